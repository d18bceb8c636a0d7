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
from jax import random
from numpyro.handlers import seed
from numpyro.infer.gibbs import GIBBS_SITES_KWARG, conditioned, with_conditioning
from numpyro.infer.util import _prepare_model_for_potential, potential_energy

from discrete_kernels import LocalFnByLeaf, LocalFnWithRows, LocalFnWithTerms, Sampler, Sites
from discrete_kernels import sites as site_rules
from discrete_kernels import validation as checks
from discrete_kernels.chains import (
    ChainTerms,
)
from discrete_kernels.minibatch import check_minibatch
from discrete_kernels.sites import SiteOptions, check_preconditioners

from ._auto_exact import check_gradient_sites
from ._plate_setup import per_coordinate_dims, plate_leaves
from ._plates import (
    all_terms_fn,
    chain_terms_fn,
    coloured_terms_fn,
    element_terms_fn,
    own_terms_fn,
    plate_dims,
)
from ._prior_trace import prior_trace
from ._probes import check_fixed_supports, warn_gated_sites
from ._target import (
    CHAIN,
    EXACT,
    ONE_HOT_GRADIENT,
    LeafSpec,
    coordinate_row_fn,
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
      (:class:`~discrete_kernels.minibatch.SubsamplePlate`); when there are any, every log
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

    def trial(
        self, leaves: Sequence[LeafSpec], dims: dict | None = None, owners: dict | None = None
    ) -> SiteSetup:
        """The setup of the same model with other ``leaves`` (their modes), their plate dims
        and term owners, for a check at setup: no warmup check and no minibatch."""
        return SiteSetup(
            tuple(leaves),
            Sites.from_leaves(leaves),
            self.leaf_shapes,
            site_dtypes=self.site_dtypes,
            prepared_model=self.prepared_model,
            enum=self.enum,
            has_deterministic=self.has_deterministic,
            plate_dims={} if dims is None else dims,
            term_owners={} if owners is None else owners,
        )

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
        unread: frozenset[int] = frozenset(),
    ) -> Callable:
        """``leaves -> (f, locals)`` for the core (``with_locals=False``: ``(f, ())``, for a
        sampler that reads no local information; ``rng_key``: the minibatch's key, see
        :meth:`log_density_fn`; ``unread``: the sampler's
        :meth:`~discrete_kernels.Sampler.unread_tables`, left None where the function gives
        each coordinate's row)."""
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
        rows = not self.sites.per_coordinate_mh and any(
            s.mode == EXACT and s.colours is not None for s in self.leaves
        )
        skipped = unread if rows else frozenset()
        local_fn = make_local_fn(log_density, self.leaves, element_terms, skipped)
        if not self.sites.per_coordinate_mh:
            if rows:
                return LocalFnWithRows(local_fn, coordinate_row_fn(log_density, self.leaves))
            if any(s.is_plate and s.colours is not None for s in self.leaves):
                # a colour's draw reads its rows alone: one evaluation per value, not one per
                # colour; the step returns every table (the loop's carry keeps its structure)
                return LocalFnByLeaf(
                    local_fn,
                    lambda leaves, j: local_fn(leaves),  # unread tables: dropped by XLA
                    lambda leaves, j, c: local_fn(leaves, (j, c)),
                    complete_at_end=True,
                )
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


def _traced(tree: Any) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree))


def concrete_setup_inputs(
    owner: str, model: Callable, rng_key: jax.Array, model_args: tuple, model_kwargs: dict
) -> tuple[jax.Array, dict]:
    """The key and keyword arguments the setup decides from: those given, or, where the
    whole chain runs under a transform (``MCMC(..., chain_method=jax.vmap)``, which NumPyro's
    ``Gibbs`` suggests for several chains), a fixed key and the values a ``Gibbs`` sweep
    conditions on replaced by a prior draw of them. The setup's probes read which sites and
    coordinates interact from concrete values; that structure does not depend on the
    conditioned values, and the chain itself is run with the traced ones. A traced model
    argument is refused: it may change the structure."""
    if not _traced(rng_key) and not _traced(model_kwargs):
        return rng_key, model_kwargs
    conditioning = dict(model_kwargs.get(GIBBS_SITES_KWARG, {}))
    others = {k: v for k, v in model_kwargs.items() if k != GIBBS_SITES_KWARG}
    if _traced(model_args) or _traced(others):
        raise ValueError(
            f"{owner}: the model's arguments are traced at init (a transform of the whole "
            "run over them); the setup reads the model's structure from concrete values. "
            'Pass the arguments as arrays, or use chain_method="sequential", "parallel" or '
            '"vectorized".'
        )
    typed = jax.dtypes.issubdtype(jnp.result_type(rng_key), jax.dtypes.prng_key)
    key = random.key(0) if typed else random.PRNGKey(0)
    kept = {k: v for k, v in conditioning.items() if not _traced(v)}
    draw = prior_trace(model, key, model_args, with_conditioning(others, kept))
    concrete = {k: v if k in kept else draw[k]["value"] for k, v in conditioning.items()}
    return key, with_conditioning(others, concrete)


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
        model_trace = prior_trace(model, rng_key, model_args, model_kwargs)
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
        check_minibatch(
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
    check_fixed_supports(model, leaves, model_trace, model_args, model_kwargs)
    gates_key = ("gated sites", tuple(site_shapes.items()))
    if gates_key not in decisions:
        decisions[gates_key] = warn_gated_sites(
            owner, model, leaves, model_trace, model_args, model_kwargs
        )
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
            decided = check_gradient_sites(
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
            decisions[plate_key] = plate_leaves(
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
            decisions[coordinate_key] = per_coordinate_dims(
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
                args = (owner, setup, exact, structural, names, model, model_args, model_kwargs)
                found = plate_leaves(*args, known=(dims, owners))
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
    model_trace = prior_trace(model, rng_key, model_args, model_kwargs)
    init_params = {} if init_params is None else init_params
    return {
        s.name: jnp.asarray(init_params.get(s.name, model_trace[s.name]["value"]))
        for s in setup.leaves
    }
