"""Automatic cyclical scheduling (ACS, Pynadath et al.): DLP proposals whose step size
``alpha_k`` and balance ``beta_k`` follow a cycle, tuned automatically during warmup.

The step is the DLP step (:func:`discrete_kernels.samplers.dlp.dlp_step`) at the cycle's
``(alpha_k, beta_k)``; the cycle and its tuning (Alg. 2-5) are the state machine of
:mod:`discrete_kernels.samplers.acs_schedule`. Inside PCD the schedule moves with the training
iteration instead (App. B, Alg. 6): :class:`ACSPCDSchedule`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from array_api_compat import device as _device

from .._xp import Array, array_namespace
from ..domains import domain_step_scale
from ..kernel import ControlFlow, StepParameters
from ..validation import check_int, check_number
from ..warmup import Feedback, Phase
from .acs_schedule import (
    DONE,
    SEARCHES,
    ACSConfig,
    ACSTunerState,
    acs_cycle_advance,
    acs_finish_tuning,
    acs_tuner_init,
    cyclical_step_size,
    select_state,
    tuning_steps,
)
from .acs_tuner import acs_step_parameters, acs_tuner_update
from .dlp import DLPSampler

__all__ = ["ACS", "ACSInfo", "ACSPCDSchedule", "ACSPCDState", "PCD_RETUNE_CYCLES"]

PCD_RETUNE_CYCLES = 25
"""ACS inside PCD re-tunes ``alpha_max`` and ``alpha_min`` every this many cycles (App. G)."""


class ACSInfo(NamedTuple):
    """Statistics of one ACS draw: :class:`~discrete_kernels.samplers.dlp.DLPInfo`, the
    **cycle_position** ``k mod s`` of its proposal, and the chain's cycle ends
    **alpha_max** and **alpha_min** (each chain tunes its own; during warmup the tuner's
    current estimates, after it the cycle in use)."""

    accept_prob: Array
    accepted: Array
    hamming_distance: Array
    step_size: Array
    balance: Array
    cycle_position: Array
    alpha_max: Array
    alpha_min: Array


def _tuning_options(tuning: Mapping[str, Any] | None) -> dict:
    """Check the ``tuning={...}`` entries of ACS: known names, valid values."""
    if tuning is None:
        return {}
    if not isinstance(tuning, Mapping):
        raise ValueError(f"ACS: tuning must be a dict of ACSConfig fields, got {tuning!r}.")
    lengths = {
        "burnin_steps": 0,
        "burnin_mh_steps": 0,
        "num_candidates": 1,
        "alpha_rounds": 1,
        "trend_window": 2,
    }
    allowed = sorted([*lengths, "learning_rate", "search", "expansion"])
    out: dict[str, Any] = {}
    for key, value in tuning.items():
        if key in lengths:
            out[key] = check_int("ACS", f"tuning[{key!r}]", value, minimum=lengths[key])
        elif key == "learning_rate":
            out[key] = check_number("ACS", "tuning['learning_rate']", value)
        elif key == "expansion":
            out[key] = check_number("ACS", "tuning['expansion']", value, low=1.0)
        elif key == "search":
            if value not in SEARCHES:
                raise ValueError(
                    f"ACS: tuning['search'] must be one of {list(SEARCHES)}, got {value!r}."
                )
            out[key] = value
        else:
            raise ValueError(f"ACS: unknown tuning option {key!r}; allowed: {allowed}.")
    return out


@dataclass(frozen=True, eq=False)
class ACS(DLPSampler):
    """Automatic cyclical scheduling (Pynadath et al.): DLP proposals whose step size
    ``alpha_k`` and balance ``beta_k`` follow a cycle of ``steps_per_cycle`` steps, from large
    exploratory moves (``alpha_max``, ``beta_max``) to local ones (``alpha_min``, 1/2), each
    MH corrected, so the chain escapes local modes.

    The cycle is tuned automatically during warmup (burn-in, EstimateAlpha for ``alpha_min``
    and ``alpha_max``, EstimateBalSched; see :mod:`discrete_kernels.samplers.acs_schedule`),
    one proposal per warmup step, at least
    :func:`~discrete_kernels.samplers.acs_schedule.tuning_steps` steps (110 with the defaults).
    The burn-in goes on while the chain's log density still rises, and the tuning restarts if
    it rose during the searches, as long as the warmup has room (so a chain far from the
    typical set does not fix its cycle there). A warmup shorter than 110 steps ends the tuning
    early with a warning. Or pass ``alpha_max``, ``alpha_min`` and ``beta_schedule`` to skip
    it.

    Parameters
    ----------
    steps_per_cycle : int
        ``s`` (the paper uses 8 or 20).
    beta_max : float
        Balance of the largest step, in [1/2, 1).
    target_accept_prob : float
        ``rho*`` of the tuning.
    alpha_floor, alpha_ceil : float
        Where the searches for ``alpha_min`` and ``alpha_max`` start (the ``alpha_max``
        search starts at ``(S - 1)^2`` instead for an ordinal site with more values). The
        default range search leaves them as far as the target needs; the paper's search stays
        between them.
    alpha_max, alpha_min, beta_schedule : optional
        An explicit cycle (all three), used as given.
    tuning : dict, optional
        Other :class:`~discrete_kernels.samplers.acs_schedule.ACSConfig` fields: ``search``
        (``"range"``, the default, or ``"paper"`` for Alg. 4 as written), ``expansion``,
        burn-in lengths, candidates per round, rounds, learning rate (``"paper"`` only),
        ``trend_window`` (steps per window of the log-density trend that keeps the burn-in
        going while a chain still climbs, 25).
    """

    steps_per_cycle: int = 8
    beta_max: float = 0.95
    target_accept_prob: float = 0.5
    alpha_floor: float = 0.05
    alpha_ceil: float = 5.0
    alpha_max: float | None = None
    alpha_min: float | None = None
    beta_schedule: Any = None
    tuning: Mapping[str, Any] | None = None
    name: ClassVar[str] = "ACS"
    steps_chains_in_rows: ClassVar[bool] = True  # its tuner's state has a field per chain
    statistics: ClassVar[tuple[str, ...]] = ACSInfo._fields
    reported: ClassVar[tuple[str, ...]] = ACSInfo._fields
    config: ACSConfig = field(init=False, repr=False)
    cycle: tuple | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        s = check_int("ACS", "steps_per_cycle", self.steps_per_cycle, minimum=2)
        floor = check_number("ACS", "alpha_floor", self.alpha_floor)
        ceil = check_number("ACS", "alpha_ceil", self.alpha_ceil)
        if not floor < ceil:
            raise ValueError(f"ACS: need 0 < alpha_floor < alpha_ceil, got {floor!r}, {ceil!r}.")
        config = ACSConfig(
            steps_per_cycle=s,
            beta_max=check_number(
                "ACS", "beta_max", self.beta_max, low=0.5, high=1.0, low_inclusive=True
            ),
            target_accept_prob=check_number(
                "ACS", "target_accept_prob", self.target_accept_prob, high=1.0
            ),
            alpha_floor=floor,
            alpha_ceil=ceil,
            **_tuning_options(self.tuning),
        )
        object.__setattr__(self, "config", config)
        object.__setattr__(self, "cycle", self._explicit_cycle(s))

    def _explicit_cycle(self, steps_per_cycle: int) -> tuple | None:
        """``(alpha_max, alpha_min, beta_schedule)`` when given (all three), else None."""
        given = [x is not None for x in (self.alpha_max, self.alpha_min, self.beta_schedule)]
        if not any(given):
            return None
        if not all(given):
            raise ValueError(
                "ACS: an explicit cycle needs all of alpha_max, alpha_min and beta_schedule."
            )
        alpha_max = check_number("ACS", "alpha_max", self.alpha_max)
        alpha_min = check_number("ACS", "alpha_min", self.alpha_min)
        if not alpha_min <= alpha_max:
            raise ValueError(
                f"ACS: need 0 < alpha_min <= alpha_max, got {alpha_min!r}, {alpha_max!r}."
            )
        betas = list(self.beta_schedule)
        if len(betas) != steps_per_cycle:
            raise ValueError(
                f"ACS: beta_schedule must have steps_per_cycle = {steps_per_cycle} values in "
                f"[0.5, 1), got {len(betas)}."
            )
        betas = [
            check_number("ACS", f"beta_schedule[{k}]", b, low=0.5, high=1.0, low_inclusive=True)
            for k, b in enumerate(betas)
        ]
        return alpha_max, alpha_min, betas

    def check_warmup(self, num_warmup: int, option: str) -> None:
        needed = tuning_steps(self.config)
        if self.cycle is None and num_warmup < needed:
            warnings.warn(
                f"ACS: {option}={num_warmup} is shorter than the {needed} steps the automatic "
                "tuning takes; it will end early with rougher estimates of the cycle (or pass "
                "alpha_max, alpha_min and beta_schedule).",
                stacklevel=3,
            )

    def adapt_init(self, like, num_warmup, sites, flat_dim, control: ControlFlow) -> ACSTunerState:
        alpha_max, alpha_min, beta_schedule = self.cycle or (None, None, None)
        state = acs_tuner_init(
            self.config,
            like,
            tuned=self.cycle is not None,
            alpha_max=alpha_max,
            alpha_min=alpha_min,
            beta_schedule=beta_schedule,
            domain_scale=domain_step_scale(sites.domains),
        )
        if self.cycle is None and num_warmup == 0:
            # no warmup to tune in: the naive cycle from (alpha_ceil, beta_max) down
            state = acs_finish_tuning(state, self.config)
        return state

    def phases(self, num_warmup: int, control: ControlFlow) -> tuple[Phase, ...]:
        """The tuning over the warmup (finished early at its end if need be), then the cycle
        moving one position per draw."""
        config = self.config

        def advance(state: ACSTunerState, feedback: Feedback) -> ACSTunerState:
            return acs_cycle_advance(state)

        if self.cycle is not None or num_warmup == 0:
            return (Phase(0, None, advance),)

        def tune(state: ACSTunerState, feedback: Feedback) -> ACSTunerState:
            # the trend of the chain's log density decides when the burn-in ends (and whether
            # the searches run again); steps_left: warmup steps after this one
            return acs_tuner_update(
                state,
                feedback.info.accept_prob,
                config,
                log_density=feedback.chain.log_density,
                steps_left=num_warmup - 1 - feedback.index,
            )

        def finish(state: ACSTunerState) -> ACSTunerState:
            return select_state(state.phase == DONE, state, acs_finish_tuning(state, config))

        return (Phase(0, num_warmup, tune, final=finish), Phase(num_warmup, None, advance))

    def parameters(self, adapt_state: ACSTunerState) -> StepParameters:
        return StepParameters(*acs_step_parameters(adapt_state, self.config))

    def _position(self, adapt_state: ACSTunerState) -> Array:
        return adapt_state.cycle_position % self.config.steps_per_cycle

    def step(self, chain, noise, params, adapt_state, sites, local_fn):
        chain, info = super().step(chain, noise, params, adapt_state, sites, local_fn)
        return chain, ACSInfo(
            *info, self._position(adapt_state), adapt_state.alpha_max, adapt_state.alpha_min
        )

    def initial_info(self, params, adapt_state, like) -> dict:
        values = super().initial_info(params, adapt_state, like)
        xp = array_namespace(like)
        values["cycle_position"] = xp.asarray(self._position(adapt_state), device=_device(like))
        for name in ("alpha_max", "alpha_min"):
            values[name] = xp.asarray(getattr(adapt_state, name), dtype=like.dtype) + 0 * like
        return values

    def adapt_final(self, adapt_state: ACSTunerState) -> dict:
        """The cycle in use: ``alpha`` and ``beta`` of length ``steps_per_cycle``, and whether
        the tuning finished."""
        xp = array_namespace(adapt_state.alpha_max)
        s = self.config.steps_per_cycle
        device = _device(adapt_state.alpha_max)
        alpha = xp.stack(
            [
                cyclical_step_size(
                    xp.asarray(k, device=device), s, adapt_state.alpha_max, adapt_state.alpha_min
                )
                for k in range(s)
            ]
        )
        tuned = adapt_state.phase == DONE
        return {"alpha": alpha, "beta": adapt_state.beta_schedule, "tuned": tuned}

    def pcd_schedule(self) -> ACSPCDSchedule:
        return ACSPCDSchedule(self)


# ------------------------------------------------------------------------------------------
# ACS inside PCD (App. B, Alg. 6)


class ACSPCDState(NamedTuple):
    """Method state of PCD with an ACS sampler (ACS paper, App. B, Alg. 6): the persistent
    ``buffer`` (C, d), the training ``iteration`` that places it in the cycle, and the cycle's
    ends ``alpha_max``, ``alpha_min`` (medians over the chains of the last tuning run, or the
    kernel's explicit values)."""

    buffer: Any
    iteration: Any
    alpha_max: Any
    alpha_min: Any


@dataclass(frozen=True)
class ACSPCDSchedule:
    """How PCD runs an ACS sampler (App. B, Alg. 6): the schedule moves with the training
    iteration. The first iteration of each cycle of ``steps_per_cycle`` iterations explores at
    ``(alpha_max, beta_max)`` with its first step not MH corrected; the others exploit at
    ``(alpha_min, 1/2)``. Iteration 0 and every :data:`PCD_RETUNE_CYCLES` cycles re-tune
    ``alpha_max`` and ``alpha_min`` (the negative phase is then the sampler's tuning run on each
    chain; medians over the chains set the cycle), unless the kernel has an explicit cycle."""

    sampler: ACS

    @property
    def tuning_steps(self) -> int:
        """Sampler steps of a re-tuning iteration."""
        return tuning_steps(self.sampler.config)

    @property
    def tunes(self) -> bool:
        """Whether the cycle is tuned (no explicit cycle)."""
        return self.sampler.cycle is None

    def init(self, buffer: Array) -> ACSPCDState:
        """The method state of a fresh buffer (C, d)."""
        xp = array_namespace(buffer)
        cycle = self.sampler.cycle
        alpha_max, alpha_min = (float("nan"),) * 2 if cycle is None else cycle[:2]
        device = _device(buffer)
        like = xp.zeros((), dtype=buffer.dtype, device=device)
        return ACSPCDState(
            buffer,
            xp.asarray(0, device=device),
            xp.full_like(like, float(alpha_max)),
            xp.full_like(like, float(alpha_min)),
        )

    def retunes(self, iteration: Array) -> Array:
        """Whether training ``iteration`` re-tunes ``alpha_max`` and ``alpha_min``."""
        config = self.sampler.config
        return (iteration % (PCD_RETUNE_CYCLES * config.steps_per_cycle)) == 0

    def parameters(self, state: ACSPCDState, step: Array) -> StepParameters:
        """``(alpha, beta, metropolis)`` of sampler step ``step`` in the state's iteration."""
        config = self.sampler.config
        xp = array_namespace(state.alpha_max)
        explore = (state.iteration % config.steps_per_cycle) == 0
        alpha = xp.where(explore, state.alpha_max, state.alpha_min)
        beta = xp.where(
            explore,
            xp.full_like(state.alpha_max, config.beta_max),
            xp.full_like(state.alpha_max, 0.5),
        )
        return StepParameters(alpha, beta, ~(explore & (step == 0)))

    @staticmethod
    def tuned_bounds(alpha_max: Array, alpha_min: Array) -> tuple[Array, Array]:
        """``(alpha_max, alpha_min)`` of the cycle from the chains' tuned values (C,): their
        medians, in order."""
        xp = array_namespace(alpha_max)
        high, low = _median(alpha_max), _median(alpha_min)
        return xp.maximum(high, low), xp.minimum(high, low)


def _median(values: Array) -> Array:
    """Median of a 1-d array (the mean of the two middle values for an even length)."""
    xp = array_namespace(values)
    ordered = xp.sort(values)
    n = ordered.shape[0]
    if n % 2:
        return ordered[n // 2]
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2
