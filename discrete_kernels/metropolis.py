"""The Metropolis-Hastings decision every proposal-based sampler ends its step with: the log
ratio with unusable terms rejected, the acceptance test and probability, the Hamming
distance of the move, and the kept state; one decision per chain (:func:`mh_finish`; on the
CPU in eager torch, on Python floats) or one per coordinate for a factorised target and
proposal (:func:`mh_finish_per_coordinate`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ._xp import Array, array_namespace, host_number, nan_to, scalar_like, sum_of
from .kernel import ChainState, StepInfo

__all__ = [
    "accept_probability",
    "coordinate_sum",
    "hamming_distance",
    "metropolis_accept",
    "mh_finish",
    "mh_finish_per_coordinate",
    "mh_log_ratio",
]


def mh_log_ratio(
    log_density_x: Array,
    log_density_y: Array,
    log_q_forward: Array,
    log_q_reverse: Array,
) -> Array:
    """``log A = f(y) - f(x) + log q(x | y) - log q(y | x)``, or ``-inf`` when unusable.

    A proposal whose log density is not finite (NaN, ``+inf`` or ``-inf``), whose forward
    probability is zero or NaN (drawn from a table with no usable entry) or whose ratio is
    NaN gets ``-inf``: it is rejected and never enters the chain. (The kernels refuse start
    values of zero probability at setup, so ``f(x)`` is finite; where a ``Gibbs`` block's
    new conditioning gives it ``-inf``, a usable proposal gets ``+inf`` and moves.) Scalar
    arrays in and out.
    """
    xp = array_namespace(log_density_y)
    log_ratio = (log_density_y - log_density_x) + (log_q_reverse - log_q_forward)
    # g - g is 0 for a finite g and NaN otherwise, and g = f(y) + log q(y | x) is finite only
    # when both are: adding it leaves a usable ratio unchanged (+0 is exact) and makes an
    # unusable one NaN, in fewer operations than isfinite (three eager torch operations each,
    # at one chain a GPU launch each)
    guard = log_density_y + log_q_forward
    log_ratio = log_ratio + (guard - guard)
    return nan_to(log_ratio, -xp.inf)


def accept_probability(log_ratio: Array) -> Array:
    """``min(1, exp(log A))``, elementwise; 0 for ``log A = -inf``."""
    xp = array_namespace(log_ratio)
    return xp.exp(xp.clip(log_ratio, max=0.0))


def metropolis_accept(log_ratio: Array, uniform: Array) -> Array:
    """Accept when ``log u < log A`` for ``u`` uniform in [0, 1); never for ``log A = -inf``
    (``log u >= -inf``) nor for a NaN ``log A`` (comparisons with NaN are false)."""
    xp = array_namespace(log_ratio)
    return xp.log(uniform) < log_ratio


def coordinate_sum(values: Array, chains_in_rows: bool = False, dtype: Any = None) -> Array:
    """The sum of an array over a leaf's coordinates: over all of it (a scalar), or with
    ``chains_in_rows`` (:attr:`Sites.chains_in_rows`) over each row, shape (C, 1)."""
    xp = array_namespace(values)
    if chains_in_rows:
        return xp.sum(values, axis=-1, keepdims=True, dtype=dtype)
    return xp.sum(values, dtype=dtype)


def hamming_distance(
    xs: Sequence[Array], ys: Sequence[Array], like: Array, chains_in_rows: bool = False
) -> Array:
    """Number of coordinates that differ between two tuples of leaves (scalar, in ``like``'s
    dtype and on its device; per chain, shape (C, 1), with ``chains_in_rows``)."""
    xp = array_namespace(like)
    counts = [coordinate_sum(x != y, chains_in_rows, like.dtype) for x, y in zip(xs, ys)]
    return sum_of(counts) if counts else xp.zeros_like(like)


def _select(accept: Array, new: ChainState, old: ChainState) -> ChainState:
    xp = array_namespace(new.log_density)
    pick = lambda a, b: xp.where(accept, a, b)  # noqa: E731
    return ChainState(
        tuple(pick(a, b) for a, b in zip(new.x, old.x)),
        pick(new.log_density, old.log_density),
        # a local the step does not read may be None on both sides (Sampler.unread_tables)
        tuple(None if a is None else pick(a, b) for a, b in zip(new.local, old.local)),
    )


def mh_finish(
    state: ChainState,
    proposal: ChainState,
    log_q_forward: Array,
    log_q_reverse: Array,
    accept_uniform: Array,
    metropolis: bool | Array,
    chains_in_rows: bool = False,
) -> tuple[ChainState, StepInfo]:
    """MH decision between ``state`` and ``proposal`` from the two proposal log densities;
    ``metropolis=False`` moves unless the proposal's log density or locals are unusable (an
    array when decided at run time, as in ACS's burn-in). With ``chains_in_rows``
    (:attr:`Sites.chains_in_rows`) every array of scalars has shape (C, 1): one decision
    per chain."""
    xp = array_namespace(state.log_density)
    if isinstance(metropolis, bool) and not chains_in_rows:
        if isinstance(host_number(state.log_density), float):
            return _mh_finish_on_host(
                state, proposal, log_q_forward, log_q_reverse, accept_uniform, metropolis
            )
    log_ratio = mh_log_ratio(state.log_density, proposal.log_density, log_q_forward, log_q_reverse)
    if isinstance(metropolis, bool) and metropolis:
        accept = metropolis_accept(log_ratio, accept_uniform)
    else:
        usable = log_ratio > -xp.inf
        if isinstance(metropolis, bool):
            accept = usable
        else:
            accept = xp.where(metropolis, metropolis_accept(log_ratio, accept_uniform), usable)
    distance = hamming_distance(state.x, proposal.x, state.log_density, chains_in_rows)
    info = StepInfo(accept_probability(log_ratio), accept & (distance > 0), distance)
    return _select(accept, proposal, state), info


def _mh_finish_on_host(
    state: ChainState,
    proposal: ChainState,
    log_q_forward: Array,
    log_q_reverse: Array,
    accept_uniform: Array,
    metropolis: bool,
) -> tuple[ChainState, StepInfo]:
    """:func:`mh_finish` for one chain in eager torch on the CPU: the same formulas on the
    scalars read as Python floats (:func:`~discrete_kernels._xp.host_number`), then the kept
    side picked by Python instead of selected element by element. About 15 operations on
    0-dim tensors fewer a step (each dispatched on its own), and no copy of the leaves and
    locals; the log ratio is computed in float64."""
    like = state.log_density
    log_ratio = mh_log_ratio(
        float(like), float(proposal.log_density), float(log_q_forward), float(log_q_reverse)
    )
    if metropolis:
        accept = bool(metropolis_accept(log_ratio, float(accept_uniform)))
    else:
        accept = log_ratio > -math.inf
    distance = hamming_distance(state.x, proposal.x, like)
    moved = accept and float(distance) > 0.0
    info = StepInfo(
        scalar_like(accept_probability(log_ratio), like),
        scalar_like(moved, like, array_namespace(like).bool),
        distance,
    )
    return (proposal if accept else state), info


def mh_finish_per_coordinate(
    state: ChainState,
    proposal: ChainState,
    log_q_forward: Sequence[Array],
    log_q_reverse: Sequence[Array],
    terms_x: Sequence[Array],
    terms_y: Sequence[Array],
    accept_uniforms: Sequence[Array],
) -> tuple[ChainState, StepInfo]:
    """One MH decision per coordinate, for a target and a proposal that both factorise over
    the coordinates (:attr:`Sites.per_coordinate_mh`).

    When ``pi(x) = prod_i pi_i(x_i)`` and ``q(y | x) = prod_i q_i(y_i | x_i)``, the product of
    the coordinates' own MH kernels leaves ``pi`` invariant: coordinate ``i`` moves to ``y_i``
    with probability ``min(1, pi_i(y_i) q_i(x_i | y_i) / (pi_i(x_i) q_i(y_i | x_i)))``, where a
    joint decision would accept or refuse all of them together (and, for many coordinates,
    refuse almost always). The new state's locals are, coordinate by coordinate, those of the
    side it took (they depend on the coordinate's own value only); its log density is the
    proposal's less the changes of the refused coordinates.

    Parameters
    ----------
    state, proposal : ChainState
        The current state and the proposal with its log density and locals (gradients).
    log_q_forward, log_q_reverse : per leaf, arrays of the leaf's shape
        ``log q_i(y_i | x_i)`` and ``log q_i(x_i | y_i)``.
    terms_x, terms_y : per leaf, arrays of the leaf's shape
        The per-coordinate terms (:data:`ElementTermsFn`) at ``x`` and at ``y``.
    accept_uniforms : per leaf, uniforms in [0, 1) of the leaf's shape

    Returns
    -------
    (ChainState, StepInfo)
        ``accept_prob`` is the mean acceptance of the coordinates whose proposal moves (1
        when none does); ``accepted`` whether some coordinate moved; ``hamming_distance``
        the proposal's changes.
    """
    xp = array_namespace(state.log_density)
    like = state.log_density
    xs, locals_ = [], []
    zero = xp.zeros_like(like)
    moved_change, kept_change, moved, proposed, prob_sum = zero, zero, zero, zero, zero
    for x, y, lx, ly, fwd, rev, gx, gy, u in zip(
        state.x,
        proposal.x,
        state.local,
        proposal.local,
        log_q_forward,
        log_q_reverse,
        terms_x,
        terms_y,
        accept_uniforms,
    ):
        change = gy - gx
        # as in mh_log_ratio: a non-finite change or forward probability makes the ratio NaN,
        # and a NaN ratio refuses that coordinate only
        log_ratio = change + rev - fwd + (change - change) + (fwd - fwd)
        log_ratio = nan_to(log_ratio, -xp.inf)
        differs = y != x
        accept = metropolis_accept(log_ratio, u) & differs
        xs.append(xp.where(accept, y, x))
        locals_.append(xp.where(accept, ly, lx))
        moved_change = moved_change + xp.sum(xp.where(accept, change, xp.zeros_like(change)))
        kept_change = kept_change + xp.sum(xp.where(accept, xp.zeros_like(change), change))
        moved = moved + xp.sum(xp.astype(accept, like.dtype))
        proposed = proposed + xp.sum(xp.astype(differs, like.dtype))
        probs = xp.where(differs, accept_probability(log_ratio), xp.zeros_like(log_ratio))
        prob_sum = prob_sum + xp.sum(probs)
    # the proposal's fresh log density less the refused changes (no error carried from step to
    # step); where a refused change is not finite, the current one plus the accepted changes
    from_proposal = proposal.log_density - kept_change
    from_current = state.log_density + moved_change
    log_density = xp.where(xp.isfinite(from_proposal), from_proposal, from_current)
    any_moved = moved > 0
    log_density = xp.where(any_moved, log_density, state.log_density)
    accept_prob = xp.where(
        proposed > 0, prob_sum / xp.maximum(proposed, xp.ones_like(proposed)), xp.ones_like(like)
    )
    info = StepInfo(accept_prob, any_moved, proposed)
    return ChainState(tuple(xs), log_density, tuple(locals_)), info
