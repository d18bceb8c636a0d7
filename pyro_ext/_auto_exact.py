"""``exact_sites="auto"`` at a Pyro kernel's setup: which gradient sites switch to exact
differences (:func:`check_gradient_sites`). At the start and a prior draw, each gradient site's
first-order local differences are compared with exact ones on a few coordinates (the core's
rule, :func:`discrete_kernels.sites.switch_badly_estimated_sites`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from discrete_kernels import sites as site_rules
from discrete_kernels.domains import is_windowed
from discrete_kernels.gradient_check import first_order_error_at
from discrete_kernels.tables import substitutions_at

from ._target import (
    GRADIENT,
    LeafSpec,
    as_tensor,
    fork_rng,
    make_local_fn,
    model_log_density,
    to_internal,
    to_user,
    trace_model,
)

__all__ = ["check_gradient_sites"]


def check_gradient_sites(
    owner: str,
    specs: tuple[LeafSpec, ...],
    start: dict,
    model: Callable,
    args: tuple,
    kwargs: dict,
    plate_sites: set | frozenset = frozenset(),
) -> tuple[LeafSpec, ...]:
    """``exact_sites="auto"``: at the start and a prior draw, compare each gradient site's
    first-order local differences with exact ones on a few coordinates; a site whose gradient
    proposal is badly wrong is switched to exact differences when that costs at most
    ``AUTO_EXACT_BUDGET`` evaluations per step (``S`` for a site in ``plate_sites``, whose
    table comes from its per-coordinate terms), and is warned about otherwise."""
    log_density = model_log_density(model, args, kwargs)
    local_fn = make_local_fn(log_density, specs)
    points = [start]  # the start and fresh prior draws of the block's sites
    with fork_rng():  # leave the user's random stream as it was
        for _ in range(site_rules.PRIOR_DRAWS):
            other = trace_model(model, args, kwargs)
            points.append({s.name: other.nodes[s.name]["value"].detach() for s in specs})
    errors_by_point = []
    for point in points:
        leaves = tuple(to_internal(s, as_tensor(point[s.name])) for s in specs)
        f, local = local_fn(leaves)
        values = {s.name: to_user(s, x) for s, x in zip(specs, leaves)}
        errors: list[Any] = [None] * len(specs)
        for j, spec in enumerate(specs):
            if spec.mode != GRADIENT or is_windowed(spec.domain):  # no table of all values
                continue
            x = leaves[j]
            chosen = list(range(min(x.numel(), 16)))
            batch = substitutions_at(spec.domain, x, chosen)
            with torch.no_grad():
                table = torch.stack([log_density({**values, spec.name: v}) for v in batch])
            errors[j] = first_order_error_at(
                spec.domain,
                x.cpu().numpy(),
                local[j].double().cpu().numpy(),
                chosen,
                (table.double() - f.double()).reshape(len(chosen), -1).cpu().numpy(),
            )
        errors_by_point.append(errors)
    # a site in plates costs S evaluations of its terms per step, not N (S - 1)
    evaluations = [
        site_rules.table_evaluations(
            s.domain, as_tensor(start[s.name]).numel(), plate=s.name in plate_sites
        )
        if s.mode == GRADIENT and not is_windowed(s.domain)
        else 0
        for s in specs
    ]
    return site_rules.switch_badly_estimated_sites(owner, specs, errors_by_point, evaluations)
