"""Which discrete sites of a NumPyro model a kernel updates plate by plate, colour by colour
or as a chain, decided once at setup (:func:`plate_leaves`), and the plates of a model whose
every coordinate takes its own MH decision (:func:`per_coordinate_dims`).

A site in plates whose terms are all indexed by its plates is a plate site (checked against
single-site changes); a site whose coordinates interact locally is coloured from the terms
each coordinate changes, or, where the model sums its interactions into one term, from its
single-site tables; a chain may be drawn whole. Before the numerical probes, the model's
program (a jaxpr, not compiled) says which terms are computed from the site, which spares
probes that cannot succeed. The probes and tables are in :mod:`numpyro_ext._plates`, the
colourings' bookkeeping in :mod:`discrete_kernels.colouring`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from discrete_kernels import sites as site_rules
from discrete_kernels.chains import (
    ChainTerms,
    chain_term_layout,
    draws_chain,
    draws_chain_from_terms,
    is_chain_graph,
)
from discrete_kernels.colouring import (
    MAX_DEPENDENCE_ENTRIES,
    MAX_TABLE_PROBE_EVALUATIONS,
    check_graph_colouring,
    colouring_from_terms,
    given_colouring,
    greedy_graph_colouring,
    table_interaction_graph,
    term_owners,
    term_probe_refusal,
)
from discrete_kernels.coordinatewise import per_coordinate_error, per_coordinate_refusal
from discrete_kernels.domains import coordinate_bounds
from discrete_kernels.samplers.plate_gibbs import MAX_COLOURS

from ._dependence import interaction_graph_of
from ._plates import (
    all_terms_fn,
    element_terms_interactions,
    outside_plate_dependents,
    own_terms_fn,
    probe_tables,
    term_dependence,
    terms_computed_from,
    verify_per_coordinate,
    verify_plate_table,
)
from ._prior_trace import prior_trace
from ._target import CHAIN, EXACT, PLATE, LeafSpec

if TYPE_CHECKING:
    from ._setup import SiteSetup

__all__ = ["plate_leaves", "terms_colouring"]


def plate_leaves(
    owner: str,
    setup: SiteSetup,
    leaves: tuple[LeafSpec, ...],
    structural: dict,
    wanted: Sequence[str],
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    blocks: dict | None = None,
    needs_tables: bool = False,
    draws_chains: bool = False,
    known: tuple[dict, dict] = ({}, {}),
) -> tuple[tuple[LeafSpec, ...], dict, dict]:
    """The leaves with the ``wanted`` ones in plate mode where their plates make their
    coordinates conditionally independent, or else a colouring does (the user's ``blocks``
    or a greedy one from the terms each coordinate changes), verified at a prior draw and a
    random state; their plate dims and their term owners (for a sampler that ``draws_chains``,
    a coloured site whose terms make it a chain is drawn whole instead, its
    :class:`~discrete_kernels.chains.ChainTerms` in place of the owners). For a sampler that
    needs plate tables, a site that neither makes independent is kept in exact mode with a colouring
    found from its single-site tables (:func:`_table_colouring`) where one exists, and
    refused with an error naming the site and the reason otherwise (for a sampler that
    ``draws_chains``, a site whose coordinates interact only with their flat neighbours gets
    its pair table instead: :mod:`discrete_kernels.chains`); for other samplers an exact site
    keeps its single-site table. The model's program (:func:`_terms_read`) spares the probes
    that cannot succeed: the plate check where a term outside the site's plates is computed
    from it, the terms' probe where a term of one element is. ``known``: the plate dims and
    term owners of ``leaves`` already in plate mode (their tables are part of every trial
    setup's ``local_fn``)."""
    out, dims, owners = list(leaves), dict[str, dict](known[0]), dict[str, Any](known[1])
    blocks = {} if blocks is None else blocks
    points = [
        tuple(jnp.asarray(draw[n]["value"], setup.site_dtypes[n]) for n in setup.names)
        for draw in (
            prior_trace(model, random.key(seed), model_args, model_kwargs) for seed in (0, 1)
        )
    ]
    for j, spec in enumerate(leaves):
        if spec.name not in wanted:
            continue
        leaf_dims, reason = structural.get(spec.name, ({}, "the model enumerates sites"))
        colours, owner_rows = None, None
        # the terms the model computes from the leaf, read from its program (no compilation)
        read = _terms_read(setup, j, points, model_args, model_kwargs)
        if reason is None and spec.name not in blocks:
            reason = _outside_plate_reason(
                setup, j, spec, leaf_dims, points, read, model_args, model_kwargs
            )
        if reason is None and spec.name not in blocks:
            reason = _verified(
                setup,
                out,
                j,
                spec,
                None,
                leaf_dims,
                None,
                points,
                dims,
                owners,
                model_args,
                model_kwargs,
            )
        plate_reason = reason
        chain_terms = None
        if reason is not None and needs_tables and spec.name not in blocks:
            if _every_pair_shares_a_term(setup, j, points, model_args, model_kwargs):
                # one coordinate at a time, the last resort, without the probes that would
                # find each coordinate interacting with every other (a network's weights)
                shape = setup.leaf_shapes[j]
                colours = np.arange(math.prod(shape)).reshape(shape)
                out[j] = LeafSpec(spec.name, spec.domain, EXACT, colours)
                continue
        if reason is not None or spec.name in blocks:
            summed = _summed_term(setup, j, spec, read) if needs_tables else None
            if setup.enum:
                colour_reason: str | None = "the model enumerates sites"
            elif summed is not None and spec.name not in blocks:
                # a term of one element computed from the site (a summed factor): the terms'
                # probe would find each coordinate that changes it interacting with every
                # other; the single-site tables (below) tell
                colour_reason = summed
            else:
                colours, owner_rows, colour_reason, chain_terms = terms_colouring(
                    setup, j, spec, points, blocks.get(spec.name), model_args, model_kwargs
                )
            many = 0 if colours is None else int(colours.max()) + 1
            if needs_tables and spec.name not in blocks and many > MAX_COLOURS:
                # e.g. a summed factor that one coordinate happens not to change at the probe
                colour_reason = f"its terms need {many} colours, more than {MAX_COLOURS}"
            if colour_reason is None:
                leaf_dims = {}
                colour_reason = _verified(
                    setup,
                    out,
                    j,
                    spec,
                    colours,
                    {},
                    owner_rows,
                    points,
                    dims,
                    owners,
                    model_args,
                    model_kwargs,
                )
            if colour_reason is not None:
                reason = colour_reason if reason is None else f"{reason}; {colour_reason}"
                colours = None
            else:
                reason = None
        if reason is not None and needs_tables:
            # a factor summed over the site hides from the terms which coordinates interact;
            # the site's single-site tables show it, and are drawn colour by colour
            colours, table_reason, probed, chain = _table_colouring(
                setup, j, spec, points, blocks.get(spec.name), model_args, model_kwargs
            )
            if colours is not None:
                mode = CHAIN if draws_chains and chain else EXACT
                out[j] = LeafSpec(spec.name, spec.domain, mode, colours)
                continue
            # probed: the tables' answer replaces the terms' (which may suggest a rewrite)
            reason = "; ".join(r for r in (plate_reason if probed else reason, table_reason) if r)
        if reason is None and draws_chains and chain_terms is not None and spec.name not in blocks:
            # a chain in its terms (an HMM's transitions as an array of terms, a scan), whose
            # colouring was verified above: drawn whole from a pair table built from its terms
            out[j] = LeafSpec(spec.name, spec.domain, CHAIN, colours)
            owners[spec.name] = chain_terms
            continue
        if reason is None:
            out[j] = LeafSpec(spec.name, spec.domain, PLATE, colours)
            dims[spec.name] = leaf_dims
            if owner_rows is not None:
                owners[spec.name] = owner_rows
        elif needs_tables or spec.mode != EXACT:  # a sampler that needs plate tables
            raise site_rules.not_plate_error(
                owner,
                spec.name,
                reason,
                "a numpyro.infer.Gibbs block of nx.GWG, nx.DMALA or NumPyro's DiscreteGibbs",
            )
    return tuple(out), dims, owners


def _verified(
    setup: SiteSetup,
    leaves: Sequence[LeafSpec],
    j: int,
    spec: LeafSpec,
    colours: np.ndarray | None,
    leaf_dims: dict,
    owner_rows: np.ndarray | None,
    points: Sequence[tuple],
    dims: dict,
    owners: dict,
    model_args: tuple,
    model_kwargs: dict,
) -> str | None:
    """None when leaf ``j``'s plate-mode table (a plate's, or a colouring's) matches
    single-site changes at the first of ``points`` and a random state, else the reason."""
    candidate = list(leaves)
    candidate[j] = LeafSpec(spec.name, spec.domain, PLATE, colours)
    trial = setup.trial(
        candidate,
        dims={**dims, spec.name: leaf_dims},
        owners=owners if owner_rows is None else {**owners, spec.name: owner_rows},
    )
    return verify_plate_table(
        candidate[j],
        j,
        points[0],
        trial.local_fn(model_args, model_kwargs),
        trial.log_density_fn(model_args, model_kwargs),
    )


def _terms_read(
    setup: SiteSetup, j: int, points: Sequence[tuple], model_args: tuple, model_kwargs: dict
) -> list[tuple[str, int, dict]] | None:
    """The terms the model computes from leaf ``j`` (:func:`~numpyro_ext._plates.
    terms_computed_from`), or None where the setup does not read terms (an enumerated model)."""
    if setup.enum or setup.prepared_model is None:
        return None
    try:
        return terms_computed_from(
            setup.prepared_model, setup.names, j, points[0], model_args, model_kwargs
        )
    except (TypeError, ValueError, IndexError):  # not traceable so: the numerical checks decide
        return None


def _every_pair_shares_a_term(
    setup: SiteSetup, j: int, points: Sequence[tuple], model_args: tuple, model_kwargs: dict
) -> bool:
    """Whether every two coordinates of leaf ``j`` are computed into one element of a term of
    several elements (:func:`~numpyro_ext._plates.element_terms_interactions`: each row's
    likelihood of a regression or a network on the whole site), for a leaf of 3 to
    :data:`MAX_COLOURS` coordinates: then no colouring has fewer colours than coordinates,
    and one coordinate at a time needs neither the terms' probe nor the tables' (a pair of
    coordinates, or a leaf that only a summed term couples, may be a chain: the tables tell)."""
    size = math.prod(setup.leaf_shapes[j])
    if setup.enum or setup.prepared_model is None or not 3 <= size <= MAX_COLOURS:
        return False
    try:
        graph = element_terms_interactions(
            setup.prepared_model, setup.names, j, points[0], model_args, model_kwargs
        )
    except (TypeError, ValueError, IndexError):  # not traceable so: the probes decide
        return False
    return graph is not None and bool(np.all(graph | np.eye(size, dtype=bool)))


def _outside_plate_reason(
    setup: SiteSetup,
    j: int,
    spec: LeafSpec,
    leaf_dims: dict,
    points: Sequence[tuple],
    read: list[tuple[str, int, dict]] | None,
    model_args: tuple,
    model_kwargs: dict,
) -> str | None:
    """Why leaf ``j``'s plate table cannot be right, from the terms the model's program
    computes from it (``read``): one outside the leaf's plates (a ``factor`` of a sum, a
    chain's transitions), where the terms' probe can colour the leaf instead; else None, and
    the numerical check decides. Spares a chain or a lattice that check's compilation."""
    if read is None:
        return None
    if _term_probe_too_large(setup, j, spec, points, model_args, model_kwargs) is not None:
        return None
    dependents = outside_plate_dependents(read, leaf_dims)
    if not dependents:
        return None
    return (
        f"the term of {dependents[0]!r} is not indexed by the plates of {spec.name!r} and is "
        "computed from it"
    )


def _summed_term(
    setup: SiteSetup, j: int, spec: LeafSpec, read: list[tuple[str, int, dict]] | None
) -> str | None:
    """Why the terms cannot colour leaf ``j``, read from its program: a term of one element
    computed from the leaf (a ``factor`` of a sum), where the leaf's single-site tables are
    small enough to colour it instead (:func:`_table_colouring`); else None (the terms'
    probe decides). A term of one element that only some coordinates change (``x[0]``) is
    coloured from the tables as well, at their cost per sweep."""
    size = math.prod(setup.leaf_shapes[j])
    if read is None or size == 1:
        return None
    if size * size * spec.domain.num_values > MAX_TABLE_PROBE_EVALUATIONS:
        return None
    for name, elements, _ in read:
        if elements == 1:
            return f"the term of {name!r} is one element computed from the whole site"
    return None


def _term_probe_too_large(
    setup: SiteSetup,
    j: int,
    spec: LeafSpec,
    points: Sequence[tuple],
    model_args: tuple,
    model_kwargs: dict,
) -> str | None:
    """Why finding which terms each coordinate of leaf ``j`` changes would probe too many
    (coordinates times the model's terms; an exact site of a gradient kernel, which has its
    single-site table to fall back on, probes less), else None."""
    assert setup.prepared_model is not None
    size = math.prod(setup.leaf_shapes[j])
    all_terms = all_terms_fn(setup.prepared_model, setup.names, model_args, model_kwargs)
    num_terms = int(jax.eval_shape(all_terms, points[0]).shape[0])
    limit = MAX_DEPENDENCE_ENTRIES if spec.mode != EXACT else MAX_DEPENDENCE_ENTRIES // 16
    return term_probe_refusal(size, num_terms, limit)


def terms_colouring(
    setup: SiteSetup,
    j: int,
    spec: LeafSpec,
    points: Sequence[tuple],
    given: Any,
    model_args: tuple,
    model_kwargs: dict,
) -> tuple[np.ndarray | None, np.ndarray | None, str | None, ChainTerms | None]:
    """``(colours, owners, None, chain)`` of leaf ``j`` (colours of its shape, term owners of
    shape (C, E), and where its terms make it a chain whose pair table from them costs little
    more than a sweep, their :class:`~discrete_kernels.chains.ChainTerms`, else None), or
    ``(None, None, reason, None)``: the user's colouring ``given`` (checked) or a greedy one,
    from the terms each coordinate changes at ``points``."""
    shape = setup.leaf_shapes[j]
    size = math.prod(shape)
    if given is None and size == 1:
        return None, None, "it is a single coordinate", None
    too_large = _term_probe_too_large(setup, j, spec, points, model_args, model_kwargs)
    if too_large is not None:
        return None, None, too_large, None
    assert setup.prepared_model is not None
    all_terms = all_terms_fn(setup.prepared_model, setup.names, model_args, model_kwargs)
    dependence = term_dependence(all_terms, j, spec, points)
    colours, problem = colouring_from_terms(
        spec.name, shape, dependence, given, "numpyro.factor", "array"
    )
    if colours is None:
        return None, None, problem, None
    num_colours = int(colours.max()) + 1
    chain = None
    if given is None and size > 1 and draws_chain_from_terms(spec.domain.num_values, num_colours):
        chain = chain_term_layout(dependence)
    return colours.reshape(shape), term_owners(dependence, colours), None, chain


def _table_colouring(
    setup: SiteSetup,
    j: int,
    spec: LeafSpec,
    points: Sequence[tuple],
    given: Any,
    model_args: tuple,
    model_kwargs: dict,
) -> tuple[np.ndarray | None, str, bool, bool]:
    """``(colours of leaf j's shape, "", True, chain)``: a colouring of leaf ``j`` under which
    no two coordinates of one colour interact, read from its single-site tables (the user's
    ``given`` one, checked, or a greedy one), and whether the leaf is better drawn whole as a
    chain (its coordinates interact only with their flat neighbours, no ``given`` colouring,
    and its pair table costs little more than a sweep: :func:`~discrete_kernels.chains.
    draws_chain`); else ``(None, reason, probed, False)``, ``probed`` whether the tables were
    probed at all.

    The tables are probed at the first two of ``points`` and at the first with every
    coordinate of the leaf moved to its next value (so that, for a binary site, a coupling
    that vanishes at one value of a third coordinate shows at the other): ``3 x N x N x S``
    evaluations of the model, at most :data:`MAX_TABLE_PROBE_EVALUATIONS` per point.
    """
    shape = setup.leaf_shapes[j]
    size, num_values = math.prod(shape), spec.domain.num_values
    flat_given = None
    if given is not None:
        flat_given, problem = given_colouring(spec.name, shape, given)
        if problem is not None:
            return None, problem, False, False
    if size * size * num_values > MAX_TABLE_PROBE_EVALUATIONS:
        return (
            None,
            (
                f"and its {size} coordinates of {num_values} values are too many to find which "
                f"interact from its exact tables ({size * size * num_values} evaluations of the "
                f"model, at most {MAX_TABLE_PROBE_EVALUATIONS})"
            ),
            False,
            False,
        )
    log_density = setup.log_density_fn(model_args, model_kwargs)
    why = "they interact (moving one changes the other's exact conditional)"
    # the program's own reading first: no compilation, and a proof rather than a probe
    graph = _program_graph(log_density, j, points[0])
    if graph is not None and flat_given is not None:
        if check_graph_colouring(graph, flat_given, why) is not None:
            graph = None  # the reading is formal: the tables decide
    if graph is None:
        x = points[0][j]
        low, high = coordinate_bounds(spec.domain, shape)
        next_values = (np.asarray(x) - low + 1) % (high - low + 1) + low
        all_moved = points[0][:j] + (jnp.asarray(next_values, x.dtype),) + points[0][j + 1 :]
        probed_points = [*points[:2], all_moved]
        tables, moved_tables, f = probe_tables(log_density, j, spec, probed_points)
        graph = table_interaction_graph(tables, moved_tables, f, float(np.finfo(tables.dtype).eps))
    if flat_given is not None:
        problem = check_graph_colouring(graph, flat_given, why)
        if problem is not None:
            return None, f"blocks[{spec.name!r}] is not a valid colouring: {problem}", True, False
        return flat_given.reshape(shape), "", True, False
    colours = greedy_graph_colouring(graph)
    # every coordinate interacting with every other: one coordinate at a time, the last
    # resort, where that is few enough colours (each recomputes the site's table)
    if size > MAX_COLOURS and int(colours.max()) + 1 >= size:
        return (
            None,
            (
                "every coordinate interacts with every other (moving any one changes the exact "
                f"conditional of every other, found from its single-site tables), and one "
                f"coordinate at a time is taken for at most {MAX_COLOURS} coordinates"
            ),
            True,
            False,
        )
    # one colour is already a joint draw: a chain's pair table would only cost more
    num_colours = int(colours.max()) + 1
    chain = num_colours > 1 and is_chain_graph(graph) and draws_chain(size, num_values, num_colours)
    return colours.reshape(shape), "", True, chain


def _program_graph(log_density: Callable, j: int, point: tuple) -> np.ndarray | None:
    """Which coordinates of leaf ``j`` interact, read from the log density's program
    (:func:`~numpyro_ext._dependence.interaction_graph_of`), shape (N, N); None where the
    reading is unknown or lists every pair (a coupling matrix held as a dense constant reads
    so whatever its zeros: the single-site tables can tell more)."""

    def of_leaf(x: jax.Array) -> jax.Array:
        return log_density(point[:j] + (x,) + point[j + 1 :])

    try:
        graph = interaction_graph_of(of_leaf, point[j])
    except (TypeError, ValueError, IndexError):  # not traceable so: the tables decide
        return None
    if graph is None or np.all(graph | np.eye(len(graph), dtype=bool)):
        return None
    return graph


def per_coordinate_dims(
    owner: str,
    setup: SiteSetup,
    leaves: tuple[LeafSpec, ...],
    structural: dict,
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
) -> dict:
    """Every leaf's ``{plate name: dim}`` when all of the model's discrete coordinates are
    conditionally independent given its other sites (``per_coordinate_mh=True``): every site
    a gradient site whose dimensions are plates, verified at two prior draws
    (:func:`numpyro_ext._plates.verify_per_coordinate`); else a ``ValueError`` naming the
    site and the reason."""

    if setup.enum:
        raise per_coordinate_error(owner, "the model enumerates sites")
    reason = per_coordinate_refusal(leaves, structural)
    if reason is not None:
        raise per_coordinate_error(owner, reason)
    dims = {spec.name: structural[spec.name][0] for spec in leaves}
    points = [
        tuple(jnp.asarray(draw[n]["value"], setup.site_dtypes[n]) for n in setup.names)
        for draw in (
            prior_trace(model, random.key(seed), model_args, model_kwargs) for seed in (0, 1)
        )
    ]
    names = setup.names
    assert setup.prepared_model is not None  # setup_potential refuses per_coordinate_mh
    reason = verify_per_coordinate(
        names,
        [s.domain for s in leaves],
        points,
        setup.log_density_fn(model_args, model_kwargs),
        setup.local_fn(model_args, model_kwargs),
        own_terms_fn(
            setup.prepared_model,
            names,
            [dims[n] for n in names],
            setup.leaf_shapes,
            model_args,
            model_kwargs,
        ),
    )
    if reason is not None:
        raise per_coordinate_error(owner, reason)
    return dims
