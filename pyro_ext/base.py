"""The one Pyro driver of discrete-kernels: any core sampler spec as a Pyro ``MCMCKernel``.

:class:`DiscreteKernel` traces the model (or takes a potential), checks the start values and
options with the core's checks, draws each step's noise with torch's RNG on the model's device
in the shapes the sampler's spec asks for, and calls the spec's step and warmup adaptation
(:mod:`discrete_kernels.samplers`). A sampler is a subclass of a few lines that builds its spec
(see :mod:`pyro_ext.steps`, :mod:`pyro_ext.acs`, :mod:`pyro_ext.ab`,
:mod:`pyro_ext.discrete_gibbs`).
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel
from pyro.poutine.util import site_is_subsample

import discrete_kernels as dk
from discrete_kernels import leaves as site_rules
from discrete_kernels import samplers as specs
from discrete_kernels import validation as checks
from discrete_kernels.constructors import KernelConstructor
from discrete_kernels.options import check_bound
from discrete_kernels.samplers import NoiseShapes, Sites, StepNoise

from ._record import LOG_EVERY, StepRecord
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

__all__ = ["DiscreteKernel", "STAT_NAMES"]

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


def draw_noise(shapes: NoiseShapes, like: torch.Tensor) -> StepNoise:
    """One step's noise in a spec's shapes, in ``like``'s dtype and on its device: all
    uniforms from one flat draw (proposal uniforms per leaf in order, the MH uniform last),
    then the normals and the permutation if the spec takes them."""
    sizes = [math.prod(shape) for shape in shapes.uniforms]
    flat = torch.rand(sum(sizes) + 1, dtype=like.dtype, device=like.device)
    pieces = flat[:-1].split(sizes)
    uniforms = tuple(u.reshape(shape) for u, shape in zip(pieces, shapes.uniforms))
    normals = None
    if shapes.num_normals:
        normals = torch.randn(shapes.num_normals, dtype=like.dtype, device=like.device)
    permutation = None
    if shapes.permutation:  # a Python loop reads it: on the CPU
        permutation = torch.randperm(shapes.permutation, device="cpu")
    return StepNoise(uniforms, flat[-1], normals, permutation)


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


class DiscreteKernel(KernelConstructor, MCMCKernel):
    """The driver: model/potential setup, checks, noise, the spec's step and adaptation,
    statistics and the Pyro protocol. Subclasses build the spec."""

    _name = "DiscreteKernel"
    _supports_auto_exact = True  # exact_sites="auto" may switch sites to exact differences

    _domain_hint = "a dict of them by site name"

    def _init_ppl(self) -> None:
        self.transforms: dict = {}  # discrete values need no transform
        self._initial_params: dict | None = None
        self._reset()

    @property
    def model(self) -> Callable | None:
        return self._model

    @model.setter
    def model(self, model: Callable | None) -> None:  # pyro_ext.Gibbs conditions it
        self._model = model

    @property
    def potential_fn(self) -> Callable | None:
        return self._potential_fn

    def _reset(self) -> None:
        self._specs: tuple[LeafSpec, ...] = ()
        self._sites: Sites | None = None
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._warmup_steps = 0
        self._t = 0
        self._state: dk.ChainState | None = None
        self._returned: dict | None = None
        self._adapt_state: Any = None
        self._step_record = StepRecord()
        self._log: OrderedDict = OrderedDict()

    def _as_array(self, value: Any) -> Any:
        return torch.as_tensor(value, dtype=torch.get_default_dtype())

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
        check_bound(self._name, self.model, self.potential_fn)
        self._step_record = StepRecord()
        self._log = OrderedDict()
        self._warmup_steps = int(warmup_steps)
        self._spec.check_warmup(self._warmup_steps, "warmup_steps")
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
                checks.check_start_value(
                    spec.name, spec.domain, value, tuple(event), one_hot=one_hot
                )
                site_rules.check_leaf_size(spec.name, tuple(event))
                start[spec.name] = _from_bool(value, one_hot)
            assert self.potential_fn is not None  # checked at construction
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
                site_rules.check_leaf_size(spec.name, tuple(prior.shape))
                if spec.name not in given:
                    start[spec.name] = prior
                    continue
                value = torch.as_tensor(given[spec.name], device=prior.device)
                checks.check_start_value(spec.name, spec.domain, value, tuple(prior.shape))
                start[spec.name] = value.to(prior.dtype)
            self._check_fixed_supports(model_trace, args, kwargs)
            if self._auto_exact and self._supports_auto_exact:
                self._switch_badly_estimated_sites(start)
        self._initial_params = start
        self._state = self._chain_state(start)
        checks.check_initial_log_density(
            self._name, self._state.log_density, [s.name for s in self._specs]
        )
        self._like = torch.zeros(
            (), dtype=_float_dtype(self._state.log_density), device=self._state.log_density.device
        )
        names = tuple(s.name for s in self._specs)
        self._sites = Sites.from_leaves(self._specs, self._checked_preconditioners(names))
        flat_dim = sum(x.numel() for x in self._state.x)
        self._spec.check_sites(self._sites, flat_dim)
        like = torch.ones((), dtype=self._like.dtype, device=self._like.device)
        self._adapt_state = self._spec.adapt_init(
            like, self._warmup_steps, flat_dim, specs.PYTHON_CONTROL, self._sites
        )
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
        assert self.model is not None  # model mode only
        points = [start]  # the start and fresh prior draws of the block's sites
        with torch.random.fork_rng(devices=[]):  # leave the user's random stream as it was
            for _ in range(site_rules.PRIOR_DRAWS):
                other = trace_model(self.model, self._args, self._kwargs)
                points.append({s.name: other.nodes[s.name]["value"].detach() for s in self._specs})
        errors_by_point = []
        for point in points:
            leaves = tuple(to_internal(s, torch.as_tensor(point[s.name])) for s in self._specs)
            f, local = local_fn(leaves)
            values = {s.name: to_user(s, x) for s, x in zip(self._specs, leaves)}
            errors: list[Any] = [None] * len(self._specs)
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
        self._specs = site_rules.switch_badly_estimated_sites(
            self._name, self._specs, errors_by_point, sizes
        )

    def _checked_preconditioners(self, names: tuple[str, ...]) -> tuple | None:
        like = self._like
        return specs.check_preconditioners(
            self._name,
            names,
            self._preconditioner,
            lambda v: torch.as_tensor(v, dtype=like.dtype, device=like.device),
        )

    def _check_fixed_supports(self, model_trace, args: tuple, kwargs: dict) -> None:
        """Refuse sites whose integer support moves with another site's value (the model is
        traced once per other site and alternative value; setup only)."""
        base = checks.movable_supports(
            [(s.name, s.domain) for s in self._specs],
            lambda name: integer_bounds(model_trace.nodes[name]),
        )
        if not base:
            return
        assert self.model is not None  # model mode only
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
        checks.check_fixed_supports(base, perturbed)

    def cleanup(self) -> None:
        self._state = None

    def logging(self) -> OrderedDict:
        """The progress bar's text; Pyro asks for it at every step, it is read from the
        device every ``LOG_EVERY`` steps (a host read waits for the GPU)."""
        if self._t == 1 or self._t % LOG_EVERY == 0 or not self._log:
            self._log = self._log_entries()
        return self._log

    def _log_entries(self) -> OrderedDict:
        recent = self._step_record.recent("accept_prob", LOG_EVERY)
        accept = float(recent.mean()) if recent.numel() else float("nan")
        return OrderedDict(
            [
                ("step size", f"{float(self._spec.parameters(self._adapt_state)[0]):.3g}"),
                ("acc. prob", f"{accept:.3f}"),
            ]
        )

    def diagnostics(self) -> dict:
        """Mean acceptance and, under ``sample_stats``, every statistic per sampling draw
        (float64 tensors on the host)."""
        sample_stats = self._step_record.columns(self._warmup_steps)
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
            assert self.potential_fn is not None  # checked at construction
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

    # ------------------------------------------------------------------ sampling

    def _draw_noise(self, shapes: NoiseShapes, index: int) -> StepNoise:
        """The noise of draw ``index`` on the model's device (:func:`draw_noise`)."""
        return draw_noise(shapes, self._like)

    def sample(self, params: dict) -> dict:
        state = self._state
        if self._returned is None or any(
            params[s.name] is not self._returned[s.name] for s in self._specs
        ):
            # new conditioning or values set from outside: rebuild the cache
            state = self._chain_state(params)
        sites = self._sites
        if state is None or sites is None:
            raise RuntimeError(f"{self._name}: call `setup` before `sample`.")
        shapes = self._spec.noise_shapes(sites, [tuple(x.shape) for x in state.x])
        noise = self._draw_noise(shapes, self._t)
        adapt = self._adapt_state
        step_params = self._spec.parameters(adapt)
        state, info = self._spec.step(state, noise, step_params, adapt, sites, self._local_fn())
        extra = self._spec.extra_stats(adapt)  # as used for this draw
        index = torch.as_tensor(self._t, device=self._like.device)
        control = specs.PYTHON_CONTROL._replace(step=self._t)
        self._adapt_state = self._spec.adapt_update(
            adapt, info, step_params, index, self._warmup_steps, control
        )
        self._t += 1
        self._record(info, step_params, state.log_density, extra)
        if self._t == self._warmup_steps >= checks.MIN_WARMUP_FOR_FROZEN_CHECK:
            start = checks.frozen_check_start(self._warmup_steps)
            accepted = self._step_record.columns(start, self._warmup_steps)["accepted"]
            if not bool(accepted.any()):  # read once, at the end of warmup
                names = [s.name for s in self._specs]
                warnings.warn(checks.no_move_message(self._name, names, self._t), stacklevel=2)
        self._state = state
        returned = {
            s.name: to_user(s, x, torch.as_tensor(params[s.name]))
            for s, x in zip(self._specs, state.x)
        }
        self._returned = returned
        return {**params, **returned}

    def _record(self, info, step_params, log_density, extra) -> None:
        values = {
            "accept_prob": info.accept_prob,
            "accepted": info.accepted,
            "step_size": step_params.step_size,
            "balance": step_params.balance,
            "hamming_distance": info.hamming_distance,
            "lp": log_density,
            **extra,
        }
        self._step_record.append(values, self._like)
