"""What the adapters know about each leaf, and the checks on a model's sites, written once.

The adapters find a model's sites with their own PPL; the bookkeeping (how a leaf's local
information is computed, the domain of an integer interval, the messages for bad input) is
the same for both and lives here.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .domains import MAX_NUM_VALUES, Domain, Ordinal
from .proposals import AUTO_EXACT_BUDGET, FIRST_ORDER_NATS_LIMIT, FIRST_ORDER_TV_LIMIT

__all__ = [
    "EXACT",
    "PRIOR_DRAWS",
    "GRADIENT",
    "ONE_HOT_GRADIENT",
    "LeafSpec",
    "check_discrete_sites",
    "auto_exact_message",
    "check_leaf_size",
    "exact_sites_option",
    "first_order_is_badly_wrong",
    "switch_badly_estimated_sites",
    "ordinal_from_bounds",
    "unsupported_site_error",
]

PRIOR_DRAWS = 1
"""Prior draws of a block's sites at which ``exact_sites="auto"`` checks the gradient, besides
the start (each costs one gradient and ``16 S`` log densities per site, at setup)."""

# How a leaf's local information is computed:
GRADIENT = "gradient"  # d f / d value of the relaxed f; local has the leaf's shape
ONE_HOT_GRADIENT = "one_hot_gradient"  # d f / d one-hot value; a table
EXACT = "exact"  # f at every single-site change; a table


@dataclass(frozen=True, eq=False)
class LeafSpec:
    """Static description of one leaf: its name, domain and how its locals are evaluated."""

    name: Any
    domain: Domain
    mode: str

    @property
    def is_table(self) -> bool:
        return self.mode != GRADIENT


def unwrap_distribution(fn: Any) -> Any:
    """The base distribution under ``Independent``/``Expanded``/masked wrappers (both PPLs
    name it ``base_dist``)."""
    while hasattr(fn, "base_dist"):
        fn = fn.base_dist
    return fn


def unwrap_support(support: Any) -> Any:
    """The base constraint under ``independent`` constraints (``base_constraint`` in both
    PPLs)."""
    while hasattr(support, "base_constraint"):
        support = support.base_constraint
    return support


def ordinal_from_bounds(name: str, lower: np.ndarray, upper: np.ndarray) -> Ordinal:
    """The ordinal domain of an integer-interval site with (possibly per-coordinate) bounds."""
    lower, upper = np.asarray(lower), np.asarray(upper)
    low, high = int(lower.min()), int(upper.max())
    if high <= low:
        raise ValueError(f"Site '{name}' has a single value; nothing to sample.")
    if high - low + 1 > MAX_NUM_VALUES:
        raise ValueError(
            f"Site '{name}' takes {high - low + 1} values ({low} .. {high}); these kernels build "
            f"a table over all values of a coordinate and allow at most {MAX_NUM_VALUES}."
        )
    uniform = lower.min() == lower.max() and upper.min() == upper.max()
    return Ordinal(
        high - low + 1,
        low,
        lower=None if uniform else lower,
        upper=None if uniform else upper,
    )


def check_leaf_size(name: Any, shape: Sequence[int]) -> None:
    """Refuse a site with no coordinates (e.g. a plate of size 0): nothing to sample."""
    if any(int(n) == 0 for n in shape):
        raise ValueError(f"Site {name!r} has shape {tuple(shape)}: no coordinates to sample.")


def exact_sites_option(owner: str, exact_sites: Any) -> tuple[bool, tuple]:
    """``(auto, names)`` from a kernel's ``exact_sites`` argument: ``"auto"`` or names."""
    if isinstance(exact_sites, str):
        if exact_sites == "auto":
            return True, ()
        raise ValueError(
            f"{owner}: exact_sites must be 'auto' or a list of site names, got {exact_sites!r}."
        )
    return False, tuple(exact_sites)


def first_order_is_badly_wrong(errors: tuple[float, float]) -> bool:
    """Whether ``(total_variation, median_error)`` of a site calls for exact differences."""
    tv, nats = errors
    return tv > FIRST_ORDER_TV_LIMIT or nats > FIRST_ORDER_NATS_LIMIT


def auto_exact_message(
    owner: str, name: Any, errors: tuple[float, float], evaluations: int, switched: bool
) -> str:
    """What the kernel says when a site's first-order estimate is badly wrong."""
    tv, nats = errors
    found = (
        f"{owner}: for site {name!r} the gradient's local differences are far from the exact "
        f"ones (median error {nats:.3g} nats per change; total variation {tv:.2f} between the "
        "proposals they imply; checked at the start and a prior draw)"
    )
    if switched:
        return (
            f"{found}. Sampling {name!r} with exact differences instead ({evaluations} "
            "log-density evaluations per step); pass exact_sites=[] to keep the gradient."
        )
    return (
        f"{found}, but exact differences would cost {evaluations} log-density evaluations "
        f"per step, so the gradient is kept; the chain may mix slowly or freeze. Pass "
        f"exact_sites=[{name!r}] to evaluate them exactly anyway."
    )


def switch_index_sites(
    owner: str, specs: Sequence[LeafSpec], failing: Sequence[int], sizes: Sequence[int]
) -> tuple[LeafSpec, ...]:
    """``exact_sites="auto"``: gradient sites whose values the model uses as indices (so the
    log density cannot be differentiated in them) switched to exact differences when that
    costs at most ``AUTO_EXACT_BUDGET`` evaluations per step, with a warning each; the others
    are left for the setup's error."""
    out = list(specs)
    for j in failing:
        spec = specs[j]
        evaluations = int(sizes[j]) * spec.domain.num_values
        if evaluations > AUTO_EXACT_BUDGET:
            continue
        warnings.warn(
            f"{owner}: the model uses site {spec.name!r} as an index (its log density has no "
            f"gradient in that value); sampling it with exact differences ({evaluations} "
            "log-density evaluations per step).",
            stacklevel=5,
        )
        out[j] = LeafSpec(spec.name, spec.domain, EXACT)
    return tuple(out)


def switch_badly_estimated_sites(
    owner: str,
    specs: Sequence[LeafSpec],
    errors_by_point: Sequence[Sequence[tuple[float, float] | None]],
    sizes: Sequence[int],
) -> tuple[LeafSpec, ...]:
    """``exact_sites="auto"``: the leaf specs with badly estimated gradient sites switched to
    exact differences, warning about each such site.

    Parameters
    ----------
    owner : the kernel's name, for the warnings
    specs : the leaves' specs
    errors_by_point : per checked point, per leaf, ``(total_variation, median_error)`` from
        :func:`discrete_kernels.proposals.first_order_error_at` (None for non-gradient leaves)
    sizes : per leaf, its number of coordinates
    """
    out = list(specs)
    for j, spec in enumerate(specs):
        found: list[tuple[float, float]] = [
            e for e in (point[j] for point in errors_by_point) if e is not None
        ]
        if spec.mode != GRADIENT or not found:
            continue
        worst = (max(e[0] for e in found), max(e[1] for e in found))
        if not first_order_is_badly_wrong(worst):
            continue
        evaluations = int(sizes[j]) * spec.domain.num_values
        switch = evaluations <= AUTO_EXACT_BUDGET
        warnings.warn(
            auto_exact_message(owner, spec.name, worst, evaluations, switch), stacklevel=5
        )
        if switch:
            out[j] = LeafSpec(spec.name, spec.domain, EXACT)
    return tuple(out)


def unsupported_site_error(name: str, fn: Any, supported: str) -> ValueError:
    return ValueError(
        f"Site '{name}' has distribution {type(fn).__name__} with support {fn.support}, "
        f"which these kernels cannot sample; supported: {supported}."
    )


def check_discrete_sites(
    kernel_name: str,
    latent: Sequence[str],
    discrete: Sequence[str],
    exact_sites: Sequence[str],
    *,
    gibbs: str,
    selector: str,
    not_counted: str,
    supported: str,
) -> None:
    """Raise when a standalone discrete kernel cannot sample the model's latent sites.

    Parameters
    ----------
    kernel_name : str
    latent, discrete : site names (``discrete`` a subset of ``latent``)
    exact_sites : names the user asked to evaluate exactly
    gibbs, selector : the adapter's Gibbs composite and discrete-site selector, for the hint
    not_counted : which sites do not count as latent, for the message
    supported : the distributions the adapter supports
    """
    continuous = [n for n in latent if n not in discrete]
    if continuous:
        raise ValueError(
            f"{kernel_name} samples discrete sites only, but the model has continuous latent "
            f"sites {list(continuous)}. Use it as a block of {gibbs}, e.g. "
            f"Gibbs([({kernel_name}(model), {selector}), (NUTS(model), None)]), or condition "
            "on those sites."
        )
    if not discrete:
        raise ValueError(
            f"{kernel_name} found no discrete latent site in the model ({not_counted} do not "
            f"count); supported: {supported}."
        )
    unknown = sorted(set(exact_sites) - set(discrete))
    if unknown:
        raise ValueError(
            f"exact_sites: {unknown} are not discrete latent sites of the model; "
            f"the discrete latent sites are {list(discrete)}."
        )
