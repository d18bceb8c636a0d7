"""Site rules, written once for both adapters: which leaves a kernel samples, how each one's
local information is computed (a gradient, or a table of exact single-coordinate changes, built
by :mod:`discrete_kernels.tables`), which sites switch to exact differences when a gradient is
too wrong to use (measured by :mod:`discrete_kernels.gradient_check`), the domain of an
integer interval, minibatch plates and the messages for bad sites.

The adapters find a model's sites with their own PPL; the bookkeeping here is the same for
both.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._xp import Array
from .domains import MAX_NUM_VALUES, Domain, Integer, Ordinal
from .gradient_check import NATS_LIMIT, TV_LIMIT
from .registration import split_options
from .tables import single_site_evaluations
from .validation import check_kernel_options, check_positive_array, check_site_names

__all__ = [
    "not_plate_error",
    "AUTO_EXACT_BUDGET",
    "CHAIN",
    "EXACT",
    "GRADIENT",
    "PLATE",
    "ONE_HOT_GRADIENT",
    "PRIOR_DRAWS",
    "LeafSpec",
    "SiteOptions",
    "auto_exact_message",
    "check_discrete_sites",
    "check_windowed_sites",
    "count_domain",
    "check_leaf_size",
    "check_preconditioners",
    "first_order_is_badly_wrong",
    "ordinal_from_bounds",
    "switch_badly_estimated_sites",
    "switch_index_sites",
    "table_evaluations",
    "unsupported_site_error",
    "unwrap_distribution",
    "unwrap_support",
    "with_windows",
]

PRIOR_DRAWS = 1
"""Prior draws of a block's sites at which ``exact_sites="auto"`` checks the gradient, besides
the start (each costs one gradient and ``16 S`` log densities per site, at setup)."""

# How a leaf's local information is computed:
GRADIENT = "gradient"  # d f / d value of the relaxed f; local has the leaf's shape
ONE_HOT_GRADIENT = "one_hot_gradient"  # d f / d one-hot value; a table
EXACT = "exact"  # f at every single-site change; a table
# f at every single-site change, from S evaluations of the per-coordinate terms of a site whose
# coordinates are conditionally independent given the rest (a plate); a table
PLATE = "plate"
# f at every change of two neighbouring flat coordinates, for a site whose coordinates interact
# only with their neighbours (a chain, :mod:`discrete_kernels.chains`); shape (N - 1, S, S)
CHAIN = "chain"

AUTO_EXACT_BUDGET = 256
"""At most this many log-density evaluations per step for a site switched to exact
differences automatically (:func:`table_evaluations`: ``N (S - 1)`` for ``N`` coordinates
of ``S`` values, ``S`` for a site in plates)."""


@dataclass(frozen=True, eq=False)
class LeafSpec:
    """Static description of one leaf: its name, domain and how its locals are evaluated."""

    name: Any
    domain: Domain
    mode: str
    #: plate mode: None (every coordinate conditionally independent), or an integer array of
    #: the leaf's shape (those of one colour are; :mod:`discrete_kernels.colouring`)
    colours: Any = None

    @property
    def num_colours(self) -> int:
        return 1 if self.colours is None else int(np.max(self.colours)) + 1

    @property
    def is_table(self) -> bool:
        return self.mode != GRADIENT

    @property
    def is_plate(self) -> bool:
        """Whether the leaf's coordinates are conditionally independent given the rest
        (verified at setup), so its table's rows are its coordinates' exact conditionals."""
        return self.mode == PLATE


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


def ordinal_from_bounds(name: str, lower: np.ndarray, upper: np.ndarray) -> Ordinal | Integer:
    """The domain of an integer-interval site with (possibly per-coordinate) bounds: an
    :class:`Ordinal` (a table over every value), or an :class:`Integer` window domain when the
    interval holds more than ``MAX_NUM_VALUES`` values (e.g. ``DiscreteUniform(0, 10**9)``).

    Bounds are read as Python integers (no fixed-width arithmetic), so wide intervals do not
    overflow."""
    lower, upper = np.asarray(lower), np.asarray(upper)
    low, high = int(lower.min()), int(upper.max())
    if high <= low:
        raise ValueError(f"Site '{name}' has a single value; nothing to sample.")
    uniform = lower.min() == lower.max() and upper.min() == upper.max()
    if high - low + 1 > MAX_NUM_VALUES:
        if not uniform:
            raise ValueError(
                f"Site '{name}' takes up to {high - low + 1} values ({low} .. {high}) with "
                "bounds that differ between its coordinates; a table over all values allows at "
                f"most {MAX_NUM_VALUES}, and the window proposal of wide intervals needs the "
                "same bounds for every coordinate. Split the site, or give every coordinate "
                "the same bounds."
            )
        return Integer(low, high)
    return Ordinal(
        high - low + 1,
        low,
        lower=None if uniform else lower,
        upper=None if uniform else upper,
    )


def with_windows(
    owner: str, leaves: Sequence[LeafSpec], window: int | Mapping[str, int] | None
) -> tuple[LeafSpec, ...]:
    """``leaves`` with the proposal windows of the ``window`` site option (model mode).

    Parameters
    ----------
    owner : the kernel's name, for messages
    leaves : the leaf specs of the model's discrete sites
    window : None (every count site keeps its window), an integer (every count site), or a
        dict ``{site: integer}``; a named site must exist and be a count site
        (:class:`Integer` domain)

    Returns
    -------
    tuple of LeafSpec, the count sites' domains with their new windows
    """
    if window is None:
        return tuple(leaves)
    names = [s.name for s in leaves]
    if isinstance(window, Mapping):
        check_site_names(f"{owner}: window", window, names)
        for name in window:
            domain = leaves[names.index(name)].domain
            if not isinstance(domain, Integer):
                raise ValueError(
                    f"{owner}: window names site {name!r}, which takes a finite set of values "
                    f"({domain!r}); the window is for count sites (integers without a table)."
                )
        widths = dict(window)
    else:
        widths = {s.name: window for s in leaves if isinstance(s.domain, Integer)}
    return tuple(
        dataclasses.replace(s, domain=dataclasses.replace(s.domain, window=int(widths[s.name])))
        if s.name in widths and isinstance(s.domain, Integer)
        else s
        for s in leaves
    )


def count_domain(name: str, lower: Any) -> Integer:
    """The :class:`Integer` domain of a site whose support is the integers ``>= lower``
    (Poisson, geometric, negative binomial, ... counts); per-coordinate lower bounds are
    read as their minimum (a proposal below a coordinate's own bound has zero density and is
    rejected)."""
    bound = np.asarray(lower)
    if bound.size == 0 or not np.all(np.isfinite(bound)):
        raise ValueError(f"Site '{name}': its lower bound {bound!r} is not a finite integer.")
    return Integer(int(bound.min()), None)


WINDOWED_SAMPLERS = "DMALA, DULA or ACS"
"""The kernels that sample a windowed (:class:`Integer`) site, for messages."""


def check_windowed_sites(
    owner: str,
    supports_windows: bool,
    names: Sequence[Any],
    domains: Sequence[Domain],
    is_table: Sequence[bool],
) -> None:
    """Refuse windowed (:class:`Integer`) sites that a kernel cannot sample.

    Parameters
    ----------
    owner : the kernel's name
    supports_windows : whether its proposal handles a window around the current value
        (the DLP family)
    names, domains, is_table : per leaf

    Raises
    ------
    ValueError
        Naming the kernel, the site and what to use instead: a kernel that needs every value
        of a coordinate (GWG, AB, Gibbs), or exact differences asked for such a site.
    """
    for name, domain, table in zip(names, domains, is_table):
        if not isinstance(domain, Integer):
            continue
        support = _integer_support(domain)
        if not supports_windows:
            raise ValueError(
                f"{owner} cannot sample site {name!r}: its values are {support}, with no table "
                f"of all values for {owner} to enumerate. Sample it with {WINDOWED_SAMPLERS} "
                "(they propose in a window around the current value), alone or as a Gibbs "
                f"block next to {owner} for the other sites."
            )
        if table:
            raise ValueError(
                f"{owner}: site {name!r} takes {support}; exact differences would enumerate "
                "every value of a coordinate. Leave it out of exact_sites: its gradient drives "
                "a proposal in a window around the current value."
            )


def _integer_support(domain: Integer) -> str:
    low = "-inf" if domain.low is None else str(domain.low)
    high = "inf" if domain.high is None else str(domain.high)
    if domain.high is None and domain.low is not None:
        return f"the integers >= {low}"
    return f"integers in [{low}, {high}]"


def check_leaf_size(name: Any, shape: Sequence[int]) -> None:
    """Refuse a site with no coordinates (e.g. a plate of size 0): nothing to sample."""
    if any(int(n) == 0 for n in shape):
        raise ValueError(f"Site {name!r} has shape {tuple(shape)}: no coordinates to sample.")


@dataclass(frozen=True)
class SiteOptions:
    """The options of a kernel that concern its sites rather than its sampler.

    - **exact_sites** - ``"auto"`` (sites whose gradient misestimates the local differences
      badly are switched to exact differences, with a warning) or a sequence of site names
      evaluated exactly (``[]``: keep every gradient).
    - **preconditioner** - per-site multipliers of the step size (DMALA and DULA; App. H of
      the DLP paper): a dict ``{site: array}`` in model mode, a pytree like the start values in
      potential mode.
    - **window** - the half-width of the proposal window of count sites (the
      :class:`~discrete_kernels.Integer` domain; DMALA and DULA), model mode: one integer
      ``>= 1`` for every count site or a dict ``{site: integer}`` (the others keep 1). In
      potential mode the ``Integer`` domain carries its own window.
    """

    exact_sites: Sequence[str] | str = "auto"
    preconditioner: Any = None
    window: int | Mapping[str, int] | None = None

    @classmethod
    def checked(cls, owner: str, options: Mapping[str, Any]) -> SiteOptions:
        """The site options a kernel was given (the others at their defaults), checked once
        (``owner``: the kernel's name, for messages)."""
        out = cls(**options)
        exact_sites_option(owner, out.exact_sites)
        if out.window is not None:
            given = out.window.values() if isinstance(out.window, Mapping) else [out.window]
            for width in given:
                try:
                    Integer(window=width)
                except ValueError as error:
                    raise ValueError(f"{owner}: window {width!r}: {error}") from None
        return out

    @property
    def auto_exact(self) -> bool:
        """Whether ``exact_sites="auto"``."""
        return isinstance(self.exact_sites, str)

    @property
    def exact_names(self) -> tuple:
        """The sites named in ``exact_sites`` (none for ``"auto"``)."""
        return () if isinstance(self.exact_sites, str) else tuple(self.exact_sites)


def kernel_options(
    sampler: type,
    model: Any,
    potential_fn: Any,
    domain: Any,
    options: Mapping[str, Any],
    domain_hint: str,
) -> tuple[Any, SiteOptions]:
    """A kernel constructor's arguments checked once: ``(spec, site options)``.

    ``sampler`` is the kernel's spec class; ``options`` its keyword arguments (the spec's
    options and the site options, any other name a ``TypeError``); ``domain_hint`` says how
    a pytree of domains is written in the calling PPL (for the error message).
    """
    check_kernel_options(sampler.name, model, potential_fn, domain, domain_hint)  # type: ignore[attr-defined]
    own, site = split_options(sampler, dict(options))
    return sampler(**own), SiteOptions.checked(sampler.name, site)  # type: ignore[attr-defined]


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
    return tv > TV_LIMIT or nats > NATS_LIMIT


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


def table_evaluations(domain: Domain, size: int, *, plate: bool = False, colours: int = 0) -> int:
    """Log-density evaluations per step of a leaf's exact table: ``S`` for a leaf in plates
    (its terms at each value, every coordinate at once), ``C S`` for one coloured in ``C``
    colours, ``N (S - 1)`` for a single-site table
    (:func:`~discrete_kernels.tables.single_site_evaluations`)."""
    num_values = domain.num_values
    if plate:
        return num_values * max(colours, 1)
    return single_site_evaluations(size, num_values)


def switch_index_sites(
    owner: str, specs: Sequence[LeafSpec], failing: Sequence[int], evaluations: Sequence[int]
) -> tuple[LeafSpec, ...]:
    """``exact_sites="auto"``: gradient sites whose values the model uses as indices (so the
    log density cannot be differentiated in them) switched to exact differences when their
    table costs at most ``AUTO_EXACT_BUDGET`` evaluations per step (``evaluations[j]``), with
    a warning each; the others are left for the setup's error."""
    out = list(specs)
    for j in failing:
        spec, cost = specs[j], int(evaluations[j])
        if cost > AUTO_EXACT_BUDGET:
            continue
        warnings.warn(
            f"{owner}: the model uses site {spec.name!r} as an index (its log density has no "
            f"gradient in that value); sampling it with exact differences ({cost} "
            "log-density evaluations per step).",
            stacklevel=5,
        )
        out[j] = LeafSpec(spec.name, spec.domain, EXACT)
    return tuple(out)


def switch_badly_estimated_sites(
    owner: str,
    specs: Sequence[LeafSpec],
    errors_by_point: Sequence[Sequence[tuple[float, float] | None]],
    evaluations: Sequence[int],
) -> tuple[LeafSpec, ...]:
    """``exact_sites="auto"``: the leaf specs with badly estimated gradient sites switched to
    exact differences, warning about each such site.

    Parameters
    ----------
    owner : the kernel's name, for the warnings
    specs : the leaves' specs
    errors_by_point : per checked point, per leaf, ``(total_variation, median_error)`` from
        :func:`first_order_error_at` (None for non-gradient leaves)
    evaluations : per leaf, the log-density evaluations per step of its exact table
        (:func:`table_evaluations`)
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
        cost = int(evaluations[j])
        switch = cost <= AUTO_EXACT_BUDGET
        warnings.warn(auto_exact_message(owner, spec.name, worst, cost, switch), stacklevel=5)
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
    check_site_names("exact_sites", exact_sites, list(discrete))


# ------------------------------------------------------------------------------------------
# minibatches


def not_plate_error(owner: str, name: Any, reason: str, alternatives: str) -> ValueError:
    """The refusal of a site that a plate-table sampler cannot update (``alternatives``: the
    PPL's Gibbs composite and kernels, e.g. ``"a pyro_ext.Gibbs block of px.GWG"``)."""
    return ValueError(
        f"{owner}: site {name!r} is not conditionally independent in its coordinates: "
        f"{reason}. Sample it with another kernel ({alternatives}) and keep {owner} for the "
        "sites in plates."
    )


def check_preconditioners(
    sampler: str,
    sites: Sequence[str],
    given: Any,
    as_array: Callable[[Any], Array],
    *,
    by_name: bool = True,
) -> tuple | None:
    """Per-leaf preconditioners (positive, finite arrays or None), checked once at setup.

    ``given``: None, or with ``by_name`` a dict ``{site name: array}`` (sites left out have
    none), otherwise a sequence with one entry per site (None where the site has none).
    ``as_array`` converts an entry to the backend's float array.
    """
    if given is None:
        return None
    if by_name:
        if not isinstance(given, Mapping):
            raise ValueError(
                f"{sampler}: preconditioner must be a dict {{site name: array}}, got "
                f"{type(given).__name__}."
            )
        check_site_names(f"{sampler}: preconditioner", given, list(sites))
        values = [given.get(name) for name in sites]
    else:
        values = list(given)
    if all(v is None for v in values):
        return None
    out = []
    for name, value in zip(sites, values):
        if value is not None:
            value = as_array(value)
            check_positive_array(sampler, f"preconditioner of {name!r}", value)
        out.append(value)
    return tuple(out)
