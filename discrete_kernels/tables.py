"""Exact tables of a site, written once for both adapters: the states one coordinate away
from the current one (single-site substitutions), the table of exact conditionals of a site in
plates from its per-element terms (``S`` evaluations instead of ``N (S - 1)``), a site summed out
of the log density, and the setup's check that a site's coordinates are conditionally
independent (which plate indexes each dimension, the terms aligned to the site, the draws and
the comparison of the check), and the memory limit of a table that is not from plates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from array_api_compat import device as _device

from ._xp import Array, array_namespace, logsumexp
from .domains import Categorical, Domain, as_finite, coordinate_bounds
from .validation import format_bytes

__all__ = [
    "MAX_EXACT_TABLE_BYTES",
    "PLATE_CHECKED_COORDINATES",
    "align_element_term",
    "check_exact_table_memory",
    "coordinate_substitutions",
    "exact_table_bytes",
    "joint_values",
    "other_value_substitutions",
    "plate_check_draws",
    "plate_dims_of",
    "plate_table_mismatch",
    "single_site_evaluations",
    "single_site_substitutions",
    "substitutions_at",
    "summed_out_log_density",
    "table_from_element_terms",
    "table_from_other_values",
]


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


def other_value_substitutions(domain: Domain, x: Array) -> Array:
    """The states that differ from ``x`` in exactly one coordinate: the ``N (S - 1)``
    evaluations an exact table needs, since its entry at a coordinate's current value is the
    log density ``f(x)`` itself (:func:`table_from_other_values` puts the table together).

    Entry ``[k * (S - 1) + r]`` is ``x`` with flat coordinate ``k`` set to the ``r``-th of its
    other values in increasing order (``low + r``, or ``low + r + 1`` from the current value
    on).

    Parameters
    ----------
    domain : Domain
    x : array, shape (n...)

    Returns
    -------
    array, shape (N * (S - 1), n...) with ``N = prod(n...)``, dtype of ``x``
    """
    xp = array_namespace(x)
    flat = xp.reshape(x, (-1,))
    size, num_values = flat.shape[0], domain.num_values
    device = _device(x)
    position = flat - domain.low  # (N,) the current value's column
    r = xp.arange(num_values - 1, device=device)[None, :]  # (1, S - 1)
    others = r + xp.astype(r >= position[:, None], r.dtype) + domain.low  # (N, S - 1)
    at_site = xp.eye(size, dtype=xp.bool, device=device)[:, None, :]  # (N, 1, N)
    batch = xp.where(at_site, xp.astype(others, x.dtype)[:, :, None], flat[None, None, :])
    return xp.reshape(batch, (size * (num_values - 1),) + tuple(x.shape))


def table_from_other_values(log_density: Array, values: Array, x: Array, domain: Domain) -> Array:
    """The exact table ``T[i, v] = f(x with x_i = v)`` from ``f(x)`` and the evaluations at
    :func:`other_value_substitutions`.

    Parameters
    ----------
    log_density : scalar
        ``f(x)``: every coordinate's entry at its current value.
    values : array, shape (N * (S - 1),)
        ``f`` at :func:`other_value_substitutions` of ``x``, in its order.
    x : integer array, shape (n...)
    domain : Domain

    Returns
    -------
    array, shape (n..., S)
    """
    xp = array_namespace(values)
    num_values = domain.num_values
    others = xp.reshape(values, tuple(x.shape) + (num_values - 1,))
    position = (x - domain.low)[..., None]  # (n..., 1)
    column = xp.arange(num_values, device=_device(values))
    filler = xp.zeros_like(others[..., :1])
    below = xp.concat([others, filler], axis=-1)  # column v < current: the v-th other value
    above = xp.concat([filler, others], axis=-1)  # column v > current: the (v - 1)-th
    current = xp.broadcast_to(xp.reshape(log_density, (1,) * (x.ndim + 1)), below.shape)
    return xp.where(column == position, current, xp.where(column < position, below, above))


def single_site_evaluations(size: int, num_values: int) -> int:
    """Log-density evaluations of a leaf's exact single-site table (not from plates):
    ``N (S - 1)``, every coordinate at each of its other values
    (:func:`other_value_substitutions`)."""
    return size * (num_values - 1)


def coordinate_substitutions(domain: Domain, x: Array, flat_index: Array) -> Array:
    """``x`` with flat coordinate ``flat_index`` (an integer array, traced or not) set to each
    candidate value: entry ``v`` of ``f`` on the batch is that coordinate's row of the exact
    table, ``T[i, v]`` (:func:`single_site_substitutions` for one coordinate).

    Returns
    -------
    array, shape (S, n...), dtype of ``x``
    """
    xp = array_namespace(x)
    flat = xp.reshape(x, (-1,))
    values = xp.astype(xp.arange(domain.num_values, device=_device(x)) + domain.low, x.dtype)
    at_site = xp.arange(flat.shape[0], device=_device(x)) == flat_index  # (N,)
    batch = xp.where(at_site[None, :], values[:, None], flat[None, :])  # (S, N)
    return xp.reshape(batch, (domain.num_values,) + tuple(x.shape))


def substitutions_at(domain: Domain, x: Array, flat_indices: Sequence[int] | Array) -> Array:
    """``x`` with one flat coordinate set to each candidate value, for the given coordinates.

    Parameters
    ----------
    domain : Domain
    x : array, shape (n...)
    flat_indices : k coordinates (indices into ``x`` flattened): a sequence of ints, or an
        integer array of shape (k,) of ``x``'s library (traced under ``jit``)

    Returns
    -------
    array, shape (k * S, n...): entry ``[m * S + v]`` is ``x`` with coordinate
    ``flat_indices[m]`` set to the ``v``-th candidate value.
    """
    xp = array_namespace(x)
    flat = xp.reshape(x, (-1,))
    size, num_values = flat.shape[0], domain.num_values
    device = _device(x)
    chosen: Array = (
        flat_indices
        if hasattr(flat_indices, "shape")
        else xp.asarray(list(flat_indices), device=device)
    )
    at_site = xp.arange(size, device=device)[None, :] == chosen[:, None]  # (k, N)
    values = xp.astype(xp.arange(num_values, device=device) + domain.low, x.dtype)
    batch = xp.where(at_site[:, None, :], values[None, :, None], flat[None, None, :])
    return xp.reshape(batch, (chosen.shape[0] * num_values,) + tuple(x.shape))


def table_from_element_terms(log_density: Array, terms: Array, x: Array, domain: Domain) -> Array:
    """The exact table ``T[i, v] = f(x with x_i = v)`` of a conditionally independent leaf.

    When the log density splits as ``f(x) = C + sum_i g_i(x_i)`` in the leaf's coordinates
    (every term that depends on the leaf is indexed by its plate, the others do not depend on
    it), ``f(x with x_i = v) = f(x) - g_i(x_i) + g_i(v)``: the ``S`` evaluations of ``g`` with
    every coordinate set to ``v`` give all ``N x S`` single-site changes.

    Parameters
    ----------
    log_density : scalar
        ``f(x)``.
    terms : array, shape (n..., S)
        ``g_i(v)`` for every coordinate ``i`` and candidate ``v`` (``NaN`` counts as ``-inf``,
        a value outside the support).
    x : integer array, shape (n...)
        The current values.
    domain : Domain

    Returns
    -------
    array, shape (n..., S)
    """
    xp = array_namespace(terms)
    terms = xp.where(xp.isnan(terms), xp.full_like(terms, -xp.inf), terms)
    # g_i(x_i) by one elementwise select per value, not a masked sum over the last axis (that
    # reduction cost 4x the model's value_and_grad on XLA's CPU at N = 10^4, S = 2)
    current = terms[..., 0]
    low = as_finite(domain).low
    for k in range(1, terms.shape[-1]):
        current = xp.where(x == low + k, terms[..., k], current)
    return terms + (log_density - current)[..., None]


def summed_out_log_density(other_terms: Array, terms: Array) -> Array:
    """The log density with a conditionally independent leaf summed out exactly.

    When ``f(x) = C + sum_i g_i(x_i)`` in the leaf's coordinates (every term that depends on
    the leaf is indexed by its plate), ``log sum_x exp f(x) = C + sum_i log sum_v exp g_i(v)``:
    ``S`` evaluations of the per-coordinate terms replace the ``S^N`` terms of the sum, and
    ``softmax(g_i)`` is coordinate ``i``'s exact conditional given the other sites.

    Parameters
    ----------
    other_terms : scalar
        ``C``: the sum of the terms outside the leaf's plates.
    terms : array, shape (n..., S)
        ``g_i(v)`` for every coordinate ``i`` and value ``v`` (``NaN`` counts as ``-inf``).

    Returns
    -------
    scalar
    """
    xp = array_namespace(terms)
    terms = xp.where(xp.isnan(terms), xp.full_like(terms, -xp.inf), terms)
    return other_terms + xp.sum(logsumexp(terms, axis=-1))


def joint_values(domain: Domain, shape: Sequence[int], max_count: int) -> np.ndarray | None:
    """Every joint value of a leaf, or None when there are more than ``max_count``.

    A leaf whose coordinates interact cannot be summed out coordinate by coordinate; when it
    has few joint values, the sum over all of them is the exact marginal
    (:func:`summed_out_log_density` with one "coordinate" whose ``S`` is their count).

    Parameters
    ----------
    domain : a finite domain (an ordinal's per-coordinate bounds are respected)
    shape : the leaf's shape
    max_count : the most joint values to list

    Returns
    -------
    ndarray of shape (M, *shape), int64, or None
    """
    low, high = coordinate_bounds(domain, tuple(shape))
    counts = (high - low + 1).reshape(-1)
    count = 1
    for c in counts.tolist():  # Python ints: no overflow on a large leaf
        count *= int(c)
        if count > max_count:
            return None
    grids = np.meshgrid(*[np.arange(c) for c in counts.tolist()], indexing="ij")
    values = np.stack([g.reshape(-1) for g in grids], -1) + low.reshape(1, -1)
    return values.reshape((-1, *shape)).astype(np.int64)


# ------------------------------------------------------------------------------------------
# plate-aware tables: which sites split by coordinate, their terms, the check at setup

PLATE_CHECKED_COORDINATES = 8
"""Coordinates of a site compared with single-site changes at setup, per checked point, before
its table is computed from its per-coordinate terms (plate mode)."""


def plate_dims_of(
    shape: Sequence[int], event_shape: Sequence[int], frames: Sequence[tuple[str, int | None, int]]
) -> tuple[dict, str | None]:
    """Which plate indexes each dimension of a site, from the site's plate frames.

    Parameters
    ----------
    shape : the site's value shape (batch shape: no event dimensions)
    event_shape : the site's distribution's event shape
    frames : ``(name, dim, size)`` of each plate the site is in (``dim`` negative, counted
        from the right of the batch shape; None for a sequential plate)

    Returns
    -------
    ``({plate name: dim}, None)`` when every dimension of size > 1 is a plate of its size
    (``({}, None)`` for a single coordinate: its table is its whole conditional), else
    ``({}, reason)`` with the reason in words.
    """
    if tuple(event_shape):
        return {}, "its coordinates are one event (an event shape, e.g. .to_event)"
    by_dim = {dim: (name, int(size)) for name, dim, size in frames if dim is not None}
    ndim = len(shape)
    dims = {}
    for axis, size in enumerate(shape):
        dim = axis - ndim
        if dim not in by_dim:
            if size == 1:
                continue
            return {}, f"its dimension {dim} (size {size}) is not a plate"
        name, plate_size = by_dim[dim]
        if plate_size != size:  # (a subsampled plate's frame has the subsample's size)
            return {}, f"its dimension {dim} (size {size}) is not its plate's ({plate_size})"
        dims[name] = dim
    return dims, None


def align_element_term(
    log_prob: Array, leaf_dims: Mapping[str, int], shape: Sequence[int]
) -> Array:
    """One log-density term indexed by (at least) a leaf's plates, in the leaf's shape: summed
    over every other dimension (inner plates, or dimensions the leaf does not have).

    Parameters
    ----------
    log_prob : array, shape (m...)
        A site's per-element log density (its batch shape), in every plate of ``leaf_dims``
        at the same dims.
    leaf_dims : ``{plate name: dim}`` of the leaf (:func:`plate_dims_of`)
    shape : the leaf's shape (n...)

    Returns
    -------
    array, shape (n...)
    """
    xp = array_namespace(log_prob)
    ndim = len(shape)
    if log_prob.ndim < ndim:
        log_prob = xp.reshape(log_prob, (1,) * (ndim - log_prob.ndim) + tuple(log_prob.shape))
    keep = {log_prob.ndim + dim for dim in leaf_dims.values()}
    extra = tuple(a for a in range(log_prob.ndim) if a not in keep)
    if extra:
        # keepdims: the kept axes stay where the leaf has them; the leading ones (all summed
        # away, since the leaf's dims are among its last ndim) are dropped
        log_prob = xp.sum(log_prob, axis=extra, keepdims=True)
        log_prob = xp.reshape(log_prob, tuple(log_prob.shape[log_prob.ndim - ndim :]))
    return xp.broadcast_to(log_prob, tuple(shape))


def plate_check_draws(domain: Domain, shape: Sequence[int], seed: int = 0) -> tuple[list, list]:
    """What the setup's check of a plate table looks at besides the start: the flat indices of
    at most :data:`PLATE_CHECKED_COORDINATES` coordinates, and two states of the leaf.

    The states are a random one (uniform over each coordinate's values, inside its bounds)
    and the same with every coordinate moved to its next value (cyclically, inside its
    bounds): a coupling between coordinates that vanishes at some values (``z_a * z_b`` at
    ``z_b = 0``) shows at one of the two for every coordinate.

    Returns
    -------
    (chosen, others)
        ``chosen`` a sorted list of flat indices; ``others`` two int64 numpy arrays of
        ``shape``.
    """
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    chosen = rng.choice(size, min(size, PLATE_CHECKED_COORDINATES), replace=False)
    domain = as_finite(domain)
    # per-coordinate bounds (an Ordinal's lower/upper): a state outside them has no density
    lower = getattr(domain, "lower", None)
    upper = getattr(domain, "upper", None)
    low = np.broadcast_to(domain.low if lower is None else np.asarray(lower), tuple(shape))
    top = domain.low + domain.num_values - 1
    high = np.broadcast_to(top if upper is None else np.asarray(upper), tuple(shape))
    other = rng.integers(low, high + 1)
    shifted = (other - low + 1) % (high - low + 1) + low
    return sorted(set(chosen.tolist())), [other, shifted]


def plate_table_mismatch(table: Any, exact: Any, log_density: float) -> str | None:
    """None when a plate table's rows match the model's single-site changes, else the reason.

    Parameters
    ----------
    table : numpy array, shape (k, S)
        Rows of the table from the per-coordinate terms at ``k`` checked coordinates.
    exact : numpy array, shape (k, S)
        The model's log density at each single-site change of those coordinates.
    log_density : the log density at the checked point (a point of zero density is not
        compared beyond its impossible values)
    """
    table, exact = np.asarray(table, np.float64), np.asarray(exact, np.float64)
    finite = np.isfinite(exact)
    if not np.array_equal(finite, np.isfinite(table)):
        return "its impossible values differ from the model's"
    if not np.isfinite(log_density):
        return None
    scale = np.maximum(1.0, np.abs(exact[finite]))
    error = np.abs(table[finite] - exact[finite]) / scale
    if error.size and float(error.max()) > 1e-3:
        return (
            "changing one coordinate changes terms outside its own plate element (a term "
            "over the whole site or across coordinates)"
        )
    return None


# ------------------------------------------------------------------------------------------
# the memory of a single-site table


MAX_EXACT_TABLE_BYTES = 8 * 2**30
"""Most memory (bytes, estimated at setup) a single-site exact table may take per chain and
step. A site whose table is not from plates (an ``exact_sites`` entry, or a categorical site,
whose coordinates are not conditionally independent given the rest) is evaluated at every
one of its ``N (S - 1)`` single-coordinate changes at once (vmapped in NumPyro, stacked
in Pyro): at least ``N x (S - 1) x N`` values (the changed copies of the site), counted at
4 bytes, before the model's own intermediates. 10^5 binary coordinates need 37.3 GB; the
limit allows about 46,000 binary coordinates."""


def exact_table_bytes(size: int, num_values: int) -> int:
    """Lower bound of the memory of one single-site exact table: ``N (S - 1)`` changed
    copies (:func:`other_value_substitutions`) of a site of ``N = size`` coordinates
    (``S = num_values``), 4 bytes a value."""
    return 4 * single_site_evaluations(size, num_values) * size


def check_exact_table_memory(owner: str, sites: Any) -> None:
    """Refuse a single-site exact table above :data:`MAX_EXACT_TABLE_BYTES`.

    ``sites`` is a :class:`discrete_kernels.Sites`; nothing is checked where the adapter gave
    no sizes (``sites.sizes`` None) or no leaf has a single-site table.
    """
    if sites.sizes is None or sites.single_site_tables is None:
        return
    for name, domain, size, single in zip(
        sites.names, sites.domains, sites.sizes, sites.single_site_tables
    ):
        if not single:
            continue
        need = exact_table_bytes(size, domain.num_values)
        if need <= MAX_EXACT_TABLE_BYTES:
            continue
        if isinstance(domain, Categorical):
            fix = (
                f"A categorical site's table is always exact: sample {name!r} with "
                "DiscreteGibbs (one coordinate at a time), or write its conditionally "
                "independent coordinates under a plate (the table then costs S evaluations)."
            )
        else:
            fix = (
                f"Leave {name!r} out of exact_sites (its gradient gives the local differences), "
                "sample it with DiscreteGibbs (one coordinate at a time), or write its "
                "conditionally independent coordinates under a plate (the table then costs S "
                "evaluations)."
            )
        raise ValueError(
            f"{owner}: the exact table of site {name!r} ({size} coordinates x "
            f"{domain.num_values} values) is not from plates, so every step evaluates the "
            f"model at all {single_site_evaluations(size, domain.num_values)} single-coordinate "
            f"changes at once: at least {format_bytes(need)} per chain (N x (S - 1) x N "
            "values); at most "
            f"{format_bytes(MAX_EXACT_TABLE_BYTES)} (MAX_EXACT_TABLE_BYTES). {fix}"
        )
