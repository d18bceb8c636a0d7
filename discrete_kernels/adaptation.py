"""Step-size adaptation during warmup: Nesterov dual averaging towards a target acceptance
(Hoffman & Gelman, 2014), written as pure updates that run under ``jit`` or in a Python loop.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from array_api_compat import device as _device

from ._xp import Array, array_namespace

__all__ = [
    "DualAveragingState",
    "StepSizeAdaptation",
    "dual_averaging_init",
    "dual_averaging_update",
    "dlp_step_size_bounds",
    "step_size_adaptation_update",
]


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


def step_size_adaptation_update(
    state: DualAveragingState,
    step_size: Array,
    accept_prob: Array,
    iteration: Array,
    num_warmup: int,
    rule: StepSizeAdaptation = DEFAULT_RULE,
    bounds: tuple[Array | float, Array | float] | None = None,
) -> tuple[DualAveragingState, Array]:
    """Adapt during warmup, freeze at the averaged step size when warmup ends.

    Parameters
    ----------
    state : DualAveragingState
    step_size : scalar array
        The step size used for the draw that produced ``accept_prob``.
    accept_prob : scalar array
    iteration : scalar integer array
        Index of that draw, counting from 0 at the first warmup draw.
    num_warmup : int
    rule : StepSizeAdaptation
    bounds : (low, high), optional
        Range of the adapted step size (:func:`dlp_step_size_bounds` for the DLP samplers).

    Returns
    -------
    (state, step_size) for the next draw. Outside warmup both are returned unchanged.
    """
    xp = array_namespace(step_size)
    in_warmup = iteration < num_warmup
    last_warmup = iteration == num_warmup - 1
    updated = dual_averaging_update(state, accept_prob, rule, bounds)
    new_state = DualAveragingState(
        *(xp.where(in_warmup, new, old) for new, old in zip(updated, state))
    )
    new_step = xp.where(
        last_warmup,
        xp.exp(updated.log_step_size_avg),
        xp.where(in_warmup, xp.exp(updated.log_step_size), step_size),
    )
    return new_state, new_step
