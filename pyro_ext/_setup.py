"""A Pyro kernel's view of its sites, built once at setup: :class:`SiteSetup`.

From a model (traced with ``poutine``) or a potential and its start values: the leaves and
their domains, the core's :class:`~discrete_kernels.Sites`, the start values checked, and the
site rules of the core applied (``exact_sites="auto"``, supports fixed at setup, the sampler's
own checks). Nothing here is mathematics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyro
import torch

from discrete_kernels import ChainState, LocalFnByLeaf, LocalFnWithTerms, Sampler, Sites
from discrete_kernels import sites as site_rules
from discrete_kernels import validation as checks
from discrete_kernels.colouring import (
    MAX_DEPENDENCE_ENTRIES,
    colouring_from_terms,
    term_owners,
    term_probe_refusal,
)
from discrete_kernels.coordinatewise import (
    Evaluation,
    per_coordinate_error,
    per_coordinate_mismatch,
    per_coordinate_refusal,
    probe_states,
)
from discrete_kernels.samplers.plate_gibbs import MAX_COLOURS
from discrete_kernels.sites import SiteOptions, check_preconditioners

from ._auto_exact import check_gradient_sites
from ._diagnose import nonfinite_terms
from ._jit import TracedFunction
from ._plates import (
    all_terms_fn,
    coloured_terms_fn,
    element_terms_fn,
    plate_dims,
    term_dependence,
    verify_plate_table,
)
from ._probes import check_fixed_supports, warn_gated_sites
from ._target import (
    EXACT,
    ONE_HOT_GRADIENT,
    PLATE,
    LeafSpec,
    as_tensor,
    check_model_trace,
    coloured_plate_table,
    fork_rng,
    latent_in_plates,
    leaf_specs_for_model,
    leaf_specs_for_potential,
    make_local_fn,
    model_log_density,
    plate_table,
    potential_log_density,
    subsample_plates,
    to_internal,
    to_user,
    trace_model,
)

__all__ = ["SiteSetup", "setup_model", "setup_potential"]

#: at most this many coordinates in a site coloured at setup (one model trace per coordinate
#: and probed state finds which terms each one changes)
MAX_COLOURED_COORDINATES = 4096


@dataclass(frozen=True, eq=False)
class SiteSetup:
    """Everything a kernel knows about its sites after setup (immutable).

    - **leaves** - one :class:`~discrete_kernels.sites.LeafSpec` per site, in order.
    - **sites** - the core's view (domains, tables, preconditioner).
    - **start** - the checked start values by site name (prior draws where none was given).
    - **log_density** - ``values -> f`` of the model (with these arguments) or potential.
    - **chain** - the chain at the start (its log density and locals for the sampler).
    - **like** - a float scalar of the model's dtype and device.
    - **element_terms** - per plate-mode leaf (by index), ``values -> g``: its per-coordinate
      terms (:func:`pyro_ext._plates.element_terms_fn`).
    - **minibatch** - the model's subsampling plates: every evaluation of the log density
      (one trace of the model) sees a new minibatch, scaled by Pyro.
    - **own_terms** - with ``per_coordinate_mh``: ``leaves -> terms``, each leaf's
      per-coordinate terms (:data:`discrete_kernels.kernel.ElementTermsFn`).
    """

    leaves: tuple[LeafSpec, ...]
    sites: Sites
    start: dict
    log_density: Callable[[dict], torch.Tensor]
    chain: ChainState
    like: torch.Tensor
    element_terms: dict = field(default_factory=dict)
    minibatch: tuple = ()
    own_terms: Callable[[tuple], tuple] | None = None

    @property
    def names(self) -> list:
        return [s.name for s in self.leaves]

    @property
    def flat_dim(self) -> int:
        """Coordinates of one chain, all leaves together."""
        return sum(math.prod(x.shape) for x in self.chain.x)

    def local_fn(self, with_locals: bool = True) -> Callable:
        """``leaves -> (f, locals)`` for the core (``with_locals=False``: ``(f, ())``); with
        ``per_coordinate_mh``, a :class:`~discrete_kernels.LocalFnWithTerms`; with several
        leaves or a table, a :class:`~discrete_kernels.LocalFnByLeaf`."""
        local_fn = _local_fn(self.log_density, self.leaves, with_locals, self.element_terms)
        if self.own_terms is not None:
            return LocalFnWithTerms(local_fn, self.own_terms)
        # eager: one leaf's table when one is read, and none after a sweep's last draw
        tables = any(spec.mode in (PLATE, EXACT) for spec in self.leaves)
        if with_locals and (len(self.leaves) > 1 or tables):
            # a colour's draw reads its rows alone: one evaluation per value, not one per colour
            coloured = any(s.mode == PLATE and s.colours is not None for s in self.leaves)
            return LocalFnByLeaf(
                local_fn,
                lambda leaves, j: local_fn(leaves, only=j),
                (lambda leaves, j, c: local_fn(leaves, only=j, colour=c)) if coloured else None,
            )
        return local_fn

    def to_leaves(self, params: dict) -> tuple:
        """Internal leaves (categorical as indices) from user-facing values."""
        return tuple(to_internal(s, as_tensor(params[s.name])) for s in self.leaves)


def _local_fn(
    log_density: Callable,
    specs: tuple[LeafSpec, ...],
    with_locals: bool,
    element_terms: dict | None = None,
) -> Callable:
    """``leaves -> (f, locals)``, or ``(f, ())`` without locals."""
    if with_locals:
        return make_local_fn(log_density, specs, element_terms)

    def log_density_only(leaves: tuple) -> tuple:
        values = {s.name: to_user(s, x) for s, x in zip(specs, leaves)}
        return log_density(values).detach(), ()

    return log_density_only


def _float_dtype(x: torch.Tensor) -> torch.dtype:
    """The floating dtype the kernel computes in: that of the model's log density."""
    return x.dtype if x.is_floating_point() else torch.get_default_dtype()


def _from_bool(value: torch.Tensor, one_hot: bool) -> torch.Tensor:
    """Boolean start values as numbers (floats for one-hot encodings)."""
    if value.dtype != torch.bool:
        return value
    return value.to(torch.get_default_dtype() if one_hot else torch.long)


def _finish(
    sampler: Sampler,
    options: SiteOptions,
    leaves: tuple[LeafSpec, ...],
    start: dict,
    log_density: Callable,
    element_terms: dict | None = None,
    drawn: frozenset = frozenset(),
    diagnose: Callable[[dict], list[str]] | None = None,
    minibatch: tuple = (),
) -> SiteSetup:
    """The setup with the sampler's checks (before the first table is evaluated), the chain
    at the start (its log density checked: ``drawn`` names the sites whose start values were
    drawn from the prior, ``diagnose(start)`` the model's non-finite terms) and the
    preconditioner."""
    owner = sampler.name
    names = tuple(s.name for s in leaves)
    values = tuple(to_internal(s, as_tensor(start[s.name])) for s in leaves)
    element_terms = {} if element_terms is None else element_terms
    shapes = [tuple(x.shape) for x in values]
    sampler.check_sites(Sites.from_leaves(leaves, None, shapes), sum(x.numel() for x in values))
    chain = sampler.init(values, _local_fn(log_density, leaves, sampler.uses_locals, element_terms))
    checks.check_initial_log_density(
        owner,
        chain.log_density,
        list(names),
        values,
        drawn=drawn,
        terms=(lambda: diagnose(start)) if diagnose is not None else (),
    )
    f = chain.log_density
    like = torch.zeros((), dtype=_float_dtype(f), device=f.device)
    preconditioner = check_preconditioners(
        owner,
        names,
        options.preconditioner,
        lambda v: torch.as_tensor(v, dtype=like.dtype, device=like.device),
    )
    sites = Sites.from_leaves(leaves, preconditioner, shapes)
    return SiteSetup(leaves, sites, start, log_density, chain, like, element_terms, minibatch)


def setup_potential(
    sampler: Sampler,
    options: SiteOptions,
    potential_fn: Callable,
    domain: Any,
    given: dict,
    jit_compile: bool = False,
) -> SiteSetup:
    """The setup of a kernel on ``potential_fn`` at start values ``given`` (by site name);
    ``jit_compile``: ``potential_fn`` through ``torch.jit.trace`` (:mod:`pyro_ext._jit`)."""
    owner = sampler.name
    if sampler.needs_plates:
        raise ValueError(
            f"{owner}: needs a model (its sites' plates make their coordinates conditionally "
            "independent); a potential_fn has no plates. Pass the model instead."
        )
    if not given:
        raise ValueError(
            f"{owner}: with `potential_fn`, pass `initial_params` to MCMC (they fix the shape "
            "of every site)."
        )
    if options.window is not None:
        raise ValueError(
            f"{owner}: the window option names model sites; with potential_fn give the window "
            "in the domain, Integer(window=...)."
        )
    leaves = leaf_specs_for_potential(domain, sorted(given))
    start = {}
    for spec in leaves:
        value = as_tensor(given[spec.name])
        one_hot = spec.mode == ONE_HOT_GRADIENT
        event = value.shape[: value.ndim - 1] if one_hot else value.shape
        checks.check_start_value(spec.name, spec.domain, value, tuple(event), one_hot=one_hot)
        site_rules.check_leaf_size(spec.name, tuple(event))
        start[spec.name] = _from_bool(value, one_hot)
    f = potential_fn(start)
    if as_tensor(f).shape != ():
        raise ValueError(
            f"{owner}: potential_fn must return a scalar (-log density), got a tensor of shape "
            f"{tuple(as_tensor(f).shape)}."
        )
    if jit_compile:
        potential_fn = TracedFunction(owner, potential_fn, source="potential_fn")
    return _finish(sampler, options, leaves, start, potential_log_density(potential_fn))


def setup_model(
    sampler: Sampler,
    options: SiteOptions,
    model: Callable,
    given: dict,
    args: tuple,
    kwargs: dict,
    conditioned: frozenset,
    jit_compile: bool = False,
) -> SiteSetup:
    """The setup of a kernel on ``model`` with the start values ``given`` (prior draws for the
    others); ``conditioned``: sites a Gibbs block's model conditions on; ``jit_compile``: the
    log density through ``torch.jit.trace`` (:mod:`pyro_ext._jit`)."""
    owner = sampler.name
    model_trace = trace_model(model, args, kwargs)
    check_model_trace(owner, model_trace)
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
    checks.check_site_names("initial_params", given, [s.name for s in leaves])
    start = {}
    for spec in leaves:
        prior = model_trace.nodes[spec.name]["value"].detach()
        site_rules.check_leaf_size(spec.name, tuple(prior.shape))
        if spec.name not in given:
            start[spec.name] = prior
            continue
        value = torch.as_tensor(given[spec.name], device=prior.device)
        checks.check_start_value(spec.name, spec.domain, value, tuple(prior.shape))
        start[spec.name] = value.to(prior.dtype)
    check_fixed_supports(model, leaves, model_trace, args, kwargs, conditioned)
    warn_gated_sites(owner, model, leaves, model_trace, args, kwargs, conditioned)
    log_density = model_log_density(model, args, kwargs)
    jit_points = None
    if jit_compile:
        if minibatch:
            raise ValueError(
                f"{owner}: jit_compile=True cannot trace a model that subsamples (plate "
                f"{minibatch[0].name!r}): a trace would keep one minibatch. Pass "
                "jit_compile=False."
            )
        jit_points = [("the start", start), ("a prior draw", _draw(model, args, kwargs, leaves))]
        log_density = _traced(
            owner, model, lambda m: model_log_density(m, args, kwargs), jit_points
        )
    structural = {s.name: plate_dims(model_trace.nodes[s.name]) for s in leaves}
    per_coordinate = sampler.per_coordinate
    # with a minibatch: no automatic switch (it compares log densities)
    if options.auto_exact and sampler.auto_exact and not minibatch:
        plate_sites = {name for name, (_, reason) in structural.items() if reason is None}
        leaves = check_gradient_sites(owner, leaves, start, model, args, kwargs, plate_sites)
    wanted = [s.name for s in leaves if sampler.needs_plate_tables or s.mode == EXACT]
    element_terms: dict = {}
    if wanted:
        leaves, element_terms = _plate_leaves(
            owner,
            leaves,
            structural,
            wanted,
            start,
            log_density,
            model,
            args,
            kwargs,
            sampler.needs_plate_tables,
            jit_points,
            getattr(sampler, "blocks", None),
        )
    drawn = frozenset(start) - frozenset(given)
    setup = _finish(
        sampler,
        options,
        leaves,
        start,
        log_density,
        element_terms,
        drawn,
        lambda values: nonfinite_terms(model, args, kwargs, values),
        minibatch,
    )
    if not per_coordinate:
        return setup
    own_terms = _per_coordinate_terms(
        owner, setup, structural, [start, _prior_values(model_trace, leaves)], model, args, kwargs
    )
    return replace(setup, sites=setup.sites._replace(per_coordinate_mh=True), own_terms=own_terms)


def _draw(model: Callable, args: tuple, kwargs: dict, leaves: tuple[LeafSpec, ...]) -> dict:
    """A fresh prior draw of the leaves' sites, the user's random stream left as it was."""
    with fork_rng():
        return _prior_values(trace_model(model, args, kwargs), leaves)


def _traced(
    owner: str,
    model: Callable,
    of_model: Callable[[Callable], Callable[[dict], torch.Tensor]],
    points: list[tuple[str, dict]],
) -> TracedFunction:
    """``jit_compile=True``: ``of_model(model)`` (a function of the sites' values: the log
    density, a leaf's per-coordinate terms) through ``torch.jit.trace``, checked at
    ``points``; inside :class:`pyro_ext.Gibbs` it is made of the unconditioned model and the
    other blocks' values are inputs of the trace."""
    from .gibbs import _ConditionedModel

    if isinstance(model, _ConditionedModel):
        return TracedFunction(owner, of_model(model.model), points, model.conditioning)
    return TracedFunction(owner, of_model(model), points)


def _prior_values(model_trace: Any, leaves: tuple[LeafSpec, ...]) -> dict:
    return {s.name: model_trace.nodes[s.name]["value"].detach() for s in leaves}


def _per_coordinate_terms(
    owner: str,
    setup: SiteSetup,
    structural: dict,
    points: list[dict],
    model: Callable,
    args: tuple,
    kwargs: dict,
) -> Callable[[tuple], tuple]:
    """Each leaf's per-coordinate terms (``leaves -> terms``) when all of the model's discrete
    coordinates are conditionally independent given its other sites
    (``per_coordinate_mh=True``): every site a gradient site whose dimensions are plates,
    verified at the start and a prior draw
    (:func:`discrete_kernels.coordinatewise.per_coordinate_mismatch`); else a ``ValueError``
    naming the site and the reason."""
    leaves = setup.leaves
    reason = per_coordinate_refusal(leaves, structural)
    if reason is not None:
        raise per_coordinate_error(owner, reason)
    per_leaf = [
        element_terms_fn(model, args, kwargs, structural[s.name][0], tuple(x.shape))
        for s, x in zip(leaves, setup.chain.x)
    ]

    def own_terms(xs: tuple) -> tuple:
        values = {s.name: to_user(s, x) for s, x in zip(leaves, xs)}
        return tuple(fn(values) for fn in per_leaf)

    local_fn = setup.local_fn()
    domains = [s.domain for s in leaves]

    def at(xs: tuple, like: tuple) -> Evaluation:
        xs = tuple(torch.as_tensor(v, device=u.device).to(u.dtype) for v, u in zip(xs, like))
        f, gradient = local_fn(xs)
        with torch.no_grad():
            terms = own_terms(xs)
        # setup only: the probe's evaluations compared on the host
        as_numpy = lambda ts: tuple(t.detach().double().cpu().numpy() for t in ts)  # noqa: E731
        return Evaluation(float(f), as_numpy(gradient), as_numpy(terms))

    for index, values in enumerate(points):
        point = tuple(to_internal(s, as_tensor(values[s.name])) for s in leaves)
        probe = probe_states(domains, [x.cpu().numpy() for x in point], index)
        with pyro.validation_enabled(False):
            reason = per_coordinate_mismatch(
                setup.names,
                probe,
                at(probe.x, point),
                at(probe.moved, point),
                at(probe.mixed, point),
            )
        if reason is not None:
            raise per_coordinate_error(owner, reason)
    return own_terms


def _plate_leaves(
    owner: str,
    leaves: tuple[LeafSpec, ...],
    structural: dict,
    wanted: list,
    start: dict,
    log_density: Callable,
    model: Callable,
    args: tuple,
    kwargs: dict,
    needs_tables: bool = False,
    jit_points: list[tuple[str, dict]] | None = None,
    blocks: dict | None = None,
) -> tuple[tuple[LeafSpec, ...], dict]:
    """The leaves with the ``wanted`` ones in plate mode where their plates make their
    coordinates conditionally independent (verified at the start and two other states), and
    their per-coordinate terms by leaf index. A sampler that needs plate tables gets an error
    naming the site and the reason otherwise; an exact site keeps its single-site table.
    ``jit_points``: ``jit_compile=True``, the terms through ``torch.jit.trace`` checked at
    those points (:func:`_traced`)."""
    out, terms_by_leaf = list(leaves), dict[int, Callable]()
    point = tuple(to_internal(s, as_tensor(start[s.name])) for s in leaves)

    def to_values(ys: tuple) -> dict:
        return {s.name: to_user(s, y) for s, y in zip(leaves, ys)}

    def density(ys: tuple) -> torch.Tensor:
        return log_density(to_values(ys))

    for j, spec in enumerate(leaves):
        if spec.name not in wanted:
            continue
        if spec.mode == ONE_HOT_GRADIENT:
            # its leaf is the category index, but the model's site is the one-hot event
            leaf_dims, reason = {}, "it is one-hot (write it as a Categorical site)"
        else:
            leaf_dims, reason = structural[spec.name]
        if reason is None:
            shape = tuple(point[j].shape)
            if jit_points is None:
                terms = element_terms_fn(model, args, kwargs, leaf_dims, shape)
            else:
                terms = _traced(
                    owner,
                    model,
                    lambda m, dims=leaf_dims, shape=shape: element_terms_fn(
                        m, args, kwargs, dims, shape
                    ),
                    jit_points,
                )

            def table_fn(ys: tuple, j: int = j, spec: LeafSpec = spec, terms=terms) -> tuple:
                f = density(ys)
                return f, plate_table(f, ys, j, spec.domain, terms, to_values)

            reason = verify_plate_table(spec.domain, j, point, table_fn, density)
        given = (blocks or {}).get(spec.name)
        colourable = jit_points is None and spec.mode != ONE_HOT_GRADIENT
        if (reason is not None or given is not None) and colourable:
            # coordinates that interact locally (a chain, a lattice): colour by colour
            colours, coloured, colour_reason = _colouring(
                spec, j, point, given, density, to_values, model, args, kwargs, needs_tables
            )
            if colour_reason is None:
                assert coloured is not None
                out[j] = LeafSpec(spec.name, spec.domain, PLATE, colours)
                terms_by_leaf[j] = coloured
                continue
            reason = colour_reason if reason is None else f"{reason}; {colour_reason}"
        if reason is None:
            out[j] = LeafSpec(spec.name, spec.domain, PLATE)
            terms_by_leaf[j] = terms
        elif needs_tables or spec.mode != EXACT:  # a sampler that needs plate tables
            raise site_rules.not_plate_error(
                owner,
                spec.name,
                reason,
                "a pyro_ext.Gibbs block of px.GWG, px.DMALA or px.DiscreteGibbs",
            )
    return tuple(out), terms_by_leaf


def _colouring(
    spec: LeafSpec,
    j: int,
    point: tuple,
    given: Any,
    density: Callable[[tuple], torch.Tensor],
    to_values: Callable[[tuple], dict],
    model: Callable,
    args: tuple,
    kwargs: dict,
    needs_tables: bool,
) -> tuple[np.ndarray | None, Callable | None, str | None]:
    """``(colours, coloured terms, None)`` of leaf ``j`` at the start ``point``: the user's
    colouring ``given`` (checked) or a greedy one from the terms each coordinate changes (at
    the start and a prior draw), verified against single-site changes; or ``(None, None,
    reason)``."""
    shape = tuple(point[j].shape)
    size = math.prod(shape)
    if given is None and size == 1:
        return None, None, "it is a single coordinate"
    all_terms = all_terms_fn(model, args, kwargs)
    num_terms = int(all_terms(to_values(point)).numel())
    # an exact site of a gradient kernel has its single-site table to fall back on: probe less
    most = MAX_COLOURED_COORDINATES if needs_tables else MAX_COLOURED_COORDINATES // 16
    # a site of more than `most` coordinates is refused whatever its terms (limit 0)
    too_many = term_probe_refusal(size, num_terms, 0 if size > most else MAX_DEPENDENCE_ENTRIES)
    if too_many is not None:
        return None, None, too_many
    drawn = _draw(model, args, kwargs, (spec,))[spec.name]
    other = point[:j] + (to_internal(spec, as_tensor(drawn)),) + point[j + 1 :]
    dependence = term_dependence(all_terms, j, spec.domain, [point, other], to_values)
    colours, problem = colouring_from_terms(
        spec.name, shape, dependence, given, "pyro.factor", "tensor"
    )
    if colours is None:
        return None, None, problem
    many = int(colours.max()) + 1
    if needs_tables and given is None and many > MAX_COLOURS:
        return None, None, f"its terms need {many} colours, more than {MAX_COLOURS}"
    coloured = coloured_terms_fn(all_terms, j, colours, term_owners(dependence, colours), to_values)

    def table_fn(ys: tuple) -> tuple:
        f = density(ys)
        return f, coloured_plate_table(f, ys, j, spec.domain, coloured)

    reason = verify_plate_table(spec.domain, j, point, table_fn, density)
    if reason is not None:
        return None, None, reason
    return colours.reshape(shape), coloured, None
