"""Pyro kernels DULA, DMALA, GWG and DiscreteGibbs: thin wrappers around
:mod:`discrete_kernels` running on torch."""

from __future__ import annotations

import math
import warnings
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel
from pyro.poutine.util import site_is_subsample

import discrete_kernels as dk
from discrete_kernels.leaves import (
    PRIOR_DRAWS,
    check_leaf_size,
    exact_sites_option,
    switch_badly_estimated_sites,
)
from discrete_kernels.options import check_kernel_options
from discrete_kernels.validation import (
    MIN_WARMUP_FOR_FROZEN_CHECK,
    check_bool,
    check_fixed_supports,
    check_initial_log_density,
    check_positive_array,
    check_start_value,
    check_symmetric_matrix,
    no_move_message,
)

from ._target import (
    GRADIENT,
    ONE_HOT_GRADIENT,
    LeafSpec,
    check_model_trace,
    integer_bounds,
    leaf_specs_for_model,
    leaf_specs_for_potential,
    make_local_fn,
    model_log_density,
    potential_log_density,
    to_internal,
    to_user,
    trace_model,
)

__all__ = ["AB", "ACS", "DMALA", "DULA", "DiscreteGibbs", "GWG"]

STAT_NAMES = ("accept_prob", "accepted", "step_size", "balance", "hamming_distance", "lp")


def _float_dtype(x: torch.Tensor) -> torch.dtype:
    """The floating dtype the kernel computes in: that of the model's log density."""
    return x.dtype if x.is_floating_point() else torch.get_default_dtype()


def _from_bool(value: torch.Tensor, one_hot: bool) -> torch.Tensor:
    """Boolean start values as numbers (floats for one-hot encodings)."""
    if value.dtype != torch.bool:
        return value
    return value.to(torch.get_default_dtype() if one_hot else torch.long)


def _conditioned_names(model: Any) -> frozenset:
    """Sites a :class:`pyro_ext.Gibbs` block's model conditions on (the other blocks')."""
    from .gibbs import _ConditionedModel

    if isinstance(model, _ConditionedModel):
        return frozenset(model.store.values) - model.own
    return frozenset()


def _alternative_values(site: dict, value: torch.Tensor) -> list:
    """A few other values of a site, to see whether other sites' supports move with it:
    two fresh draws and, for an integer interval, its two ends."""
    out = []
    for _ in range(2):
        try:
            out.append(site["fn"].sample().reshape(value.shape))
        except Exception:  # no sample method, or another shape
            continue
    bounds = integer_bounds(site)
    if bounds is not None:
        for bound in bounds:
            out.append(
                torch.as_tensor(bound, dtype=value.dtype, device=value.device).expand(value.shape)
            )
    return out


class _DiscreteKernel(MCMCKernel):
    """Shared machinery: model/potential setup, step counting, statistics, Pyro protocol."""

    _name = "DiscreteKernel"
    _adapt_default = False
    _supports_auto_exact = True  # exact_sites="auto" may switch sites to exact differences

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        step_size: float | None = 0.5,
        adapt_step_size: bool | None = None,
        target_accept_prob: float = 0.574,
        exact_sites: Sequence[str] | str = "auto",
    ) -> None:
        check_kernel_options(
            self._name,
            model,
            potential_fn,
            domain,
            step_size,
            target_accept_prob,
            "a dict of them by site name",
        )
        self.model = model
        self.potential_fn = potential_fn
        self.transforms: dict = {}  # discrete values need no transform
        self._domain = domain
        self._step_size = step_size
        self._adapt_enabled = self._adapt_default if adapt_step_size is None else adapt_step_size
        self._rule = dk.StepSizeAdaptation(target_accept_prob=target_accept_prob)
        self._auto_exact, self._exact_sites = exact_sites_option(self._name, exact_sites)
        self._initial_params: dict | None = None
        self._reset()

    def _reset(self) -> None:
        self._specs: tuple[LeafSpec, ...] | None = None
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._warmup_steps = 0
        self._t = 0
        self._state: dk.ChainState | None = None
        self._returned: dict | None = None
        self._adaptation = None
        self._current_step_size = None
        self._stats: dict[str, list] = {name: [] for name in STAT_NAMES}

    # ------------------------------------------------------------------ Pyro protocol

    @property
    def initial_params(self) -> dict | None:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: dict | None) -> None:
        self._initial_params = params

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        """Find the sites, check the start values (drawn from the prior for the sites not
        given), and cache the log density and locals at them."""
        stats = {name: [] for name in STAT_NAMES}
        self._stats = stats
        self._warmup_steps = int(warmup_steps)
        self._t = 0
        self._args, self._kwargs = args, kwargs
        given = dict(self._initial_params or {})
        if self.model is None:
            if not given:
                raise ValueError(
                    f"{self._name}: with `potential_fn`, pass `initial_params` to MCMC "
                    "(they fix the shape of every site)."
                )
            self._specs = leaf_specs_for_potential(self._domain, sorted(given))
            start = {}
            for spec in self._specs:
                value = torch.as_tensor(given[spec.name])
                one_hot = spec.mode == ONE_HOT_GRADIENT
                event = value.shape[: value.ndim - 1] if one_hot else value.shape
                check_start_value(spec.name, spec.domain, value, tuple(event), one_hot=one_hot)
                check_leaf_size(spec.name, tuple(event))
                start[spec.name] = _from_bool(value, one_hot)
            f = self.potential_fn(start)
            if torch.as_tensor(f).shape != ():
                raise ValueError(
                    f"{self._name}: potential_fn must return a scalar (-log density), got a "
                    f"tensor of shape {tuple(torch.as_tensor(f).shape)}."
                )
        else:
            model_trace = trace_model(self.model, args, kwargs)
            check_model_trace(self._name, model_trace)
            self._specs = leaf_specs_for_model(self._name, model_trace, self._exact_sites)
            unknown = sorted(set(given) - {s.name for s in self._specs})
            if unknown:
                raise ValueError(
                    f"initial_params: {unknown} are not discrete latent sites of the model; "
                    f"they are {[s.name for s in self._specs]}."
                )
            start = {}
            for spec in self._specs:
                prior = model_trace.nodes[spec.name]["value"].detach()
                check_leaf_size(spec.name, tuple(prior.shape))
                if spec.name not in given:
                    start[spec.name] = prior
                    continue
                value = torch.as_tensor(given[spec.name], device=prior.device)
                check_start_value(spec.name, spec.domain, value, tuple(prior.shape))
                start[spec.name] = value.to(prior.dtype)
            self._check_fixed_supports(model_trace, args, kwargs)
            if self._auto_exact and self._supports_auto_exact:
                self._switch_badly_estimated_sites(start)
        self._initial_params = start
        self._state = self._chain_state(start)
        check_initial_log_density(
            self._name, self._state.log_density, [s.name for s in self._specs]
        )
        self._like = torch.zeros(
            (), dtype=_float_dtype(self._state.log_density), device=self._state.log_density.device
        )
        self._setup_options()
        step = torch.as_tensor(
            self._initial_step_size(), dtype=self._like.dtype, device=self._like.device
        )
        self._current_step_size = step
        self._adaptation = dk.dual_averaging_init(step)
        # MCMC starts from these very tensors: the cached state is valid for them
        self._returned = {s.name: start[s.name] for s in self._specs}

    def _switch_badly_estimated_sites(self, start: dict) -> None:
        """``exact_sites="auto"``: at the start and a prior draw, compare each gradient
        site's first-order local differences with exact ones on a few coordinates; a site
        whose gradient
        proposal is badly wrong is switched to exact differences when that costs at most
        ``AUTO_EXACT_BUDGET`` evaluations per step, and is warned about otherwise."""
        log_density = self._log_density()
        local_fn = make_local_fn(log_density, self._specs)
        points = [start]  # the start and fresh prior draws of the block's sites
        with torch.random.fork_rng(devices=[]):  # leave the user's random stream as it was
            for _ in range(PRIOR_DRAWS):
                other = trace_model(self.model, self._args, self._kwargs)
                points.append({s.name: other.nodes[s.name]["value"].detach() for s in self._specs})
        errors_by_point = []
        for point in points:
            leaves = tuple(to_internal(s, torch.as_tensor(point[s.name])) for s in self._specs)
            f, local = local_fn(leaves)
            values = {s.name: to_user(s, x) for s, x in zip(self._specs, leaves)}
            errors = [None] * len(self._specs)
            for j, spec in enumerate(self._specs):
                if spec.mode != GRADIENT:
                    continue
                x = leaves[j]
                chosen = list(range(min(x.numel(), 16)))
                batch = dk.proposals.substitutions_at(spec.domain, x, chosen)
                with torch.no_grad():
                    table = torch.stack([log_density({**values, spec.name: v}) for v in batch])
                errors[j] = dk.proposals.first_order_error_at(
                    spec.domain,
                    x.cpu().numpy(),
                    local[j].double().cpu().numpy(),
                    chosen,
                    (table.double() - f.double()).reshape(len(chosen), -1).cpu().numpy(),
                )
            errors_by_point.append(errors)
        sizes = [torch.as_tensor(start[s.name]).numel() for s in self._specs]
        self._specs = switch_badly_estimated_sites(self._name, self._specs, errors_by_point, sizes)

    def _setup_options(self) -> None:
        """Option checks that need the sites (a subclass hook; runs once at setup)."""

    def _check_fixed_supports(self, model_trace, args: tuple, kwargs: dict) -> None:
        """Refuse sites whose integer support moves with another site's value (the model is
        traced once per other site and alternative value; setup only)."""
        base = {  # a boolean support cannot move
            s.name: integer_bounds(model_trace.nodes[s.name])
            for s in self._specs
            if not isinstance(s.domain, dk.Binary)
        }
        base = {name: bounds for name, bounds in base.items() if bounds is not None}
        if not base:
            return
        conditioned = _conditioned_names(self.model)
        values = {
            name: site["value"]
            for name, site in model_trace.nodes.items()
            if site["type"] == "sample"
            and (not site["is_observed"] or name in conditioned)
            and not site_is_subsample(site)
        }
        perturbed = []
        with torch.random.fork_rng(devices=[]):  # leave the user's random stream as it was
            for changed, value in values.items():
                for alternative in _alternative_values(model_trace.nodes[changed], value):
                    try:
                        other = trace_model(
                            self.model, args, kwargs, {**values, changed: alternative}
                        )
                        bounds = {name: integer_bounds(other.nodes[name]) for name in base}
                    except Exception:  # an alternative the model cannot take: nothing learned
                        continue
                    perturbed.append((changed, bounds))
        check_fixed_supports(base, perturbed)

    def cleanup(self) -> None:
        self._state = None

    def logging(self) -> OrderedDict:
        stats = self._stats
        recent = stats["accept_prob"][-50:]
        accept = sum(recent) / max(len(recent), 1)
        return OrderedDict(
            [
                ("step size", f"{float(self._current_step_size):.3g}"),
                ("acc. prob", f"{accept:.3f}"),
            ]
        )

    def diagnostics(self) -> dict:
        """Mean acceptance and, under ``sample_stats``, every statistic per sampling draw."""
        start = self._warmup_steps
        sample_stats = {
            name: torch.tensor(values[start:], dtype=torch.float64)
            for name, values in self._stats.items()
        }
        accept = sample_stats["accept_prob"]
        return {
            "acceptance rate": float(accept.mean()) if accept.numel() else float("nan"),
            "sample_stats": sample_stats,
        }

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_state"] = None  # rebuilt by setup in the worker
        return state

    # ------------------------------------------------------------------ target

    def _log_density(self) -> Callable:
        if self.model is None:
            return potential_log_density(self.potential_fn)
        return model_log_density(self.model, self._args, self._kwargs)

    def _local_fn(self) -> Callable:
        return make_local_fn(self._log_density(), self._specs)

    def _chain_state(self, params: dict) -> dk.ChainState:
        leaves = tuple(to_internal(s, torch.as_tensor(params[s.name])) for s in self._specs)
        f, local = self._local_fn()(leaves)
        return dk.ChainState(leaves, f, local)

    def clear_cache(self) -> None:
        """Forget the cached log density and locals (the model's conditioning changed, e.g.
        inside :class:`pyro_ext.Gibbs`); they are recomputed at the next step."""
        self._returned = None

    def _initial_step_size(self) -> float:
        return self._step_size

    # ------------------------------------------------------------------ sampling

    @abstractmethod
    def _core_step(self, state, uniforms, accept_uniform, local_fn, step_size, balance, metropolis):
        """One transition of the core: ``(ChainState, StepInfo)``."""

    @abstractmethod
    def _noise_shapes(self, leaves: tuple) -> tuple:
        """Shapes of the proposal uniforms of one step."""

    def sample(self, params: dict) -> dict:
        state = self._state
        if self._returned is None or any(
            params[s.name] is not self._returned[s.name] for s in self._specs
        ):
            # new conditioning or values set from outside: rebuild the cache
            state = self._chain_state(params)
        shapes = self._noise_shapes(state.x)
        sizes = [math.prod(shape) for shape in shapes]
        flat = torch.rand(sum(sizes) + 1, dtype=self._like.dtype, device=self._like.device)
        uniforms = tuple(u.reshape(shape) for u, shape in zip(flat[:-1].split(sizes), shapes))
        step_size, balance, metropolis = self._step_parameters()
        state, info = self._core_step(
            state, uniforms, flat[-1], self._local_fn(), step_size, balance, metropolis
        )
        extra = self._extra_stats()  # as used for this draw
        self._adapt(info, step_size)
        self._t += 1
        self._record(info, step_size, state.log_density, balance, extra)
        if self._t == self._warmup_steps >= MIN_WARMUP_FOR_FROZEN_CHECK:
            if not any(self._stats["accepted"][: self._warmup_steps]):
                names = [s.name for s in self._specs]
                warnings.warn(no_move_message(self._name, names, self._t), stacklevel=2)
        self._state = state
        returned = {
            s.name: to_user(s, x, torch.as_tensor(params[s.name]))
            for s, x in zip(self._specs, state.x)
        }
        self._returned = returned
        return {**params, **returned}

    def _step_parameters(self) -> tuple:
        """``(step_size, balance, metropolis)`` of the next proposal."""
        return self._current_step_size, 0.5, True

    def _adapt(self, info: dk.StepInfo, step_size) -> None:
        """Dual averaging of the step size during the warmup steps counted since ``setup``."""
        if self._adapt_enabled and self._warmup_steps > 0:
            self._adaptation, self._current_step_size = dk.step_size_adaptation_update(
                self._adaptation,
                step_size,
                info.accept_prob,
                torch.as_tensor(self._t, device=self._like.device),
                self._warmup_steps,
                self._rule,
            )

    def _extra_stats(self) -> dict:
        return {}

    def _record(self, info, step_size, log_density, balance, extra) -> None:
        values = {
            "accept_prob": info.accept_prob,
            "accepted": info.accepted,
            "step_size": step_size,
            "balance": balance,
            "hamming_distance": info.hamming_distance,
            "lp": log_density,
            **extra,
        }
        for name, value in values.items():
            self._stats.setdefault(name, []).append(float(value))


class _DLPKernel(_DiscreteKernel):
    _metropolis = True

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        step_size: float = 0.5,
        adapt_step_size: bool | None = None,
        target_accept_prob: float = 0.574,
        preconditioner: dict | None = None,
        exact_sites: Sequence[str] | str = "auto",
    ) -> None:
        if step_size is None:
            raise ValueError(f"{self._name}: step_size must be a positive finite number.")
        super().__init__(
            model,
            potential_fn=potential_fn,
            domain=domain,
            step_size=step_size,
            adapt_step_size=adapt_step_size,
            target_accept_prob=target_accept_prob,
            exact_sites=exact_sites,
        )
        if preconditioner is not None and not isinstance(preconditioner, dict):
            raise ValueError(f"{self._name}: preconditioner must be a dict {{site name: tensor}}.")
        self._preconditioner = preconditioner

    def _setup_options(self) -> None:
        self._preconditioners = self._checked_preconditioners()

    def _checked_preconditioners(self) -> tuple | None:
        """Per-site preconditioners, checked once at setup."""
        if self._preconditioner is None:
            return None
        names = {s.name for s in self._specs}
        unknown = sorted(set(self._preconditioner) - names)
        if unknown:
            raise ValueError(
                f"{self._name}: preconditioner names unknown sites {unknown}; the discrete "
                f"sites are {sorted(names)}."
            )
        out = []
        for spec in self._specs:
            value = self._preconditioner.get(spec.name)
            if value is not None:
                value = torch.as_tensor(value, dtype=self._like.dtype, device=self._like.device)
                check_positive_array(self._name, f"preconditioner of {spec.name!r}", value)
            out.append(value)
        return tuple(out)

    def _noise_shapes(self, leaves: tuple) -> tuple:
        return dk.dlp_noise_shapes([s.domain for s in self._specs], [x.shape for x in leaves])

    def _step_parameters(self) -> tuple:
        return self._current_step_size, 0.5, self._metropolis

    def _core_step(self, state, uniforms, accept_uniform, local_fn, step_size, balance, metropolis):
        return dk.dlp_step(
            state,
            uniforms,
            accept_uniform,
            local_fn=local_fn,
            domains=[s.domain for s in self._specs],
            is_table=[s.is_table for s in self._specs],
            step_size=step_size,
            balance=balance,
            preconditioner=self._preconditioners,
            metropolis=metropolis,
        )


class DMALA(_DLPKernel):
    """Discrete Metropolis-adjusted Langevin algorithm (Zhang et al., 2022) for Pyro.

    Every coordinate is proposed in parallel from the discrete Langevin proposal and the move
    is MH corrected. One model evaluation with its gradient per step (the current one is
    cached). Parameters as :class:`numpyro_ext.DMALA`; in potential mode ``potential_fn``
    takes a dict of site values, ``domain`` is one domain or a dict by site name, and
    ``initial_params`` (given to ``pyro.infer.MCMC``) fix the sites' shapes.
    """

    _name = "DMALA"
    _adapt_default = True


class DULA(_DLPKernel):
    """The DMALA proposal without the MH step (biased; see :class:`numpyro_ext.DULA`)."""

    _name = "DULA"
    _metropolis = False


class GWG(_DiscreteKernel):
    """Gibbs with gradients (Grathwohl et al., 2021): one coordinate per step, MH corrected.
    Parameters as :class:`numpyro_ext.GWG`."""

    _name = "GWG"

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        step_size: float | None = None,
        exact_sites: Sequence[str] | str = "auto",
    ) -> None:
        super().__init__(
            model,
            potential_fn=potential_fn,
            domain=domain,
            step_size=step_size,
            adapt_step_size=False,
            exact_sites=exact_sites,
        )

    def _initial_step_size(self) -> float:
        return float("inf") if self._step_size is None else self._step_size

    def _noise_shapes(self, leaves: tuple) -> tuple:
        return ((),)

    def _core_step(self, state, uniforms, accept_uniform, local_fn, step_size, balance, metropolis):
        return dk.gwg_step(
            state,
            uniforms[0],
            accept_uniform,
            local_fn=local_fn,
            domains=[s.domain for s in self._specs],
            is_table=[s.is_table for s in self._specs],
            balance=balance,
            step_size=None if self._step_size is None else step_size,
        )


class DiscreteGibbs(_DiscreteKernel):
    """One coordinate at a time, in a random order each sweep (Pyro has no such kernel).

    Each coordinate is resampled from its exact conditional (``S`` model evaluations for
    ``S`` candidate values), or with Liu's modified (Metropolised) or a random-walk
    proposal. One MCMC draw is one sweep over every discrete coordinate. The update rule is
    :func:`discrete_kernels.gibbs_site_proposal`.

    Parameters
    ----------
    model, potential_fn, domain
        As in :class:`DMALA`.
    random_walk : bool
        Uniform proposals over the coordinate's values, MH corrected.
    modified : bool
        Never propose the current value (Liu, 1996).
    """

    _name = "DiscreteGibbs"
    _supports_auto_exact = False  # exact conditionals already, no local differences

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        random_walk: bool = False,
        modified: bool = False,
    ) -> None:
        super().__init__(model, potential_fn=potential_fn, domain=domain, step_size=None)
        self._random_walk = check_bool(self._name, "random_walk", random_walk)
        self._modified = check_bool(self._name, "modified", modified)

    def _initial_step_size(self) -> float:
        return float("nan")  # no step size

    def _chain_state(self, params: dict) -> dk.ChainState:
        leaves = tuple(to_internal(s, torch.as_tensor(params[s.name])) for s in self._specs)
        f = self._log_density()({s.name: to_user(s, x) for s, x in zip(self._specs, leaves)})
        f = f.detach()
        return dk.ChainState(leaves, f, ())

    def _noise_shapes(self, leaves: tuple) -> tuple:
        total = sum(x.numel() for x in leaves)
        return ((total,), (total,))

    def _core_step(self, state, uniforms, accept_uniform, local_fn, step_size, balance, metropolis):
        log_density = self._log_density()
        leaves = [x.clone() for x in state.x]
        f = state.log_density
        coordinates = [(j, k) for j, x in enumerate(leaves) for k in range(x.numel())]
        order = torch.randperm(len(coordinates), device="cpu")  # a Python loop reads it
        propose_u, accept_u = uniforms
        accept_probs, changed = [], 0
        with torch.no_grad():
            for position, c in enumerate(order.tolist()):
                j, k = coordinates[c]
                spec, x = self._specs[j], leaves[j]
                flat = x.reshape(-1)
                current = int(flat[k]) - spec.domain.low
                weights = []
                for v in range(spec.domain.num_values):
                    if v == current:
                        weights.append(f)
                        continue
                    candidate = flat.clone()
                    candidate[k] = v + spec.domain.low
                    values = {s.name: to_user(s, y) for s, y in zip(self._specs, leaves)}
                    values[spec.name] = to_user(spec, candidate.reshape(x.shape))
                    weights.append(log_density(values).detach())
                weights = torch.stack([torch.as_tensor(w) for w in weights])
                valid = _valid_candidates(spec, x, k)
                proposal, log_ratio = dk.gibbs_site_proposal(
                    weights,
                    torch.as_tensor(current, device=weights.device),
                    propose_u[position],
                    valid=valid,
                    random_walk=self._random_walk,
                    modified=self._modified,
                )
                accept_probs.append(dk.accept_probability(log_ratio))
                if (
                    bool(dk.metropolis_accept(log_ratio, accept_u[position]))
                    and int(proposal) != current
                ):
                    flat = flat.clone()
                    flat[k] = int(proposal) + spec.domain.low
                    leaves[j] = flat.reshape(x.shape)
                    f = weights[int(proposal)]
                    changed += 1
        mean_accept = torch.stack(accept_probs).mean()
        like = mean_accept
        info = dk.StepInfo(
            mean_accept,
            torch.as_tensor(changed > 0, device=like.device),
            torch.as_tensor(float(changed), dtype=like.dtype, device=like.device),
        )
        return dk.ChainState(tuple(leaves), f, ()), info


def _valid_candidates(spec: LeafSpec, x: torch.Tensor, flat_index: int) -> torch.Tensor | None:
    """Candidates inside the bounds of one coordinate (ordinal sites with array bounds)."""
    if not isinstance(spec.domain, dk.Ordinal):
        return None
    table = spec.domain.valid_candidates(x.to(_float_dtype(x)))
    if table is None:
        return None
    table = torch.broadcast_to(table, tuple(x.shape) + (spec.domain.num_values,))
    return table.reshape(-1, spec.domain.num_values)[flat_index]


class ACS(_DLPKernel):
    """Automatic cyclical scheduling for Pyro: DLP proposals on a cycle of step sizes and
    balances, tuned automatically during warmup (one proposal per warmup step). Options,
    statistics and the tuning as :class:`numpyro_ext.ACS`; ``kernel.schedule()`` returns the
    cycle in use."""

    _name = "ACS"

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        steps_per_cycle: int = 8,
        beta_max: float = 0.95,
        target_accept_prob: float = 0.5,
        alpha_floor: float = 0.05,
        alpha_ceil: float = 5.0,
        alpha_max: float | None = None,
        alpha_min: float | None = None,
        beta_schedule: Sequence[float] | None = None,
        tuning: dict | None = None,
        exact_sites: Sequence[str] | str = "auto",
    ) -> None:
        super().__init__(
            model,
            potential_fn=potential_fn,
            domain=domain,
            step_size=alpha_ceil,
            adapt_step_size=False,
            target_accept_prob=target_accept_prob,
            exact_sites=exact_sites,
        )
        self._config, self._cycle = dk.acs_options(
            steps_per_cycle,
            beta_max,
            target_accept_prob,
            alpha_floor,
            alpha_ceil,
            alpha_max,
            alpha_min,
            beta_schedule,
            tuning,
        )
        self._tuner = None

    @property
    def config(self) -> dk.ACSConfig:
        return self._config

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        super().setup(warmup_steps, *args, **kwargs)
        needed = dk.tuning_steps(self._config)
        if self._cycle is None and warmup_steps < needed:
            warnings.warn(
                f"ACS: warmup_steps={warmup_steps} is shorter than the {needed} steps the "
                "automatic tuning takes; it will end early with rougher estimates of the "
                "cycle (or pass alpha_max, alpha_min and beta_schedule).",
                stacklevel=2,
            )
        alpha_max, alpha_min, beta_schedule = self._cycle or (None, None, None)
        like = torch.ones((), dtype=self._like.dtype, device=self._like.device)
        tuner = dk.acs_tuner_init(
            self._config,
            like,
            tuned=self._cycle is not None,
            alpha_max=alpha_max,
            alpha_min=alpha_min,
            beta_schedule=beta_schedule,
        )
        if self._cycle is None and warmup_steps == 0:
            tuner = dk.acs_finish_tuning(tuner, self._config)
        self._tuner = tuner

    def _step_parameters(self) -> tuple:
        return dk.acs_step_parameters(self._tuner, self._config)

    def _adapt(self, info: dk.StepInfo, step_size) -> None:
        self._tuner = dk.acs_warmup_update(
            self._tuner,
            info.accept_prob,
            self._config,
            torch.as_tensor(self._t, device=self._like.device),
            self._warmup_steps,
        )

    def _extra_stats(self) -> dict:
        return {"cycle_position": self._tuner.cycle_position % self._config.steps_per_cycle}

    def logging(self) -> OrderedDict:
        log = super().logging()
        log["phase"] = (
            "tuned" if int(self._tuner.phase) == 5 else f"tuning {int(self._tuner.phase)}"
        )
        return log

    def schedule(self) -> dict:
        """The cycle in use: ``alpha`` and ``beta`` tensors of length ``steps_per_cycle``."""
        tuner = self._tuner
        s = self._config.steps_per_cycle
        alpha = torch.stack(
            [
                dk.cyclical_step_size(
                    torch.as_tensor(k, device=self._like.device),
                    s,
                    tuner.alpha_max,
                    tuner.alpha_min,
                )
                for k in range(s)
            ]
        )
        return {"alpha": alpha, "beta": tuner.beta_schedule, "tuned": bool(tuner.phase == 5)}


class AB(_DiscreteKernel):
    """Any-scale balanced sampler for Pyro: ``variant="1st" | "trace" | "shift" | "max"``,
    ``(sigma, alpha)`` tuned on the jump distance during warmup and ``W`` fitted from a
    burn-in inside warmup, as :class:`numpyro_ext.AB` (same options and statistics:
    ``step_size`` is ``sigma``, ``balance`` is ``alpha``)."""

    _name = "AB"
    _supports_auto_exact = False  # quadratic proposals need every site's gradient

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        variant: str = "1st",
        step_size: float = 0.1,
        alpha: float = 0.5,
        adapt: bool = True,
        rate: float = 0.2,
        decay: float = 0.9,
        block_size: int | None = None,
        burn_in: int | None = None,
        max_doublings: int = 3,
        coupling: Any = None,
        exact_sites: Sequence[str] = (),
    ) -> None:
        super().__init__(
            model,
            potential_fn=potential_fn,
            domain=domain,
            step_size=step_size,
            adapt_step_size=adapt,
            exact_sites=exact_sites,
        )
        self._config = dk.ab.ab_options(
            variant, step_size, alpha, rate, decay, block_size, burn_in, self._name, max_doublings
        )
        self._is_quadratic = variant != "1st"
        self._coupling = coupling
        self._tuner = None
        self.quadratic: dk.QuadraticProposal | None = None

    @property
    def config(self) -> dk.ABConfig:
        return self._config

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        super().setup(warmup_steps, *args, **kwargs)
        like = torch.ones((), dtype=self._like.dtype, device=self._like.device)
        self._tuner = dk.ab.ab_tuner_init(self._config, like)
        self._plan = dk.ab.ab_warmup_plan(
            self._config,
            warmup_steps,
            adapt=self._adapt_enabled,
            fit_w=self._is_quadratic and self._coupling is None,
        )
        self.quadratic = None
        if not self._is_quadratic:
            return
        tables = [s.name for s in self._specs if s.is_table]
        if tables:
            raise ValueError(
                f"AB: variant={self._config.variant!r} needs binary or ordinal sites with "
                f"gradients; {tables} are categorical or exact. Use variant='1st'."
            )
        d = sum(x.numel() for x in self._state.x)
        self._pairs = dk.ab.quadratic_stats_init(d, like)
        if self._coupling is not None:
            w = torch.as_tensor(self._coupling, dtype=like.dtype, device=like.device)
            w = check_symmetric_matrix("AB", "coupling", w, d)
            self.quadratic = dk.ab.quadratic_from_coupling(w, self._config.variant)
        elif warmup_steps == 0:
            warnings.warn(
                f"AB: variant={self._config.variant!r} fits W during warmup; with "
                "warmup_steps=0 it runs as AB-1st (or pass coupling=W).",
                stacklevel=2,
            )
        if self.quadratic is None:  # AB-1st until W is fitted
            zeros = torch.zeros(d, dtype=like.dtype, device=like.device)
            self.quadratic = dk.QuadraticProposal(
                torch.zeros(d, d, dtype=like.dtype, device=like.device), zeros
            )

    _noise_shapes = _DLPKernel._noise_shapes  # one uniform per coordinate, as the DLP

    def _tuning(self) -> bool:
        return self._adapt_enabled and self._t < self._warmup_steps

    def _step_parameters(self) -> tuple:
        sigma, alpha = dk.ab.ab_tuner_parameters(self._tuner, self._config, self._tuning())
        return sigma, alpha, True

    def _core_step(self, state, uniforms, accept_uniform, local_fn, step_size, balance, metropolis):
        normals = None
        if self._is_quadratic:
            diag = self.quadratic.diag
            normals = torch.randn(diag.shape[0], dtype=diag.dtype, device=diag.device)
        return dk.ab_step(
            state,
            uniforms,
            normals,
            accept_uniform,
            local_fn=local_fn,
            domains=[s.domain for s in self._specs],
            is_table=[s.is_table for s in self._specs],
            sigma=step_size,
            alpha=balance,
            quadratic=self.quadratic if self._is_quadratic else None,
        )

    def _adapt(self, info: dk.ABStepInfo, step_size) -> None:
        if self._tuning():
            self._tuner = dk.ab.ab_tuner_update(
                self._tuner, info.jump, self._config, self._plan.block_size
            )
        if self._t < self._plan.burn_in:
            self._pairs = dk.ab.quadratic_stats_update(self._pairs, info.dx, info.dg)
            if self._t + 1 == self._plan.burn_in:
                self.quadratic, _ = dk.ab.fit_quadratic_proposal(self._pairs, self._config.variant)
                if self._plan.restart:
                    self._tuner = dk.ab.ab_tuner_restart(self._tuner, self._config)

    def logging(self) -> OrderedDict:
        log = super().logging()
        sigma, alpha = dk.ab.ab_tuner_parameters(self._tuner, self._config, False)
        log["step size"] = f"{float(sigma):.3g}"
        log["alpha"] = f"{float(alpha):.3g}"
        return log

    def parameters(self) -> dict:
        """The tuned ``sigma`` and ``alpha`` (frozen after warmup)."""
        return {"sigma": float(self._tuner.sigma), "alpha": float(self._tuner.alpha)}
