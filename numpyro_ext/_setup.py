"""A NumPyro kernel's view of its sites, built once at setup: :class:`SiteSetup`.

From a model (traced with NumPyro's handlers) or a potential and its start values: the leaves
and their domains, the core's :class:`~discrete_kernels.Sites`, shapes and dtypes, the model
prepared for repeated log-density evaluations, and the site rules of the core applied
(``exact_sites="auto"``, supports fixed at setup, the sampler's own checks). Nothing here is
mathematics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.handlers import seed, trace
from numpyro.infer.gibbs import GIBBS_SITES_KWARG, conditioned, prototype_trace, with_conditioning
from numpyro.infer.util import _prepare_model_for_potential, potential_energy

from discrete_kernels import LocalFnWithTerms, Sampler, Sites
from discrete_kernels import sites as site_rules
from discrete_kernels import validation as checks
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
)
from discrete_kernels.coordinatewise import per_coordinate_error, per_coordinate_refusal
from discrete_kernels.domains import coordinate_bounds, is_windowed
from discrete_kernels.samplers.plate_gibbs import MAX_COLOURS
from discrete_kernels.sites import SiteOptions, check_preconditioners

from ._once import run_once
from ._plates import (
    all_terms_fn,
    chain_terms_fn,
    coloured_terms_fn,
    element_terms_fn,
    outside_plate_dependents,
    own_terms_fn,
    plate_dims,
    probe_tables,
    term_dependence,
    terms_computed_from,
    verify_per_coordinate,
    verify_plate_table,
)
from ._target import (
    CHAIN,
    EXACT,
    GRADIENT,
    ONE_HOT_GRADIENT,
    PLATE,
    LeafSpec,
    integer_bounds,
    latent_in_plates,
    leaf_specs_for_model,
    leaf_specs_for_potential,
    make_local_fn,
    subsample_plates,
)
from ._warmup_check import plan_warmup_check

__all__ = ["SiteSetup", "check_init_params", "initial_values", "setup_model", "setup_potential"]


@dataclass(frozen=True, eq=False)
class SiteSetup:
    """Everything a kernel knows about its sites after setup (immutable).

    - **leaves** - one :class:`~discrete_kernels.sites.LeafSpec` per leaf (site, or leaf of
      the potential's pytree), in order.
    - **sites** - the core's view (domains, tables, preconditioner).
    - **leaf_shapes** - the internal leaves' shapes of one chain (categorical as indices).
    - **site_dtypes** - model mode: each site's dtype.
    - **treedef** - potential mode: the structure of the start values.
    - **potential_fn** / **prepared_model**, **enum** - what evaluates the log density.
    - **has_deterministic** - the model has deterministic sites (replayed after sampling).
    - **plate_dims** - per plate-mode leaf (every leaf, with ``per_coordinate_mh``),
      ``{plate name: dim}`` of its coordinates.
    - **term_owners** - per coloured plate-mode leaf, its terms' owners per colour (C, E);
      per chain leaf drawn from its terms, their :class:`~discrete_kernels.chains.ChainTerms`.
    - **warmup_check** - the gradient leaves the warmup checks (``exact_sites="auto"``;
      :mod:`numpyro_ext._warmup_check`), or None.
    - **minibatch** - the model's subsampling plates
      (:class:`~discrete_kernels.sites.SubsamplePlate`); when there are any, every log
      density is evaluated under ``seed`` with a key the caller passes, which draws the
      minibatch.
    """

    leaves: tuple[LeafSpec, ...]
    sites: Sites
    leaf_shapes: tuple[tuple[int, ...], ...]
    site_dtypes: dict = field(default_factory=dict)
    treedef: Any = None
    potential_fn: Callable | None = None
    prepared_model: Callable | None = None
    enum: bool = False
    has_deterministic: bool = False
    plate_dims: dict = field(default_factory=dict)
    term_owners: dict = field(default_factory=dict)
    warmup_check: Any = None
    minibatch: tuple = ()

    @property
    def names(self) -> list:
        return [s.name for s in self.leaves]

    @property
    def flat_dim(self) -> int:
        """Coordinates of one chain, all leaves together."""
        return sum(math.prod(shape) for shape in self.leaf_shapes)

    def log_density_fn(
        self, model_args: tuple, model_kwargs: dict | None, rng_key: jax.Array | None = None
    ) -> Callable:
        """``leaves -> f`` for these arguments and conditioning; with subsampling plates, ``f``
        on the minibatch that ``rng_key`` draws (the same one at every call of the returned
        function, so that a value and its gradient share it)."""
        if self.prepared_model is None:
            treedef, potential_fn = self.treedef, self.potential_fn
            assert potential_fn is not None

            def potential_log_density(leaves: tuple) -> jax.Array:
                return -potential_fn(jax.tree.unflatten(treedef, list(leaves)))

            return potential_log_density
        prepared, enum, names = self.prepared_model, self.enum, self.names
        kwargs = {} if model_kwargs is None else model_kwargs
        if self.minibatch:
            if rng_key is None:
                raise ValueError(
                    f"{self.minibatch[0]}: this evaluation of the log density has no key "
                    "to draw its minibatch."
                )
            prepared = seed(prepared, rng_key)

        def log_density(leaves: tuple) -> jax.Array:
            z = dict(zip(names, leaves))
            return -potential_energy(
                prepared, model_args, with_conditioning(kwargs, z), {}, enum=enum
            )

        return log_density

    def local_fn(
        self,
        model_args: tuple,
        model_kwargs: dict | None,
        with_locals: bool = True,
        rng_key: jax.Array | None = None,
    ) -> Callable:
        """``leaves -> (f, locals)`` for the core (``with_locals=False``: ``(f, ())``, for a
        sampler that reads no local information; ``rng_key``: the minibatch's key, see
        :meth:`log_density_fn`)."""
        log_density = self.log_density_fn(model_args, model_kwargs, rng_key)
        if not with_locals:
            return lambda leaves: (log_density(leaves), ())
        prepared = self.prepared_model
        element_terms: dict = {}
        for j, s in enumerate(self.leaves):
            chain_terms = self.term_owners.get(s.name)
            if s.mode == CHAIN and isinstance(chain_terms, ChainTerms) and prepared is not None:
                all_terms = all_terms_fn(prepared, self.names, model_args, model_kwargs)
                element_terms[j] = chain_terms_fn(all_terms, j, s.domain, chain_terms)
            if not s.is_plate or prepared is None:
                continue
            if s.colours is None:
                element_terms[j] = element_terms_fn(
                    prepared,
                    self.names,
                    j,
                    self.plate_dims[s.name],
                    self.leaf_shapes[j],
                    model_args,
                    model_kwargs,
                )
            else:
                all_terms = all_terms_fn(prepared, self.names, model_args, model_kwargs)
                element_terms[j] = coloured_terms_fn(
                    all_terms, j, s.colours, self.term_owners[s.name]
                )
        local_fn = make_local_fn(log_density, self.leaves, element_terms)
        if not self.sites.per_coordinate_mh:
            return local_fn
        assert prepared is not None  # a model: setup_potential refuses per_coordinate_mh
        terms = own_terms_fn(
            prepared,
            self.names,
            [self.plate_dims[name] for name in self.names],
            self.leaf_shapes,
            model_args,
            model_kwargs,
        )
        return LocalFnWithTerms(local_fn, terms)

    def to_leaves(self, z: Any) -> tuple:
        """Internal leaves (categorical as indices) from user-facing values."""
        if self.prepared_model is not None:
            return tuple(jnp.asarray(z[s.name]) for s in self.leaves)
        return tuple(
            jnp.argmax(x, axis=-1) if s.mode == ONE_HOT_GRADIENT else jnp.asarray(x)
            for s, x in zip(self.leaves, jax.tree.leaves(z))
        )

    def to_user(self, leaves: tuple, like: Any) -> Any:
        """User-facing values (one-hot where the potential takes them) from leaves."""
        if self.prepared_model is not None:
            return {s.name: x for s, x in zip(self.leaves, leaves)}
        out = [
            jax.nn.one_hot(x, s.domain.num_values, dtype=jnp.asarray(ref).dtype)
            if s.mode == ONE_HOT_GRADIENT
            else x
            for s, x, ref in zip(self.leaves, leaves, jax.tree.leaves(like))
        ]
        return jax.tree.unflatten(self.treedef, out)


def _sites(
    owner: str,
    leaves: tuple[LeafSpec, ...],
    shapes: Sequence[tuple[int, ...]],
    sampler: Sampler,
    options: SiteOptions,
    treedef: Any,
) -> Sites:
    """The core's view of the leaves with the checked preconditioner; the sampler's checks."""
    names = tuple(s.name for s in leaves)
    preconditioner = None
    if options.preconditioner is not None:
        by_name = treedef is None  # potential mode: a pytree like init_params
        given = options.preconditioner if by_name else treedef.flatten_up_to(options.preconditioner)
        preconditioner = check_preconditioners(
            owner,
            names,
            given,
            lambda v: jnp.asarray(v, dtype=jnp.result_type(float)),
            by_name=by_name,
        )
    sites = Sites.from_leaves(leaves, preconditioner, shapes)
    sampler.check_sites(sites, sum(math.prod(s) for s in shapes))
    return sites


def _leaf_names(init_params: Any) -> list | None:
    """The keys of a flat dict of arrays (so messages name ``'bits'``, not ``site 0``)."""
    if isinstance(init_params, dict) and all(
        not isinstance(v, (dict, list, tuple)) for v in init_params.values()
    ):
        return [path[0].key for path, _ in jax.tree_util.tree_flatten_with_path(init_params)[0]]
    return None


def setup_potential(
    sampler: Sampler, options: SiteOptions, potential_fn: Callable, domain: Any, init_params: Any
) -> SiteSetup:
    """The setup of a kernel on ``potential_fn`` at start values ``init_params`` (one chain)."""
    owner = sampler.name
    if sampler.needs_plates:
        raise ValueError(
            f"{owner}: needs a model (its sites' plates make their coordinates conditionally "
            "independent); a potential_fn has no plates. Pass the model instead."
        )
    if init_params is None:
        raise ValueError(
            f"{owner}: with `potential_fn`, pass `init_params` to MCMC.run (they fix the shape "
            "of every leaf)."
        )
    if options.window is not None:
        raise ValueError(
            f"{owner}: the window option names model sites; with potential_fn give the window "
            "in the domain, Integer(window=...)."
        )
    values, treedef = jax.tree.flatten(init_params)
    leaves = leaf_specs_for_potential(domain, treedef, len(values), _leaf_names(init_params))
    shapes = tuple(
        tuple(jnp.shape(x)[:-1] if s.mode == ONE_HOT_GRADIENT else jnp.shape(x))
        for s, x in zip(leaves, values)
    )
    sites = _sites(owner, leaves, shapes, sampler, options, treedef)
    return SiteSetup(leaves, sites, shapes, treedef=treedef, potential_fn=potential_fn)


def setup_model(
    sampler: Sampler,
    options: SiteOptions,
    model: Callable,
    rng_key: jax.Array,
    model_args: tuple,
    model_kwargs: dict,
    decisions: dict,
) -> SiteSetup:
    """The setup of a kernel on ``model`` (traced at a prior draw of its sites).

    ``decisions``: the kernel's cache of ``exact_sites="auto"`` decisions by site shapes, so
    that every chain of a run takes the same one (NumPyro stacks their states).
    """
    owner = sampler.name
    try:
        model_trace = prototype_trace(conditioned(model), rng_key, model_args, model_kwargs)
    except (OverflowError, TypeError, ValueError) as error:
        raise ValueError(
            f"{owner}: tracing the model with start values drawn from its prior failed "
            f"({type(error).__name__}: {str(error).splitlines()[0]}). Check the sites' "
            "distributions and parameters."
        ) from error
    leaves = leaf_specs_for_model(owner, model_trace, options.exact_names)
    leaves = site_rules.with_windows(owner, leaves, options.window)
    minibatch = subsample_plates(model_trace)
    if minibatch:
        site_rules.check_minibatch(
            owner,
            sampler.minibatch_refusal(),
            minibatch,
            leaves,
            options.exact_names,
            latent_in_plates(model_trace, minibatch),
            "remove subsample_size=",
        )
    site_rules.check_windowed_sites(
        owner,
        sampler.windowed_domains,
        [s.name for s in leaves],
        [s.domain for s in leaves],
        [s.is_table for s in leaves],
    )
    site_shapes = {s.name: tuple(jnp.shape(model_trace[s.name]["value"])) for s in leaves}
    site_dtypes = {s.name: jnp.result_type(model_trace[s.name]["value"]) for s in leaves}
    for name, shape in site_shapes.items():
        site_rules.check_leaf_size(name, shape)
    _check_fixed_supports(model, leaves, model_trace, model_args, model_kwargs)
    enum = any(
        site["type"] == "sample"
        and not site["is_observed"]
        and site["infer"].get("enumerate", "") == "parallel"
        for site in model_trace.values()
    )
    has_deterministic = any(site["type"] == "deterministic" for site in model_trace.values())
    prepared = _prepare_model_for_potential(conditioned(model), model_trace, enum=enum)
    setup = SiteSetup(
        leaves,
        Sites.from_leaves(leaves),
        tuple(site_shapes[s.name] for s in leaves),
        site_dtypes,
        prepared_model=prepared,
        enum=enum,
        has_deterministic=has_deterministic,
    )
    structural = {} if enum else {s.name: plate_dims(model_trace[s.name]) for s in leaves}
    per_coordinate = sampler.per_coordinate
    # with a minibatch: no automatic switch and no warmup check (both compare log densities)
    auto_exact = options.auto_exact and sampler.auto_exact and not minibatch
    if auto_exact:
        key = tuple(site_shapes.items())
        decided = decisions.get(key)
        if decided is None:
            plate_sites = {name for name, (_, reason) in structural.items() if reason is None}
            decided = _switch_badly_estimated_sites(
                owner, setup, model, model_trace, model_args, model_kwargs, plate_sites
            )
            decisions[key] = decided
        leaves = decided
    wanted = [
        s.name
        for s in leaves
        if sampler.needs_plate_tables or (s.mode == EXACT and s.name in structural)
    ]
    dims: dict = {}
    owners: dict = {}
    if wanted:
        plate_key = ("plates", tuple(site_shapes.items()), tuple(wanted))
        if plate_key not in decisions:
            decisions[plate_key] = _plate_leaves(
                owner,
                setup,
                leaves,
                structural,
                wanted,
                model,
                model_args,
                model_kwargs,
                getattr(sampler, "blocks", None),
                sampler.needs_plate_tables,
                sampler.draws_chains,
            )
        leaves, dims, owners = decisions[plate_key]
    sites = _sites(owner, leaves, setup.leaf_shapes, sampler, options, None)
    if per_coordinate:
        coordinate_key = ("per coordinate", tuple(site_shapes.items()))
        if coordinate_key not in decisions:
            decisions[coordinate_key] = _per_coordinate_dims(
                owner, setup, leaves, structural, model, model_args, model_kwargs
            )
        dims = decisions[coordinate_key]
        sites = sites._replace(per_coordinate_mh=True)
    check = None
    if auto_exact and sampler.uses_locals:
        check_key = ("warmup check", tuple(site_shapes.items()), tuple(s.mode for s in leaves))
        if check_key not in decisions:

            def verify(names: list) -> dict:
                if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(model_kwargs)):
                    return {}  # traced conditioning (parallel chains): no values to verify at
                exact = tuple(
                    LeafSpec(s.name, s.domain, EXACT) if s.name in names else s for s in leaves
                )
                found = _plate_leaves(
                    owner, setup, exact, structural, names, model, model_args, model_kwargs
                )
                # plate sites only: a coloured site's table needs its term owners
                plain = {s.name for s in found[0] if s.is_plate and s.colours is None}
                return {name: d for name, d in found[1].items() if name in names and name in plain}

            decisions[check_key] = plan_warmup_check(leaves, setup.leaf_shapes, structural, verify)
        check = decisions[check_key]
    return SiteSetup(
        leaves,
        sites,
        setup.leaf_shapes,
        site_dtypes,
        prepared_model=prepared,
        enum=enum,
        has_deterministic=has_deterministic,
        plate_dims=dims,
        term_owners=owners,
        warmup_check=check,
        minibatch=minibatch,
    )


def _per_coordinate_dims(
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
            prototype_trace(conditioned(model), random.key(seed), model_args, model_kwargs)
            for seed in (0, 1)
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


def _plate_leaves(
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
    keeps its single-site table."""
    out, dims, owners = list(leaves), dict[str, dict](), dict[str, Any]()
    blocks = {} if blocks is None else blocks
    points = [
        tuple(jnp.asarray(draw[n]["value"], setup.site_dtypes[n]) for n in setup.names)
        for draw in (
            prototype_trace(conditioned(model), random.key(seed), model_args, model_kwargs)
            for seed in (0, 1)
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
        if reason is not None or spec.name in blocks:
            summed = _summed_term(setup, j, spec, read) if needs_tables else None
            if setup.enum:
                colour_reason: str | None = "the model enumerates sites"
            elif summed is not None and spec.name not in blocks:
                # every coordinate changes a term of one element: its terms cannot colour the
                # site, its single-site tables (below) can
                colour_reason = summed
            else:
                colours, owner_rows, colour_reason, chain_terms = _colouring(
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
    trial = SiteSetup(
        tuple(candidate),
        Sites.from_leaves(candidate),
        setup.leaf_shapes,
        **_rest(setup),
        plate_dims={**dims, spec.name: leaf_dims},
        term_owners=owners if owner_rows is None else {**owners, spec.name: owner_rows},
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
    if size * num_terms <= limit:
        return None
    return (
        f"its {size} coordinates and the model's {num_terms} terms are too many to find "
        "which terms each coordinate changes"
    )


def _colouring(
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
    x = points[0][j]
    low, high = coordinate_bounds(spec.domain, shape)
    next_values = (np.asarray(x) - low + 1) % (high - low + 1) + low
    all_moved = points[0][:j] + (jnp.asarray(next_values, x.dtype),) + points[0][j + 1 :]
    probed_points = [*points[:2], all_moved]
    log_density = setup.log_density_fn(model_args, model_kwargs)
    tables, moved_tables, f = probe_tables(log_density, j, spec, probed_points)
    graph = table_interaction_graph(tables, moved_tables, f, float(np.finfo(tables.dtype).eps))
    why = "they interact (moving one changes the other's exact conditional)"
    if flat_given is not None:
        problem = check_graph_colouring(graph, flat_given, why)
        if problem is not None:
            return None, f"blocks[{spec.name!r}] is not a valid colouring: {problem}", True, False
        return flat_given.reshape(shape), "", True, False
    colours = greedy_graph_colouring(graph)
    if size > 1 and int(colours.max()) + 1 >= size:
        return (
            None,
            (
                "every coordinate interacts with every other (moving any one changes the exact "
                "conditional of every other, found from its single-site tables)"
            ),
            True,
            False,
        )
    # one colour is already a joint draw: a chain's pair table would only cost more
    num_colours = int(colours.max()) + 1
    chain = num_colours > 1 and is_chain_graph(graph) and draws_chain(size, num_values, num_colours)
    return colours.reshape(shape), "", True, chain


def _switch_badly_estimated_sites(
    owner: str,
    setup: SiteSetup,
    model: Callable,
    model_trace: dict,
    model_args,
    model_kwargs,
    plate_sites: set | frozenset = frozenset(),
) -> tuple[LeafSpec, ...]:
    """``exact_sites="auto"``: at the start and a prior draw, compare each gradient site's
    first-order local differences with exact ones on a few coordinates; a site whose gradient
    proposal is badly wrong is switched to exact differences when that costs at most
    ``AUTO_EXACT_BUDGET`` evaluations per step, and is warned about otherwise."""
    specs = setup.leaves
    leaves = tuple(jnp.asarray(model_trace[s.name]["value"]) for s in specs)
    if any(isinstance(x, jax.core.Tracer) for x in leaves):
        return specs  # traced start (parallel chains): no concrete values to judge by
    log_density = setup.log_density_fn(model_args, model_kwargs)
    names = setup.names
    # a windowed (count) site has no table of all values to compare with: it keeps its gradient
    gradient_sites = [
        j for j, s in enumerate(specs) if s.mode == GRADIENT and not is_windowed(s.domain)
    ]
    if not gradient_sites:
        return specs
    chosen = {j: list(range(min(leaves[j].size, 16))) for j in gradient_sites}

    def tables_at(points):
        """Exact log densities at the substitutions of the chosen coordinates of every
        gradient site, all points and sites in one batch: ``{j: (points, k_j * S_j)}``."""
        batches = []
        for j in gradient_sites:
            domain = specs[j].domain
            batch = jax.vmap(lambda x, d=domain, j=j: site_rules.substitutions_at(d, x, chosen[j]))(
                points[j]
            )
            size = batch.shape[1]
            full = tuple(  # (points, size, ...) for every leaf, site j substituted
                batch if k == j else jnp.broadcast_to(y[:, None], (y.shape[0], size) + y.shape[1:])
                for k, y in enumerate(points)
            )
            batches.append(tuple(jnp.reshape(y, (-1,) + y.shape[2:]) for y in full))
        merged = tuple(jnp.concatenate(parts) for parts in zip(*batches))
        values = jax.vmap(log_density)(merged)
        out, start = {}, 0
        for j in gradient_sites:
            size = len(chosen[j]) * specs[j].domain.num_values
            count = points[0].shape[0] * size
            out[j] = jnp.reshape(values[start : start + count], (points[0].shape[0], size))
            start += count
        return out

    # the start and a fresh prior draw of the block's sites, evaluated by one compiled
    # program (eagerly, each operation of the model would be compiled on its own)
    rows = [leaves]
    for key in random.split(random.key(1000), site_rules.PRIOR_DRAWS):
        draw = prototype_trace(conditioned(model), key, model_args, model_kwargs)
        rows.append(tuple(jnp.asarray(draw[n]["value"], x.dtype) for n, x in zip(names, leaves)))
    try:
        compiled_local_fn = jax.jit(make_local_fn(log_density, specs))
        evaluated = [compiled_local_fn(row) for row in rows]
    except TypeError:  # some site is used as an index: find it, then check the rest
        switched = _switch_index_sites(
            owner,
            specs,
            leaves,
            log_density,
            plate_sites,
            lambda j: _colouring(setup, j, specs[j], rows[:2], None, model_args, model_kwargs)[0],
        )
        if switched == specs:
            return specs
        again = SiteSetup(switched, Sites.from_leaves(switched), setup.leaf_shapes, **_rest(setup))
        return _switch_badly_estimated_sites(
            owner, again, model, model_trace, model_args, model_kwargs, plate_sites
        )
    points = tuple(jnp.stack(parts) for parts in zip(*rows))
    f = jnp.stack([e[0] for e in evaluated])
    local = tuple(jnp.stack(parts) for parts in zip(*[e[1] for e in evaluated]))
    tables = run_once(tables_at, points)
    errors_by_point = []
    for p in range(f.shape[0]):
        errors: list[Any] = [None] * len(specs)
        for j in gradient_sites:
            errors[j] = site_rules.first_order_error_at(
                specs[j].domain,
                np.asarray(points[j][p]),
                np.asarray(local[j][p], np.float64),
                chosen[j],
                np.asarray(tables[j][p], np.float64).reshape(len(chosen[j]), -1) - float(f[p]),
            )
        errors_by_point.append(errors)
    # a site in plates costs S evaluations of its terms per step, not N * S
    sizes = [
        1 if s.name in plate_sites else math.prod(shape)
        for s, shape in zip(specs, setup.leaf_shapes)
    ]
    return site_rules.switch_badly_estimated_sites(owner, specs, errors_by_point, sizes)


def _rest(setup: SiteSetup) -> dict:
    return {
        "site_dtypes": setup.site_dtypes,
        "prepared_model": setup.prepared_model,
        "enum": setup.enum,
        "has_deterministic": setup.has_deterministic,
    }


def _switch_index_sites(
    owner: str,
    specs: tuple[LeafSpec, ...],
    leaves: tuple,
    log_density: Callable,
    plate_sites: set | frozenset = frozenset(),
    colours_of: Callable[[int], np.ndarray | None] | None = None,
) -> tuple[LeafSpec, ...]:
    """Gradient sites the log density cannot be differentiated in (values used as indices),
    found one at a time with the others held exact (shapes only, nothing computed), switched
    to exact differences."""
    failing = []
    for j, spec in enumerate(specs):
        if spec.mode != GRADIENT or is_windowed(spec.domain):
            continue
        alone = [
            s if k == j or s.mode != GRADIENT else LeafSpec(s.name, s.domain, EXACT)
            for k, s in enumerate(specs)
        ]
        try:
            jax.eval_shape(make_local_fn(log_density, alone), leaves)
        except TypeError:
            failing.append(j)
    # a site in plates costs S evaluations of its terms per step, a coloured one C x S, not N x S
    sizes = [
        1 if s.name in plate_sites else int(np.prod(jnp.shape(x))) for s, x in zip(specs, leaves)
    ]
    for j in failing:
        if sizes[j] * specs[j].domain.num_values > site_rules.AUTO_EXACT_BUDGET and colours_of:
            colours = colours_of(j)
            if colours is not None:
                sizes[j] = int(colours.max()) + 1
    return site_rules.switch_index_sites(owner, specs, failing, sizes)


def _alternative_values(site: dict) -> list:
    """A few other values of a site, to see whether other sites' supports move with it:
    two fresh draws and, for an integer interval, its two ends."""
    fn, value = site["fn"], jnp.asarray(site["value"])
    out = []
    for k in (1, 2):
        try:
            out.append(fn.sample(random.key(k)).reshape(value.shape))
        except Exception:  # no sample method, or another shape
            continue
    bounds = integer_bounds(site)
    if bounds is not None:
        out += [jnp.broadcast_to(b, value.shape).astype(value.dtype) for b in bounds]
    return out


def _check_fixed_supports(
    model: Callable, leaves: tuple[LeafSpec, ...], model_trace: dict, model_args, model_kwargs
) -> None:
    """Refuse sites whose integer support moves with another site's value (traced once per
    other site and alternative value; setup only)."""
    base = checks.movable_supports(
        [(s.name, s.domain) for s in leaves], lambda name: integer_bounds(model_trace[name])
    )
    if not base or any(isinstance(b, jax.core.Tracer) for pair in base.values() for b in pair):
        return  # nothing to check, or traced (parallel chains: _static refuses it)
    conditioning = dict(model_kwargs.get(GIBBS_SITES_KWARG, {}))
    values = {
        name: site["value"]
        for name, site in model_trace.items()
        if site["type"] == "sample" and (not site["is_observed"] or name in conditioning)
    }
    seeded = seed(conditioned(model), random.key(0))
    perturbed = []
    for changed in values:
        for alternative in _alternative_values(model_trace[changed]):
            kwargs = with_conditioning(model_kwargs, {**values, changed: alternative})
            try:
                other = trace(seeded).get_trace(*model_args, **kwargs)
                bounds = {name: integer_bounds(other[name]) for name in base}
            except Exception:  # an alternative the model cannot take: nothing learned
                continue
            perturbed.append((changed, bounds))
    checks.check_fixed_supports(base, perturbed)


def check_init_params(setup: SiteSetup, init_params: Any, batch_shape: tuple) -> Any:
    """Start values checked against the sites (shape, dtype, support, NaN) and cast to the
    sites' dtypes; untouched when traced (``chain_method="parallel"``)."""
    if init_params is None:
        return None
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(init_params)):
        return init_params
    if setup.prepared_model is None:
        values = [jnp.asarray(x) for x in jax.tree.leaves(init_params)]
        out = []
        for spec, x in zip(setup.leaves, values):
            one_hot = spec.mode == ONE_HOT_GRADIENT
            event = x.shape[len(batch_shape) : x.ndim - (1 if one_hot else 0)]
            checks.check_start_value(
                spec.name,
                spec.domain,
                x,
                event,
                one_hot=one_hot,
                batch_shape=x.shape[: len(batch_shape)],
            )
            if x.dtype == jnp.bool_:
                x = x.astype(jnp.result_type(float) if one_hot else jnp.int32)
            out.append(x)
        return jax.tree.unflatten(setup.treedef, out)
    if not isinstance(init_params, dict):
        raise ValueError(
            f"init_params: give a dict {{site name: value}}, got {type(init_params).__name__}."
        )
    checks.check_site_names("init_params", init_params, list(setup.names))
    checked = {}
    for spec, shape in zip(setup.leaves, setup.leaf_shapes):
        if spec.name not in init_params:
            continue
        x = jnp.asarray(init_params[spec.name])
        checks.check_start_value(spec.name, spec.domain, x, shape, batch_shape=batch_shape)
        checked[spec.name] = x.astype(setup.site_dtypes[spec.name])
    return checked


def initial_values(
    setup: SiteSetup, model: Callable | None, rng_key, init_params: Any, model_args, model_kwargs
) -> Any:
    """One chain's start: the given values, and prior draws for the sites not given."""
    if model is None:
        return init_params
    model_trace = prototype_trace(conditioned(model), rng_key, model_args, model_kwargs)
    init_params = {} if init_params is None else init_params
    return {
        s.name: jnp.asarray(init_params.get(s.name, model_trace[s.name]["value"]))
        for s in setup.leaves
    }
