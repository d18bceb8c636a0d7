"""Gibbs with gradients (Grathwohl et al., ICML 2021): one coordinate of one leaf per step.

The move (a coordinate and its new value) is drawn from ``softmax(balance * delta)`` over all
single-coordinate moves, ``delta`` the local differences of :mod:`discrete_kernels.local`
(``balance = 1/2``), then MH corrected with the reverse move's probability at the proposal.
The baseline the DLP papers compare to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from array_api_compat import device as _device

from .._xp import Array, array_namespace, categorical_from_uniform, log_softmax, masked_sum
from ..domains import Binary, Domain, Ordinal
from ..kernel import (
    ChainState,
    ControlFlow,
    LocalFn,
    NoiseShapes,
    Sites,
    StepInfo,
    StepParameters,
    propose,
)
from ..local import current_mask, finite_local, local_delta, mask_invalid, squared_distance
from ..metropolis import (
    mh_finish,
)
from ..validation import check_noise, check_number, check_step_size
from .dlp import DLPInfo, DLPSampler, StepSizeState, step_size_state

__all__ = ["GWG", "gwg_log_prob", "gwg_move_logits", "gwg_sample", "gwg_step"]


def gwg_move_logits(
    domain: Domain,
    x: Array,
    local: Array,
    is_table: bool,
    balance: Array | float = 0.5,
    step_size: Array | float | None = None,
) -> Array:
    """Logits of every single-coordinate move of a leaf, shape (n..., S).

    ``logit[i, v] = balance * delta[i, v] - dist2 / (2 * step_size)`` for ``v != x_i``;
    ``-inf`` at the current value and outside the coordinate's bounds. With
    ``step_size=None`` there is no distance penalty (Grathwohl et al.'s GWG); for binary
    leaves the penalty is the same for every move and cancels. ``balance`` and ``step_size``
    broadcast against the table (n..., S): with chains in rows, shape (C, 1, 1).
    """
    xp = array_namespace(local)
    local = finite_local(local, is_table)
    delta = local_delta(Ordinal(2) if isinstance(domain, Binary) else domain, x, local, is_table)
    logits = balance * delta
    if step_size is not None:
        logits = logits - squared_distance(domain, x, local) / (2.0 * step_size)
    logits = xp.where(current_mask(domain, x, local), xp.full_like(logits, -xp.inf), logits)
    return mask_invalid(domain, logits)


def _flat_log_softmax(logits: Sequence[Array], chains_in_rows: bool = False) -> Array:
    """Log-softmax over all moves of all leaves, flattened and concatenated in leaf order:
    shape (M,), or (C, M) per chain with ``chains_in_rows``."""
    xp = array_namespace(logits[0])
    flat = (-1,) if not chains_in_rows else (logits[0].shape[0], -1)
    return log_softmax(xp.concat([xp.reshape(table, flat) for table in logits], axis=-1))


def _row_scalar(value: Array | float | None) -> Array | float | None:
    """A per-chain (C, 1) parameter as (C, 1, 1), to broadcast against (C, n, S) tables."""
    if value is None or isinstance(value, float) or value.ndim != 2:
        return value
    return value[..., None]


def gwg_sample(
    domains: Sequence[Domain],
    xs: Sequence[Array],
    logits: Sequence[Array],
    uniform: Array,
    chains_in_rows: bool = False,
) -> tuple[tuple[Array, ...], Array]:
    """Pick one move among all leaves and apply it.

    Parameters
    ----------
    domains, xs : per leaf
    logits : per leaf, shape (n_j..., S_j), from :func:`gwg_move_logits`
    uniform : scalar uniform in [0, 1) (shape (C, 1) with ``chains_in_rows``)
    chains_in_rows : bool
        The leaves hold C chains in their rows (:attr:`~discrete_kernels.Sites.chains_in_rows`):
        one move per chain.

    Returns
    -------
    ys : tuple of arrays, the proposed leaves
    log_prob : scalar array, ``log q(y | x)`` (shape (C, 1) with ``chains_in_rows``)
    """
    xp = array_namespace(logits[0])
    log_probs = _flat_log_softmax(logits, chains_in_rows)
    if chains_in_rows:
        move = categorical_from_uniform(log_probs, uniform[..., 0])[..., None]  # (C, 1)
    else:
        move = categorical_from_uniform(log_probs, uniform)
    positions = xp.arange(log_probs.shape[-1], device=_device(log_probs))
    log_prob = masked_sum(positions == move, log_probs, axis=-1)
    ys = []
    offset = 0
    rows = 1 if chains_in_rows else 0  # leading axes that are not the leaf's own
    for domain, x, table in zip(domains, xs, logits):
        size = math.prod(table.shape[rows:])
        indices = xp.arange(size, device=_device(table)) + offset
        chosen = xp.reshape(indices == move, table.shape)
        changed = xp.any(chosen, axis=-1)
        index = xp.argmax(xp.astype(chosen, xp.int32), axis=-1)
        ys.append(xp.where(changed, xp.astype(index + domain.low, x.dtype), x))
        offset += size
    return tuple(ys), log_prob[..., None] if chains_in_rows else log_prob


def gwg_log_prob(
    domains: Sequence[Domain],
    xs: Sequence[Array],
    ys: Sequence[Array],
    logits: Sequence[Array],
    chains_in_rows: bool = False,
) -> Array:
    """``log q(y | x)`` of the single-coordinate move from ``x`` to ``y`` (exactly one change).

    Parameters
    ----------
    domains, xs, ys : per leaf
    logits : per leaf, :func:`gwg_move_logits` evaluated at ``x``
    chains_in_rows : bool
        One move per chain, the chains in the leaves' rows.

    Returns
    -------
    scalar array (shape (C, 1) with ``chains_in_rows``)
    """
    xp = array_namespace(logits[0])
    flat = (-1,) if not chains_in_rows else (logits[0].shape[0], -1)
    masks = []
    for domain, x, y, table in zip(domains, xs, ys, logits):
        masks.append(xp.reshape((y != x)[..., None] & current_mask(domain, y, table), flat))
    log_prob = masked_sum(
        xp.concat(masks, axis=-1), _flat_log_softmax(logits, chains_in_rows), axis=-1
    )
    return log_prob[..., None] if chains_in_rows else log_prob


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
    chains_in_rows: bool = False,
) -> tuple[ChainState, StepInfo]:
    """One Gibbs-with-gradients transition: one coordinate changes, MH corrected.

    Parameters
    ----------
    state : ChainState
    move_uniform : scalar uniform in [0, 1) that picks the move
    accept_uniform : scalar uniform in [0, 1)
    local_fn, domains, is_table : as in :func:`discrete_kernels.samplers.dlp.dlp_step`
    balance : scalar
        ``beta`` = 1/2 in Grathwohl et al.
    step_size : scalar or None
        Optional distance penalty for ordinal leaves (see :func:`gwg_move_logits`).
    chains_in_rows : bool
        The leaves hold C chains in their rows, shape (C, n); the uniforms, ``balance``,
        ``step_size``, the log density and the statistics then have shape (C, 1)
        (:attr:`~discrete_kernels.Sites.chains_in_rows`).

    Returns
    -------
    (ChainState, StepInfo)

    Raises
    ------
    ValueError, TypeError
        A move or MH uniform that is not a scalar of the state's array library, or a step
        size (given as a number) that is not positive and finite (checked at trace time).
    """
    scalar = (state.x[0].shape[0], 1) if chains_in_rows else ()
    check_noise("gwg_step", "the move uniform", move_uniform, scalar, state.x[0])
    check_noise("gwg_step", "the MH uniform", accept_uniform, scalar, state.x[0])
    check_step_size("gwg_step", "step_size", step_size)
    if chains_in_rows:  # per-chain parameters against (C, n, S) tables
        balance, step_size = _row_scalar(balance), _row_scalar(step_size)

    def logits_at(chain: ChainState, origin: ChainState | None) -> list:
        return [
            gwg_move_logits(d, x, loc, t, balance, step_size)
            for d, x, loc, t in zip(domains, chain.x, chain.local, is_table)
        ]

    def sample(chain: ChainState, logits: list) -> tuple[tuple, Array]:
        return gwg_sample(domains, chain.x, logits, move_uniform, chains_in_rows)

    def log_prob(xs: Sequence[Array], ys: Sequence[Array], logits: list) -> Array:
        return gwg_log_prob(domains, xs, ys, logits, chains_in_rows)

    proposal, log_q_forward, log_q_reverse = propose(state, local_fn, logits_at, sample, log_prob)
    return mh_finish(
        state, proposal, log_q_forward, log_q_reverse, accept_uniform, True, chains_in_rows
    )


@dataclass(frozen=True, eq=False)
class GWG(DLPSampler):
    """Gibbs with gradients (Grathwohl et al., 2021): one coordinate per step.

    The coordinate and its new value are drawn from ``softmax(delta / 2)`` over all
    single-coordinate moves, with ``delta`` the gradient estimate of the change in log density,
    then MH corrected.

    Parameters
    ----------
    step_size : float, optional
        Optional distance penalty ``dist^2 / (2 alpha)`` on ordinal jumps (no effect on binary
        sites). None is Grathwohl et al.'s GWG; ``step_size`` then reports ``inf``.
    """

    step_size: float | None = None
    name: ClassVar[str] = "GWG"
    # its move table spans every value of every coordinate; counts need a window per
    # coordinate and a reverse table around the proposal (not built: DMALA does this)
    windowed_domains: ClassVar[bool] = False
    steps_chains_in_rows: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.step_size is not None:
            step = check_number(self.name, "step_size", self.step_size)
            object.__setattr__(self, "step_size", step)

    def noise_shapes(self, sites: Sites, leaf_shapes: Sequence[tuple[int, ...]]) -> NoiseShapes:
        return NoiseShapes(((),))

    def adapt_init(self, like, num_warmup, sites, flat_dim, control: ControlFlow) -> StepSizeState:
        return step_size_state(like, math.inf if self.step_size is None else self.step_size, sites)

    def parameters(self, adapt_state: StepSizeState) -> StepParameters:
        return StepParameters(adapt_state.step_size, adapt_state.balance, True)

    def step(self, chain, noise, params, adapt_state, sites, local_fn):
        chain, info = gwg_step(
            chain,
            noise.uniforms[0],
            noise.accept_uniform,
            local_fn=local_fn,
            domains=sites.domains,
            is_table=sites.is_table,
            balance=params.balance,
            step_size=None if self.step_size is None else params.step_size,
            chains_in_rows=sites.chains_in_rows,
        )
        return chain, DLPInfo(*info, params.step_size, params.balance)

    def log_proposal(self, chain: ChainState, ys: tuple, params: StepParameters, sites: Sites):
        """``log q(ys | chain)`` (``-inf`` unless exactly one coordinate changes)."""
        xp = array_namespace(chain.log_density)
        changed = sum(int(xp.sum(xp.astype(a != b, xp.int32))) for a, b in zip(chain.x, ys))
        if changed != 1:
            return -math.inf
        step = None if self.step_size is None else params.step_size
        logits = [
            gwg_move_logits(d, x, loc, t, params.balance, step)
            for d, x, loc, t in zip(sites.domains, chain.x, chain.local, sites.is_table)
        ]
        return gwg_log_prob(sites.domains, chain.x, ys, logits)
