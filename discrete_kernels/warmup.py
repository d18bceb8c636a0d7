"""Warmup as composable phases, and dual averaging of a step size.

A sampler's adaptation is a list of :class:`Phase` objects, each acting on the sampler's
adaptation state over a range of draws: ``init`` before the first draw of the range (after the
draw before it), ``update`` after every draw in it, ``final`` after the update of its last
draw. One combinator, :func:`run_phases`, runs them in list order after each draw, with the
adapter's branch (:class:`~discrete_kernels.ControlFlow`): a real branch on the draw index,
which is shared by all chains, so a phase's work costs nothing outside its range. A phase with
``stop=None`` runs to the end of sampling (ACS's cycle).

Dual averaging (Nesterov, as in Hoffman & Gelman, 2014) moves ``log(step_size)`` towards a
target acceptance; :func:`dual_averaging_phase` is the phase every step-size adaptation uses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from array_api_compat import device as _device

from ._xp import Array, array_namespace

__all__ = [
    "DualAveragingState",
    "Feedback",
    "Phase",
    "StepSizeAdaptation",
    "dlp_step_size_bounds",
    "dual_averaging_init",
    "dual_averaging_phase",
    "dual_averaging_update",
    "run_phases",
    "start_phases",
]


class Feedback(NamedTuple):
    """What a phase sees of the draw just made: the step's **info**, the **params** it used,
    the **chain** after it and its **index** (0 for the first warmup draw; an integer array
    shared by all chains, or a Python int)."""

    info: Any
    params: Any
    chain: Any
    index: Any


class Phase(NamedTuple):
    """One piece of a warmup over draws ``start <= index < stop`` (``stop=None``: to the end).

    - **update** - ``(state, feedback) -> state`` after every draw of the range;
    - **init** - ``state -> state`` before the range's first draw (at setup when ``start``
      is 0);
    - **final** - ``state -> state`` after the update of the range's last draw.
    """

    start: int
    stop: int | None
    update: Callable[[Any, Feedback], Any] | None = None
    init: Callable[[Any], Any] | None = None
    final: Callable[[Any], Any] | None = None


def _same(state: Any) -> Any:
    return state


def _bound(update: Callable[[Any, Feedback], Any], feedback: Feedback) -> Callable[[Any], Any]:
    return lambda state: update(state, feedback)


def start_phases(phases: Sequence[Phase], state: Any) -> Any:
    """The adaptation state before the first draw: the ``init`` of every phase starting at 0."""
    for phase in phases:
        if phase.start == 0 and phase.init is not None and phase.stop != 0:
            state = phase.init(state)
    return state


def run_phases(phases: Sequence[Phase], state: Any, feedback: Feedback, control: Any) -> Any:
    """The adaptation state after draw ``feedback.index``: each phase in list order runs its
    init if its range starts at the next draw, its update if the draw is in its range, and its
    final if the draw is its range's last.

    ``control.step`` (a Python int, where the adapter knows the index on the host) decides in
    Python; otherwise ``control.cond`` branches on the index array.
    """
    at = feedback.index if control.step is None else control.step

    def when(predicate: Any, fn: Callable[[Any], Any], state: Any) -> Any:
        if isinstance(predicate, bool):
            return fn(state) if predicate else state
        return control.cond(predicate, fn, _same, state)

    def inside(phase: Phase) -> Any:
        if phase.stop is None:
            return True if phase.start == 0 else at >= phase.start
        if phase.start == 0:
            return at < phase.stop
        return (at >= phase.start) & (at < phase.stop)

    for phase in phases:
        if phase.stop is not None and phase.stop <= phase.start:
            continue
        if phase.init is not None and phase.start > 0:
            state = when(at == phase.start - 1, phase.init, state)
        if phase.update is not None:
            state = when(inside(phase), _bound(phase.update, feedback), state)
        if phase.final is not None and phase.stop is not None:
            state = when(at == phase.stop - 1, phase.final, state)
    return state


# ------------------------------------------------------------------------------------------
# dual averaging


class DualAveragingState(NamedTuple):
    """State of dual averaging on ``log(step_size)``; all fields are scalar arrays."""

    log_step_size: Array
    log_step_size_avg: Array
    error_sum: Array
    count: Array
    prox_center: Array


class StepSizeAdaptation(NamedTuple):
    """Constants of the rule (Stan's defaults)."""

    target_accept_prob: float = 0.574
    t0: float = 10.0
    kappa: float = 0.75
    gamma: float = 0.05


DEFAULT_RULE = StepSizeAdaptation()


def dlp_step_size_bounds(domain_scale: float) -> tuple[float, float]:
    """Range in which the DLP step size ``alpha`` still changes the proposal.

    A move of squared length ``delta^2`` pays ``delta^2 / (2 alpha)`` nats in the proposal
    (DLP paper, Eq. 3). Below ``alpha = 1e-3`` even the shortest move (``delta^2 = 1``) pays
    500 nats, so nothing ever moves; above ``1e3 * max(1, domain_scale)`` the longest move
    (``delta^2`` up to ``domain_scale``, :func:`discrete_kernels.domains.domain_step_scale`)
    pays under 5e-4 nats, so every larger ``alpha`` gives the same proposal.
    """
    return 1e-3, 1e3 * max(1.0, domain_scale)


def dual_averaging_init(step_size: Array) -> DualAveragingState:
    """Start at ``step_size``, with the shrinkage centre at ``log(10 * step_size)``."""
    xp = array_namespace(step_size)
    log_step = xp.log(step_size)
    zero = xp.zeros_like(log_step)
    return DualAveragingState(log_step, zero, zero, zero, log_step + math.log(10.0))


def dual_averaging_update(
    state: DualAveragingState,
    accept_prob: Array,
    rule: StepSizeAdaptation = DEFAULT_RULE,
    bounds: tuple[Array | float, Array | float] | None = None,
) -> DualAveragingState:
    """One dual-averaging update from an observed acceptance probability; ``bounds``
    ``(low, high)`` clips the step size (the iterate, hence also its average)."""
    xp = array_namespace(state.log_step_size)
    count = state.count + 1.0
    weight = 1.0 / (count + rule.t0)
    error_sum = (1.0 - weight) * state.error_sum + weight * (rule.target_accept_prob - accept_prob)
    log_step = state.prox_center - xp.sqrt(count) / rule.gamma * error_sum
    if bounds is not None:
        low, high = (
            xp.log(xp.asarray(b, dtype=log_step.dtype, device=_device(log_step))) for b in bounds
        )
        log_step = xp.minimum(xp.maximum(log_step, low), high)
    avg_weight = count ** (-rule.kappa)
    log_step_avg = avg_weight * log_step + (1.0 - avg_weight) * state.log_step_size_avg
    return DualAveragingState(log_step, log_step_avg, error_sum, count, state.prox_center)


def dual_averaging_phase(
    start: int,
    stop: int,
    rule: StepSizeAdaptation,
    accept_prob: Callable[[Any, Feedback], Array],
    bounds: Callable[[Any], tuple[Any, Any]] | None = None,
) -> Phase:
    """Dual averaging of ``state.step_size`` over draws ``[start, stop)``, frozen at the
    averaged step size after the last one.

    The adaptation state is any NamedTuple with fields ``step_size`` (the next draw's) and
    ``dual_averaging`` (a :class:`DualAveragingState`). ``accept_prob(state, feedback)`` is
    the acceptance (or pseudo-acceptance) the rule sees; ``bounds(state)`` the clip range of
    the step size.
    """

    def init(state: Any) -> Any:
        return state._replace(dual_averaging=dual_averaging_init(state.step_size))

    def update(state: Any, feedback: Feedback) -> Any:
        xp = array_namespace(state.step_size)
        dual = dual_averaging_update(
            state.dual_averaging,
            accept_prob(state, feedback),
            rule,
            None if bounds is None else bounds(state),
        )
        return state._replace(dual_averaging=dual, step_size=xp.exp(dual.log_step_size))

    def final(state: Any) -> Any:
        xp = array_namespace(state.step_size)
        return state._replace(step_size=xp.exp(state.dual_averaging.log_step_size_avg))

    return Phase(start, stop, update, init, final)
