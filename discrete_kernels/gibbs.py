"""Single-site updates for one-coordinate-at-a-time samplers (the Gibbs baseline).

For one coordinate with candidate values ``v = 0..S-1`` the caller evaluates the exact log
density at every candidate, ``w[v] = f(x with x_i = v)``, and these functions propose a new
value and return the log MH ratio of the move (0 for the exact conditional, which is always
accepted). Forms, after Liu (1996):

- exact conditional: ``v ~ softmax(w)``;
- modified (Metropolised) Gibbs: ``v ~ softmax(w)`` restricted to ``v != current``, accepted
  with ``min(1, (1 - p_current) / (1 - p_v))``;
- random walk: ``v`` uniform over the valid candidates, accepted with ``min(1, exp(w_v - w_c))``;
- modified random walk: the same, restricted to ``v != current``.
"""

from __future__ import annotations

from ._xp import Array, array_namespace, categorical_from_uniform, masked_sum

__all__ = ["gibbs_site_proposal"]


def _logsumexp(x: Array) -> Array:
    xp = array_namespace(x)
    top = xp.max(x)
    top = xp.where(xp.isfinite(top), top, xp.zeros_like(top))
    return top + xp.log(xp.sum(xp.exp(x - top)))


def gibbs_site_proposal(
    log_weights: Array,
    current: Array,
    uniform: Array,
    *,
    valid: Array | None = None,
    random_walk: bool = False,
    modified: bool = False,
) -> tuple[Array, Array]:
    """Propose a value for one coordinate and return the log MH ratio of the move.

    Parameters
    ----------
    log_weights : array, shape (S,)
        Exact log density at every candidate value; NaN counts as ``-inf``.
    current : integer scalar array
        Index of the current value.
    uniform : scalar uniform in [0, 1)
    valid : bool array, shape (S,), optional
        Candidates inside the coordinate's support (default: all).
    random_walk, modified : bool
        Which form (see the module docstring).

    Returns
    -------
    proposal : integer scalar array
    log_ratio : scalar array
        ``log A`` of the move; 0 for the exact conditional; 0 as well when ``proposal``
        equals ``current``.
    """
    xp = array_namespace(log_weights)
    num_values = log_weights.shape[0]
    index = xp.arange(num_values)
    neg_inf = xp.full_like(log_weights, -xp.inf)
    w = xp.where(xp.isnan(log_weights), neg_inf, log_weights)
    if valid is not None:
        w = xp.where(valid, w, neg_inf)
    allowed = xp.ones(num_values, dtype=xp.bool) if valid is None else valid
    if modified:
        allowed = allowed & (index != current)
    if random_walk:
        logits = xp.where(allowed, xp.zeros_like(w), neg_inf)
    else:
        logits = xp.where(allowed, w, neg_inf)
    proposal = categorical_from_uniform(logits, uniform)
    w_current = masked_sum(index == current, w, axis=0)
    w_proposal = masked_sum(index == proposal, w, axis=0)
    if random_walk:
        log_ratio = w_proposal - w_current
    elif modified:
        # (1 - p_c) / (1 - p_v) = sum_{u != c} e^w_u / sum_{u != v} e^w_u
        log_ratio = _logsumexp(xp.where(index != current, w, neg_inf)) - _logsumexp(
            xp.where(index != proposal, w, neg_inf)
        )
    else:
        log_ratio = xp.zeros_like(w_current)
    same = proposal == current
    log_ratio = xp.where(same, xp.zeros_like(log_ratio), log_ratio)
    log_ratio = xp.where(xp.isnan(log_ratio), xp.full_like(log_ratio, -xp.inf), log_ratio)
    return proposal, log_ratio
