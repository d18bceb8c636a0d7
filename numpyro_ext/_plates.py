"""Plate-aware exact tables in NumPyro: which discrete sites are conditionally independent in
their coordinates, and their per-coordinate terms.

A site's coordinates are conditionally independent given the rest when every log-density term
that depends on the site is indexed by the site's plates (read from the trace's plate frames)
and no other term depends on it. Then the terms of the model evaluated with every coordinate
set to ``v``, each summed over its other dimensions, give ``g_i(v)`` for all coordinates at
once, and the exact table ``T[i, v] = f(x with x_i = v)`` costs ``S`` evaluations
(:func:`discrete_kernels.sites.table_from_element_terms`). The claim is verified numerically at
setup against single-site changes; a site that fails keeps its other mode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.gibbs import with_conditioning
from numpyro.infer.util import compute_log_probs

from discrete_kernels.sites import (
    LeafSpec,
    align_element_term,
    plate_check_draws,
    plate_dims_of,
    plate_table_mismatch,
    substitutions_at,
)

__all__ = ["element_terms_fn", "plate_dims", "verify_plate_table"]


def plate_dims(site: dict) -> tuple[dict, str | None]:
    """``({plate name: dim}, None)`` of a site whose every dimension is a plate, or
    ``({}, reason)`` when the site cannot be treated plate by plate
    (:func:`discrete_kernels.sites.plate_dims_of`)."""
    frames = [(frame.name, frame.dim, frame.size) for frame in site["cond_indep_stack"]]
    return plate_dims_of(jnp.shape(site["value"]), tuple(site["fn"].event_shape), frames)


def element_terms_fn(
    prepared_model: Callable,
    names: Sequence[str],
    j: int,
    leaf_dims: dict,
    shape: tuple,
    model_args: tuple,
    model_kwargs: dict | None,
) -> Callable[[tuple], jax.Array]:
    """``leaves -> g`` of leaf ``j``: the sum of every term indexed by all of the leaf's plates,
    each reduced to the leaf's shape (the terms outside those plates are left out: the check
    at setup verifies they do not depend on the leaf)."""
    kwargs = {} if model_kwargs is None else model_kwargs

    def terms(leaves: tuple) -> jax.Array:
        z = dict(zip(names, leaves))
        log_probs, model_trace = compute_log_probs(
            prepared_model, model_args, with_conditioning(kwargs, z), {}, sum_log_prob=False
        )
        total = jnp.zeros(shape, jnp.result_type(float))
        for name, log_prob in log_probs.items():
            frames = {f.name: f.dim for f in model_trace[name]["cond_indep_stack"]}
            if all(frames.get(p) == d for p, d in leaf_dims.items()):
                total = total + align_element_term(jnp.asarray(log_prob), leaf_dims, shape)
        return total

    return terms


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
    (:func:`discrete_kernels.sites.plate_check_draws`), else the reason (in words)."""
    x = leaves[j]
    size = int(np.prod(x.shape))
    chosen, others = plate_check_draws(spec.domain, x.shape, seed)
    compiled_local = jax.jit(local_fn)
    compiled_density = jax.jit(jax.vmap(log_density))
    points = [leaves] + [leaves[:j] + (jnp.asarray(y, x.dtype),) + leaves[j + 1 :] for y in others]
    for point in points:
        f, local = compiled_local(point)
        table = np.asarray(local[j], np.float64).reshape(size, -1)[chosen]
        batch = substitutions_at(spec.domain, point[j], chosen)
        full = tuple(
            batch if k == j else jnp.broadcast_to(y, (batch.shape[0],) + y.shape)
            for k, y in enumerate(point)
        )
        exact = np.asarray(compiled_density(full), np.float64).reshape(len(chosen), -1)
        reason = plate_table_mismatch(table, exact, float(f))
        if reason is not None:
            return reason
    return None
