"""One spec per sampler: what a PPL adapter needs to run a discrete kernel, written once.

A spec says, for one sampler, which noise a step takes (:meth:`SamplerSpec.noise_shapes`),
how a step maps ``(chain, noise, parameters)`` to the next chain (:meth:`SamplerSpec.step`),
which parameters the next step uses (:meth:`SamplerSpec.parameters`), and how warmup adapts
them, as an ``(adapt_init, adapt_update, adapt_final)`` triple. Nothing random happens here:
the adapter draws the noise with its own RNG, in the shapes the spec asks for, and the
adapter's control flow (``jax.lax.cond`` and ``fori_loop``, or plain Python) comes in as a
:class:`ControlFlow`. The one driver per PPL (``numpyro_ext.base``, ``pyro_ext.base``) calls,
for every sampler, in this order::

    adapt = spec.adapt_init(like, num_warmup, flat_dim, control, sites)  # once
    params = spec.parameters(adapt)                                  # every step
    chain, info = spec.step(chain, noise, params, adapt, sites, local_fn)
    adapt = spec.adapt_update(adapt, info, params, index, num_warmup, control)

``index`` is the index of the draw just made (0 for the first warmup draw), shared by all
chains: an adapter that vectorises chains passes it unbatched, so ``control.cond`` on it stays
a real branch and warmup-only work costs nothing per sampling step.

Adding a sampler means writing its spec here (and its core step) and registering a class of a
few lines in each adapter; see the guide's "Adding a sampler".
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from array_api_compat import device as _device

from . import ab as _ab
from . import acs as _acs
from . import esh as _esh
from . import gibbs as _gibbs
from ._xp import Array, array_namespace
from .adaptation import (
    DualAveragingState,
    StepSizeAdaptation,
    dlp_step_size_bounds,
    dual_averaging_init,
    step_size_adaptation_update,
)
from .domains import Binary, Domain, domain_step_scale
from .steps import ChainState, StepInfo, dlp_noise_shapes, dlp_step, gwg_step
from .validation import (
    check_bool,
    check_int,
    check_number,
    check_positive_array,
    check_symmetric_matrix,
)

__all__ = [
    "ABSpec",
    "ACSSpec",
    "ControlFlow",
    "DLPSpec",
    "DualAveragingAdaptState",
    "ESHChain",
    "ESHSpec",
    "ESHStepInfo",
    "GWGSpec",
    "GibbsSpec",
    "NoiseShapes",
    "PYTHON_CONTROL",
    "SamplerSpec",
    "Sites",
    "StepNoise",
    "StepParameters",
    "ab_spec",
    "acs_spec",
    "check_preconditioners",
    "coupled_step",
    "dlp_spec",
    "esh_spec",
    "gibbs_spec",
    "gwg_spec",
    "synchronised_noise",
]

LocalFn = Callable[[tuple], tuple]


class Sites(NamedTuple):
    """What a step needs to know about the sampled sites (leaves), fixed at setup.

    - **names** - site names, for messages.
    - **domains** - one :class:`Domain` per leaf.
    - **is_table** - per leaf, whether its local information is a table of exact local
      differences (categorical and exact sites) rather than a gradient.
    - **preconditioner** - per-leaf multipliers of the step size (arrays or None), or None.
    """

    names: tuple[str, ...]
    domains: tuple[Domain, ...]
    is_table: tuple[bool, ...]
    preconditioner: tuple | None = None

    @classmethod
    def from_leaves(cls, leaves: Sequence[Any], preconditioner: tuple | None = None) -> Sites:
        """From the adapter's per-leaf records (anything with ``name``, ``domain`` and
        ``is_table``, such as :class:`discrete_kernels.leaves.LeafSpec`)."""
        return cls(
            tuple(s.name for s in leaves),
            tuple(s.domain for s in leaves),
            tuple(s.is_table for s in leaves),
            preconditioner,
        )


class NoiseShapes(NamedTuple):
    """The noise of one step: uniforms of these shapes (one array per entry), one MH uniform,
    ``num_normals`` standard normals and a random permutation of ``range(permutation)``
    (0: none of them)."""

    uniforms: tuple[tuple[int, ...], ...]
    num_normals: int = 0
    permutation: int = 0


class StepNoise(NamedTuple):
    """The noise of one step, drawn by the adapter in the shapes of :class:`NoiseShapes`."""

    uniforms: tuple[Array, ...]
    accept_uniform: Array
    normals: Array | None = None
    permutation: Array | None = None


class StepParameters(NamedTuple):
    """Parameters of one proposal: its step size and balance (the AB paper's ``sigma`` and
    ``alpha``), and whether the move is MH corrected (False only for DULA and ACS's burn-in)."""

    step_size: Array
    balance: Array
    metropolis: Array | bool = True


Cond = Callable[[Any, Callable, Callable, Any], Any]
Loop = Callable[[int, Callable, Any], Any]


def _python_cond(predicate: Any, true_fn: Callable, false_fn: Callable, operand: Any) -> Any:
    return true_fn(operand) if bool(predicate) else false_fn(operand)


class ControlFlow(NamedTuple):
    """The adapter's branch and loop: ``cond(pred, true_fn, false_fn, operand)`` and
    ``loop(num, body, carry)`` (``jax.lax.cond``/``fori_loop`` under jit, Python otherwise).

    ``step``: the draw's index as a Python int where the adapter knows it on the host (Python
    control); warmup branches then decide on it instead of on the index array, which on a GPU
    would wait for the device at every step."""

    cond: Cond = _python_cond
    loop: Loop = _ab.python_loop
    step: int | None = None


PYTHON_CONTROL = ControlFlow()


class DualAveragingAdaptState(NamedTuple):
    """Adaptation state of DULA, DMALA and GWG: dual averaging of the step size, the step
    size of the next draw, and the upper end of the adapted step size's range
    (:func:`discrete_kernels.adaptation.dlp_step_size_bounds`)."""

    dual_averaging: DualAveragingState
    next_step_size: Array
    max_step_size: Array


def check_preconditioners(
    sampler: str,
    sites: Sequence[str],
    given: Any,
    as_array: Callable[[Any], Array],
    *,
    by_name: bool = True,
) -> tuple | None:
    """Per-leaf preconditioners (positive, finite arrays or None), checked once at setup.

    ``given``: None, or with ``by_name`` a dict ``{site name: array}`` (sites left out have
    none), otherwise a sequence with one entry per site (None where the site has none).
    ``as_array`` converts an entry to the backend's float array.
    """
    if given is None:
        return None
    if by_name:
        if not isinstance(given, Mapping):
            raise ValueError(
                f"{sampler}: preconditioner must be a dict {{site name: array}}, got "
                f"{type(given).__name__}."
            )
        unknown = sorted(set(given) - set(sites))
        if unknown:
            raise ValueError(
                f"{sampler}: preconditioner names unknown sites {unknown}; the discrete "
                f"sites are {sorted(sites)}."
            )
        values = [given.get(name) for name in sites]
    else:
        values = list(given)
    if all(v is None for v in values):
        return None
    out = []
    for name, value in zip(sites, values):
        if value is not None:
            value = as_array(value)
            check_positive_array(sampler, f"preconditioner of {name!r}", value)
        out.append(value)
    return tuple(out)


class SamplerSpec:
    """Base of the specs: no adaptation, no extra statistics. Subclasses set ``name`` and
    implement :meth:`noise_shapes`, :meth:`step`, :meth:`adapt_init` and
    :meth:`parameters`."""

    name: str = "sampler"
    #: statistics a kernel of this sampler reports beyond the shared ones
    extra_statistics: tuple[str, ...] = ()

    def check_sites(self, sites: Sites, flat_dim: int) -> None:
        """Refuse sites this sampler cannot handle (setup, outside compiled code)."""

    def check_warmup(self, num_warmup: int, option: str) -> None:
        """Refuse or warn about a warmup this sampler cannot use (``option``: how the PPL
        names the warmup length)."""

    def noise_shapes(self, sites: Sites, leaf_shapes: Sequence[tuple[int, ...]]) -> NoiseShapes:
        raise NotImplementedError

    def adapt_init(
        self,
        like: Array,
        num_warmup: int,
        flat_dim: int,
        control: ControlFlow,
        sites: Sites | None = None,
    ):
        """The adaptation state before the first draw (``like``: a float scalar of the
        backend and dtype to use; ``sites``: the sampled sites, for adaptations that start
        from the domains' scale)."""
        raise NotImplementedError

    def parameters(self, adapt_state: Any) -> StepParameters:
        """The parameters of the next draw."""
        raise NotImplementedError

    def step(
        self,
        chain: ChainState,
        noise: StepNoise,
        params: StepParameters,
        adapt_state: Any,
        sites: Sites,
        local_fn: LocalFn,
    ) -> tuple[ChainState, StepInfo]:
        raise NotImplementedError

    def adapt_update(
        self,
        adapt_state: Any,
        info: StepInfo,
        params: StepParameters,
        index: Array,
        num_warmup: int,
        control: ControlFlow,
    ) -> Any:
        """The adaptation state after draw ``index`` (0-based, shared by all chains)."""
        return adapt_state

    def adapt_final(self, adapt_state: Any) -> dict:
        """What the warmup settled on (read it after warmup), as a dict of arrays."""
        return {"step_size": self.parameters(adapt_state).step_size}

    def extra_stats(self, adapt_state: Any) -> dict:
        """Values of :attr:`extra_statistics` for the draw made with ``adapt_state``."""
        return {}


@dataclass(frozen=True)
class _DualAveragingSpec(SamplerSpec):
    """A fixed step size, or dual averaging of it during warmup (``adapt``)."""

    step_size: float = 0.5
    adapt: bool = True
    rule: StepSizeAdaptation = StepSizeAdaptation()

    def initial_step_size(self) -> float:
        return self.step_size

    def adapt_init(
        self, like, num_warmup, flat_dim, control, sites=None
    ) -> DualAveragingAdaptState:
        xp = array_namespace(like)
        step = xp.full_like(like, self.initial_step_size())
        scale = 0.0 if sites is None else domain_step_scale(sites.domains)
        high = xp.full_like(like, dlp_step_size_bounds(scale)[1])
        return DualAveragingAdaptState(dual_averaging_init(step), step, high)

    def parameters(self, adapt_state: DualAveragingAdaptState) -> StepParameters:
        xp = array_namespace(adapt_state.next_step_size)
        half = xp.full_like(adapt_state.next_step_size, 0.5)  # not 0 * step: GWG's is inf
        return StepParameters(adapt_state.next_step_size, half, True)

    def adapt_update(self, adapt_state, info, params, index, num_warmup, control):
        after_warmup = control.step is not None and control.step >= num_warmup
        if not (self.adapt and num_warmup > 0) or after_warmup:
            return adapt_state  # what the update below returns outside warmup
        dual, next_step = step_size_adaptation_update(
            adapt_state.dual_averaging,
            params.step_size,
            info.accept_prob,
            index,
            num_warmup,
            self.rule,
            bounds=(dlp_step_size_bounds(0.0)[0], adapt_state.max_step_size),
        )
        return DualAveragingAdaptState(dual, next_step, adapt_state.max_step_size)


@dataclass(frozen=True)
class DLPSpec(_DualAveragingSpec):
    """DMALA (``metropolis=True``) and DULA (False): every coordinate proposed in parallel from
    the discrete Langevin proposal (:func:`discrete_kernels.dlp_step`)."""

    name: str = "DMALA"
    metropolis: bool = True

    def noise_shapes(self, sites, leaf_shapes) -> NoiseShapes:
        return NoiseShapes(tuple(dlp_noise_shapes(sites.domains, leaf_shapes)))

    def parameters(self, adapt_state: DualAveragingAdaptState) -> StepParameters:
        params = super().parameters(adapt_state)
        return params._replace(metropolis=self.metropolis)

    def step(self, chain, noise, params, adapt_state, sites, local_fn):
        return dlp_step(
            chain,
            noise.uniforms,
            noise.accept_uniform,
            local_fn=local_fn,
            domains=sites.domains,
            is_table=sites.is_table,
            step_size=params.step_size,
            balance=params.balance,
            preconditioner=sites.preconditioner,
            metropolis=params.metropolis,
        )


@dataclass(frozen=True)
class GWGSpec(_DualAveragingSpec):
    """Gibbs with gradients: one coordinate per step from the softmax of the local differences
    (``step_size=None``: the original, unscaled proposal; reported as ``inf``)."""

    name: str = "GWG"
    step_size: float | None = None  # type: ignore[assignment]
    adapt: bool = False

    def initial_step_size(self) -> float:
        return math.inf if self.step_size is None else self.step_size

    def noise_shapes(self, sites, leaf_shapes) -> NoiseShapes:
        return NoiseShapes(((),))

    def step(self, chain, noise, params, adapt_state, sites, local_fn):
        return gwg_step(
            chain,
            noise.uniforms[0],
            noise.accept_uniform,
            local_fn=local_fn,
            domains=sites.domains,
            is_table=sites.is_table,
            balance=params.balance,
            step_size=None if self.step_size is None else params.step_size,
        )


@dataclass(frozen=True)
class ACSSpec(SamplerSpec):
    """Automatic cyclical scheduling: DLP proposals on a cycle of step sizes and balances,
    tuned during warmup (:mod:`discrete_kernels.acs`). ``cycle``: an explicit
    ``(alpha_max, alpha_min, beta_schedule)``, or None to tune it."""

    config: _acs.ACSConfig = _acs.ACSConfig()
    cycle: tuple | None = None
    preconditioned: bool = False
    name: str = "ACS"
    extra_statistics: tuple[str, ...] = ("balance", "cycle_position")

    def check_warmup(self, num_warmup: int, option: str) -> None:
        needed = _acs.tuning_steps(self.config)
        if self.cycle is None and num_warmup < needed:
            warnings.warn(
                f"ACS: {option}={num_warmup} is shorter than the {needed} steps the automatic "
                "tuning takes; it will end early with rougher estimates of the cycle (or pass "
                "alpha_max, alpha_min and beta_schedule).",
                stacklevel=3,
            )

    def noise_shapes(self, sites, leaf_shapes) -> NoiseShapes:
        return NoiseShapes(tuple(dlp_noise_shapes(sites.domains, leaf_shapes)))

    def adapt_init(self, like, num_warmup, flat_dim, control, sites=None) -> _acs.ACSTunerState:
        alpha_max, alpha_min, beta_schedule = self.cycle or (None, None, None)
        state = _acs.acs_tuner_init(
            self.config,
            like,
            tuned=self.cycle is not None,
            alpha_max=alpha_max,
            alpha_min=alpha_min,
            beta_schedule=beta_schedule,
            domain_scale=0.0 if sites is None else _acs.domain_step_scale(sites.domains),
        )
        if self.cycle is None and num_warmup == 0:
            # no warmup to tune in: the naive cycle from (alpha_ceil, beta_max) down
            state = _acs.acs_finish_tuning(state, self.config)
        return state

    def parameters(self, adapt_state: _acs.ACSTunerState) -> StepParameters:
        return StepParameters(*_acs.acs_step_parameters(adapt_state, self.config))

    step = DLPSpec.step

    def adapt_update(self, adapt_state, info, params, index, num_warmup, control):
        if control.step is not None and control.step >= num_warmup:
            # after warmup the tuning has finished: only the cycle moves (a Python-driven step
            # would otherwise pay the whole tuner's arithmetic for it)
            return _acs.acs_cycle_advance(adapt_state)
        return _acs.acs_warmup_update(adapt_state, info.accept_prob, self.config, index, num_warmup)

    def adapt_final(self, adapt_state: _acs.ACSTunerState) -> dict:
        """The cycle in use: ``alpha`` and ``beta`` of length ``steps_per_cycle``, and whether
        the tuning finished."""
        xp = array_namespace(adapt_state.alpha_max)
        s = self.config.steps_per_cycle
        alpha = xp.stack(
            [
                _acs.cyclical_step_size(
                    xp.asarray(k, device=_device(adapt_state.alpha_max)),
                    s,
                    adapt_state.alpha_max,
                    adapt_state.alpha_min,
                )
                for k in range(s)
            ]
        )
        tuned = adapt_state.phase == _acs.DONE
        return {"alpha": alpha, "beta": adapt_state.beta_schedule, "tuned": tuned}

    def extra_stats(self, adapt_state: _acs.ACSTunerState) -> dict:
        return {"cycle_position": adapt_state.cycle_position % self.config.steps_per_cycle}


@dataclass(frozen=True)
class GibbsSpec(SamplerSpec):
    """One coordinate at a time from its exact conditional (or Liu's modified / random-walk
    forms), in a random order each sweep: one draw is one sweep
    (:func:`discrete_kernels.gibbs.gibbs_sweep`). Its ``local_fn`` need only return the log
    density (``(f, ())``); it has no step size or adaptation (reported as NaN)."""

    random_walk: bool = False
    modified: bool = False
    name: str = "DiscreteGibbs"

    def noise_shapes(self, sites, leaf_shapes) -> NoiseShapes:
        total = sum(math.prod(shape) for shape in leaf_shapes)
        return NoiseShapes(((total,), (total,)), permutation=total)

    def adapt_init(self, like, num_warmup, flat_dim, control, sites=None) -> Array:
        xp = array_namespace(like)
        return xp.full_like(like, math.nan)

    def parameters(self, adapt_state: Array) -> StepParameters:
        return StepParameters(adapt_state, adapt_state, True)

    def step(self, chain, noise, params, adapt_state, sites, local_fn):
        propose_uniforms, accept_uniforms = noise.uniforms
        return _gibbs.gibbs_sweep(
            chain,
            [int(c) for c in noise.permutation],
            propose_uniforms,
            accept_uniforms,
            lambda leaves: local_fn(leaves)[0],
            sites.domains,
            random_walk=self.random_walk,
            modified=self.modified,
        )


class ABAdaptState(NamedTuple):
    """Adaptation state of AB.

    - **tuner** - :class:`discrete_kernels.ab.ABTunerState`, the (step_size, balance) search.
    - **stats** - :class:`discrete_kernels.ab.QuadraticStats` of the burn-in pairs (None for
      AB-1st).
    - **quadratic** - :class:`discrete_kernels.ab.QuadraticProposal` (zeros until fitted,
      which is exactly AB-1st; None for AB-1st).
    - **next_step_size**, **next_balance** - step size and balance of the next proposal (a
      probe during warmup, the tuned values after).
    - **dual_averaging** - of ``log step_size`` in the warmup's first phase
      (``initial_steps``); **max_step_size** - its upper bound
      (:func:`discrete_kernels.adaptation.dlp_step_size_bounds` of the sites).
    """

    tuner: _ab.ABTunerState
    stats: Any
    quadratic: Any
    next_step_size: Array
    next_balance: Array
    dual_averaging: DualAveragingState
    max_step_size: Array


@dataclass(frozen=True)
class ABSpec(SamplerSpec):
    """Any-scale balanced sampler (:mod:`discrete_kernels.ab`): AB-1st, or a quadratic
    variant with ``W`` from ``coupling`` or fitted from a burn-in inside warmup; ``(step_size,
    balance)`` tuned on the expected jump distance during warmup when ``adapt``.

    The warmup schedule (:func:`discrete_kernels.ab.ab_warmup_plan`: tune, collect pairs, fit
    ``W``, restart the tuner) is :meth:`adapt_update`, branching on the shared draw index.
    """

    config: _ab.ABConfig = _ab.ab_options("1st", 0.1, 0.5, 0.2, 0.9, None, None)
    adapt: bool = True
    coupling: Any = None
    name: str = "AB"
    extra_statistics: tuple[str, ...] = ("balance",)

    @property
    def quadratic(self) -> bool:
        return self.config.variant != "1st"

    def plan(self, num_warmup: int) -> _ab.ABWarmupPlan:
        return _ab.ab_warmup_plan(
            self.config,
            num_warmup,
            adapt=self.adapt,
            fit_w=self.quadratic and self.coupling is None,
            name=self.name,
        )

    def check_sites(self, sites: Sites, flat_dim: int) -> None:
        if not self.quadratic:
            return
        tables = [n for n, table in zip(sites.names, sites.is_table) if table]
        if tables:
            raise ValueError(
                f"{self.name}: variant={self.config.variant!r} needs binary or ordinal sites "
                f"with gradients; {tables} are categorical or exact. Use variant='1st'."
            )
        if self.coupling is not None:
            check_symmetric_matrix(self.name, "coupling", self.coupling, flat_dim)

    def check_warmup(self, num_warmup: int, option: str) -> None:
        plan = self.plan(num_warmup)  # refuses a burn-in longer than the warmup
        one_round = 6 * plan.block_size  # three probes of sigma, then three of balance
        if self.adapt and 0 < num_warmup < one_round:
            warnings.warn(
                f"{self.name}: {option}={num_warmup} is shorter than one round of the step-size "
                f"search ({one_round} steps: 6 blocks of {plan.block_size}); the step size stays "
                f"near its start ({self.config.sigma}), where the chain may barely move. "
                "Lengthen the warmup, pass a smaller block_size=, or pass step_size= with "
                "adapt=False.",
                stacklevel=3,
            )
        if self.quadratic and num_warmup == 0 and self.coupling is None:
            warnings.warn(
                f"{self.name}: variant={self.config.variant!r} fits W during warmup; with "
                f"{option}=0 it runs as AB-1st (or pass coupling=W).",
                stacklevel=3,
            )

    def noise_shapes(self, sites, leaf_shapes) -> NoiseShapes:
        normals = sum(math.prod(s) for s in leaf_shapes) if self.quadratic else 0
        return NoiseShapes(tuple(dlp_noise_shapes(sites.domains, leaf_shapes)), normals)

    def adapt_init(self, like, num_warmup, flat_dim, control, sites=None) -> ABAdaptState:
        xp = array_namespace(like)
        tuner = _ab.ab_tuner_init(self.config, like)
        tuning = self.adapt and num_warmup > 0
        initial = tuning and self.plan(num_warmup).initial_steps > 0
        # the dual-averaging phase runs at (sigma, balance) of the config, not a probe
        step_size, balance = _ab.ab_tuner_parameters(tuner, self.config, tuning and not initial)
        dual = dual_averaging_init(step_size)
        scale = 0.0 if sites is None else domain_step_scale(sites.domains)
        high = xp.full_like(like, dlp_step_size_bounds(scale)[1])
        if not self.quadratic:
            return ABAdaptState(tuner, None, None, step_size, balance, dual, high)
        stats = _ab.quadratic_stats_init(flat_dim, like)
        if self.coupling is None:  # AB-1st until W is fitted
            device = _device(like)
            zeros = xp.zeros((flat_dim,), dtype=like.dtype, device=device)
            quadratic = _ab.QuadraticProposal(
                xp.zeros((flat_dim, flat_dim), dtype=like.dtype, device=device), zeros
            )
        else:
            w = xp.asarray(self.coupling, dtype=like.dtype, device=_device(like))
            quadratic = _ab.quadratic_from_coupling(w, self.config.variant, control.loop)
        return ABAdaptState(tuner, stats, quadratic, step_size, balance, dual, high)

    def parameters(self, adapt_state: ABAdaptState) -> StepParameters:
        return StepParameters(adapt_state.next_step_size, adapt_state.next_balance, True)

    def step(self, chain, noise, params, adapt_state, sites, local_fn):
        return _ab.ab_step(
            chain,
            noise.uniforms,
            noise.normals,
            noise.accept_uniform,
            local_fn=local_fn,
            domains=sites.domains,
            is_table=sites.is_table,
            sigma=params.step_size,
            balance=params.balance,
            quadratic=adapt_state.quadratic,
        )

    def adapt_update(self, adapt_state, info, params, index, num_warmup, control):
        plan = self.plan(num_warmup)
        config = self.config
        at = index if control.step is None else control.step  # what the branches decide on
        if self.adapt and num_warmup > 0:

            def initial(state: ABAdaptState) -> ABAdaptState:
                # DMALA's dual averaging of sigma; at its last step the search starts there
                dual, step_size = step_size_adaptation_update(
                    state.dual_averaging,
                    params.step_size,
                    info.accept_prob,
                    index,
                    plan.initial_steps,
                    StepSizeAdaptation(),
                    bounds=(dlp_step_size_bounds(0.0)[0], state.max_step_size),
                )
                last = index == plan.initial_steps - 1
                xp = array_namespace(step_size)
                sigma = xp.where(last, step_size, state.tuner.sigma)
                tuner = state.tuner._replace(sigma=sigma, round_sigma=sigma)
                probe_step, balance = _ab.ab_tuner_parameters(tuner, config, True)
                return state._replace(
                    tuner=tuner,
                    dual_averaging=dual,
                    next_step_size=xp.where(last, probe_step, step_size),
                    next_balance=xp.where(last, balance, state.next_balance),
                )

            def tune(state: ABAdaptState) -> ABAdaptState:
                tuner = _ab.ab_tuner_update(state.tuner, info.jump, config, plan.block_size)
                step_size, balance = _ab.ab_tuner_parameters(tuner, config, index + 1 < num_warmup)
                return state._replace(tuner=tuner, next_step_size=step_size, next_balance=balance)

            def search(state: ABAdaptState) -> ABAdaptState:
                return control.cond(at < num_warmup, tune, _same, state)

            if plan.initial_steps > 0:
                adapt_state = control.cond(at < plan.initial_steps, initial, search, adapt_state)
            else:
                adapt_state = search(adapt_state)
        if plan.burn_in > 0:

            def collect(state: ABAdaptState) -> ABAdaptState:
                stats = _ab.quadratic_stats_update(state.stats, info.dx, info.dg)
                return state._replace(stats=stats)

            def fit(state: ABAdaptState) -> ABAdaptState:
                quadratic, _ = _ab.fit_quadratic_proposal(state.stats, config.variant, control.loop)
                if not plan.restart:
                    return state._replace(quadratic=quadratic)
                tuner = _ab.ab_tuner_restart(state.tuner, config)
                step_size, balance = _ab.ab_tuner_parameters(tuner, config, True)
                return state._replace(
                    quadratic=quadratic, tuner=tuner, next_step_size=step_size, next_balance=balance
                )

            adapt_state = control.cond(at < plan.burn_in, collect, _same, adapt_state)
            adapt_state = control.cond(at == plan.burn_in - 1, fit, _same, adapt_state)
        return adapt_state

    def adapt_final(self, adapt_state: ABAdaptState) -> dict:
        """The tuned ``step_size`` and ``balance`` (frozen after warmup)."""
        return {"step_size": adapt_state.tuner.sigma, "balance": adapt_state.tuner.balance}


def _same(state: Any) -> Any:
    return state


# ------------------------------------------------------------------------------------------
# coupled chains of the DLP samplers (UCD with gradient proposals)


def synchronised_noise(noise: StepNoise, chain: ChainState, sites: Sites) -> StepNoise:
    """``chain``'s half of the common noise of a coupled DLP step.

    A DLP proposal factorises over coordinates. A Binary leaf flips coordinate ``i`` when
    ``u_i < sigmoid(logit_i)``; written as a draw of the *new value*, ``y_i = 1`` iff
    ``u'_i < P(y_i = 1 | x)``, with ``u'_i = u_i`` where ``x_i = 0`` and ``1 - u_i`` where
    ``x_i = 1`` (still uniform). Two chains sharing ``u`` this way propose the same value with
    probability ``1 - |P_xi(y_i = 1) - P_eta(y_i = 1)|``: a maximal coupling of each
    coordinate. Other domains already draw the new value by inverse CDF from ``u_i`` (a common
    uniform coupling: valid, not maximal in general). The MH uniform is shared as is.
    """
    uniforms = []
    for domain, x, u in zip(sites.domains, chain.x, noise.uniforms):
        if isinstance(domain, Binary):
            xp = array_namespace(u)
            u = xp.where(x == 1, 1.0 - u, u)
        uniforms.append(u)
    return noise._replace(uniforms=tuple(uniforms))


def coupled_step(
    spec: SamplerSpec,
    xi: ChainState,
    eta: ChainState,
    noise: StepNoise,
    params: StepParameters,
    adapt_state: Any,
    sites: Sites,
    local_fn: LocalFn,
) -> tuple[ChainState, ChainState, StepInfo, StepInfo]:
    """One step of two coupled chains of a DLP sampler (DMALA, DULA, ACS) on common noise
    (:func:`synchronised_noise`); each chain is marginally an exact step of ``spec``, and two
    chains in the same state stay together.

    Returns
    -------
    (xi_next, eta_next, info_xi, info_eta)
    """
    if not isinstance(spec, (DLPSpec, ACSSpec)):
        raise ValueError(
            f"coupled chains need a DLP proposal (DMALA, DULA or ACS); got {spec.name}."
        )
    sampler: SamplerSpec = spec  # the shared DLP step, whichever of the two specs
    xi, info_xi = sampler.step(
        xi, synchronised_noise(noise, xi, sites), params, adapt_state, sites, local_fn
    )
    eta, info_eta = sampler.step(
        eta, synchronised_noise(noise, eta, sites), params, adapt_state, sites, local_fn
    )
    return xi, eta, info_xi, info_eta


# ------------------------------------------------------------------------------------------
# specs from the kernels' options (every option checked here, once for both adapters)


def dlp_spec(
    name: str,
    step_size: Any,
    adapt_step_size: Any,
    target_accept_prob: Any,
    *,
    metropolis: bool,
    adapt_default: bool,
) -> DLPSpec:
    """The spec of DMALA (``metropolis=True``) or DULA from their options."""
    step_size = check_number(name, "step_size", step_size)
    target = check_number(name, "target_accept_prob", target_accept_prob, high=1.0)
    adapt = (
        adapt_default
        if adapt_step_size is None
        else check_bool(name, "adapt_step_size", adapt_step_size)
    )
    rule = StepSizeAdaptation(target_accept_prob=target)
    return DLPSpec(step_size=step_size, adapt=adapt, rule=rule, name=name, metropolis=metropolis)


def gibbs_spec(random_walk: Any = False, modified: Any = False) -> GibbsSpec:
    """The spec of single-site Gibbs from its options."""
    name = "DiscreteGibbs"
    return GibbsSpec(
        check_bool(name, "random_walk", random_walk), check_bool(name, "modified", modified)
    )


def gwg_spec(step_size: Any, name: str = "GWG") -> GWGSpec:
    """The spec of GWG (``step_size=None``: no distance penalty)."""
    if step_size is not None:
        step_size = check_number(name, "step_size", step_size)
    return GWGSpec(step_size=step_size, name=name)


def acs_spec(
    steps_per_cycle: Any = 8,
    beta_max: Any = 0.95,
    target_accept_prob: Any = 0.5,
    alpha_floor: Any = 0.05,
    alpha_ceil: Any = 5.0,
    alpha_max: Any = None,
    alpha_min: Any = None,
    beta_schedule: Any = None,
    tuning: dict | None = None,
) -> ACSSpec:
    """The spec of ACS from its options (:func:`discrete_kernels.acs.acs_options`)."""
    config, cycle = _acs.acs_options(
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
    return ACSSpec(config=config, cycle=cycle)


def ab_spec(
    variant: str = "1st",
    step_size: Any = 0.1,
    balance: Any = 0.5,
    adapt: Any = True,
    rate: Any = 0.2,
    decay: Any = 0.9,
    block_size: Any = None,
    burn_in: Any = None,
    max_doublings: Any = 3,
    coupling: Any = None,
    name: str = "AB",
    initial_steps: Any = None,
) -> ABSpec:
    """The spec of AB from its options (``coupling``: an array of the adapter's backend)."""
    config = _ab.ab_options(
        variant,
        step_size,
        balance,
        rate,
        decay,
        block_size,
        burn_in,
        name,
        max_doublings,
        initial_steps,
    )
    adapt = check_bool(name, "adapt", adapt)
    if coupling is not None and variant == "1st":
        raise ValueError(f"{name}: coupling is a W for the quadratic variants; variant='1st'.")
    return ABSpec(config=config, adapt=adapt, coupling=coupling, name=name)


# ------------------------------------------------------------------------------------------
# ESH: the continuous sampler (step size and orbit length adapted in warmup, no MH step)


class ESHChain(NamedTuple):
    """State of an ESH chain on the flat unconstrained vector: **x** (d,), **log_density**
    ``f(x)`` (scalar) and **grad** ``grad f(x)`` (d,), cached so a draw of ``N`` leapfrog steps
    costs ``N`` gradients."""

    x: Array
    log_density: Array
    grad: Array


class ESHStepInfo(NamedTuple):
    """Statistics of one ESH draw: **hamiltonian_drift** (largest ``|H(t) - H(0)|``),
    **trajectory_length** (``step_size * num_steps``), **num_grad_evals**."""

    hamiltonian_drift: Array
    trajectory_length: Array
    num_grad_evals: Array


@dataclass(frozen=True)
class ESHSpec:
    """Energy-sampling Hamiltonian dynamics (:mod:`discrete_kernels.esh`) for continuous
    sites, on the flat unconstrained vector.

    ``step_size`` and ``num_steps`` given: fixed. None (the default): adapted during warmup
    (:func:`discrete_kernels.esh.esh_adapt_update`), from ``adaptation``'s initial values.

    A draw takes ``max_steps`` uniforms (one per leapfrog step, for the reservoir), one more
    that places the start on the orbit (``exact``: ``floor(u (N + 1))`` steps integrated
    backward) and ``d`` normals for the fresh direction (:meth:`noise_shapes`).
    """

    step_size: float | None = None
    num_steps: int | None = None
    exact: bool = True
    adaptation: _esh.ESHAdaptation = _esh.ESHAdaptation()
    name: str = "ESH"

    @property
    def max_steps(self) -> int:
        """Most leapfrog steps of a draw (the length of its reservoir uniforms)."""
        return self.num_steps if self.num_steps is not None else self.adaptation.max_num_steps

    def noise_shapes(self, flat_dim: int) -> NoiseShapes:
        return NoiseShapes(uniforms=((self.max_steps,), ()), num_normals=flat_dim)

    def init(self, x: Array, value_and_grad: Callable[[Array], tuple[Array, Array]]) -> ESHChain:
        log_density, grad = value_and_grad(x)
        return ESHChain(x, log_density, grad)

    def adapt_init(self, x: Array) -> _esh.ESHAdaptState:
        """Adaptation state of a chain at ``x`` (d,), at the given or initial values."""
        xp = array_namespace(x)
        step = self.adaptation.initial_step_size if self.step_size is None else self.step_size
        steps = self.adaptation.initial_num_steps if self.num_steps is None else self.num_steps
        return _esh.esh_adapt_init(xp.asarray(step, dtype=x.dtype, device=_device(x)), steps, x)

    def adapt_update(
        self,
        state: _esh.ESHAdaptState,
        info: ESHStepInfo,
        x: Array,
        index: Array,
        num_warmup: int,
    ) -> _esh.ESHAdaptState:
        """The adaptation after draw ``index`` (0-based), which ended at ``x``."""
        if num_warmup == 0 or (self.step_size is not None and self.num_steps is not None):
            return state
        return _esh.esh_adapt_update(
            state,
            info.hamiltonian_drift,
            x,
            index,
            num_warmup,
            self.adaptation,
            adapt_step_size=self.step_size is None,
            adapt_num_steps=self.num_steps is None,
        )

    def step(
        self,
        chain: ESHChain,
        noise: StepNoise,
        value_and_grad: Callable[[Array], tuple[Array, Array]],
        adapt_state: _esh.ESHAdaptState,
        loop: Callable | None = None,
    ) -> tuple[ESHChain, ESHStepInfo]:
        """One draw: a trajectory from ``chain`` with the direction and offsets of ``noise``,
        at the step size and number of steps of ``adapt_state`` (:meth:`adapt_init`)."""
        xp = array_namespace(chain.x)
        assert noise.normals is not None
        reservoir, offset = noise.uniforms
        step_size, num_steps = adapt_state.step_size, adapt_state.num_steps
        if self.num_steps is not None:
            num_steps = self.num_steps  # a Python int: plain loops
        direction = _esh.unit_vector(xp.astype(noise.normals, chain.x.dtype))
        # uniform on 0..num_steps (the clip only guards u rounding up to 1 in float32)
        backward = xp.astype(xp.floor(offset * (num_steps + 1)), xp.int32)
        backward = xp.clip(backward, 0, num_steps)
        zero = xp.zeros_like(chain.log_density)
        start = _esh.ESHState(chain.x, direction, zero, chain.log_density, chain.grad)
        sample, info = _esh.esh_trajectory(
            start,
            step_size,
            num_steps,
            value_and_grad,
            reservoir,
            backward_steps=backward,
            exact=self.exact,
            loop=loop,
        )
        stats = ESHStepInfo(
            info.hamiltonian_drift,
            xp.asarray(step_size * num_steps, dtype=chain.x.dtype, device=_device(chain.x)),
            xp.asarray(num_steps, dtype=xp.int32, device=_device(chain.x)),
        )
        return ESHChain(sample.x, sample.log_density, sample.grad), stats


def esh_spec(step_size: Any = None, num_steps: Any = None, exact: Any = True) -> ESHSpec:
    """The spec of ESH from its options (every option checked here, for both adapters);
    None: adapted during warmup."""
    name = "ESH"
    if step_size is not None:
        step_size = float(check_number(name, "step_size", step_size))
    if num_steps is not None:
        num_steps = check_int(name, "num_steps", num_steps, minimum=1)
    return ESHSpec(step_size, num_steps, check_bool(name, "exact", exact))
