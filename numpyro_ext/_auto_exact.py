"""``exact_sites="auto"`` at a NumPyro kernel's setup: which gradient sites switch to exact
differences (:func:`check_gradient_sites`). At the start and a prior draw, each gradient site's
first-order local differences are compared with exact ones on a few coordinates (the core's
rule, :func:`discrete_kernels.sites.switch_badly_estimated_sites`); a site used as an index,
which cannot be differentiated, is found by shapes alone and switched first.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from discrete_kernels import sites as site_rules
from discrete_kernels.domains import is_windowed
from discrete_kernels.gradient_check import first_order_error_at
from discrete_kernels.tables import substitutions_at

from ._once import jit_once, run_once
from ._plate_setup import terms_colouring
from ._prior_trace import prior_trace
from ._target import EXACT, GRADIENT, LeafSpec, make_local_fn

if TYPE_CHECKING:
    from ._setup import SiteSetup

__all__ = ["check_gradient_sites"]


def check_gradient_sites(
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
            batch = jax.vmap(lambda x, d=domain, j=j: substitutions_at(d, x, chosen[j]))(points[j])
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
    # the keys as separate outputs of one program run once (iterating over a key array
    # compiles an index per key)
    keys = run_once(lambda: tuple(random.split(random.key(1000), site_rules.PRIOR_DRAWS)))
    for key in keys:
        draw = prior_trace(model, key, model_args, model_kwargs)
        rows.append(tuple(jnp.asarray(draw[n]["value"], x.dtype) for n, x in zip(names, leaves)))
    try:
        tables_cost = sum(
            site_rules.table_evaluations(spec.domain, math.prod(x.shape))
            for spec, x in zip(specs, leaves)
            if spec.mode == EXACT
        )
        compiled_local_fn = jit_once(make_local_fn(log_density, specs), 1 + tables_cost)
        evaluated = [compiled_local_fn(row) for row in rows]
    except TypeError:  # some site is used as an index: find it, then check the rest

        def colours_of(j: int) -> np.ndarray | None:
            return terms_colouring(setup, j, specs[j], rows[:2], None, model_args, model_kwargs)[0]

        switched = _switch_index_sites(owner, specs, leaves, log_density, plate_sites, colours_of)
        if switched == specs:
            return specs
        again = setup.trial(switched)
        return check_gradient_sites(
            owner, again, model, model_trace, model_args, model_kwargs, plate_sites
        )
    # stacked in NumPy: each eager JAX operation would compile a program of its own
    points = tuple(np.stack([np.asarray(x) for x in parts]) for parts in zip(*rows))
    f = np.stack([np.asarray(e[0]) for e in evaluated])
    local = tuple(
        np.stack([np.asarray(x) for x in parts]) for parts in zip(*[e[1] for e in evaluated])
    )
    # in NumPy: each eager index of a JAX array below would compile a program of its own
    tables = {j: np.asarray(t) for j, t in run_once(tables_at, points).items()}
    errors_by_point = []
    for p in range(f.shape[0]):
        errors: list[Any] = [None] * len(specs)
        for j in gradient_sites:
            errors[j] = first_order_error_at(
                specs[j].domain,
                np.asarray(points[j][p]),
                np.asarray(local[j][p], np.float64),
                chosen[j],
                np.asarray(tables[j][p], np.float64).reshape(len(chosen[j]), -1) - float(f[p]),
            )
        errors_by_point.append(errors)
    # a site in plates costs S evaluations of its terms per step, not N (S - 1)
    evaluations = [
        site_rules.table_evaluations(s.domain, math.prod(shape), plate=s.name in plate_sites)
        if s.mode == GRADIENT and not is_windowed(s.domain)
        else 0
        for s, shape in zip(specs, setup.leaf_shapes)
    ]
    return site_rules.switch_badly_estimated_sites(owner, specs, errors_by_point, evaluations)


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
    # a site in plates costs S evaluations of its terms per step, a coloured one C x S, not
    # N (S - 1)
    evaluations = {
        j: site_rules.table_evaluations(
            specs[j].domain, int(np.prod(jnp.shape(leaves[j]))), plate=specs[j].name in plate_sites
        )
        for j in failing
    }
    for j in failing:
        if evaluations[j] > site_rules.AUTO_EXACT_BUDGET and colours_of:
            colours = colours_of(j)
            if colours is not None:
                evaluations[j] = site_rules.table_evaluations(
                    specs[j].domain, 0, plate=True, colours=int(colours.max()) + 1
                )
    return site_rules.switch_index_sites(
        owner, specs, failing, [evaluations.get(j, 0) for j in range(len(specs))]
    )
