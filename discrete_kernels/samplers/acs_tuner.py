"""The automatic tuning of ACS's cycle (Pynadath et al., Alg. 2-5), as a pure state machine
driven one step at a time: which ``(alpha, beta)`` each warmup step uses and how the tuner's
state (:class:`~discrete_kernels.samplers.acs_schedule.ACSTunerState`) moves after it. The
cycle it tunes (Eq. 8-9) is :mod:`discrete_kernels.samplers.acs_schedule`.

Tuning (Alg. 2-5 of the paper), one proposal per MCMC step, all inside warmup:

0. burn-in without MH at ``(alpha_ceil, beta_max)`` (``burnin_steps``; none by default: on a
   binary BNN these steps threw chains hundreds of nats below their start, into states where
   they froze; the paper's 50 with ``tuning={"burnin_steps": 50}``);
1. burn-in with MH at ``beta = 1/2`` (DMALA's proposal) and a step size adapted to ``rho*``
   as it goes (dual averaging, as DMALA's warmup, from ``sqrt(alpha_floor alpha_ceil)``), for
   at least ``burnin_mh_steps`` and on while the chain's log density still rises (below);
2. EstimateAlpha for ``alpha_min`` at ``beta = 1/2``: rounds of ``num_candidates`` step sizes
   searched from ``alpha_floor``. The default (range search after an MH burn-in) skips it:
   the burn-in already adapts the step size of acceptance ``rho*`` at ``beta = 1/2``, averaged
   over all its steps, which is ``alpha_min``; a search round sees one proposal per candidate;
3. EstimateAlpha for ``alpha_max`` at ``beta_max``: the same, from the larger of
   ``alpha_ceil`` and the domain's scale (:func:`discrete_kernels.domains.domain_step_scale`);
4. EstimateBalSched: for each position ``k = 1 .. s-1`` of the cycle, ``num_candidates``
   balances on a grid of ``[1/2, beta_{k-1}]``, keeping the one of highest acceptance;
5. done: the tuned cycle.

The paper's burn-in (phase 1 on a naive cycle, a fixed number of steps) can end while a chain
is still far from the typical set; the searches then tune the cycle to that transient (step
sizes of acceptance ``rho*`` on a slope of the log density) and the chain can freeze there
once it climbs out. Here the tuner watches the trend of the chain's log density ``f`` in
windows of ``trend_window`` steps: a window is *rising* when its mean ``f`` exceeds the
previous window's by more than its own standard deviation (a steady climb moves the mean by
about ``sqrt(12)`` within-window deviations; noise at stationarity by a fraction of one), or
when ``f`` never changed in it (a frozen chain has not settled either).
Phase 1 ends at the first window end after ``burnin_mh_steps`` that is not rising, or when
only the searches' steps are left in the warmup. If the window that ends the balance search is
rising (the chain climbed during the searches), the tuning restarts at phase 1 when the warmup
still has room for phase 1 and the searches; otherwise the cycle stands. Without the log
density (:func:`acs_tuner_update` called without it, as ACS inside PCD does) phase 1 lasts
``burnin_mh_steps`` and nothing restarts.

Two searches are available (``ACSConfig.search``). ``"paper"`` is Alg. 4 as written: each
round tests step sizes between the bound and ``bound * (1 -/+ zeta |rho* - rho|)``, downward
for ``alpha_max`` and upward for ``alpha_min``, so a round moves the bound by at most
``1 + zeta / 2`` (a factor 1.25) and never past its start. ``"range"`` (the default) first
brackets the target: while the acceptance stays on one side of ``rho*`` the ``r``-th round
spans a factor ``expansion ** r`` (``expansion = 4``) in the direction that approaches it (up
while acceptance is above the target, down while below); once a round saw both sides (or the
search turned back) it narrows by bisection in ``log(alpha)``: each round tests the best
step size so far and its neighbours one spacing of the previous round away, halving the
spacing (with 5 candidates). ``learning_rate`` is used by ``"paper"`` only. Ties in
acceptance (all ``1`` or all ``0``, common at the ends of the range) go to the candidate
towards the target instead of staying at the bound. So the defaults reach step sizes far from
``alpha_floor`` and ``alpha_ceil`` in a few rounds, inside the range where a step size still
changes the proposal (:func:`discrete_kernels.warmup.dlp_step_size_bounds`: up to
``1e3 (S - 1)^2`` for an ordinal coordinate with ``S`` values, ``1e3`` for a binary one).

Acceptance is the expected acceptance ``min(1, exp(log A))`` of each proposal, not the realised
rate. Unlike Alg. 4-5, where the chain jumps to the proposal of the best candidate, here the
chain moves by the usual MH rule throughout phases 1-4, so it stays a valid MCMC chain.
"""

from __future__ import annotations

import math

from array_api_compat import device as _device

from .._xp import Array, array_namespace
from ..warmup import (
    DualAveragingState,
    StepSizeAdaptation,
    dlp_step_size_bounds,
    dual_averaging_update,
)
from .acs_schedule import (
    ALPHA_MAX,
    ALPHA_MIN,
    BALANCE,
    BURNIN,
    BURNIN_MH,
    DONE,
    ACSConfig,
    ACSTunerState,
    acs_finish_tuning,
    alpha_min_from_burnin,
    burnin_start,
    cyclical_balance,
    cyclical_step_size,
    next_phase,
    on_schedule_axis,
    search_steps,
    select_state,
)

__all__ = [
    "acs_step_parameters",
    "acs_tuner_update",
    "acs_warmup_update",
    "search_round",
]


def _linspace_point(low: Array, high: Array, index: Array, num: int) -> Array:
    xp = array_namespace(low)
    if num == 1:
        return high
    return low + (high - low) * xp.astype(index, low.dtype) / (num - 1)


def _alpha_candidate(state: ACSTunerState, config: ACSConfig, maximum: bool) -> Array:
    """Candidate step size of this step in an EstimateAlpha round (Alg. 4, or the range
    search of the module docstring)."""
    xp = array_namespace(state.alpha_min)
    t = config.num_candidates
    index = state.count % t
    if config.search == "range":
        bound = state.alpha_max if maximum else state.alpha_min
        fraction = xp.astype(index, bound.dtype) / (t - 1) if t > 1 else xp.ones_like(bound)
        # bracketing: geometric steps from the bound over a factor `expansion` ** r in the
        # search's r-th round, so k rounds reach a factor expansion ** (k (k + 1) / 2)
        reach = xp.astype(state.count // t + 1, bound.dtype)
        expand = bound * config.expansion ** (state.direction * reach * fraction)
        # narrowing: geometric points on [bound e^-width, bound e^width]
        narrow = bound * xp.exp(state.width * (2 * fraction - 1))
        # outside dlp_step_size_bounds every step size proposes the same moves
        low = xp.asarray(dlp_step_size_bounds(0.0)[0], dtype=bound.dtype, device=_device(bound))
        candidate = xp.where(state.bracketed, narrow, expand)
        return xp.minimum(xp.maximum(candidate, low), state.alpha_limit)
    gap = xp.abs(config.target_accept_prob - state.rho)
    if maximum:
        bound = state.alpha_max
        proposal = bound * (1 - config.learning_rate * gap)
        return _linspace_point(proposal, bound, index, t)
    bound = state.alpha_min
    proposal = bound * (1 + config.learning_rate * gap)
    return _linspace_point(bound, proposal, index, t)


def _balance_candidate(state: ACSTunerState, config: ACSConfig) -> tuple[Array, Array]:
    """Cycle position being tuned and its candidate balance (Alg. 5)."""
    t = config.num_candidates
    position = state.count // t + 1  # 1 .. s-1
    ceiling = cyclical_balance(position - 1, state.beta_schedule)
    beta = _linspace_point(0.5 + 0.0 * ceiling, ceiling, state.count % t, t)
    return position, beta


def acs_step_parameters(state: ACSTunerState, config: ACSConfig) -> tuple[Array, Array, Array]:
    """``(alpha, beta, metropolis)`` for the next step: ``metropolis`` is False only in the
    burn-in without MH correction."""
    xp = array_namespace(state.alpha_min)
    s = config.steps_per_cycle
    like = state.alpha_min
    scalar = lambda v: xp.asarray(v, dtype=like.dtype, device=_device(like))  # noqa: E731
    ceil = scalar(config.alpha_ceil)
    half, beta_max = scalar(0.5), scalar(config.beta_max)
    _, balance_beta = _balance_candidate(state, config)
    balance_position = state.count // config.num_candidates + 1
    cycle_alpha = cyclical_step_size(state.cycle_position, s, state.alpha_max, state.alpha_min)
    cycle_beta = cyclical_balance(state.cycle_position, state.beta_schedule)
    alphas = [
        ceil,
        state.burnin_alpha,
        _alpha_candidate(state, config, maximum=False),
        _alpha_candidate(state, config, maximum=True),
        cyclical_step_size(balance_position, s, state.alpha_max, state.alpha_min),
        cycle_alpha,
    ]
    betas = [beta_max, half, half, beta_max, balance_beta, cycle_beta]
    alpha = _select(state.phase, alphas)
    beta = _select(state.phase, betas)
    return alpha, beta, state.phase != BURNIN


def _select(phase: Array, values: list[Array]) -> Array:
    xp = array_namespace(values[0])
    out = values[-1]
    for index in range(len(values) - 2, -1, -1):
        out = xp.where(phase == index, values[index], out)
    return out


def _trend_update(
    state: ACSTunerState, log_density: Array, config: ACSConfig
) -> tuple[Array, Array, Array, Array]:
    """``(window_sum, window_sq, previous_mean, rising)`` after a step that reached
    ``log_density``: the window's running mean and sum of squared deviations (Welford, kept in
    the fields ``window_sum`` and ``window_sq``), and at a window's end its verdict (module
    docstring)."""
    xp = array_namespace(state.window_sum)
    window = config.trend_window
    step = state.tuning_step + 1
    seen = xp.astype((step - 1) % window + 1, state.window_sum.dtype)  # steps in this window
    f = xp.astype(log_density, state.window_sum.dtype)
    delta = f - state.window_sum
    mean = state.window_sum + delta / seen
    squares = state.window_sq + delta * (f - mean)
    end = step % window == 0
    spread = xp.sqrt(xp.maximum(squares, xp.zeros_like(squares)) / seen)
    # a window in which f never changed (a frozen chain) has not settled either
    rising = xp.where(end, ((mean - state.previous_mean) > spread) | (spread == 0), state.rising)
    previous_mean = xp.where(end, mean, state.previous_mean)
    mean = xp.where(end, xp.zeros_like(mean), mean)
    squares = xp.where(end, xp.zeros_like(squares), squares)
    return mean, squares, previous_mean, rising


def search_round(
    state: ACSTunerState,
    config: ACSConfig,
    alpha: Array,
    beta: Array,
    accept_prob: Array,
    count: Array,
) -> ACSTunerState:
    """One step of a search round (phases 2-4): the candidate ``(alpha, beta)`` just tried had
    expected acceptance ``accept_prob``; ``count`` is the phase's step count after it. Keeps
    the round's best candidate, and at the round's end moves the bound it searched (the
    range search also its direction, bracket and width; Alg. 5 its balance). Returns
    ``state`` with the searches' fields updated (the others as they were)."""
    xp = array_namespace(state.alpha_min)
    t = config.num_candidates
    s = config.steps_per_cycle
    target = config.target_accept_prob
    phase = state.phase
    in_alpha = (phase == ALPHA_MIN) | (phase == ALPHA_MAX)
    in_balance = phase == BALANCE
    # best candidate of the round: closest to the target (alpha), highest acceptance (beta)
    gap = xp.abs(accept_prob - target)
    if config.search == "range":
        # a tie (all 1 or all 0 at the ends of the range) goes to the step size towards the
        # target: the larger one while acceptance is above it, the smaller one below
        towards = xp.where(accept_prob > target, alpha > state.best_value, alpha < state.best_value)
        better_alpha = in_alpha & ((gap < state.best_gap) | ((gap == state.best_gap) & towards))
    else:
        better_alpha = in_alpha & (gap < state.best_gap)
    better_beta = in_balance & (accept_prob > state.best_accept)
    better = better_alpha | better_beta
    best_gap = xp.where(better_alpha, gap, state.best_gap)
    best_accept = xp.where(better, accept_prob, state.best_accept)
    best_value = xp.where(better_alpha, alpha, xp.where(better_beta, beta, state.best_value))

    round_done = (count % t == 0) & (in_alpha | in_balance)
    alpha_min = xp.where(round_done & (phase == ALPHA_MIN), best_value, state.alpha_min)
    alpha_max = xp.where(round_done & (phase == ALPHA_MAX), best_value, state.alpha_max)
    rho = xp.where(round_done & in_alpha, best_accept, state.rho)
    # range search: which side of the target this round saw, and where to go next
    round_above = in_alpha & (state.round_above | (accept_prob > target))
    round_below = in_alpha & (state.round_below | (accept_prob < target))
    new_direction = xp.where(best_accept > target, xp.ones_like(rho), -xp.ones_like(rho))
    end_alpha_round = round_done & in_alpha
    # the target is bracketed once a round saw acceptance on both sides of it, or the search
    # turned back (except after its first round, whose direction was a guess: up from
    # alpha_floor, down from the ceiling)
    flipped = (new_direction != state.direction) & (count > t)
    bracketed = state.bracketed | (end_alpha_round & (flipped | (round_above & round_below)))
    # next narrowing round: one spacing of the round just ended either side of its best
    # candidate, so each round shrinks the bracket by (t - 1) / 2 (bisection in log alpha)
    spacing = xp.where(
        state.bracketed,
        2 * state.width / max(t - 1, 1),
        xp.astype(count // t, state.width.dtype) * math.log(config.expansion) / max(t - 1, 1),
    )
    width = xp.where(end_alpha_round, spacing, state.width)
    direction = xp.where(end_alpha_round, new_direction, state.direction)
    round_above = round_above & ~round_done
    round_below = round_below & ~round_done
    position = count // t  # the position whose round just ended is count // t
    at_position = xp.arange(s, device=_device(position)) == on_schedule_axis(position)
    beta_schedule = xp.where(
        on_schedule_axis(round_done & in_balance) & at_position,
        on_schedule_axis(best_value),
        state.beta_schedule,
    )
    # a new round starts from scratch
    best_gap = xp.where(round_done, xp.full_like(best_gap, math.inf), best_gap)
    best_accept = xp.where(round_done, xp.full_like(best_accept, -1.0), best_accept)
    return state._replace(
        best_gap=best_gap,
        best_accept=best_accept,
        best_value=best_value,
        alpha_min=alpha_min,
        alpha_max=alpha_max,
        rho=rho,
        round_above=round_above,
        round_below=round_below,
        bracketed=bracketed,
        width=width,
        direction=direction,
        beta_schedule=beta_schedule,
    )


def acs_tuner_update(
    state: ACSTunerState,
    accept_prob: Array,
    config: ACSConfig,
    log_density: Array | None = None,
    steps_left: Array | int | None = None,
) -> ACSTunerState:
    """Advance the tuner after a step with the parameters of :func:`acs_step_parameters`,
    whose proposal had expected acceptance ``accept_prob``.

    ``log_density`` (the chain's after the step) and ``steps_left`` (warmup steps after this
    one), given together, turn on the trend watch of the module docstring: phase 1 goes on
    while the log density rises (until only the searches fit in the warmup), and a climb during
    the searches restarts the tuning. Without them phase 1 lasts ``burnin_mh_steps``.
    """
    xp = array_namespace(state.alpha_min)
    watch = log_density is not None and steps_left is not None
    t = config.num_candidates
    s = config.steps_per_cycle
    target = config.target_accept_prob
    phase, count = state.phase, state.count + 1
    alpha, beta, _ = acs_step_parameters(state, config)
    accept_prob = xp.where(xp.isnan(accept_prob), xp.zeros_like(accept_prob), accept_prob)
    searched = search_round(state, config, alpha, beta, accept_prob, count)
    # the fields the phase change below moves on from the search's values
    alpha_min, alpha_max, rho = searched.alpha_min, searched.alpha_max, searched.rho
    direction, bracketed = searched.direction, searched.bracketed
    beta_schedule = searched.beta_schedule

    phase_length = [
        config.burnin_steps,
        config.burnin_mh_steps,
        config.alpha_rounds * t,
        config.alpha_rounds * t,
        (s - 1) * t,
    ]
    integer = lambda v: xp.asarray(v, device=_device(phase))  # noqa: E731
    length = _select(phase, [integer(n) for n in phase_length] + [integer(-1)])
    advance = (count == length) & (phase != DONE)
    following = _select(phase, [integer(next_phase(config, p)) for p in range(DONE + 1)])
    # phase 1: a step size of acceptance rho* at beta = 1/2, adapted as the chain moves
    # (dual averaging, as DMALA's warmup, from sqrt(alpha_floor alpha_ceil))
    dual = dual_averaging_update(
        DualAveragingState(
            xp.log(state.burnin_alpha),
            state.burnin_log_avg,
            state.burnin_error_sum,
            state.burnin_count,
            xp.full_like(alpha, math.log(10 * burnin_start(config))),
        ),
        accept_prob,
        StepSizeAdaptation(target_accept_prob=target),
        (dlp_step_size_bounds(0.0)[0], state.alpha_limit),
    )
    in_burnin = phase == BURNIN_MH
    burnin_alpha = xp.where(in_burnin, xp.exp(dual.log_step_size), state.burnin_alpha)
    burnin_log_avg = xp.where(in_burnin, dual.log_step_size_avg, state.burnin_log_avg)
    burnin_error_sum = xp.where(in_burnin, dual.error_sum, state.burnin_error_sum)
    burnin_count = xp.where(in_burnin, dual.count, state.burnin_count)
    window_sum, window_sq = state.window_sum, state.window_sq
    previous_mean, rising, restart = state.previous_mean, state.rising, xp.zeros_like(advance)
    if watch:
        assert log_density is not None and steps_left is not None  # for mypy
        window_sum, window_sq, previous_mean, rising = _trend_update(state, log_density, config)
        left = xp.asarray(steps_left, device=_device(phase))
        no_room = left <= search_steps(config)
        window_end = (state.tuning_step + 1) % config.trend_window == 0
        burnin_over = (count >= length) & ((window_end & ~rising) | no_room)
        advance = xp.where(phase == BURNIN_MH, burnin_over, advance)
        # a climb during the searches: tune again if phase 1 and the searches still fit
        room = left > search_steps(config) + config.burnin_mh_steps
        restart = advance & (phase == BALANCE) & rising & room
        following = xp.where(restart, xp.full_like(following, BURNIN_MH), following)
    new_phase = xp.where(advance, following, phase)
    entering_min = advance & (new_phase == ALPHA_MIN)
    entering_max = advance & (new_phase == ALPHA_MAX)
    # entering the alpha_max search: its acceptance memory starts at 0 (Alg. 4, line 1)
    rho = xp.where(entering_max, xp.zeros_like(rho), rho)
    # the alpha_min search starts upward from alpha_floor, the alpha_max search downward
    direction = xp.where(entering_min, xp.ones_like(direction), direction)
    direction = xp.where(entering_max, -xp.ones_like(direction), direction)
    bracketed = bracketed & ~(entering_min | entering_max)
    if alpha_min_from_burnin(config):
        # the burn-in targets the same acceptance at the same balance as the alpha_min search,
        # averaged over all its steps (a search round sees one proposal per candidate)
        from_burnin = advance & (phase == BURNIN_MH)
        alpha_min = xp.where(from_burnin, xp.exp(burnin_log_avg), alpha_min)
    # entering the balance search or the final cycle: make alpha_min <= alpha_max
    entering_balance = advance & (phase == ALPHA_MAX)
    low = xp.minimum(alpha_min, alpha_max)
    high = xp.maximum(alpha_min, alpha_max)
    if alpha_min_from_burnin(config):
        # alpha_min from the burn-in averages many steps: an alpha_max search that ends below it
        # (at beta_max every large step is rejected) raises alpha_max to it, not the reverse
        low = alpha_min
    alpha_min = xp.where(entering_balance, low, alpha_min)
    alpha_max = xp.where(entering_balance, high, alpha_max)
    beta_schedule = xp.where(
        on_schedule_axis(entering_balance) & (xp.arange(s, device=_device(beta_schedule)) == 0),
        xp.full_like(beta_schedule, config.beta_max),
        beta_schedule,
    )
    count = xp.where(advance, xp.zeros_like(count), count)
    cycle_position = xp.where(phase == DONE, state.cycle_position + 1, state.cycle_position)
    # a restart starts the searches afresh, from where the first tuning started them
    alpha_min = xp.where(restart, xp.full_like(alpha_min, config.alpha_floor), alpha_min)
    alpha_max = xp.where(restart, state.alpha_max_start, alpha_max)
    beta_schedule = xp.where(
        on_schedule_axis(restart), xp.full_like(beta_schedule, config.beta_max), beta_schedule
    )
    bracketed = bracketed & ~restart
    rho = xp.where(restart, xp.zeros_like(rho), rho)
    return searched._replace(
        phase=new_phase,
        count=count,
        alpha_min=alpha_min,
        alpha_max=alpha_max,
        rho=rho,
        beta_schedule=beta_schedule,
        cycle_position=cycle_position,
        direction=direction,
        bracketed=bracketed,
        burnin_alpha=burnin_alpha,
        burnin_log_avg=burnin_log_avg,
        burnin_error_sum=burnin_error_sum,
        burnin_count=burnin_count,
        tuning_step=xp.where(phase == DONE, state.tuning_step, state.tuning_step + 1),
        window_sum=window_sum,
        window_sq=window_sq,
        previous_mean=previous_mean,
        rising=rising,
        restarts=state.restarts + xp.astype(restart, state.restarts.dtype),
    )


def acs_warmup_update(
    state: ACSTunerState,
    accept_prob: Array,
    config: ACSConfig,
    iteration: Array,
    num_warmup: int,
    log_density: Array | None = None,
) -> ACSTunerState:
    """:func:`acs_tuner_update`, and at the last warmup step (``iteration == num_warmup - 1``)
    :func:`~discrete_kernels.samplers.acs_schedule.acs_finish_tuning` if the tuning has not
    finished, so sampling always follows a fixed cycle. With ``log_density`` (the chain's after
    the step) the tuner watches its trend (module docstring)."""
    steps_left = None if log_density is None else num_warmup - 1 - iteration
    updated = acs_tuner_update(state, accept_prob, config, log_density, steps_left)
    finished = acs_finish_tuning(updated, config)
    force = (iteration == num_warmup - 1) & (updated.phase != DONE)
    return select_state(force, finished, updated)
