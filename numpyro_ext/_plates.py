"""Plate-aware exact tables in NumPyro: which discrete sites are conditionally independent in
their coordinates, and their per-coordinate terms.

A site's coordinates are conditionally independent given the rest when every log-density term
that depends on the site is indexed by the site's plates (read from the trace's plate frames)
and no other term depends on it. Then the terms of the model evaluated with every coordinate
set to ``v``, each summed over its other dimensions, give ``g_i(v)`` for all coordinates at
once, and the exact table ``T[i, v] = f(x with x_i = v)`` costs ``S`` evaluations
(:func:`discrete_kernels.tables.table_from_element_terms`). The claim is verified numerically at
setup against single-site changes; a site that fails keeps its other mode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.extend.core import Var
from numpyro.infer.gibbs import with_conditioning
from numpyro.infer.util import compute_log_probs

from discrete_kernels.chains import ChainTerms, chain_term_patterns, pair_table_from_terms
from discrete_kernels.colouring import terms_changed
from discrete_kernels.coordinatewise import Evaluation, per_coordinate_mismatch, probe_states
from discrete_kernels.domains import Categorical, coordinate_bounds
from discrete_kernels.groups import plate_groups_of
from discrete_kernels.sites import LeafSpec
from discrete_kernels.tables import (
    align_element_term,
    plate_check_draws,
    plate_dims_of,
    plate_table_mismatch,
    single_site_substitutions,
    substitutions_at,
)

from ._dependence import output_dependence
from ._once import jit_once

__all__ = [
    "all_terms_fn",
    "chain_terms_fn",
    "coloured_terms_fn",
    "element_terms_fn",
    "element_terms_interactions",
    "in_plates",
    "outside_plate_dependents",
    "own_terms_fn",
    "plate_dims",
    "plate_groups",
    "probe_tables",
    "probed_term_dependence",
    "term_dependence",
    "terms_computed_from",
    "verify_per_coordinate",
    "verify_plate_table",
]


def plate_dims(site: dict) -> tuple[dict, str | None]:
    """``({plate name: dim}, None)`` of a site whose every dimension is a plate, or
    ``({}, reason)`` when the site cannot be treated plate by plate
    (:func:`discrete_kernels.tables.plate_dims_of`)."""
    frames = [(frame.name, frame.dim, frame.size) for frame in site["cond_indep_stack"]]
    return plate_dims_of(jnp.shape(site["value"]), tuple(site["fn"].event_shape), frames)


def plate_groups(site: dict) -> dict | None:
    """``{plate name: dim}`` of the plates among a site's dimensions where not every dimension
    is one (:func:`discrete_kernels.groups.plate_groups_of`), else None."""
    frames = [(frame.name, frame.dim, frame.size) for frame in site["cond_indep_stack"]]
    return plate_groups_of(jnp.shape(site["value"]), tuple(site["fn"].event_shape), frames)


def element_terms_fn(
    prepared_model: Callable,
    names: Sequence[str],
    j: int,
    leaf_dims: dict,
    shape: tuple,
    model_args: tuple,
    model_kwargs: dict | None,
) -> Callable[[tuple, jax.Array], jax.Array]:
    """``(leaves, v) -> g`` of plate leaf ``j``: with every coordinate set to ``v``, the sum
    of every term indexed by all of the leaf's plates, each reduced to ``shape`` (the leaf's,
    or its groups' where some axis is not a plate: ``v`` then broadcasts to the leaf; the
    terms outside those plates are left out: the check at setup verifies they do not depend
    on the leaf)."""
    kwargs = {} if model_kwargs is None else model_kwargs

    def terms(leaves: tuple, value: jax.Array) -> jax.Array:
        x = leaves[j]
        z = dict(zip(names, leaves))
        z[names[j]] = jnp.full(x.shape, value, x.dtype)
        log_probs, model_trace = compute_log_probs(
            prepared_model, model_args, with_conditioning(kwargs, z), {}, sum_log_prob=False
        )
        total = jnp.zeros(shape, jnp.result_type(float))
        for name, log_prob in log_probs.items():
            frames = {f.name: f.dim for f in model_trace[name]["cond_indep_stack"]}
            if in_plates(frames, leaf_dims):
                total = total + align_element_term(jnp.asarray(log_prob), leaf_dims, shape)
        return total

    return terms


def all_terms_fn(
    prepared_model: Callable, names: Sequence[str], model_args: tuple, model_kwargs: dict | None
) -> Callable[[tuple], jax.Array]:
    """``leaves -> terms``: every element of every site's log-density term, flat, shape (E,)
    (each site's term at its batch shape, in trace order)."""
    kwargs = {} if model_kwargs is None else model_kwargs

    def terms(leaves: tuple) -> jax.Array:
        z = dict(zip(names, leaves))
        log_probs, model_trace = compute_log_probs(
            prepared_model, model_args, with_conditioning(kwargs, z), {}, sum_log_prob=False
        )
        parts = []
        for name, log_prob in log_probs.items():
            site = model_trace[name]
            if isinstance(site["fn"], dist.Independent):
                # an event's terms element by element (their sum is the event's log density),
                # so that e.g. .to_event(1) on independent coordinates does not couple them
                log_prob = _unwrapped(site["fn"]).log_prob(site["value"])
                if site.get("scale") is not None:
                    log_prob = site["scale"] * log_prob
            parts.append(jnp.ravel(jnp.asarray(log_prob, jnp.result_type(float))))
        return jnp.concatenate(parts) if parts else jnp.zeros((0,))

    return terms


def _site_terms_fn(
    prepared_model: Callable,
    names: Sequence[str],
    j: int,
    leaves: tuple,
    model_args: tuple,
    model_kwargs: dict | None,
    found: list[tuple[str, int, dict]],
) -> Callable[[jax.Array], list]:
    """``x -> [term of each site]`` with leaf ``j`` set to ``x`` (the other leaves at
    ``leaves``), element by element as :func:`all_terms_fn`; ``(site, elements, {plate name:
    dim})`` of each term appended to ``found`` while it is traced."""
    kwargs = {} if model_kwargs is None else model_kwargs

    def all_terms(x: jax.Array) -> list:
        z = dict(zip(names, leaves[:j] + (x,) + leaves[j + 1 :]))
        log_probs, model_trace = compute_log_probs(
            prepared_model, model_args, with_conditioning(kwargs, z), {}, sum_log_prob=False
        )
        terms = []
        for name, log_prob in log_probs.items():
            site = model_trace[name]
            if isinstance(site["fn"], dist.Independent):  # element by element, as all_terms_fn
                log_prob = _unwrapped(site["fn"]).log_prob(site["value"])
            frames = {f.name: f.dim for f in site["cond_indep_stack"]}
            found.append((name, int(np.prod(jnp.shape(log_prob))), frames))
            terms.append(jnp.asarray(log_prob))
        return terms

    return all_terms


def terms_computed_from(
    prepared_model: Callable,
    names: Sequence[str],
    j: int,
    leaves: tuple,
    model_args: tuple,
    model_kwargs: dict | None,
) -> list[tuple[str, int, dict]]:
    """``(site, elements, {plate name: dim})`` of every site whose log-density term the model
    computes from leaf ``j``, in trace order.

    Read from the program, not from values: the model is traced to a jaxpr (no compilation)
    and every value computed from the leaf is followed forward; an operation with any such
    input counts all its outputs as such (a ``scan`` or nested ``jit`` as a whole). So a site
    listed here may depend on the leaf only formally (``0 * x``); one not listed cannot
    depend on it.
    """
    found: list[tuple[str, int, dict]] = []  # filled while tracing, in trace order
    all_terms = _site_terms_fn(prepared_model, names, j, leaves, model_args, model_kwargs, found)
    jaxpr = jax.make_jaxpr(all_terms)(leaves[j]).jaxpr
    reached = set(jaxpr.invars)
    for equation in jaxpr.eqns:
        if any(isinstance(v, Var) and v in reached for v in equation.invars):
            reached.update(equation.outvars)
    # one output per site (a term of several elements is one array)
    return [entry for entry, v in zip(found, jaxpr.outvars) if isinstance(v, Var) and v in reached]


def element_terms_interactions(
    prepared_model: Callable,
    names: Sequence[str],
    j: int,
    leaves: tuple,
    model_args: tuple,
    model_kwargs: dict | None,
) -> np.ndarray | None:
    """Which coordinates of leaf ``j`` share an element of a term of more than one element,
    read from the program (:func:`~numpyro_ext._dependence.output_dependence`): shape (N, N),
    ``[i, k]`` where some element of such a term is computed from both; None where the
    reading is unknown. Formal, as the reading is: a pair listed may not interact in value.
    Terms of one element (a summed ``factor``) are left out: they hide which coordinates
    interact, which the single-site tables tell."""
    found: list[tuple[str, int, dict]] = []
    all_terms = _site_terms_fn(prepared_model, names, j, leaves, model_args, model_kwargs, found)
    dependence = output_dependence(all_terms, leaves[j])
    if dependence is None:
        return None
    size = int(np.prod(np.shape(leaves[j])))
    graph = np.zeros((size, size), bool)
    for d in dependence:
        if d is None or d.size <= size:  # not computed from the leaf, or one element
            continue
        rows = d.reshape(-1, size).astype(np.int32)
        graph |= (rows.T @ rows) > 0
    return graph


def outside_plate_dependents(terms: Sequence[tuple[str, int, dict]], leaf_dims: dict) -> list[str]:
    """Of ``terms`` (:func:`terms_computed_from`), the sites whose term is not indexed by all
    of a leaf's plates ``leaf_dims``: the terms a plate table leaves out. A plate table is
    right only if there are none."""
    return [name for name, _, frames in terms if not in_plates(frames, leaf_dims)]


def in_plates(frames: dict, leaf_dims: dict) -> bool:
    """Whether a term with plate ``frames`` (``{name: dim}``) is indexed by every one of a
    leaf's plates ``leaf_dims`` (the same dims): a term of the leaf's plate table."""
    return all(frames.get(p) == d for p, d in leaf_dims.items())


def _unwrapped(fn: dist.Distribution) -> dist.Distribution:
    while isinstance(fn, dist.Independent):
        fn = fn.base_dist
    return fn


def coloured_terms_fn(
    all_terms: Callable[[tuple], jax.Array], j: int, colours: np.ndarray, owners: np.ndarray
) -> Callable[..., jax.Array]:
    """``(leaves, v, only=None) -> g`` of coloured leaf ``j``: for each colour, the terms with
    that colour's coordinates set to ``v`` summed by their owner (a term depends on at most one
    coordinate of a colour; :func:`discrete_kernels.colouring.term_owners`), so coordinate
    ``i`` gets the terms it owns at ``x_i = v``. Costs one evaluation per colour; with
    ``only`` (a colour), that colour's alone, the other coordinates' entries 0.

    ``colours``: integer array of the leaf's shape; ``owners``: shape (C, E).
    """
    size = int(colours.size)
    flat_colours = jnp.asarray(colours.reshape(-1))
    owner_rows = jnp.asarray(owners)

    def terms(leaves: tuple, value: jax.Array, only: int | None = None) -> jax.Array:
        x = leaves[j]
        flat = jnp.reshape(x, (-1,))
        total = jnp.zeros((size,), jnp.result_type(float))
        for colour in range(owners.shape[0]) if only is None else [only]:
            changed = jnp.where(flat_colours == colour, jnp.asarray(value, x.dtype), flat)
            evaluated = all_terms(leaves[:j] + (jnp.reshape(changed, x.shape),) + leaves[j + 1 :])
            owned = owner_rows[colour] < size
            # unowned terms may be -inf/NaN at this substitution: keep them out of the sums
            safe = jnp.where(owned, evaluated, 0.0)
            total = (
                total + jax.ops.segment_sum(safe, owner_rows[colour], num_segments=size + 1)[:size]
            )
        return jnp.reshape(total, x.shape)

    return terms


def chain_terms_fn(
    all_terms: Callable[[tuple], jax.Array], j: int, domain: Any, layout: ChainTerms
) -> Callable[[jax.Array, tuple], jax.Array]:
    """``(f, leaves) -> P`` of chain leaf ``j`` whose terms the model gives one by one: its
    pair table (N - 1, S, S) from the model's terms at ``3 S^2`` states, vmapped, and at the
    leaves (:func:`discrete_kernels.chains.pair_table_from_terms`)."""
    num_values = domain.num_values
    low = domain.low

    def pair_table(f: jax.Array, leaves: tuple) -> jax.Array:
        x = leaves[j]
        positions = jnp.reshape(x, (-1,)).astype(jnp.int32) - low
        patterns = chain_term_patterns(positions, num_values)  # (3, S, S, N)
        states = jnp.reshape(patterns + low, (-1, *x.shape)).astype(x.dtype)
        terms = jax.vmap(lambda v: all_terms(leaves[:j] + (v,) + leaves[j + 1 :]))(states)
        terms = jnp.reshape(terms, (3, num_values, num_values, -1))
        return pair_table_from_terms(f, all_terms(leaves), terms, layout, positions)

    return pair_table


def term_dependence(
    all_terms: Callable[[tuple], jax.Array],
    j: int,
    spec: LeafSpec,
    points: Sequence[tuple],
    seed: int = 0,
    batch_size: int = 256,
) -> np.ndarray:
    """``D[i, e]``: whether term ``e`` depends on coordinate ``i`` of leaf ``j``, shape (N, E).

    Read from the terms' program where the reading is known
    (:func:`~numpyro_ext._dependence.output_dependence`: formal, so it holds at every state
    and lists at least every dependence a probe can see; no compilation), else probed
    (:func:`probed_term_dependence`).
    """
    point = points[0]
    size = int(np.prod(point[j].shape))
    read = output_dependence(lambda x: [all_terms(point[:j] + (x,) + point[j + 1 :])], point[j])
    if read is not None and read[0] is not None:
        return np.asarray(read[0]).reshape(-1, size).T
    return probed_term_dependence(all_terms, j, spec, points, seed, batch_size)


def probed_term_dependence(
    all_terms: Callable[[tuple], jax.Array],
    j: int,
    spec: LeafSpec,
    points: Sequence[tuple],
    seed: int = 0,
    batch_size: int = 256,
) -> np.ndarray:
    """``D[i, e]`` of :func:`term_dependence`, probed numerically.

    Two probes, united: the terms that change when the coordinate moves to each of its other
    values at each of ``points`` (an index such as ``probs[z]``), and, for a leaf that
    is not categorical, the non-zero entries of the terms' Jacobian at a random non-integer
    point (arithmetic such as ``z_0 * z_1 * z_2``, whose change at an integer point can vanish
    because another factor is 0). ``N (S - 1)`` evaluations per point, then one per
    coordinate, at setup.
    """
    domain = spec.domain
    size = int(np.prod(points[0][j].shape))
    compiled = jit_once(
        lambda point, shift: jax.lax.map(
            lambda i: _changed(all_terms, j, domain, point, i, shift),
            jnp.arange(size),
            batch_size=batch_size,
        ),
        2 * size,
    )
    # every other value, not only the next: an agreement term c_i == c_{i+1} changes only
    # where one of the two values is the neighbour's
    shifts = range(1, domain.num_values)
    dependence = np.logical_or.reduce(
        [np.asarray(compiled(point, shift)) for point in points for shift in shifts]
    )
    if not isinstance(domain, Categorical):
        x = points[0][j]
        rng = np.random.default_rng(seed)
        relaxed = domain.low + (domain.num_values - 1) * rng.uniform(0.1, 0.9, size=x.shape)
        point = points[0]

        def terms_at(value: jax.Array) -> jax.Array:
            return all_terms(point[:j] + (value,) + point[j + 1 :])

        try:
            jacobian_at = jit_once(jax.jacfwd(terms_at), size)
            jacobian = jacobian_at(jnp.asarray(relaxed, jnp.result_type(float)))
        except (TypeError, ValueError):  # a model that takes integer values only
            return dependence
        jacobian = np.asarray(jacobian).reshape(-1, size).T  # (N, E)
        dependence |= np.abs(np.nan_to_num(jacobian, nan=1.0)) > 0
    return dependence


def _changed(
    all_terms: Callable, j: int, domain, point: tuple, i: jax.Array, shift: jax.Array | int = 1
) -> jax.Array:
    x = point[j]
    flat = jnp.reshape(x, (-1,))
    moved = (flat[i] - domain.low + shift) % domain.num_values + domain.low
    changed = jnp.reshape(flat.at[i].set(moved.astype(x.dtype)), x.shape)
    before = all_terms(point)
    after = all_terms(point[:j] + (changed,) + point[j + 1 :])
    return terms_changed(before, after)


def probe_tables(
    log_density: Callable[[tuple], jax.Array],
    j: int,
    spec: LeafSpec,
    points: Sequence[tuple],
    batch_evaluations: int = 4096,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Leaf ``j``'s single-site tables at each of ``points``, and again with each coordinate
    moved to its next value (cyclically, inside its bounds): what
    :func:`discrete_kernels.colouring.table_interaction_graph` reads. ``N x N x S``
    evaluations of the log density per point, ``batch_evaluations`` at a time, at setup.

    Returns
    -------
    (tables, moved, f)
        Shapes (P, N, S), (P, N, N, S) and (P,) for ``P`` points, ``N`` coordinates and
        ``S`` values; ``moved[p, k]`` the table at point ``p`` with coordinate ``k`` moved.
    """
    domain = spec.domain
    shape = tuple(points[0][j].shape)
    size, num_values = int(np.prod(shape)), domain.num_values
    low, high = (jnp.ravel(jnp.asarray(b)) for b in coordinate_bounds(domain, shape))

    def table(point: tuple) -> jax.Array:
        batch = single_site_substitutions(domain, point[j])
        values = jax.vmap(lambda x: log_density(point[:j] + (x,) + point[j + 1 :]))(batch)
        return jnp.reshape(values, (size, num_values))

    def moved_table(point: tuple, k: jax.Array) -> jax.Array:
        x = point[j]
        flat = jnp.ravel(x)
        value = (flat[k] - low[k] + 1) % (high[k] - low[k] + 1) + low[k]
        changed = jnp.reshape(flat.at[k].set(value.astype(x.dtype)), x.shape)
        return table(point[:j] + (changed,) + point[j + 1 :])

    @partial(jit_once, evaluations=size * size * num_values)
    def probe(point: tuple) -> tuple[jax.Array, jax.Array, jax.Array]:
        moved = jax.lax.map(
            lambda k: moved_table(point, k),
            jnp.arange(size),
            batch_size=max(1, batch_evaluations // (size * num_values)),
        )
        return table(point), moved, log_density(point)

    results = [probe(point) for point in points]
    tables, moved, f = (np.stack([np.asarray(r[i]) for r in results]) for i in range(3))
    return tables, moved, f


def verify_plate_table(
    spec: LeafSpec,
    j: int,
    leaves: tuple,
    local_fn: Callable[[tuple], tuple],
    log_density: Callable[[tuple], jax.Array],
    seed: int = 0,
) -> str | None:
    """None when leaf ``j``'s plate table matches single-site changes of the log density at
    ``leaves`` and at two other states of the leaf
    (:func:`discrete_kernels.tables.plate_check_draws`), else the reason (in words)."""
    x = leaves[j]
    size = int(np.prod(x.shape))
    chosen, others = plate_check_draws(spec.domain, x.shape, seed)
    compiled_local = jit_once(local_fn)
    compiled_density = jit_once(jax.vmap(log_density))
    points = [leaves] + [leaves[:j] + (jnp.asarray(y, x.dtype),) + leaves[j + 1 :] for y in others]
    for point in points:
        f, local = compiled_local(point)
        table = np.asarray(local[j], np.float64).reshape(size, -1)[chosen]
        # built in NumPy: each eager JAX operation here would compile a program of its own
        batch = substitutions_at(spec.domain, np.asarray(point[j]), np.asarray(chosen))
        full = tuple(
            batch if k == j else np.broadcast_to(np.asarray(y), (batch.shape[0],) + y.shape)
            for k, y in enumerate(point)
        )
        exact = np.asarray(compiled_density(full), np.float64).reshape(len(chosen), -1)
        reason = plate_table_mismatch(table, exact, float(f))
        if reason is not None:
            return reason
    return None


def own_terms_fn(
    prepared_model: Callable,
    names: Sequence[str],
    leaf_dims: Sequence[dict],
    shapes: Sequence[tuple],
    model_args: tuple,
    model_kwargs: dict | None,
) -> Callable[[tuple], tuple]:
    """``leaves -> terms``: per leaf, the sum of every term indexed by all of the leaf's plates
    at the leaves' own values, reduced to the leaf's shape
    (:data:`discrete_kernels.local_fns.ElementTermsFn`; :func:`verify_per_coordinate` checks
    that they add up to the log density's changes)."""
    per_leaf = [
        element_terms_fn(prepared_model, names, j, dims, shape, model_args, model_kwargs)
        for j, (dims, shape) in enumerate(zip(leaf_dims, shapes))
    ]

    def terms(leaves: tuple) -> tuple:
        return tuple(fn(leaves, x) for fn, x in zip(per_leaf, leaves))

    return terms


def verify_per_coordinate(
    names: Sequence[str],
    domains: Sequence[Any],
    points: Sequence[tuple],
    log_density: Callable[[tuple], jax.Array],
    local_fn: Callable[[tuple], tuple],
    terms_fn: Callable[[tuple], tuple],
    seed: int = 0,
) -> str | None:
    """None when every coordinate of every leaf is conditionally independent of the others,
    as a per-coordinate MH decision needs, at each of ``points``, else the reason in words
    (:func:`discrete_kernels.coordinatewise.per_coordinate_mismatch`)."""
    evaluate = jit_once(lambda z: (log_density(z), local_fn(z)[1], terms_fn(z)))

    def at(leaves: tuple, like: tuple) -> Evaluation:
        f, gradient, terms = evaluate(tuple(jnp.asarray(v, u.dtype) for v, u in zip(leaves, like)))
        return Evaluation(
            float(f), tuple(np.asarray(g) for g in gradient), tuple(np.asarray(t) for t in terms)
        )

    for index, point in enumerate(points):
        probe = probe_states(domains, [np.asarray(v) for v in point], seed + index)
        reason = per_coordinate_mismatch(
            names,
            probe,
            at(probe.x, point),
            at(probe.moved, point),
            at(probe.mixed, point),
        )
        if reason is not None:
            return reason
    return None
