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
"""

from __future__ import annotations

from array_api_compat import device as _device
from array_api_compat import is_torch_array

from ._xp import Array, array_namespace, masked_sum
from .domains import Categorical, Domain, Ordinal

__all__ = [
    "as_float",
    "current_mask",
    "finite_local",
    "local_delta",
    "mask_invalid",
    "squared_distance",
]


def as_float(x: Array, like: Array) -> Array:
    """``x`` in the dtype of ``like``."""
    xp = array_namespace(like)
    return xp.astype(x, like.dtype)


def _offsets(domain: Domain, like: Array) -> Array:
    """Candidate values relative to the domain's lowest, ``0 .. S - 1``, dtype of ``like``.

    Distances are computed between offsets, not raw values: an ordinal site on
    ``[1e8, 1e8 + 4]`` has offsets exact in float32, its raw values do not.
    """
    xp = array_namespace(like)
    return xp.astype(xp.arange(domain.num_values, device=_device(like)), like.dtype)


def _offset_of(domain: Domain, x: Array, like: Array) -> Array:
    """``x - low`` (in ``x``'s own dtype, exact for integers), then in the dtype of ``like``."""
    return as_float(x - domain.low if domain.low else x, like)


def current_mask(domain: Domain, x: Array, like: Array) -> Array:
    """Boolean table marking each coordinate's current value, shape x.shape + (S,)."""
    return _offsets(domain, like) == _offset_of(domain, x, like)[..., None]


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


def mask_invalid(domain: Domain, logits: Array) -> Array:
    """``logits`` (n..., S) with ``-inf`` at candidates outside each coordinate's bounds."""
    if isinstance(domain, Ordinal):
        valid = domain.valid_candidates(logits)
        if valid is not None:
            xp = array_namespace(logits)
            return xp.where(valid, logits, xp.full_like(logits, -xp.inf))
    return logits
