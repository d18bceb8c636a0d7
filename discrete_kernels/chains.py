"""Exact draws of a whole chain: forward filtering, backward sampling from pair tables.

A site whose coordinates interact only with their neighbours in flat order (a hidden Markov
chain, a change of state per step, whatever the model writes them as: one ``factor`` of a sum
over the chain included) has a log density that, as a function of the site with the rest
fixed, is

    f(x) = f(r) + sum_i u_i(x_i) + sum_i h_i(x_i, x_{i+1})

around any reference state ``r`` (the current one): ``u_i(a) = f(r with x_i = a) - f(r)`` and
``h_i(a, b) = f(r with x_i = a, x_{i+1} = b) - f(r with x_i = a) - f(r with x_{i+1} = b) +
f(r)`` (an expansion that is exact when no term couples coordinates further apart, which the
drivers check at setup). All of it comes from the site's *pair table* ``P[i, a, b] = f(r with
x_i = a, x_{i+1} = b)``: ``(N - 1) S^2`` evaluations of the model, vmapped. The site's exact
conditional is then a chain, drawn jointly by forward filtering and backward sampling (Carter
and Kohn, 1994; Frühwirth-Schnatter, 1994): an independent draw of all ``N`` coordinates, where
a Gibbs sweep moves them one colour at a time.

Both passes are written as parallel prefix scans (``log2 N`` levels of batched ``S x S`` work)
rather than a loop of ``N`` steps, so that they stay small programs under ``jit`` and need no
control flow of the array library: the forward messages are prefix products of the steps'
matrices in the ``(logsumexp, +)`` semiring; the backward draw draws, for every position ``i``
and every value ``b`` of its successor, the value ``x_i`` would take given ``x_{i+1} = b`` (an
``(N - 1, S)`` map; one uniform per position, shared by its ``S`` values), and composes those
maps from the end.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from array_api_compat import device as _device

from ._xp import Array, array_namespace, categorical_from_uniform, is_torch_array, logsumexp
from .domains import Domain

__all__ = [
    "MAX_PAIR_TABLE_COST",
    "ChainTerms",
    "chain_draw",
    "chain_log_prob",
    "chain_potentials",
    "chain_term_layout",
    "chain_term_patterns",
    "draws_chain",
    "draws_chain_from_terms",
    "forward_messages",
    "is_chain_graph",
    "pair_substitutions",
    "pair_table_from_terms",
]

MAX_PAIR_TABLE_COST = 4
"""A chain is drawn whole from its pair table (``(N - 1) S^2`` evaluations) where that costs at
most this many times a colour-by-colour sweep from single-site tables (``C N S``): for a chain
of two colours, up to ``S = 8`` values; beyond, the sweep's cheaper steps win."""


def draws_chain(size: int, num_values: int, num_colours: int) -> bool:
    """Whether a chain of ``size`` coordinates of ``num_values`` values, which a sweep would
    draw in ``num_colours`` colours, is drawn whole (:data:`MAX_PAIR_TABLE_COST`)."""
    pair_cost = (size - 1) * num_values * num_values
    return size > 1 and pair_cost <= MAX_PAIR_TABLE_COST * num_colours * size * num_values


def draws_chain_from_terms(num_values: int, num_colours: int) -> bool:
    """Whether a chain whose terms the model gives one by one (an HMM's transitions as an array
    of terms, a ``scan``) is drawn whole from its terms (:func:`pair_table_from_terms`: ``3 S^2
    + 1`` evaluations) rather than swept colour by colour from them (``C^2 S``), at most
    :data:`MAX_PAIR_TABLE_COST` times the sweep's cost: for two colours, up to ``S = 5``."""
    pair_cost = 3 * num_values * num_values + 1
    return pair_cost <= MAX_PAIR_TABLE_COST * num_colours * num_colours * num_values


class ChainTerms(NamedTuple):
    """Which of a model's terms (flat, ``E`` of them) a chain site's pair table reads: per
    coordinate the terms of that coordinate alone, per neighbouring pair ``(i, i + 1)`` the
    terms of both, as term indices padded with ``E`` (a term that is always 0).

    - **singles** - integer array, shape (N, K1)
    - **pairs** - integer array, shape (N - 1, K2)
    """

    singles: Any
    pairs: Any


def chain_term_layout(dependence: Any) -> ChainTerms | None:
    """The :class:`ChainTerms` of a site from the terms each coordinate changes, or None when
    some term depends on coordinates that are not one coordinate or two flat neighbours (the
    site is not a chain in its terms). Terms that no coordinate changes are left out.

    Parameters
    ----------
    dependence : bool array, shape (N, E): whether term ``e`` depends on coordinate ``i``
        (:func:`numpyro_ext._plates.term_dependence` finds it at setup)
    """
    import numpy as np

    depends = np.asarray(dependence, bool)
    size, num_terms = depends.shape
    count = depends.sum(axis=0)
    low = np.argmax(depends, axis=0)
    high = size - 1 - np.argmax(depends[::-1], axis=0)
    if np.any((count > 0) & (high - low > 1)):
        return None

    def members(mask: Any, rows: int) -> Any:
        terms = np.flatnonzero(mask)
        owner = low[terms]
        order = np.argsort(owner, kind="stable")
        terms, owner = terms[order], owner[order]
        counts = np.bincount(owner, minlength=rows)
        rank = np.arange(terms.size) - (np.cumsum(counts) - counts)[owner]
        out = np.full((rows, max(1, int(counts.max(initial=0)))), num_terms, dtype=np.int64)
        out[owner, rank] = terms
        return out

    return ChainTerms(members(count == 1, size), members(count == 2, size - 1))


def chain_term_patterns(positions: Array, num_values: int) -> Array:
    """The states whose terms give a chain's pair table: for each offset ``c`` in 0, 1, 2 and
    values ``(a, b)``, the current state with every coordinate ``i = c (mod 3)`` set to ``a``
    and every ``i = c + 1 (mod 3)`` set to ``b``. Each pair ``(i, i + 1)`` with ``i = c`` then
    holds ``(a, b)`` while the pairs around it that are read elsewhere are left alone: ``3
    S^2`` states for the whole chain, whatever its length.

    Parameters
    ----------
    positions : integer array, shape (N,): the current state as positions ``0 .. S - 1``
    num_values : int, ``S``

    Returns
    -------
    integer array, shape (3, S, S, N), positions
    """
    xp = array_namespace(positions)
    dev = _device(positions)
    residue = xp.arange(positions.shape[0], device=dev) % 3
    offset = xp.arange(3, device=dev)[:, None, None, None]
    values = xp.astype(xp.arange(num_values, device=dev), positions.dtype)
    at_a = residue[None, None, None, :] == offset
    at_b = residue[None, None, None, :] == (offset + 1) % 3
    return xp.where(
        at_a,
        values[None, :, None, None],
        xp.where(at_b, values[None, None, :, None], positions[None, None, None, :]),
    )


def pair_table_from_terms(
    log_density: Array,
    terms_at_x: Array,
    pattern_terms: Array,
    layout: ChainTerms,
    positions: Array,
) -> Array:
    """A chain's pair table ``P[i, a, b] = f(x with x_i = a, x_{i+1} = b)`` from its terms at
    the :func:`chain_term_patterns` (``3 S^2`` evaluations instead of ``(N - 1) S^2``).

    With ``U_i(a)`` the change of coordinate ``i``'s own terms at ``x_i = a`` and ``H_i(a, b)``
    the change of the pair ``(i, i + 1)``'s terms at ``(a, b)`` (both read at offset ``i mod
    3``, where that pair holds ``(a, b)``), changing ``x_i, x_{i+1}`` to ``(a, b)`` changes
    exactly those and the terms of the pairs on either side:

        P[i, a, b] = f(x) + U_i(a) + U_{i+1}(b) + H_i(a, b) + H_{i-1}(x_{i-1}, a)
                     + H_{i+1}(b, x_{i+2})

    Parameters
    ----------
    log_density : float array, shape (): ``f(x)``
    terms_at_x : float array, shape (E,): every term at ``x``
    pattern_terms : float array, shape (3, S, S, E): every term at each pattern
    layout : ChainTerms
    positions : integer array, shape (N,): ``x`` as positions

    Returns
    -------
    float array, shape (N - 1, S, S)
    """
    xp = array_namespace(pattern_terms)
    num_values, num_terms = pattern_terms.shape[1], pattern_terms.shape[-1]
    size = positions.shape[0]
    dev = _device(pattern_terms)
    change = pattern_terms - terms_at_x
    # index E reads an appended zero (the layouts' padding)
    change = xp.concat([change, xp.zeros_like(change[..., :1])], axis=-1)
    by_offset = xp.reshape(
        xp.permute_dims(change, (1, 2, 0, 3)), (num_values, num_values, 3 * (num_terms + 1))
    )
    residue = xp.arange(size, device=dev) % 3

    def summed(members: Array) -> Array:  # (rows, K) term indices -> (S, S, rows)
        rows, width = members.shape
        index = residue[:rows, None] * (num_terms + 1) + xp.asarray(members, device=dev)
        values = xp.take(by_offset, xp.reshape(index, (-1,)), axis=-1)
        return xp.sum(xp.reshape(values, (num_values, num_values, rows, width)), axis=-1)

    own = xp.permute_dims(summed(layout.singles)[:, 0, :], (1, 0))  # U: (N, S)
    pair = xp.permute_dims(summed(layout.pairs), (2, 0, 1))  # H: (N - 1, S, S)
    x = _as_index(positions)
    zero_row = xp.zeros_like(pair[:1, 0, :])  # (1, S)
    # H_{i-1}(x_{i-1}, a) for i >= 1 and H_{i+1}(b, x_{i+2}) for i <= N - 3
    at_prev = xp.broadcast_to(x[:-2, None, None], (size - 2, 1, num_values))
    before = xp.take_along_axis(pair[:-1], at_prev, axis=1)[:, 0, :]
    at_next = xp.broadcast_to(x[2:, None, None], (size - 2, num_values, 1))
    after = xp.take_along_axis(pair[1:], at_next, axis=2)[..., 0]
    before = xp.concat([zero_row, before], axis=0)  # (N - 1, S) over a
    after = xp.concat([after, zero_row], axis=0)  # (N - 1, S) over b
    rows = own[:-1] + before  # (N - 1, S): everything that depends on a alone
    columns = own[1:] + after  # (N - 1, S): on b alone
    return log_density + pair + rows[:, :, None] + columns[:, None, :]


def is_chain_graph(graph: object) -> bool:
    """Whether every interaction of an interaction graph joins neighbours in flat order
    (``|i - k| = 1``): then the site is a chain (or a plate, with no interaction at all).

    Parameters
    ----------
    graph : bool array, shape (N, N), symmetric (the diagonal is ignored)
    """
    import numpy as np

    graph = np.asarray(graph, bool)
    size = graph.shape[0]
    offsets = np.abs(np.arange(size)[:, None] - np.arange(size)[None, :])
    return bool(not np.any(graph & (offsets > 1)))


def pair_substitutions(domain: Domain, x: Array) -> Array:
    """Every state that differs from ``x`` at most in two neighbouring flat coordinates.

    Entry ``[(i * S + a) * S + b]`` is ``x`` with flat coordinates ``i`` and ``i + 1`` set to
    the ``a``-th and ``b``-th candidate values, so evaluating ``f`` on the batch and reshaping
    to ``(N - 1, S, S)`` gives the pair table ``P[i, a, b]``.

    Parameters
    ----------
    domain : a finite Domain (``S`` values from ``domain.low``)
    x : array, shape (n...), at least two coordinates

    Returns
    -------
    array, shape ((N - 1) * S * S, n...), dtype of ``x``
    """
    xp = array_namespace(x)
    flat = xp.reshape(x, (-1,))
    size, num_values = flat.shape[0], domain.num_values
    dev = _device(x)
    values = xp.astype(xp.arange(num_values, device=dev) + domain.low, x.dtype)
    position = xp.arange(size, device=dev)[None, :]
    first = xp.arange(size - 1, device=dev)[:, None]  # (N - 1, 1)
    at_first = (position == first)[:, None, None, :]  # (N - 1, 1, 1, N)
    at_second = (position == first + 1)[:, None, None, :]
    batch = xp.where(
        at_first,
        values[None, :, None, None],
        xp.where(at_second, values[None, None, :, None], flat[None, None, None, :]),
    )  # (N - 1, S, S, N)
    return xp.reshape(batch, ((size - 1) * num_values * num_values,) + tuple(x.shape))


def chain_potentials(pair_table: Array, positions: Array) -> tuple[Array, Array]:
    """The expansion ``f(y) - f(x) = sum_i u_i(y_i) + sum_i h_i(y_i, y_{i+1})`` around the
    current state ``x`` from its pair table.

    Each pair's own entry at ``x`` is its reference (``h_i`` is exactly 0 on the current row
    and column, whatever the rounding of the table's entries). Where a value is impossible
    next to the current state's neighbour (``-inf`` in the table), the expansion cannot
    separate the pair terms through it: those entries are ``-inf`` here, and a draw from the
    potentials is then a proposal (no longer the exact conditional) that excludes them.

    Parameters
    ----------
    pair_table : float array, shape (N - 1, S, S): ``f(x with x_i = a, x_{i+1} = b)``
    positions : integer array, shape (N,): ``x`` as positions ``0 .. S - 1`` in the table

    Returns
    -------
    (unary, pairwise) : float arrays of shapes (N, S) and (N - 1, S, S)
    """
    xp = array_namespace(pair_table)
    pairs, num_values = pair_table.shape[0], pair_table.shape[-1]
    first, second = _as_index(positions[:-1]), _as_index(positions[1:])
    # rows[i, a] = P[i, a, x_{i+1}], columns[i, b] = P[i, x_i, b]
    at_second = xp.broadcast_to(second[:, None, None], (pairs, num_values, 1))
    rows = xp.take_along_axis(pair_table, at_second, axis=2)[..., 0]
    at_first = xp.broadcast_to(first[:, None, None], (pairs, 1, num_values))
    columns = xp.take_along_axis(pair_table, at_first, axis=1)[:, 0, :]
    base = xp.take_along_axis(rows, first[:, None], axis=1)  # (N - 1, 1): P[i, x_i, x_{i+1}]
    pairwise = pair_table - rows[:, :, None] - columns[:, None, :] + base[:, :, None]
    unary = xp.concat([rows - base, columns[-1:] - base[-1:]], axis=0)
    return _finite_or_impossible(unary), _finite_or_impossible(pairwise)


def _as_index(x: Array) -> Array:
    """``x`` as indices for ``take_along_axis``: int64 in torch (which takes no other), int32
    elsewhere (JAX's default integer)."""
    xp = array_namespace(x)
    return xp.astype(x, xp.int64 if is_torch_array(x) else xp.int32)


def _finite_or_impossible(x: Array) -> Array:
    """NaN and ``+inf`` as ``-inf``: where the current state's row or column of a pair is
    impossible (``-inf``), the expansion subtracts it and says nothing about the pair; such
    values are not drawn from this state (the caller's MH step keeps the move exact)."""
    xp = array_namespace(x)
    return xp.where(xp.isnan(x) | (x == float("inf")), xp.full_like(x, -float("inf")), x)


def _log_matmul(a: Array, b: Array) -> Array:
    """``C[..., i, k] = logsumexp_j (A[..., i, j] + B[..., j, k])``: a matrix product in the
    ``(logsumexp, +)`` semiring."""
    return logsumexp(a[..., :, :, None] + b[..., None, :, :], axis=-2)


def forward_messages(unary: Array, pairwise: Array) -> Array:
    """The forward filter's messages ``alpha_i(b) = log sum over y_0 .. y_{i-1} of
    exp(sum_{k <= i} u_k(y_k) + sum_{k < i} h_k(y_k, y_{k+1}))`` with ``y_i = b``.

    A Hillis-Steele prefix scan over the step matrices ``M_i(a, b) = h_i(a, b) +
    u_{i+1}(b)``: ``ceil(log2 N)`` levels.

    Parameters
    ----------
    unary : float array, shape (N, S)
    pairwise : float array, shape (N - 1, S, S)

    Returns
    -------
    float array, shape (N, S)
    """
    xp = array_namespace(unary)
    steps = pairwise + unary[1:, None, :]  # (N - 1, S, S)
    length, offset = steps.shape[0], 1
    while offset < length:  # steps[i] becomes M_0 (x) ... (x) M_i
        combined = _log_matmul(steps[:-offset], steps[offset:])
        steps = xp.concat([steps[:offset], combined], axis=0)
        offset *= 2
    later = logsumexp(unary[0][None, :, None] + steps, axis=-2)  # (N - 1, S)
    return xp.concat([unary[:1], later], axis=0)


def chain_draw(pair_table: Array, positions: Array, uniforms: Array) -> Array:
    """A draw of the whole chain from its exact conditional given the rest.

    Parameters
    ----------
    pair_table : float array, shape (N - 1, S, S), at the current state
    positions : integer array, shape (N,): the current state as table positions
    uniforms : float array, shape (N,), uniforms in [0, 1): ``[i]`` draws ``y_i`` (by its
        conditional's inverse CDF; for ``i < N - 1`` one uniform serves every value ``b`` of
        ``y_{i+1}``: only the realised ``b`` is read, and ``u_i`` is independent of the
        uniforms that decide ``y_{i+1}``)

    Returns
    -------
    integer array, shape (N,): the new state as table positions
    """
    xp = array_namespace(pair_table)
    unary, pairwise = chain_potentials(pair_table, positions)
    alpha = forward_messages(unary, pairwise)
    last = categorical_from_uniform(alpha[-1], uniforms[-1])
    # choice[i, b]: y_i drawn given y_{i+1} = b, from alpha_i(a) + h_i(a, b)
    logits = xp.permute_dims(alpha[:-1, :, None] + pairwise, (0, 2, 1))  # (N - 1, S_b, S_a)
    shared = xp.broadcast_to(uniforms[:-1, None], logits.shape[:-1])
    maps = _as_index(categorical_from_uniform(logits, shared))  # (N - 1, S)
    # compose from the end: maps[i] becomes maps[i] o maps[i + 1] o ... o maps[N - 2]
    length, offset = maps.shape[0], 1
    while offset < length:
        composed = xp.take_along_axis(maps[:-offset], maps[offset:], axis=1)
        maps = xp.concat([composed, maps[-offset:]], axis=0)
        offset *= 2
    at_last = xp.broadcast_to(xp.reshape(xp.astype(last, maps.dtype), (1, 1)), (length, 1))
    earlier = xp.take_along_axis(maps, at_last, axis=1)[:, 0]
    return xp.concat([earlier, xp.astype(last, maps.dtype)[None]], axis=0)


def chain_log_prob(pair_table: Array, positions: Array, new_positions: Array) -> Array:
    """``log q(y | x)`` of :func:`chain_draw` (the exact conditional, up to the table's
    rounding): ``sum_i u_i(y_i) + sum_i h_i(y_i, y_{i+1}) - log Z``.

    Parameters
    ----------
    pair_table : float array, shape (N - 1, S, S), at ``x``
    positions, new_positions : integer arrays, shape (N,): ``x`` and ``y`` as table positions

    Returns
    -------
    float array, shape ()
    """
    xp = array_namespace(pair_table)
    unary, pairwise = chain_potentials(pair_table, positions)
    alpha = forward_messages(unary, pairwise)
    y = _as_index(new_positions)
    own = xp.sum(xp.take_along_axis(unary, y[:, None], axis=1))
    num_values = pair_table.shape[-1]
    flat_pairs = xp.reshape(pairwise, (pairwise.shape[0], num_values * num_values))
    pairs = xp.sum(xp.take_along_axis(flat_pairs, (y[:-1] * num_values + y[1:])[:, None], axis=1))
    return own + pairs - logsumexp(alpha[-1], axis=-1)
