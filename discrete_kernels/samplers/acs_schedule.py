"""The cycle of ACS (Pynadath et al.): the cyclical step-size and balancing schedules (Eq. 8-9),
the tuner's settings and state, its start and its end. The tuning itself (Alg. 2-5), a pure
state machine driven one step at a time, is :mod:`discrete_kernels.samplers.acs_tuner`.

The step of ACS is the DLP step with step size ``alpha_k`` and balance ``beta_k``
(:func:`discrete_kernels.dlp_step`); this module only decides ``(alpha_k, beta_k)``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from array_api_compat import device as _device

from .._xp import Array, array_namespace
from ..warmup import dlp_step_size_bounds

__all__ = [
    "ACSConfig",
    "ACSTunerState",
    "DONE",
    "acs_cycle_advance",
    "acs_finish_tuning",
    "acs_tuner_init",
    "cyclical_balance",
    "on_schedule_axis",
    "select_state",
    "alpha_min_from_burnin",
    "burnin_start",
    "next_phase",
    "search_steps",
    "cyclical_step_size",
    "tuning_steps",
]

BURNIN, BURNIN_MH, ALPHA_MIN, ALPHA_MAX, BALANCE, DONE = range(6)
SEARCHES = ("range", "paper")


class ACSConfig(NamedTuple):
    """Static settings of the cycle and its tuning: the kernel's options
    (:class:`discrete_kernels.samplers.acs.ACS`, defaults there) and the tuning's constants
    (defaults from the paper and its code, changed through the kernel's ``tuning={...}``)."""

    steps_per_cycle: int
    beta_max: float
    target_accept_prob: float
    alpha_floor: float
    alpha_ceil: float
    burnin_steps: int = 0
    burnin_mh_steps: int = 50
    num_candidates: int = 5
    alpha_rounds: int = 5
    learning_rate: float = 0.5
    search: str = "range"
    expansion: float = 4.0
    trend_window: int = 25


def alpha_min_from_burnin(config: ACSConfig) -> bool:
    """Whether ``alpha_min`` is the burn-in's dual-averaged step size (the range search after
    an MH burn-in), with no search of its own (phase 2 skipped)."""
    return config.search == "range" and config.burnin_mh_steps > 0


def search_steps(config: ACSConfig) -> int:
    """Number of MCMC steps of the searches (phases 2-4)."""
    searches = 1 if alpha_min_from_burnin(config) else 2
    alpha = searches * config.alpha_rounds * config.num_candidates
    balance = (config.steps_per_cycle - 1) * config.num_candidates
    return alpha + balance


def tuning_steps(config: ACSConfig) -> int:
    """Number of MCMC steps the tuning takes at least (each is one log-density evaluation):
    phase 1 may go on while the chain's log density rises, within the warmup."""
    return config.burnin_steps + config.burnin_mh_steps + search_steps(config)


def cyclical_step_size(k: Array, steps_per_cycle: int, alpha_max: Array, alpha_min: Array):
    """``alpha_k = max(alpha_max / 2 * (cos(pi * (k mod s) / s) + 1), alpha_min)`` (Eq. 8)."""
    xp = array_namespace(alpha_max)
    position = xp.astype(k % steps_per_cycle, alpha_max.dtype)
    alpha = alpha_max / 2 * (xp.cos(math.pi * position / steps_per_cycle) + 1)
    return xp.maximum(alpha, alpha_min)


def cyclical_balance(k: Array, beta_schedule: Array) -> Array:
    """``beta_k = beta_schedule[k mod s]``; ``k`` of shape ``B``, ``beta_schedule`` (*B, s)
    (one schedule per chain where the chains are rows)."""
    xp = array_namespace(beta_schedule)
    s = beta_schedule.shape[-1]
    positions = xp.arange(s, device=_device(beta_schedule))
    at_k = positions == xp.expand_dims(k % s, axis=-1)
    return xp.sum(xp.where(at_k, beta_schedule, xp.zeros_like(beta_schedule)), axis=-1)


def on_schedule_axis(condition: Array) -> Array:
    """A per-chain ``condition`` with the balance schedule's axis added, to select schedules."""
    xp = array_namespace(condition)
    return xp.expand_dims(condition, axis=-1)


def select_state(condition: Array, on_true: ACSTunerState, on_false: ACSTunerState):
    """Field by field ``where(condition, on_true, on_false)``, the per-chain ``condition``
    reaching the balance schedule's positions too."""
    xp = array_namespace(condition)
    return ACSTunerState(
        *(
            xp.where(on_schedule_axis(condition) if t.ndim > condition.ndim else condition, t, f)
            for t, f in zip(on_true, on_false)
        )
    )


class ACSTunerState(NamedTuple):
    """Tuner state; every field is an array (scalars unless noted).

    - **phase** - 0..5 (:mod:`~discrete_kernels.samplers.acs_tuner`); **count** - steps taken
      in this phase.
    - **alpha_min**, **alpha_max** - current estimates (the search bounds of Alg. 4).
    - **rho** - acceptance of the best candidate of the last round (``rho_cur``).
    - **best_gap**, **best_value**, **best_accept** - the best candidate of the current round.
    - **beta_schedule** - (s,) balances; **cycle_position** - ``k`` of the running cycle.
    - With chains in rows (``like`` of shape (C, 1)) every field has that shape, the balance
      schedule (C, 1, s): each chain tunes its own cycle.
    - **direction** - range search: +1 while the search moves up, -1 down;
      **bracketed** - whether the target has been bracketed (the search then narrows);
      **width** - half-width in ``log(alpha)`` of the next narrowing round;
      **alpha_limit** - largest step size the range search tests
      (:func:`discrete_kernels.warmup.dlp_step_size_bounds`);
      **round_above**, **round_below** - whether a candidate of this round had acceptance
      above / below the target.
    - **burnin_alpha** - step size of the MH burn-in (phase 1), adapted as it goes by dual
      averaging (:func:`discrete_kernels.warmup.dual_averaging_update`), whose
      **burnin_log_avg** (averaged log step size), **burnin_error_sum** and **burnin_count**
      these are;
      **alpha_max_start** - where the ``alpha_max`` search starts (kept for a restart).
    - Trend of the log density: **tuning_step** - steps since the tuning began;
      **window_sum**, **window_sq** - sums of ``f`` and ``f^2`` over the current window;
      **previous_mean** - mean ``f`` of the last window; **rising** - whether the last window
      was rising (:mod:`~discrete_kernels.samplers.acs_tuner`); **restarts** - how often the
      tuning restarted.
    """

    phase: Array
    count: Array
    alpha_min: Array
    alpha_max: Array
    rho: Array
    best_gap: Array
    best_value: Array
    best_accept: Array
    beta_schedule: Array
    cycle_position: Array
    direction: Array
    bracketed: Array
    width: Array
    alpha_limit: Array
    round_above: Array
    round_below: Array
    burnin_alpha: Array
    burnin_log_avg: Array
    burnin_error_sum: Array
    burnin_count: Array
    alpha_max_start: Array
    tuning_step: Array
    window_sum: Array
    window_sq: Array
    previous_mean: Array
    rising: Array
    restarts: Array


def acs_tuner_init(
    config: ACSConfig,
    like: Array,
    tuned: bool = False,
    alpha_max: float | None = None,
    alpha_min: float | None = None,
    beta_schedule=None,
    domain_scale: float = 0.0,
) -> ACSTunerState:
    """Initial tuner state; ``tuned=True`` with explicit schedules skips the tuning.

    ``like`` is any float array of the backend and dtype to use. ``domain_scale``
    (:func:`discrete_kernels.domains.domain_step_scale`): the range search for ``alpha_max``
    starts at the larger of it and ``alpha_ceil``.
    """
    xp = array_namespace(like)
    dtype = like.dtype
    s = config.steps_per_cycle
    device = _device(like)
    # every field shaped like `like`: one per chain where the chains are rows
    shape = tuple(like.shape)
    scalar = lambda v: xp.full(shape, v, dtype=dtype, device=device)  # noqa: E731
    integer = lambda v: xp.full(shape, v, device=device)  # noqa: E731 (int, or bool for a bool)
    if beta_schedule is None:
        beta = xp.full((*shape, s), config.beta_max, dtype=dtype, device=device)
    else:
        beta = xp.asarray(beta_schedule, dtype=dtype, device=device) + xp.zeros(
            (*shape, s), dtype=dtype, device=device
        )
    ceil = config.alpha_ceil
    if config.search == "range":
        ceil = max(ceil, domain_scale)
    false = integer(False)
    alpha_max_start = ceil if alpha_max is None else alpha_max
    return ACSTunerState(
        phase=integer(DONE if tuned else next_phase(config, BURNIN - 1)),
        count=integer(0),
        alpha_min=scalar(config.alpha_floor if alpha_min is None else alpha_min),
        alpha_max=scalar(alpha_max_start),
        rho=scalar(0.0),
        best_gap=scalar(math.inf),
        best_value=scalar(0.0),
        best_accept=scalar(-1.0),
        beta_schedule=beta,
        cycle_position=integer(0),
        direction=scalar(1.0),
        bracketed=false,
        width=scalar(0.0),
        alpha_limit=scalar(dlp_step_size_bounds(domain_scale)[1]),
        round_above=false,
        round_below=false,
        burnin_alpha=scalar(burnin_start(config)),
        burnin_log_avg=scalar(0.0),
        burnin_error_sum=scalar(0.0),
        burnin_count=scalar(0.0),
        alpha_max_start=scalar(alpha_max_start),
        tuning_step=integer(0),
        window_sum=scalar(0.0),
        window_sq=scalar(0.0),
        previous_mean=scalar(-math.inf),
        rising=integer(True),
        restarts=integer(0),
    )


def burnin_start(config: ACSConfig) -> float:
    """Where the burn-in's step size starts: ``sqrt(alpha_floor alpha_ceil)`` (0.5, DMALA's
    default, with the defaults)."""
    return math.sqrt(config.alpha_floor * config.alpha_ceil)


def next_phase(config: ACSConfig, phase: int) -> int:
    """The phase after ``phase``, skipping phases of no steps (burn-ins of length 0, the
    ``alpha_min`` search where :func:`alpha_min_from_burnin`): such a phase would never end."""
    lengths = {
        BURNIN: config.burnin_steps,
        BURNIN_MH: config.burnin_mh_steps,
        ALPHA_MIN: 0 if alpha_min_from_burnin(config) else 1,
    }
    following = phase + 1
    while lengths.get(following, 1) == 0:
        following += 1
    return min(following, DONE)


def acs_cycle_advance(state: ACSTunerState) -> ACSTunerState:
    """:func:`~discrete_kernels.samplers.acs_tuner.acs_tuner_update` of a finished tuning
    (phase ``DONE``) without the tuning's work: only the step count and the cycle's position
    move on. For drivers that know on the host that warmup has ended (the tuning is always
    finished by then)."""
    return state._replace(count=state.count + 1, cycle_position=state.cycle_position + 1)


def acs_finish_tuning(state: ACSTunerState, config: ACSConfig) -> ACSTunerState:
    """End the tuning now (warmup too short for the budget): keep the estimates so far, with
    ``alpha_min <= alpha_max`` and a non-increasing balance schedule, and start the cycle."""
    xp = array_namespace(state.alpha_min)
    s = config.steps_per_cycle
    low = xp.minimum(state.alpha_min, state.alpha_max)
    high = xp.maximum(state.alpha_min, state.alpha_max)
    # positions not tuned yet keep beta_max: replace by the running minimum (non-increasing)
    beta = state.beta_schedule
    running = [beta[..., 0]]
    for k in range(1, s):
        running.append(xp.minimum(running[-1], beta[..., k]))
    beta = xp.stack(running, axis=-1)
    return state._replace(
        phase=xp.full_like(state.phase, DONE),
        count=xp.zeros_like(state.count),
        alpha_min=low,
        alpha_max=high,
        beta_schedule=beta,
        cycle_position=xp.zeros_like(state.cycle_position),
    )
