"""Gradient-informed proposals on discrete leaves: the discrete Langevin proposal (DLP) and
Gibbs-with-gradients (GWG).

Notation (DESIGN.md section 4): the target is ``pi(x) ∝ exp(f(x))``. For every coordinate ``i``
of a leaf and every candidate value ``v`` of its domain, the *local difference*
``delta[i, v]`` estimates ``f(x with x_i = v) - f(x)``:

- from the gradient ``g`` of the relaxed ``f`` (ordinal and binary leaves):
  ``delta[i, v] = g_i * (v - x_i)``;
- from a *table* ``T[i, v]`` whose differences along ``v`` are what matter: the gradient with
  respect to the one-hot encoding (categorical leaves, ``T = ∂f/∂onehot``) or the exact values
  ``T[i, v] = f(x with x_i = v)``; then ``delta[i, v] = T[i, v] - T[i, x_i]``.

A leaf's *local information* is ``g`` (shape ``x.shape``) or ``T`` (shape ``x.shape + (S,)``);
``is_table`` says which. Everything here acts on one chain: the adapters vectorise over chains.
Randomness enters as uniforms in [0, 1) drawn by the adapter.
"""

from __future__ import annotations

from collections.abc import Sequence

from array_api_compat import device as _device
from array_api_compat import is_torch_array

from ._xp import (
    Array,
    array_namespace,
    categorical_from_uniform,
    log_sigmoid,
    log_softmax,
    masked_sum,
    sigmoid,
)
from .domains import Binary, Categorical, Domain, Ordinal

__all__ = [
    "AUTO_EXACT_BUDGET",
    "FIRST_ORDER_NATS_LIMIT",
    "FIRST_ORDER_TV_LIMIT",
    "finite_local",
    "first_order_error_at",
    "first_order_proposal_error",
    "substitutions_at",
    "dlp_leaf_log_prob",
    "dlp_leaf_logits",
    "dlp_leaf_sample",
    "dlp_noise_shape",
    "gwg_log_prob",
    "gwg_move_logits",
    "gwg_sample",
    "local_delta",
    "single_site_substitutions",
    "squared_distance",
]


def _float(x: Array, like: Array) -> Array:
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
    return _float(x - domain.low if domain.low else x, like)


def _current_mask(domain: Domain, x: Array, like: Array) -> Array:
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
        current = masked_sum(_current_mask(domain, x, local), local)
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
        changed = ~_current_mask(domain, x, like)
        return xp.astype(changed, like.dtype) * 2.0
    diff = _offsets(domain, like) - _offset_of(domain, x, like)[..., None]
    return diff * diff


def _mask_invalid(domain: Domain, logits: Array) -> Array:
    if isinstance(domain, Ordinal):
        valid = domain.valid_candidates(logits)
        if valid is not None:
            xp = array_namespace(logits)
            return xp.where(valid, logits, xp.full_like(logits, -xp.inf))
    return logits


# --------------------------------------------------------------------------------------------
# Discrete Langevin proposal


def dlp_leaf_logits(
    domain: Domain,
    x: Array,
    local: Array,
    is_table: bool,
    step_size: Array | float,
    balance: Array | float = 0.5,
    preconditioner: Array | float = 1.0,
) -> Array:
    """Logits of the DLP for one leaf.

    ``logit[i, v] = balance * delta[i, v] - dist2(x_i, v) / (2 * step_size * preconditioner_i)``.
    For a ``Binary`` leaf the closed form is returned instead: the flip logit of each
    coordinate, ``balance * delta_flip - 1 / (2 * step_size * preconditioner)``, so that the
    flip probability is ``sigmoid(logit)``.

    Parameters
    ----------
    domain : Domain
    x : array, shape (n...)
    local : array, shape (n...) or (n..., S)
    is_table : bool
    step_size : float or scalar array
        ``alpha`` > 0, on the leaf's own value scale.
    balance : float or scalar array
        ``beta``; 1/2 gives the locally balanced DLP of DULA/DMALA.
    preconditioner : float or array broadcastable to (n...)
        Per-coordinate multiplier of the step size (App. H of the DLP paper).

    Returns
    -------
    array, shape (n...) for ``Binary``, (n..., S) otherwise.
    """
    xp = array_namespace(local)
    local = finite_local(local, is_table)
    scale = step_size * preconditioner
    if isinstance(domain, Binary):
        xf = _float(x, local)
        if is_table:
            at_current = _current_mask(domain, x, local)
            delta_flip = masked_sum(~at_current, local) - masked_sum(at_current, local)
        else:
            delta_flip = local * (1.0 - 2.0 * xf)
        return balance * delta_flip - 1.0 / (2.0 * scale)
    delta = local_delta(domain, x, local, is_table)
    dist2 = squared_distance(domain, x, local)
    scale = xp.asarray(scale, dtype=local.dtype, device=_device(local))
    logits = balance * delta - dist2 / (2.0 * scale[..., None] if scale.ndim else 2.0 * scale)
    return _mask_invalid(domain, logits)


def dlp_noise_shape(domain: Domain, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Shape of the uniforms :func:`dlp_leaf_sample` needs for a leaf of ``shape``: one per
    coordinate, whatever the domain."""
    return tuple(shape)


def dlp_leaf_sample(domain: Domain, x: Array, logits: Array, uniform: Array) -> Array:
    """Draw the proposed leaf from its DLP logits.

    Parameters
    ----------
    domain : Domain
    x : array, shape (n...)
    logits : array, from :func:`dlp_leaf_logits`
    uniform : array, shape (n...)
        Uniforms in [0, 1), one per coordinate.

    Returns
    -------
    array, shape (n...), dtype of ``x``
    """
    xp = array_namespace(logits)
    if isinstance(domain, Binary):
        # P(u < sigmoid(l)) = sigmoid(l); no log of u, and exp(-|l|) is shared with the
        # log_sigmoid of dlp_leaf_log_prob under jit
        flip = uniform < sigmoid(logits)
        return xp.where(flip, 1 - x, x)
    index = categorical_from_uniform(logits, uniform)
    return xp.astype(index + domain.low, x.dtype)


def dlp_leaf_log_prob(domain: Domain, x: Array, y: Array, logits: Array) -> Array:
    """``log q(y | x)`` of a DLP for one leaf, summed over its coordinates.

    Parameters
    ----------
    domain : Domain
    x, y : array, shape (n...)
        Current and proposed values.
    logits : array
        :func:`dlp_leaf_logits` evaluated at ``x``.

    Returns
    -------
    scalar array
    """
    xp = array_namespace(logits)
    if isinstance(domain, Binary):
        # log sigmoid(-l) = log sigmoid(l) - l: one transcendental pass, shared with sampling
        log_flip = log_sigmoid(logits)
        return xp.sum(xp.where(y != x, log_flip, log_flip - logits))
    chosen = _current_mask(domain, y, logits)
    return xp.sum(masked_sum(chosen, log_softmax(logits)))


# --------------------------------------------------------------------------------------------
# Gibbs with gradients: one coordinate of one leaf changes per step


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
    leaves the penalty is the same for every move and cancels.
    """
    xp = array_namespace(local)
    local = finite_local(local, is_table)
    delta = local_delta(Ordinal(2) if isinstance(domain, Binary) else domain, x, local, is_table)
    logits = balance * delta
    if step_size is not None:
        logits = logits - squared_distance(domain, x, local) / (2.0 * step_size)
    logits = xp.where(_current_mask(domain, x, local), xp.full_like(logits, -xp.inf), logits)
    return _mask_invalid(domain, logits)


def _flat_log_softmax(logits: Sequence[Array]) -> Array:
    """Log-softmax over all moves of all leaves, flattened and concatenated in leaf order."""
    xp = array_namespace(logits[0])
    return log_softmax(xp.concat([xp.reshape(table, (-1,)) for table in logits]))


def gwg_sample(
    domains: Sequence[Domain],
    xs: Sequence[Array],
    logits: Sequence[Array],
    uniform: Array,
) -> tuple[tuple[Array, ...], Array]:
    """Pick one move among all leaves and apply it.

    Parameters
    ----------
    domains, xs : per leaf
    logits : per leaf, shape (n_j..., S_j), from :func:`gwg_move_logits`
    uniform : scalar uniform in [0, 1)

    Returns
    -------
    ys : tuple of arrays, the proposed leaves
    log_prob : scalar array, ``log q(y | x)``
    """
    xp = array_namespace(logits[0])
    log_probs = _flat_log_softmax(logits)
    move = categorical_from_uniform(log_probs, uniform)
    positions = xp.arange(log_probs.shape[0], device=_device(log_probs))
    log_prob = masked_sum(positions == move, log_probs, axis=0)
    ys = []
    offset = 0
    for domain, x, table in zip(domains, xs, logits):
        size = 1
        for dim in table.shape:
            size *= dim
        chosen = xp.reshape(xp.arange(size, device=_device(table)) + offset == move, table.shape)
        changed = xp.any(chosen, axis=-1)
        index = xp.argmax(xp.astype(chosen, xp.int32), axis=-1)
        ys.append(xp.where(changed, xp.astype(index + domain.low, x.dtype), x))
        offset += size
    return tuple(ys), log_prob


def gwg_log_prob(
    domains: Sequence[Domain],
    xs: Sequence[Array],
    ys: Sequence[Array],
    logits: Sequence[Array],
) -> Array:
    """``log q(y | x)`` of the single-coordinate move from ``x`` to ``y`` (exactly one change).

    Parameters
    ----------
    domains, xs, ys : per leaf
    logits : per leaf, :func:`gwg_move_logits` evaluated at ``x``

    Returns
    -------
    scalar array
    """
    xp = array_namespace(logits[0])
    masks = []
    for domain, x, y, table in zip(domains, xs, ys, logits):
        masks.append(xp.reshape((y != x)[..., None] & _current_mask(domain, y, table), (-1,)))
    return masked_sum(xp.concat(masks), _flat_log_softmax(logits), axis=0)


def single_site_substitutions(domain: Domain, x: Array) -> Array:
    """Every state that differs from ``x`` in at most one coordinate, for exact tables.

    Entry ``[k * S + v]`` is ``x`` with flat coordinate ``k`` set to candidate ``v`` (the
    current value included), so evaluating ``f`` on the batch and reshaping to
    ``x.shape + (S,)`` gives the exact table ``T[k, v] = f(x with x_k = v)``.

    Parameters
    ----------
    domain : Domain
    x : array, shape (n...)

    Returns
    -------
    array, shape (N * S, n...) with ``N = prod(n...)``, dtype of ``x``
    """
    xp = array_namespace(x)
    flat = xp.reshape(x, (-1,))
    size = flat.shape[0]
    num_values = domain.num_values
    values = xp.astype(xp.arange(num_values, device=_device(x)) + domain.low, x.dtype)
    at_site = xp.eye(size, dtype=xp.bool, device=_device(x))[:, None, :]  # (N, 1, N)
    batch = xp.where(at_site, values[None, :, None], flat[None, None, :])  # (N, S, N)
    return xp.reshape(batch, (size * num_values,) + tuple(x.shape))


# --------------------------------------------------------------------------------------------
# how good is the first-order estimate of a site? (checked once at setup)

FIRST_ORDER_TV_LIMIT = 0.3
"""Above this total variation the gradient's proposal is judged badly wrong for a site."""

FIRST_ORDER_NATS_LIMIT = 5.0
"""Above this median error (in nats) of a single-coordinate change the gradient's estimate is
judged badly wrong: a joint move adds these errors in its MH ratio, and its acceptance falls
like ``exp(-error)`` per changed coordinate."""

AUTO_EXACT_BUDGET = 256
"""At most this many log-density evaluations per step for a site switched to exact
differences automatically (``N * S`` for ``N`` coordinates of ``S`` values)."""


def substitutions_at(domain: Domain, x: Array, flat_indices: Sequence[int]) -> Array:
    """``x`` with one flat coordinate set to each candidate value, for the given coordinates.

    Parameters
    ----------
    domain : Domain
    x : array, shape (n...)
    flat_indices : k coordinates (indices into ``x`` flattened)

    Returns
    -------
    array, shape (k * S, n...): entry ``[m * S + v]`` is ``x`` with coordinate
    ``flat_indices[m]`` set to the ``v``-th candidate value.
    """
    xp = array_namespace(x)
    flat = xp.reshape(x, (-1,))
    size, num_values = flat.shape[0], domain.num_values
    device = _device(x)
    chosen = xp.asarray(list(flat_indices), device=device)
    at_site = xp.arange(size, device=device)[None, :] == chosen[:, None]  # (k, N)
    values = xp.astype(xp.arange(num_values, device=device) + domain.low, x.dtype)
    batch = xp.where(at_site[:, None, :], values[None, :, None], flat[None, None, :])
    return xp.reshape(batch, (chosen.shape[0] * num_values,) + tuple(x.shape))


def first_order_proposal_error(
    delta_gradient: Array, delta_exact: Array, valid: Array | None = None
) -> float:
    """Mean total variation between the locally balanced single-coordinate proposals that the
    gradient's and the exact local differences imply: ``softmax(delta / 2)`` per coordinate.

    0 when the gradient is exact (e.g. binary sites of a quadratic energy without
    self-coupling); near 1 when it points the wrong way (a value used through a comparison
    has gradient 0; a strongly curved relaxation overstates the effect of a flip). Setup-time
    diagnostic on concrete arrays.

    Parameters
    ----------
    delta_gradient, delta_exact : arrays, shape (k, S)
        Local differences of ``k`` coordinates (0 at each current value).
    valid : bool array broadcastable to (k, S), optional
        Candidates inside each coordinate's support.

    Returns
    -------
    float in [0, 1]
    """
    xp = array_namespace(delta_exact)
    usable = xp.isfinite(delta_exact) & xp.isfinite(delta_gradient)
    if valid is not None:
        usable = usable & valid
    minus_inf = xp.full_like(delta_exact, -xp.inf)
    p = xp.exp(log_softmax(xp.where(usable, delta_gradient / 2, minus_inf)))
    q = xp.exp(log_softmax(xp.where(usable, delta_exact / 2, minus_inf)))
    per_coordinate = 0.5 * xp.sum(xp.abs(p - q), axis=-1)
    return float(xp.mean(per_coordinate))


def first_order_error_at(
    domain: Domain, x, gradient, chosen: Sequence[int], delta_exact
) -> tuple[float, float]:
    """How wrong a leaf's first-order local differences are at the ``chosen`` coordinates.

    Parameters
    ----------
    domain : Domain
    x, gradient : numpy arrays, shape (n...)
    chosen : k flat coordinate indices
    delta_exact : numpy array, shape (k, S)
        ``f(x with x_c = v) - f(x)`` for each chosen coordinate ``c`` and candidate ``v``.

    Returns
    -------
    (total_variation, median_error)
        :func:`first_order_proposal_error`, and the median over the changes ``v != x_c``
        inside the support of ``|delta_gradient - delta_exact|`` in nats.
    """
    import numpy as np

    x_chosen = np.reshape(x, (-1,))[list(chosen)]
    estimate = local_delta(domain, x_chosen, np.reshape(gradient, (-1,))[list(chosen)], False)
    exact = np.asarray(delta_exact, np.float64)
    valid = np.ones(exact.shape, bool)
    if isinstance(domain, Ordinal):
        table = domain.valid_candidates(np.zeros(np.shape(x), np.float64))
        if table is not None:
            table = np.broadcast_to(table, np.shape(x) + (domain.num_values,))
            valid = table.reshape(-1, domain.num_values)[list(chosen)]
    tv = first_order_proposal_error(estimate, exact, valid)
    changes = valid & (estimate != 0) | valid & (exact != 0)
    errors = np.abs(estimate - exact)[changes & np.isfinite(exact)]
    return tv, float(np.median(errors)) if errors.size else 0.0
