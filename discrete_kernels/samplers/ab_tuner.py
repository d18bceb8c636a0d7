"""The (step size, balance) search of the AB samplers: coordinate ascent on the expected jump
distance (Sun et al., ICLR 2023, App. A.2, Alg. 3-4), as a pure state machine driven one step
at a time (the AB paper's ``sigma`` is the kernels' ``step_size``, its ``alpha`` their
``balance``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from array_api_compat import device as _device

from .._xp import Array, array_namespace
from ..domains import Categorical, Domain
from ..metropolis import (
    coordinate_sum,
)
from ..warmup import DualAveragingState
from .ab_linalg import QuadraticProposal, QuadraticStats

__all__ = [
    "ABAdaptState",
    "ABConfig",
    "ABWarmupPlan",
    "ABTunerState",
    "ab_tuner_init",
    "ab_tuner_parameters",
    "ab_tuner_restart",
    "ab_tuner_update",
    "jump_distance",
]


class ABConfig(NamedTuple):
    """Static settings of an AB kernel: its options (:class:`discrete_kernels.samplers.ab.AB`,
    defaults from App. A.2 there) and two constants of the search.

    ``max_doublings`` > 0 extends the paper's search: while the same direction keeps winning
    for a coordinate, its probes move by ``(1 +- rate)^(2^k)`` (``k`` consecutive wins, at most
    ``max_doublings``), so a start far from the optimum (the default ``sigma = 0.1`` on a
    target that wants ``sigma = 10``) is left in a few rounds instead of dozens; a round that
    keeps ``theta`` or reverses direction returns to ``(1 +- rate)``. ``max_doublings = 0`` is
    Alg. 3-4 exactly.

    ``initial_steps``: warmup steps that first adapt ``sigma`` by dual averaging towards
    acceptance 0.574 at the initial balance (DMALA's rule), before the jump-distance search
    starts from there (:func:`default_initial_steps` when None; 0 is the paper's start at
    ``sigma``). The search then only refines a step size of the right scale instead of
    climbing to it from 0.1 a factor ``(1 + rate)^8`` per round at best.
    """

    variant: str
    sigma: float
    balance: float
    rate: float
    decay: float
    block_size: int | None
    burn_in: int | None
    max_doublings: int
    initial_steps: int | None
    balance_bounds: tuple[float, float] = (0.5, 1.0)  # the balanced range of Eq. 6
    restart_sigma_factor: float = 100.0


class ABTunerState(NamedTuple):
    """State of the (sigma, balance) search; all scalar arrays.

    - **sigma**, **balance** - current values; **rate** - ``gamma``.
    - **coordinate** - 0 while tuning sigma, 1 while tuning balance.
    - **probe** - 0, 1, 2 for ``theta``, ``theta`` scaled up, ``theta`` scaled down.
    - **count** - steps taken in this probe's block.
    - **jump_base**, **jump_plus**, **jump_minus** - summed expected jumps of the three probes.
    - **round_sigma**, **round_balance** - values at the start of the round (to decay ``gamma``).
    - **sigma_streak**, **balance_streak** - signed count of consecutive wins in one direction.
    """

    sigma: Array
    balance: Array
    rate: Array
    coordinate: Array
    probe: Array
    count: Array
    jump_base: Array
    jump_plus: Array
    jump_minus: Array
    round_sigma: Array
    round_balance: Array
    sigma_streak: Array
    balance_streak: Array


def ab_tuner_init(config: ABConfig, like: Array) -> ABTunerState:
    """Tuner at ``(sigma, balance)`` of ``config``; dtype of ``like``."""
    xp = array_namespace(like)
    device = _device(like)
    scalar = lambda v: xp.asarray(v, dtype=like.dtype, device=device)  # noqa: E731
    integer = lambda v: xp.asarray(v, device=device)  # noqa: E731
    zero = scalar(0.0)
    return ABTunerState(
        sigma=scalar(config.sigma),
        balance=scalar(config.balance),
        rate=scalar(config.rate),
        coordinate=integer(0),
        probe=integer(0),
        count=integer(0),
        jump_base=zero,
        jump_plus=zero,
        jump_minus=zero,
        round_sigma=scalar(config.sigma),
        round_balance=scalar(config.balance),
        sigma_streak=integer(0),
        balance_streak=integer(0),
    )


def _probe_factors(state: ABTunerState, config: ABConfig) -> tuple[Array, Array]:
    """Up and down factors of the coordinate being tuned: ``(1 + gamma)^e`` and
    ``(1 - gamma)^e`` with ``e = 2^k`` after ``k`` consecutive wins that way (else 1)."""
    xp = array_namespace(state.rate)
    streak = xp.where(state.coordinate == 0, state.sigma_streak, state.balance_streak)
    # arrays, not Python numbers: array_api_compat's torch `minimum` and `where` type a
    # number through torch.result_type, which splits a torch.compile program
    cap = xp.full_like(streak, config.max_doublings)
    one = xp.ones_like(state.rate)
    up_power = xp.where(
        streak > 0, 2.0 ** xp.astype(xp.minimum(streak, cap), state.rate.dtype), one
    )
    down_power = xp.where(
        streak < 0, 2.0 ** xp.astype(xp.minimum(-streak, cap), state.rate.dtype), one
    )
    return (one + state.rate) ** up_power, (one - state.rate) ** down_power


def _probe_factor(state: ABTunerState, config: ABConfig) -> Array:
    xp = array_namespace(state.rate)
    up, down = _probe_factors(state, config)
    return xp.where(state.probe == 1, up, xp.where(state.probe == 2, down, xp.ones_like(up)))


def _clip_balance(balance: Array, config: ABConfig) -> Array:
    xp = array_namespace(balance)
    low, high = config.balance_bounds
    return xp.clip(balance, low, high)


def ab_tuner_parameters(
    state: ABTunerState, config: ABConfig, tuning: Array | bool = True
) -> tuple[Array, Array]:
    """``(sigma, balance)`` of the next step: the probe's values while ``tuning``, otherwise
    the current best."""
    xp = array_namespace(state.sigma)
    tuning = xp.asarray(tuning, device=_device(state.sigma))
    factor = xp.where(tuning, _probe_factor(state, config), xp.ones_like(state.rate))
    on_sigma = state.coordinate == 0
    sigma = xp.where(on_sigma, state.sigma * factor, state.sigma)
    balance = xp.where(on_sigma, state.balance, _clip_balance(state.balance * factor, config))
    return sigma, balance


def _next_streak(streak: Array, direction: Array) -> Array:
    xp = array_namespace(streak)
    up = xp.where(streak > 0, streak + 1, xp.ones_like(streak))
    down = xp.where(streak < 0, streak - 1, -xp.ones_like(streak))
    return xp.where(direction > 0, up, xp.where(direction < 0, down, xp.zeros_like(streak)))


def ab_tuner_update(
    state: ABTunerState, jump: Array, config: ABConfig, block_size: int
) -> ABTunerState:
    """Record one step's expected jump; at the end of the third block of a coordinate keep
    the best of ``theta`` and its two probes (ties as in Alg. 4: up, then down, then stay) and
    move to the other coordinate; after a round (sigma then balance) with no change,
    ``gamma <- decay * gamma``.

    Unlike the pseudo-code of Alg. 3, where the balance block still runs at the old sigma, the
    new sigma is used at once (plain coordinate ascent).
    """
    xp = array_namespace(state.sigma)
    zero = xp.zeros_like(jump)
    base = state.jump_base + xp.where(state.probe == 0, jump, zero)
    plus = state.jump_plus + xp.where(state.probe == 1, jump, zero)
    minus = state.jump_minus + xp.where(state.probe == 2, jump, zero)
    count = state.count + 1
    block_done = count >= block_size
    probe = xp.where(block_done, state.probe + 1, state.probe)
    count = xp.where(block_done, xp.zeros_like(count), count)
    decided = probe >= 3
    # Alg. 4's order: the up probe wins ties, then the down probe, then theta; so a chain
    # that never moves at a tiny sigma (all jumps 0) still grows it
    go_up = (plus >= base) & (plus >= minus)
    go_down = ~go_up & (minus >= base)
    up, down = _probe_factors(state, config)
    factor = xp.where(go_up, up, xp.where(go_down, down, xp.ones_like(up)))
    direction = xp.where(go_up, 1, xp.where(go_down, -1, 0))
    on_sigma = state.coordinate == 0
    sigma = xp.where(decided & on_sigma, state.sigma * factor, state.sigma)
    scaled = _clip_balance(state.balance * factor, config)
    balance = xp.where(decided & ~on_sigma, scaled, state.balance)
    # a probe clipped onto the current balance is no move
    direction = xp.where(~on_sigma & (balance == state.balance), 0, direction)
    sigma_streak = xp.where(
        decided & on_sigma, _next_streak(state.sigma_streak, direction), state.sigma_streak
    )
    balance_streak = xp.where(
        decided & ~on_sigma, _next_streak(state.balance_streak, direction), state.balance_streak
    )
    round_done = decided & ~on_sigma
    unchanged = (sigma == state.round_sigma) & (balance == state.round_balance)
    rate = xp.where(round_done & unchanged, state.rate * config.decay, state.rate)
    return ABTunerState(
        sigma=sigma,
        balance=balance,
        rate=rate,
        coordinate=xp.where(decided, 1 - state.coordinate, state.coordinate),
        probe=xp.where(decided, xp.zeros_like(probe), probe),
        count=count,
        jump_base=xp.where(decided, zero, base),
        jump_plus=xp.where(decided, zero, plus),
        jump_minus=xp.where(decided, zero, minus),
        round_sigma=xp.where(round_done, sigma, state.round_sigma),
        round_balance=xp.where(round_done, balance, state.round_balance),
        sigma_streak=sigma_streak,
        balance_streak=balance_streak,
    )


def ab_tuner_restart(state: ABTunerState, config: ABConfig) -> ABTunerState:
    """Restart the search when ``W`` has just been fitted, at ``balance = 1`` and
    ``sigma * config.restart_sigma_factor``, a fresh round and the base rate.

    At ``balance = 1`` and ``sigma -> inf`` the quadratic proposal is a Gibbs step of the
    auxiliary-variable model, exact (acceptance 1) for a quadratic target; the first-order
    burn-in's optimum is usually far below it. ``restart_sigma_factor = 0`` keeps the search
    where it was (Alg. 1, which just continues).
    """
    if config.restart_sigma_factor == 0:
        return state
    xp = array_namespace(state.sigma)
    fresh = ab_tuner_init(config, state.sigma)
    sigma = state.sigma * config.restart_sigma_factor
    balance = xp.ones_like(state.balance) * config.balance_bounds[1]
    return fresh._replace(sigma=sigma, balance=balance, round_sigma=sigma, round_balance=balance)


def jump_distance(
    domains: Sequence[Domain],
    xs: Sequence[Array],
    ys: Sequence[Array],
    chains_in_rows: bool = False,
) -> Array:
    """``sum |y - x|`` over numeric leaves plus the number of changed categorical
    coordinates (scalar; per chain, shape (C, 1), with ``chains_in_rows``): the jump distance
    the (sigma, balance) tuner maximises."""
    xp = array_namespace(xs[0])
    total = None
    for d, x, y in zip(domains, xs, ys):
        if isinstance(d, Categorical):
            part = coordinate_sum(xp.astype(x != y, xp.float32), chains_in_rows)
        else:
            moved = xp.abs(xp.astype(y, xp.float32) - xp.astype(x, xp.float32))
            part = coordinate_sum(moved, chains_in_rows)
        total = part if total is None else total + part
    return total


class ABWarmupPlan(NamedTuple):
    """When the warmup of an AB kernel does what (decided once, for both adapters).

    - **block_size** - steps per tuner probe.
    - **burn_in** - warmup steps whose proposal pairs fit ``W`` (0: no fit in this run).
    - **restart** - restart the tuner after the fit (only when tuning goes on after it).
    - **initial_steps** - first warmup steps, dual averaging of ``sigma``.
    """

    block_size: int
    burn_in: int
    restart: bool
    initial_steps: int = 0


class ABAdaptState(NamedTuple):
    """Adaptation state of AB.

    - **tuner** - :class:`~discrete_kernels.samplers.ab_tuner.ABTunerState`, the (step_size,
      balance) search.
    - **stats** - :class:`~discrete_kernels.samplers.ab_linalg.QuadraticStats` of the burn-in
      pairs (None for AB-1st).
    - **quadratic** - :class:`~discrete_kernels.samplers.ab_linalg.QuadraticProposal` (zeros
      until fitted, which is exactly AB-1st; None for AB-1st).
    - **step_size**, **balance** - of the next proposal (a probe during the search, the tuned
      values after).
    - **dual_averaging** - of ``log step_size`` in the warmup's first phase; **max_step_size**
      its upper bound (:func:`~discrete_kernels.warmup.dlp_step_size_bounds` of the sites).
    """

    tuner: ABTunerState
    stats: QuadraticStats | None
    quadratic: QuadraticProposal | None
    step_size: Array
    balance: Array
    dual_averaging: DualAveragingState
    max_step_size: Array
