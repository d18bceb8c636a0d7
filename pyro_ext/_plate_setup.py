"""A Pyro kernel's plate decisions at setup: which leaves a plate makes conditionally
independent coordinate by coordinate (their per-coordinate terms), which ones interact only
locally and are coloured (a chain, a lattice), and the per-coordinate terms of
``per_coordinate_mh=True``. Each decision is verified against the model's own log density at
probe states (the core's rules in :mod:`discrete_kernels.coordinatewise`,
:mod:`discrete_kernels.colouring` and :mod:`discrete_kernels.tables`); NumPyro's counterpart
is :mod:`numpyro_ext._plate_setup`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyro
import torch

from discrete_kernels import sites as site_rules
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

from ._jit import traced_of_model
from ._plates import (
    all_terms_fn,
    coloured_terms_fn,
    element_terms_fn,
    term_dependence,
    verify_plate_table,
)
from ._target import (
    EXACT,
    ONE_HOT_GRADIENT,
    PLATE,
    LeafSpec,
    as_tensor,
    coloured_plate_table,
    draw_prior_values,
    plate_table,
    to_internal,
    to_user,
)

if TYPE_CHECKING:
    from ._setup import SiteSetup

__all__ = ["MAX_COLOURED_COORDINATES", "per_coordinate_terms", "plate_leaves"]

#: at most this many coordinates in a site coloured at setup (one model trace per coordinate
#: and probed state finds which terms each one changes)
MAX_COLOURED_COORDINATES = 4096


def per_coordinate_terms(
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


def plate_leaves(
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
    tracer: str = "jit",
) -> tuple[tuple[LeafSpec, ...], dict]:
    """The leaves with the ``wanted`` ones in plate mode where their plates make their
    coordinates conditionally independent (verified at the start and two other states), and
    their per-coordinate terms by leaf index. A sampler that needs plate tables gets an error
    naming the site and the reason otherwise; an exact site keeps its single-site table.
    ``jit_points``: ``jit_compile=True`` (or ``torch_compile=True``: ``tracer="fx"``), the
    terms through a trace checked at those points (:func:`pyro_ext._jit.traced_of_model`)."""
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
                terms = traced_of_model(
                    owner,
                    model,
                    lambda m, dims=leaf_dims, shape=shape: element_terms_fn(
                        m, args, kwargs, dims, shape
                    ),
                    jit_points,
                    tracer,
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
    drawn = draw_prior_values(model, args, kwargs, (spec,))[spec.name]
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
