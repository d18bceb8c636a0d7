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

import torch

from discrete_kernels import ChainState, LocalFnByLeaf, LocalFnWithTerms, Sampler, Sites
from discrete_kernels import sites as site_rules
from discrete_kernels import validation as checks
from discrete_kernels.minibatch import check_minibatch
from discrete_kernels.sites import SiteOptions, check_preconditioners

from ._auto_exact import check_gradient_sites
from ._diagnose import nonfinite_terms
from ._jit import TRACER_OPTIONS, TracedFunction, traced_of_model
from ._plate_setup import per_coordinate_terms, plate_leaves
from ._plates import plate_dims
from ._probes import check_fixed_supports, warn_gated_sites
from ._target import (
    EXACT,
    ONE_HOT_GRADIENT,
    PLATE,
    LeafSpec,
    as_tensor,
    check_model_trace,
    draw_prior_values,
    latent_in_plates,
    leaf_specs_for_model,
    leaf_specs_for_potential,
    make_local_fn,
    model_log_density,
    potential_log_density,
    prior_values,
    subsample_plates,
    to_internal,
    to_user,
    trace_model,
)

__all__ = ["SiteSetup", "setup_model", "setup_potential"]


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
      per-coordinate terms (:data:`discrete_kernels.local_fns.ElementTermsFn`).
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

    def local_fn(self, with_locals: bool = True, functional: bool = False) -> Callable:
        """``leaves -> (f, locals)`` for the core (``with_locals=False``: ``(f, ())``); with
        ``per_coordinate_mh``, a :class:`~discrete_kernels.LocalFnWithTerms`; with several
        leaves or a table, a :class:`~discrete_kernels.LocalFnByLeaf`. ``functional``: the
        gradients by ``torch.func`` (for ``torch.compile``; :func:`make_local_fn`)."""
        local_fn = _local_fn(
            self.log_density, self.leaves, with_locals, self.element_terms, functional
        )
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
    functional: bool = False,
) -> Callable:
    """``leaves -> (f, locals)``, or ``(f, ())`` without locals."""
    if with_locals:
        return make_local_fn(log_density, specs, element_terms, functional)

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
    ``jit_compile``: ``potential_fn`` through ``torch.jit.trace`` (:mod:`pyro_ext._jit`;
    ``torch_compile`` compiles a potential as it is)."""
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
    torch_compile: bool = False,
) -> SiteSetup:
    """The setup of a kernel on ``model`` with the start values ``given`` (prior draws for the
    others); ``conditioned``: sites a Gibbs block's model conditions on; ``jit_compile``: the
    log density through ``torch.jit.trace``, ``torch_compile``: through ``make_fx``, for
    ``torch.compile`` (:mod:`pyro_ext._jit`)."""
    owner = sampler.name
    model_trace = trace_model(model, args, kwargs)
    check_model_trace(owner, model_trace)
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
    tracer = "fx" if torch_compile else "jit"
    if jit_compile or torch_compile:
        option = TRACER_OPTIONS[tracer]
        if minibatch:
            raise ValueError(
                f"{owner}: {option}=True cannot trace a model that subsamples (plate "
                f"{minibatch[0].name!r}): a trace would keep one minibatch. Pass "
                f"{option}=False."
            )
        jit_points = [
            ("the start", start),
            ("a prior draw", draw_prior_values(model, args, kwargs, leaves)),
        ]
        log_density = traced_of_model(
            owner, model, lambda m: model_log_density(m, args, kwargs), jit_points, tracer
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
        leaves, element_terms = plate_leaves(
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
            tracer,
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
    own_terms = per_coordinate_terms(
        owner, setup, structural, [start, prior_values(model_trace, leaves)], model, args, kwargs
    )
    return replace(setup, sites=setup.sites._replace(per_coordinate_mh=True), own_terms=own_terms)
