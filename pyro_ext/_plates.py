"""Plate-aware exact tables in Pyro: which discrete sites are conditionally independent in
their coordinates, and their per-coordinate terms.

A site's coordinates are conditionally independent given the rest when every log-density term
that depends on the site is indexed by the site's plates (read from the trace's
``cond_indep_stack``: ``pyro.plate`` frames) and no other term depends on it. Then the
per-site ``log_prob`` of the model traced with every coordinate set to ``v``
(``Trace.compute_log_prob``, not summed), each summed over its other dimensions, give
``g_i(v)`` for all coordinates at once, and the exact table ``T[i, v] = f(x with x_i = v)``
costs ``S`` evaluations (:func:`discrete_kernels.tables.table_from_element_terms`). The claim is
verified numerically at setup against single-site changes; a site that fails keeps its other
mode (or is refused by a sampler that needs the table).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyro
import torch
from pyro.distributions.util import scale_and_mask
from pyro.poutine.util import site_is_subsample
from torch.distributions import Independent as TorchIndependent

from discrete_kernels import Domain
from discrete_kernels.colouring import terms_changed
from discrete_kernels.domains import as_finite
from discrete_kernels.tables import (
    align_element_term,
    plate_check_draws,
    plate_dims_of,
    plate_table_mismatch,
    substitutions_at,
)

from ._target import Values, trace_model

__all__ = [
    "all_terms_fn",
    "coloured_terms_fn",
    "element_terms_fn",
    "plate_dims",
    "term_dependence",
    "verify_plate_table",
]


def plate_dims(site: dict) -> tuple[dict, str | None]:
    """``({plate name: dim}, None)`` of a traced sample site whose every dimension is a plate,
    or ``({}, reason)`` when the site cannot be treated plate by plate
    (:func:`discrete_kernels.tables.plate_dims_of`)."""
    frames = [(frame.name, frame.dim, frame.size) for frame in site["cond_indep_stack"]]
    return plate_dims_of(tuple(site["value"].shape), tuple(site["fn"].event_shape), frames)


def _device_of(values: Values, fallback: torch.Tensor) -> torch.device:
    """Where a model's terms are gathered: on its sites' values. A term can sit elsewhere:
    ``pyro.factor`` wraps its factor in ``Unit``, which calls ``torch.as_tensor`` on it, and
    under a set default device (``torch.set_default_device("cpu")``) that moves a CUDA factor."""
    for value in values.values():
        if isinstance(value, torch.Tensor):
            return value.device
    return fallback.device


def element_terms_fn(
    model: Callable, args: tuple, kwargs: dict, leaf_dims: Mapping[str, int], shape: tuple
) -> Callable[[Values], torch.Tensor]:
    """``values -> g`` of a leaf with plates ``leaf_dims`` and shape ``shape`` (n...): the sum
    of every site's ``log_prob`` indexed by all of the leaf's plates, each reduced to the
    leaf's shape. The terms outside those plates are left out: the check at setup verifies
    that they do not depend on the leaf.

    ``values`` are the sites' user-facing values (conditioned in the model); ``g`` has shape
    (n...). Evaluated without validation: the table visits every value at every coordinate,
    some outside a coordinate's support (their log density is ``-inf``, as MCMC sees it).
    """

    def terms(values: Values) -> torch.Tensor:
        with torch.no_grad(), pyro.validation_enabled(False):
            model_trace = trace_model(model, args, kwargs, values)
            model_trace.compute_log_prob(lambda _, site: not site_is_subsample(site))
        total: torch.Tensor | None = None
        for site in model_trace.nodes.values():
            if site["type"] != "sample" or "log_prob" not in site:
                continue
            frames = {f.name: f.dim for f in site["cond_indep_stack"]}
            if all(frames.get(p) == d for p, d in leaf_dims.items()):
                term = align_element_term(site["log_prob"], leaf_dims, shape)
                term = term.to(_device_of(values, term))
                total = term if total is None else total + term
        assert total is not None  # the leaf's own site is in its plates
        return total

    return terms


def verify_plate_table(
    domain: Domain,
    j: int,
    leaves: tuple,
    table_fn: Callable[[tuple], tuple[torch.Tensor, torch.Tensor]],
    log_density: Callable[[tuple], torch.Tensor],
    seed: int = 0,
) -> str | None:
    """None when leaf ``j``'s plate table matches single-site changes of the log density at
    ``leaves`` and at two other states of the leaf
    (:func:`discrete_kernels.tables.plate_check_draws`), else the reason (in words).

    Parameters
    ----------
    domain : the leaf's domain
    j : the leaf's index
    leaves : internal leaves of the checked point (the start)
    table_fn : ``leaves -> (f, table)``, ``table`` of shape (n..., S) from the leaf's terms
    log_density : ``leaves -> f``, the model's log density
    seed : of the checked coordinates and the other states (numpy's RNG: torch's stream,
        the user's, is left as it was)
    """
    x = leaves[j]
    chosen, others = plate_check_draws(domain, tuple(x.shape), seed)
    points = [leaves] + [
        leaves[:j] + (torch.as_tensor(y, device=x.device).to(x.dtype),) + leaves[j + 1 :]
        for y in others
    ]
    with torch.no_grad(), pyro.validation_enabled(False):
        for point in points:
            f, table = table_fn(point)
            rows = table.reshape(-1, domain.num_values)[chosen]
            batch = substitutions_at(domain, point[j], chosen)
            exact = torch.stack([log_density(point[:j] + (y,) + point[j + 1 :]) for y in batch])
            reason = plate_table_mismatch(
                rows.double().cpu().numpy(),
                exact.double().reshape(len(chosen), -1).cpu().numpy(),
                float(f),
            )
            if reason is not None:
                return reason
    return None


def all_terms_fn(model: Callable, args: tuple, kwargs: dict) -> Callable[[Values], torch.Tensor]:
    """``values -> terms``: every element of every site's log-density term, flat, shape (E,)
    (each site's ``log_prob`` at its batch shape, scaled and masked as Pyro does, in trace
    order; an event's terms element by element, so that ``.to_event`` on independent
    coordinates does not couple them). Evaluated without validation and without a graph."""

    def terms(values: Values) -> torch.Tensor:
        with torch.no_grad(), pyro.validation_enabled(False):
            model_trace = trace_model(model, args, kwargs, values)
            parts = []
            for site in model_trace.nodes.values():
                if site["type"] != "sample" or site_is_subsample(site):
                    continue
                fn = site["fn"]
                while isinstance(fn, TorchIndependent):
                    fn = fn.base_dist
                log_prob = scale_and_mask(fn.log_prob(site["value"]), site["scale"], site["mask"])
                parts.append(log_prob.reshape(-1))
        device = _device_of(values, parts[0])
        return torch.cat([p.to(device=device, dtype=parts[0].dtype) for p in parts])

    return terms


def term_dependence(
    all_terms: Callable[[Values], torch.Tensor],
    j: int,
    domain: Domain,
    points: Sequence[tuple],
    to_values: Callable[[tuple], Values],
) -> np.ndarray:
    """``D[i, e]``: whether term ``e`` changes when coordinate ``i`` of leaf ``j`` moves to
    any other of its values, at any of ``points`` (internal leaves), shape (N, E). Every
    other value, not only the next: an agreement term ``c_i == c_{i+1}`` changes only where
    one of the two values is the neighbour's. ``N (S - 1)`` model evaluations per point, at
    setup (:func:`discrete_kernels.colouring.terms_changed`)."""
    domain = as_finite(domain)
    rows = []
    for point in points:
        x = point[j]
        flat = x.reshape(-1)
        before = all_terms(to_values(point))
        # on the model's device, read back once per point
        changed = torch.zeros((flat.numel(), before.numel()), dtype=torch.bool, device=x.device)
        for i, shift in itertools.product(range(flat.numel()), range(1, domain.num_values)):
            moved = flat.clone()
            moved[i] = (moved[i] - domain.low + shift) % domain.num_values + domain.low
            leaves = point[:j] + (moved.reshape(x.shape),) + point[j + 1 :]
            changed[i] |= terms_changed(before, all_terms(to_values(leaves)))
        rows.append(changed.cpu().numpy())
    return np.logical_or.reduce(rows)


def coloured_terms_fn(
    all_terms: Callable[[Values], torch.Tensor],
    j: int,
    colours: np.ndarray,
    owners: np.ndarray,
    to_values: Callable[[tuple], Values],
) -> Callable[[tuple, int, int | None], torch.Tensor]:
    """``(leaves, v, colour) -> g`` of coloured leaf ``j``, shape of the leaf: for each colour,
    the terms with that colour's coordinates set to ``v`` summed by their owner (a term
    depends on at most one coordinate of a colour:
    :func:`discrete_kernels.colouring.term_owners`), so coordinate ``i`` gets the terms it
    owns at ``x_i = v``. One evaluation per colour; with ``colour`` (not None) that colour's
    alone, the other coordinates' entries 0.

    ``colours``: integer array of the leaf's shape; ``owners``: shape (C, E), ``N`` where a
    term has no owner of that colour.
    """
    size = int(colours.size)
    on_device: dict = {}  # the colours and owners as tensors, per device

    def terms(leaves: tuple, value: int, only: int | None = None) -> torch.Tensor:
        x = leaves[j]
        if x.device not in on_device:
            on_device[x.device] = (
                torch.as_tensor(colours.reshape(-1), device=x.device),
                torch.as_tensor(owners, device=x.device),
            )
        flat_colours, owner_rows = on_device[x.device]
        flat = x.reshape(-1)
        total: torch.Tensor | None = None
        for colour in range(owner_rows.shape[0]) if only is None else [only]:
            changed = torch.where(flat_colours == colour, torch.full_like(flat, value), flat)
            leaves_c = leaves[:j] + (changed.reshape(x.shape),) + leaves[j + 1 :]
            evaluated = all_terms(to_values(leaves_c))
            if total is None:
                total = torch.zeros(size + 1, dtype=evaluated.dtype, device=x.device)
            # unowned terms may be -inf/NaN at this substitution: keep them out of the sums
            safe = torch.where(owner_rows[colour] < size, evaluated, 0.0)
            total = total.index_add(0, owner_rows[colour], safe)
        assert total is not None
        return total[:size].reshape(x.shape)

    return terms
