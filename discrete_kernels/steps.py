"""One MCMC transition of the DLP samplers (DULA, DMALA) and of GWG, on a tuple of leaves.

The adapters supply ``local_fn(leaves) -> (f, locals)``: the log density ``f`` (a scalar) and,
per leaf, its local information (gradient or table, see :mod:`discrete_kernels.proposals`).
The current ``f`` and locals are cached in :class:`ChainState`, so a step evaluates
``local_fn`` once, at the proposal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from ._xp import Array, array_namespace
from .domains import Domain
from .mh import accept_probability, metropolis_accept, mh_log_ratio
from .proposals import (
    dlp_leaf_log_prob,
    dlp_leaf_logits,
    dlp_leaf_sample,
    dlp_noise_shape,
    gwg_log_prob,
    gwg_move_logits,
    gwg_sample,
)

__all__ = [
    "ChainState",
    "LocalFn",
    "StepInfo",
    "dlp_noise_shapes",
    "dlp_propose",
    "dlp_step",
    "gwg_step",
    "hamming_distance",
    "mh_finish",
]

LocalFn = Callable[[tuple[Array, ...]], tuple[Array, tuple[Array, ...]]]


class ChainState(NamedTuple):
    """Position of one chain with its cached log density and local information.

    - **x** - tuple of leaves, each of shape (n_j...).
    - **log_density** - scalar ``f(x)``.
    - **local** - tuple, per leaf the gradient (n_j...) or table (n_j..., S_j).
    """

    x: tuple[Array, ...]
    log_density: Array
    local: tuple[Array, ...]


class StepInfo(NamedTuple):
    """Per-step statistics; all scalar arrays.

    - **accept_prob** - ``min(1, exp(log A))`` of the proposal (for DULA: the MH acceptance
      the move would have had).
    - **accepted** - whether the chain moved: the proposal was accepted *and* differs from
      the current state (accepting a copy of the current state is not a move).
    - **hamming_distance** - number of coordinates the proposal changes.
    """

    accept_prob: Array
    accepted: Array
    hamming_distance: Array


def hamming_distance(xs: Sequence[Array], ys: Sequence[Array], like: Array) -> Array:
    """Number of coordinates that differ between two tuples of leaves (scalar, in ``like``'s
    dtype and on its device)."""
    xp = array_namespace(like)
    total = xp.zeros_like(like)
    for x, y in zip(xs, ys):
        total = total + xp.sum(xp.astype(x != y, total.dtype))
    return total


def _select(accept: Array, new: ChainState, old: ChainState) -> ChainState:
    xp = array_namespace(new.log_density)
    pick = lambda a, b: xp.where(accept, a, b)  # noqa: E731
    return ChainState(
        tuple(pick(a, b) for a, b in zip(new.x, old.x)),
        pick(new.log_density, old.log_density),
        tuple(pick(a, b) for a, b in zip(new.local, old.local)),
    )


def _broadcast_per_leaf(value: Array | float | Sequence | None, n: int, default: float):
    if value is None:
        return (default,) * n
    if isinstance(value, (tuple, list)):
        return tuple(default if v is None else v for v in value)
    return (value,) * n


def dlp_noise_shapes(
    domains: Sequence[Domain], shapes: Sequence[tuple[int, ...]]
) -> tuple[tuple[int, ...], ...]:
    """Shapes of the proposal uniforms :func:`dlp_step` takes: one per coordinate of each
    leaf."""
    return tuple(dlp_noise_shape(d, s) for d, s in zip(domains, shapes))


def mh_finish(
    state: ChainState,
    proposal: ChainState,
    log_q_forward: Array,
    log_q_reverse: Array,
    accept_uniform: Array,
    metropolis: bool | Array,
) -> tuple[ChainState, StepInfo]:
    """MH decision between ``state`` and ``proposal`` from the two proposal log densities;
    ``metropolis=False`` moves unless the proposal's log density or locals are unusable."""
    xp = array_namespace(state.log_density)
    log_ratio = mh_log_ratio(state.log_density, proposal.log_density, log_q_forward, log_q_reverse)
    # unadjusted: always move, except to a state with unusable energy or gradient
    usable = log_ratio > -xp.inf
    if isinstance(metropolis, bool):
        accept = metropolis_accept(log_ratio, accept_uniform) if metropolis else usable
    else:  # decided at run time (ACS burn-in)
        accept = xp.where(metropolis, metropolis_accept(log_ratio, accept_uniform), usable)
    distance = hamming_distance(state.x, proposal.x, state.log_density)
    info = StepInfo(accept_probability(log_ratio), accept & (distance > 0), distance)
    return _select(accept, proposal, state), info


def dlp_propose(
    state: ChainState,
    proposal_uniforms: Sequence[Array],
    *,
    local_fn: LocalFn,
    domains: Sequence[Domain],
    is_table: Sequence[bool],
    step_size: Array | float,
    balance: Array | float = 0.5,
    preconditioner: Sequence[Array | float | None] | None = None,
) -> tuple[ChainState, Array, Array]:
    """Draw a DLP proposal and evaluate it: ``(proposal, log q(y|x), log q(x|y))``.

    Arguments as in :func:`dlp_step`; the proposal carries ``f`` and locals at ``y``.
    """
    n = len(domains)
    preconditioner = _broadcast_per_leaf(preconditioner, n, 1.0)

    def logits_at(s: ChainState) -> list[Array]:
        return [
            dlp_leaf_logits(d, x, loc, t, step_size, balance, p)
            for d, x, loc, t, p in zip(domains, s.x, s.local, is_table, preconditioner)
        ]

    forward = logits_at(state)
    ys = tuple(
        dlp_leaf_sample(d, x, lg, u)
        for d, x, lg, u in zip(domains, state.x, forward, proposal_uniforms)
    )
    log_q_forward = sum(
        dlp_leaf_log_prob(d, x, y, lg) for d, x, y, lg in zip(domains, state.x, ys, forward)
    )
    f_y, local_y = local_fn(ys)
    proposal = ChainState(ys, f_y, tuple(local_y))
    reverse = logits_at(proposal)
    log_q_reverse = sum(
        dlp_leaf_log_prob(d, y, x, lg) for d, x, y, lg in zip(domains, state.x, ys, reverse)
    )
    return proposal, log_q_forward, log_q_reverse


def dlp_step(
    state: ChainState,
    proposal_uniforms: Sequence[Array],
    accept_uniform: Array,
    *,
    local_fn: LocalFn,
    domains: Sequence[Domain],
    is_table: Sequence[bool],
    step_size: Array | float,
    balance: Array | float = 0.5,
    preconditioner: Sequence[Array | float | None] | None = None,
    metropolis: bool | Array = True,
) -> tuple[ChainState, StepInfo]:
    """One DMALA (``metropolis=True``) or DULA (``metropolis=False``) transition.

    Parameters
    ----------
    state : ChainState
    proposal_uniforms : per leaf, uniforms in [0, 1) of shape :func:`dlp_noise_shapes`
    accept_uniform : scalar uniform in [0, 1)
    local_fn : callable
        ``leaves -> (f, locals)``.
    domains, is_table : per leaf
    step_size : scalar
        ``alpha`` > 0.
    balance : scalar
        ``beta``; 1/2 for DULA/DMALA.
    preconditioner : per leaf, None or an array broadcastable to the leaf
    metropolis : bool or boolean scalar array
        Whether to apply the MH correction (an array when decided at run time).

    Returns
    -------
    (ChainState, StepInfo)
    """
    proposal, log_q_forward, log_q_reverse = dlp_propose(
        state,
        proposal_uniforms,
        local_fn=local_fn,
        domains=domains,
        is_table=is_table,
        step_size=step_size,
        balance=balance,
        preconditioner=preconditioner,
    )
    return mh_finish(state, proposal, log_q_forward, log_q_reverse, accept_uniform, metropolis)


def gwg_step(
    state: ChainState,
    move_uniform: Array,
    accept_uniform: Array,
    *,
    local_fn: LocalFn,
    domains: Sequence[Domain],
    is_table: Sequence[bool],
    balance: Array | float = 0.5,
    step_size: Array | float | None = None,
) -> tuple[ChainState, StepInfo]:
    """One Gibbs-with-gradients transition: one coordinate changes, MH corrected.

    Parameters
    ----------
    state : ChainState
    move_uniform : scalar uniform in [0, 1) that picks the move
    accept_uniform : scalar uniform in [0, 1)
    local_fn, domains, is_table : as in :func:`dlp_step`
    balance : scalar
        ``beta`` = 1/2 in Grathwohl et al.
    step_size : scalar or None
        Optional distance penalty for ordinal leaves (see
        :func:`~discrete_kernels.proposals.gwg_move_logits`).

    Returns
    -------
    (ChainState, StepInfo)
    """

    def logits_at(s: ChainState) -> list[Array]:
        return [
            gwg_move_logits(d, x, loc, t, balance, step_size)
            for d, x, loc, t in zip(domains, s.x, s.local, is_table)
        ]

    forward = logits_at(state)
    ys, log_q_forward = gwg_sample(domains, state.x, forward, move_uniform)
    f_y, local_y = local_fn(ys)
    proposal = ChainState(ys, f_y, tuple(local_y))
    log_q_reverse = gwg_log_prob(domains, ys, state.x, logits_at(proposal))
    return mh_finish(state, proposal, log_q_forward, log_q_reverse, accept_uniform, True)
