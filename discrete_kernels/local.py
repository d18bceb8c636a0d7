"""Local differences: what a leaf's local information says about single-coordinate changes.

Notation (DESIGN.md section 4): the target is ``pi(x) ∝ exp(f(x))``. For every coordinate ``i``
of a leaf and every candidate value ``v`` of its domain, the *local difference*
``delta[i, v]`` estimates ``f(x with x_i = v) - f(x)``:

- from the gradient ``g`` of the relaxed ``f`` (ordinal and binary leaves):
  ``delta[i, v] = g_i * (v - x_i)``;
- from a *table* ``T[i, v]`` whose differences along ``v`` are what matter: the gradient with
  respect to the one-hot encoding (categorical leaves, ``T = ∂f/∂onehot``) or the exact values
  ``T[i, v] = f(x with x_i = v)``; then ``delta[i, v] = T[i, v] - T[i, x_i]``.

A leaf's *local information* is ``g`` (shape ``x.shape``) or ``T`` (shape ``x.shape + (S,)``);
``is_table`` says which. Everything here acts on one chain.

A proposal's *table* has one position per candidate: for a finite domain the positions are
its values (``low + k``, ``S = num_values``); for a windowed domain (:class:`Integer`) they
are the moves ``-w .. w`` from each coordinate's current value (``S = 2 w + 1``, the current
value at position ``w``), so every candidate depends on ``x`` and candidates outside the
support are masked per coordinate (:func:`mask_invalid`).
"""

from __future__ import annotations

from array_api_compat import device as _device

from ._xp import Array, array_namespace, is_torch_array, masked_sum
from .domains import Categorical, Domain, Integer, Ordinal

__all__ = [
    "as_float",
    "candidate_mask",
    "candidate_value",
    "current_mask",
    "finite_local",
    "local_delta",
    "mask_invalid",
    "squared_distance",
    "table_size",
    "window_valid",
]


def as_float(x: Array, like: Array) -> Array:
    """``x`` in the dtype of ``like`` (``x`` itself when it has it: no copy, which eager
    torch would make as one more operation)."""
    if x.dtype == like.dtype:  # the usual case, without the array-API layer's call
        return x
    xp = array_namespace(like)
    return xp.astype(x, like.dtype, copy=False)


def table_size(domain: Domain) -> int:
    """``S``, the positions of a proposal's table: every value of a finite domain, the
    ``2 w + 1`` moves of a windowed one."""
    return domain.table_size if isinstance(domain, Integer) else domain.num_values


def _offsets(domain: Domain, like: Array) -> Array:
    """The table's positions ``0 .. S - 1``, dtype of ``like``: candidate values relative to
    the domain's lowest, or (windowed) relative to ``x_i - w``.

    Distances are computed between offsets, not raw values: an ordinal site on
    ``[1e8, 1e8 + 4]`` has offsets exact in float32, its raw values do not.
    """
    xp = array_namespace(like)
    return xp.astype(xp.arange(table_size(domain), device=_device(like)), like.dtype)


def _offset_of(domain: Domain, x: Array, like: Array) -> Array:
    """The position of ``x`` in its own table, in the dtype of ``like``: ``x - low`` (in
    ``x``'s own dtype, exact for integers), or ``w`` for a windowed domain."""
    if isinstance(domain, Integer):
        xp = array_namespace(like)
        return xp.full(x.shape, float(domain.window), dtype=like.dtype, device=_device(like))
    return as_float(x - domain.low if domain.low else x, like)


def current_mask(domain: Domain, x: Array, like: Array) -> Array:
    """Boolean table marking each coordinate's current value, shape x.shape + (S,)."""
    return _offsets(domain, like) == _offset_of(domain, x, like)[..., None]


def candidate_mask(domain: Domain, x: Array, y: Array, like: Array) -> Array:
    """Boolean table marking ``y`` among the candidates of ``x``'s table, shape x.shape + (S,).

    For a finite domain the table does not depend on ``x`` (this is :func:`current_mask` of
    ``y``); for a windowed one it marks the move ``y_i - x_i`` (no position when
    ``|y_i - x_i| > w``).
    """
    if isinstance(domain, Integer):
        move = as_float(y - x, like) + float(domain.window)
        return _offsets(domain, like) == move[..., None]
    return current_mask(domain, y, like)


def candidate_value(domain: Domain, x: Array, index: Array) -> Array:
    """The value at table position ``index`` for each coordinate, shape and dtype of ``x``:
    ``low + index``, or ``x + index - w`` for a windowed domain."""
    xp = array_namespace(x)
    index = xp.astype(index, x.dtype)
    if isinstance(domain, Integer):
        return x + (index - domain.window)
    return index + domain.low


def finite_local(local: Array, is_table: bool) -> Array:
    """Local information with its non-finite entries made harmless for a proposal.

    A gradient entry that is NaN or infinite says nothing usable about its coordinate: it
    becomes 0 (an uninformed proposal there). A table entry that is NaN or ``+inf`` becomes
    ``-inf`` (that value is never proposed). The reverse proposal goes through the same rule,
    so the MH ratio stays exact; without it one infinite gradient entry turns every move
    probability into NaN and freezes the chain.
    """
    xp = array_namespace(local)
    if is_table:
        bad = xp.isnan(local) | (local == xp.inf)
        return xp.where(bad, xp.full_like(local, -xp.inf), local)
    if is_torch_array(local):  # one eager operation instead of four (isfinite is three)
        return local.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    return xp.where(xp.isfinite(local), local, xp.zeros_like(local))


def local_delta(domain: Domain, x: Array, local: Array, is_table: bool) -> Array:
    """Estimated change of ``f`` for setting each coordinate to each candidate value.

    Parameters
    ----------
    domain : Domain
    x : array, shape (n...)
        Current values of the leaf.
    local : array, shape (n...) or (n..., S)
        Gradient ``g`` of the relaxed ``f`` (``is_table=False``) or a table ``T``.
    is_table : bool

    Returns
    -------
    array, shape (n..., S)
        ``delta[..., v]``; zero at the current value.
    """
    xp = array_namespace(local)
    if is_table or isinstance(domain, Categorical):
        if not is_table:
            raise ValueError("Categorical leaves need a table (one-hot gradient or exact).")
        current = masked_sum(current_mask(domain, x, local), local)
        return local - current[..., None]
    values = _offsets(domain, local)
    return local[..., None] * (values - _offset_of(domain, x, local)[..., None]) + xp.zeros_like(
        values
    )


def squared_distance(domain: Domain, x: Array, like: Array) -> Array:
    """Squared distance from each coordinate's value to each candidate, shape (n..., S).

    Ordinal and binary values use ``(v - x_i)^2``; categorical values use the one-hot
    distance, 2 for any change.
    """
    xp = array_namespace(like)
    if isinstance(domain, Categorical):
        changed = ~current_mask(domain, x, like)
        return xp.astype(changed, like.dtype) * 2.0
    diff = _offsets(domain, like) - _offset_of(domain, x, like)[..., None]
    return diff * diff


def window_valid(domain: Integer, x: Array, like: Array) -> Array | None:
    """Which moves of each coordinate's window stay in the support, or None when all do
    (no bound on either side).

    Parameters
    ----------
    domain : Integer
    x : integer array, shape (n...)
    like : float array giving dtype and device

    Returns
    -------
    bool array, shape (n..., 2 w + 1): move ``k - w`` is valid iff
    ``low <= x_i + k - w <= high``. The room to each bound is computed in ``x``'s integer
    dtype and capped at ``w`` before any float conversion, so wide supports stay exact.
    """
    if domain.low is None and domain.high is None:
        return None
    xp = array_namespace(like)
    w = domain.window
    moves = _offsets(domain, like) - float(w)
    valid = xp.ones(tuple(x.shape) + (domain.table_size,), dtype=xp.bool, device=_device(like))
    if domain.low is not None:
        below = as_float(xp.clip(x - domain.low, 0, w), like)
        valid = valid & (moves >= -below[..., None])
    if domain.high is not None:
        above = as_float(xp.clip(domain.high - x, 0, w), like)
        valid = valid & (moves <= above[..., None])
    return valid


def mask_invalid(domain: Domain, logits: Array, x: Array | None = None) -> Array:
    """``logits`` (n..., S) with ``-inf`` at candidates outside each coordinate's bounds.

    ``x`` (n...), the current values, is needed by a windowed domain only: its candidates
    are moves from ``x``, truncated at the support's ends."""
    xp = array_namespace(logits)
    valid = None
    if isinstance(domain, Ordinal):
        valid = domain.valid_candidates(logits)
    elif isinstance(domain, Integer):
        if x is None:
            raise ValueError("mask_invalid: a windowed domain needs the current values x.")
        valid = window_valid(domain, x, logits)
    if valid is None:
        return logits
    return xp.where(valid, logits, xp.full_like(logits, -xp.inf))
