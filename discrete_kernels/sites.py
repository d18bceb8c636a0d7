"""Site rules, written once for both adapters: which leaves a kernel samples, how each one's
local information is computed (a gradient, or a table of exact single-coordinate changes),
when a gradient is too wrong to use, the domain of an integer interval and the messages for
bad sites.

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
from array_api_compat import device as _device

from ._xp import Array, array_namespace, log_softmax, logsumexp
from .domains import MAX_NUM_VALUES, Domain, Integer, Ordinal, as_finite, coordinate_bounds
from .local import local_delta
from .validation import check_kernel_options, check_positive_array, check_site_names

__all__ = [
    "PLATE_CHECKED_COORDINATES",
    "align_element_term",
    "not_plate_error",
    "plate_check_draws",
    "plate_dims_of",
    "plate_table_mismatch",
    "summed_out_log_density",
    "table_from_element_terms",
    "AUTO_EXACT_BUDGET",
    "CHAIN",
    "EXACT",
    "FIRST_ORDER_NATS_LIMIT",
    "FIRST_ORDER_TV_LIMIT",
    "GRADIENT",
    "PLATE",
    "ONE_HOT_GRADIENT",
    "PRIOR_DRAWS",
    "LeafSpec",
    "SiteOptions",
    "auto_exact_message",
    "SubsamplePlate",
    "check_discrete_sites",
    "check_minibatch",
    "check_windowed_sites",
    "count_domain",
    "check_leaf_size",
    "check_preconditioners",
    "first_order_error_at",
    "first_order_is_badly_wrong",
    "first_order_proposal_error",
    "ordinal_from_bounds",
    "coordinate_substitutions",
    "single_site_substitutions",
    "substitutions_at",
    "switch_badly_estimated_sites",
    "switch_index_sites",
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

FIRST_ORDER_TV_LIMIT = 0.3
"""Above this total variation the gradient's proposal is judged badly wrong for a site."""

FIRST_ORDER_NATS_LIMIT = 5.0
"""Above this median error (in nats) of a single-coordinate change the gradient's estimate is
judged badly wrong: a joint move adds these errors in its MH ratio, and its acceptance falls
like ``exp(-error)`` per changed coordinate."""

AUTO_EXACT_BUDGET = 256
"""At most this many log-density evaluations per step for a site switched to exact
differences automatically (``N * S`` for ``N`` coordinates of ``S`` values)."""


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
    from .kernel import split_options

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
        :func:`first_order_error_at` (None for non-gradient leaves)
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
    check_site_names("exact_sites", exact_sites, list(discrete))


# ------------------------------------------------------------------------------------------
# exact tables and the first-order check


@dataclass(frozen=True)
class SubsamplePlate:
    """A plate of the model that draws a minibatch: its **name**, its **size** ``N`` and its
    **subsample_size** ``b < N`` (the PPL scales the terms inside it by ``N / b``)."""

    name: str
    size: int
    subsample_size: int

    def __str__(self) -> str:
        return f"plate {self.name!r} subsamples {self.subsample_size} of {self.size}"


def check_minibatch(
    owner: str,
    refusal: str | None,
    plates: Sequence[SubsamplePlate],
    leaves: Sequence[LeafSpec],
    exact_names: Sequence[str],
    latent_in_plates: Mapping[str, str],
    remove_hint: str,
) -> None:
    """Refuse what cannot run on a minibatch estimate of the log density.

    Parameters
    ----------
    owner : str
        The kernel's name.
    refusal : str or None
        The sampler's :meth:`~discrete_kernels.Sampler.minibatch_refusal`.
    plates : the model's subsampling plates (not empty)
    leaves : the kernel's leaves (a table leaf compares log densities)
    exact_names : the sites the user listed in ``exact_sites``
    latent_in_plates : ``{site: plate}`` for latent sites inside a subsampling plate
    remove_hint : how the PPL spells the fix, e.g. ``"remove subsample_size="``

    Raises
    ------
    ValueError
        Naming the kernel, the plate and the reason.
    """
    where = "; ".join(str(p) for p in plates)
    if refusal is not None:
        raise ValueError(
            f"{owner}: {where} (a new minibatch at every step): {refusal}. Use DULA with a "
            f"fixed step size (stochastic-gradient DLP), or {remove_hint}."
        )
    for name, plate in latent_in_plates.items():
        raise ValueError(
            f"{owner}: latent site {name!r} is inside subsampling plate {plate!r}: its "
            "coordinates would be other rows at every step. Keep latent sites outside the "
            f"subsampling plate, or {remove_hint}."
        )
    if exact_names:
        raise ValueError(
            f"{owner}: {where}: exact_sites={list(exact_names)} compares log densities, and "
            "on a minibatch log density the differences are not exact. Pass exact_sites=[] "
            f"(stochastic gradients), or {remove_hint}."
        )
    tables = [s.name for s in leaves if s.is_table]
    if tables:
        raise ValueError(
            f"{owner}: {where}: sites {tables} need exact differences (categorical values "
            "used as indices), which compare log densities on a minibatch. Give them "
            f"another Gibbs block, or {remove_hint}."
        )


def single_site_substitutions(domain: Domain, x: Array) -> Array:
    """Every state that differs from ``x`` in at most one coordinate, for exact tables.

    Entry ``[k * S + v]`` is ``x`` with flat coordinate ``k`` set to candidate ``v`` (the
    current value included), so evaluating ``f`` on the batch and reshaping to
    ``x.shape + (S,)`` gives the exact table ``T[k, v] = f(x with x_k = v)``.

    Parameters
    ----------
    domain : Domain
    x : array, shape (n...)

    Returns
    -------
    array, shape (N * S, n...) with ``N = prod(n...)``, dtype of ``x``
    """
    xp = array_namespace(x)
    flat = xp.reshape(x, (-1,))
    size = flat.shape[0]
    num_values = domain.num_values
    values = xp.astype(xp.arange(num_values, device=_device(x)) + domain.low, x.dtype)
    at_site = xp.eye(size, dtype=xp.bool, device=_device(x))[:, None, :]  # (N, 1, N)
    batch = xp.where(at_site, values[None, :, None], flat[None, None, :])  # (N, S, N)
    return xp.reshape(batch, (size * num_values,) + tuple(x.shape))


def coordinate_substitutions(domain: Domain, x: Array, flat_index: Array) -> Array:
    """``x`` with flat coordinate ``flat_index`` (an integer array, traced or not) set to each
    candidate value: entry ``v`` of ``f`` on the batch is that coordinate's row of the exact
    table, ``T[i, v]`` (:func:`single_site_substitutions` for one coordinate).

    Returns
    -------
    array, shape (S, n...), dtype of ``x``
    """
    xp = array_namespace(x)
    flat = xp.reshape(x, (-1,))
    values = xp.astype(xp.arange(domain.num_values, device=_device(x)) + domain.low, x.dtype)
    at_site = xp.arange(flat.shape[0], device=_device(x)) == flat_index  # (N,)
    batch = xp.where(at_site[None, :], values[:, None], flat[None, :])  # (S, N)
    return xp.reshape(batch, (domain.num_values,) + tuple(x.shape))


def substitutions_at(domain: Domain, x: Array, flat_indices: Sequence[int] | Array) -> Array:
    """``x`` with one flat coordinate set to each candidate value, for the given coordinates.

    Parameters
    ----------
    domain : Domain
    x : array, shape (n...)
    flat_indices : k coordinates (indices into ``x`` flattened): a sequence of ints, or an
        integer array of shape (k,) of ``x``'s library (traced under ``jit``)

    Returns
    -------
    array, shape (k * S, n...): entry ``[m * S + v]`` is ``x`` with coordinate
    ``flat_indices[m]`` set to the ``v``-th candidate value.
    """
    xp = array_namespace(x)
    flat = xp.reshape(x, (-1,))
    size, num_values = flat.shape[0], domain.num_values
    device = _device(x)
    chosen: Array = (
        flat_indices
        if hasattr(flat_indices, "shape")
        else xp.asarray(list(flat_indices), device=device)
    )
    at_site = xp.arange(size, device=device)[None, :] == chosen[:, None]  # (k, N)
    values = xp.astype(xp.arange(num_values, device=device) + domain.low, x.dtype)
    batch = xp.where(at_site[:, None, :], values[None, :, None], flat[None, None, :])
    return xp.reshape(batch, (chosen.shape[0] * num_values,) + tuple(x.shape))


def table_from_element_terms(log_density: Array, terms: Array, x: Array, domain: Domain) -> Array:
    """The exact table ``T[i, v] = f(x with x_i = v)`` of a conditionally independent leaf.

    When the log density splits as ``f(x) = C + sum_i g_i(x_i)`` in the leaf's coordinates
    (every term that depends on the leaf is indexed by its plate, the others do not depend on
    it), ``f(x with x_i = v) = f(x) - g_i(x_i) + g_i(v)``: the ``S`` evaluations of ``g`` with
    every coordinate set to ``v`` give all ``N x S`` single-site changes.

    Parameters
    ----------
    log_density : scalar
        ``f(x)``.
    terms : array, shape (n..., S)
        ``g_i(v)`` for every coordinate ``i`` and candidate ``v`` (``NaN`` counts as ``-inf``,
        a value outside the support).
    x : integer array, shape (n...)
        The current values.
    domain : Domain

    Returns
    -------
    array, shape (n..., S)
    """
    xp = array_namespace(terms)
    terms = xp.where(xp.isnan(terms), xp.full_like(terms, -xp.inf), terms)
    # g_i(x_i) by one elementwise select per value, not a masked sum over the last axis (that
    # reduction cost 4x the model's value_and_grad on XLA's CPU at N = 10^4, S = 2)
    current = terms[..., 0]
    low = as_finite(domain).low
    for k in range(1, terms.shape[-1]):
        current = xp.where(x == low + k, terms[..., k], current)
    return terms + (log_density - current)[..., None]


def summed_out_log_density(other_terms: Array, terms: Array) -> Array:
    """The log density with a conditionally independent leaf summed out exactly.

    When ``f(x) = C + sum_i g_i(x_i)`` in the leaf's coordinates (every term that depends on
    the leaf is indexed by its plate), ``log sum_x exp f(x) = C + sum_i log sum_v exp g_i(v)``:
    ``S`` evaluations of the per-coordinate terms replace the ``S^N`` terms of the sum, and
    ``softmax(g_i)`` is coordinate ``i``'s exact conditional given the other sites.

    Parameters
    ----------
    other_terms : scalar
        ``C``: the sum of the terms outside the leaf's plates.
    terms : array, shape (n..., S)
        ``g_i(v)`` for every coordinate ``i`` and value ``v`` (``NaN`` counts as ``-inf``).

    Returns
    -------
    scalar
    """
    xp = array_namespace(terms)
    terms = xp.where(xp.isnan(terms), xp.full_like(terms, -xp.inf), terms)
    return other_terms + xp.sum(logsumexp(terms, axis=-1))


def joint_values(domain: Domain, shape: Sequence[int], max_count: int) -> np.ndarray | None:
    """Every joint value of a leaf, or None when there are more than ``max_count``.

    A leaf whose coordinates interact cannot be summed out coordinate by coordinate; when it
    has few joint values, the sum over all of them is the exact marginal
    (:func:`summed_out_log_density` with one "coordinate" whose ``S`` is their count).

    Parameters
    ----------
    domain : a finite domain (an ordinal's per-coordinate bounds are respected)
    shape : the leaf's shape
    max_count : the most joint values to list

    Returns
    -------
    ndarray of shape (M, *shape), int64, or None
    """
    low, high = coordinate_bounds(domain, tuple(shape))
    counts = (high - low + 1).reshape(-1)
    count = 1
    for c in counts.tolist():  # Python ints: no overflow on a large leaf
        count *= int(c)
        if count > max_count:
            return None
    grids = np.meshgrid(*[np.arange(c) for c in counts.tolist()], indexing="ij")
    values = np.stack([g.reshape(-1) for g in grids], -1) + low.reshape(1, -1)
    return values.reshape((-1, *shape)).astype(np.int64)


# ------------------------------------------------------------------------------------------
# plate-aware tables: which sites split by coordinate, their terms, the check at setup

PLATE_CHECKED_COORDINATES = 8
"""Coordinates of a site compared with single-site changes at setup, per checked point, before
its table is computed from its per-coordinate terms (plate mode)."""


def plate_dims_of(
    shape: Sequence[int], event_shape: Sequence[int], frames: Sequence[tuple[str, int | None, int]]
) -> tuple[dict, str | None]:
    """Which plate indexes each dimension of a site, from the site's plate frames.

    Parameters
    ----------
    shape : the site's value shape (batch shape: no event dimensions)
    event_shape : the site's distribution's event shape
    frames : ``(name, dim, size)`` of each plate the site is in (``dim`` negative, counted
        from the right of the batch shape; None for a sequential plate)

    Returns
    -------
    ``({plate name: dim}, None)`` when every dimension of size > 1 is a plate of its size
    (``({}, None)`` for a single coordinate: its table is its whole conditional), else
    ``({}, reason)`` with the reason in words.
    """
    if tuple(event_shape):
        return {}, "its coordinates are one event (an event shape, e.g. .to_event)"
    by_dim = {dim: (name, int(size)) for name, dim, size in frames if dim is not None}
    ndim = len(shape)
    dims = {}
    for axis, size in enumerate(shape):
        dim = axis - ndim
        if dim not in by_dim:
            if size == 1:
                continue
            return {}, f"its dimension {dim} (size {size}) is not a plate"
        name, plate_size = by_dim[dim]
        if plate_size != size:  # (a subsampled plate's frame has the subsample's size)
            return {}, f"its dimension {dim} (size {size}) is not its plate's ({plate_size})"
        dims[name] = dim
    return dims, None


def align_element_term(
    log_prob: Array, leaf_dims: Mapping[str, int], shape: Sequence[int]
) -> Array:
    """One log-density term indexed by (at least) a leaf's plates, in the leaf's shape: summed
    over every other dimension (inner plates, or dimensions the leaf does not have).

    Parameters
    ----------
    log_prob : array, shape (m...)
        A site's per-element log density (its batch shape), in every plate of ``leaf_dims``
        at the same dims.
    leaf_dims : ``{plate name: dim}`` of the leaf (:func:`plate_dims_of`)
    shape : the leaf's shape (n...)

    Returns
    -------
    array, shape (n...)
    """
    xp = array_namespace(log_prob)
    ndim = len(shape)
    if log_prob.ndim < ndim:
        log_prob = xp.reshape(log_prob, (1,) * (ndim - log_prob.ndim) + tuple(log_prob.shape))
    keep = {log_prob.ndim + dim for dim in leaf_dims.values()}
    extra = tuple(a for a in range(log_prob.ndim) if a not in keep)
    if extra:
        # keepdims: the kept axes stay where the leaf has them; the leading ones (all summed
        # away, since the leaf's dims are among its last ndim) are dropped
        log_prob = xp.sum(log_prob, axis=extra, keepdims=True)
        log_prob = xp.reshape(log_prob, tuple(log_prob.shape[log_prob.ndim - ndim :]))
    return xp.broadcast_to(log_prob, tuple(shape))


def plate_check_draws(domain: Domain, shape: Sequence[int], seed: int = 0) -> tuple[list, list]:
    """What the setup's check of a plate table looks at besides the start: the flat indices of
    at most :data:`PLATE_CHECKED_COORDINATES` coordinates, and two states of the leaf.

    The states are a random one (uniform over each coordinate's values, inside its bounds)
    and the same with every coordinate moved to its next value (cyclically, inside its
    bounds): a coupling between coordinates that vanishes at some values (``z_a * z_b`` at
    ``z_b = 0``) shows at one of the two for every coordinate.

    Returns
    -------
    (chosen, others)
        ``chosen`` a sorted list of flat indices; ``others`` two int64 numpy arrays of
        ``shape``.
    """
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    chosen = rng.choice(size, min(size, PLATE_CHECKED_COORDINATES), replace=False)
    domain = as_finite(domain)
    # per-coordinate bounds (an Ordinal's lower/upper): a state outside them has no density
    lower = getattr(domain, "lower", None)
    upper = getattr(domain, "upper", None)
    low = np.broadcast_to(domain.low if lower is None else np.asarray(lower), tuple(shape))
    top = domain.low + domain.num_values - 1
    high = np.broadcast_to(top if upper is None else np.asarray(upper), tuple(shape))
    other = rng.integers(low, high + 1)
    shifted = (other - low + 1) % (high - low + 1) + low
    return sorted(set(chosen.tolist())), [other, shifted]


def plate_table_mismatch(table: Any, exact: Any, log_density: float) -> str | None:
    """None when a plate table's rows match the model's single-site changes, else the reason.

    Parameters
    ----------
    table : numpy array, shape (k, S)
        Rows of the table from the per-coordinate terms at ``k`` checked coordinates.
    exact : numpy array, shape (k, S)
        The model's log density at each single-site change of those coordinates.
    log_density : the log density at the checked point (a point of zero density is not
        compared beyond its impossible values)
    """
    table, exact = np.asarray(table, np.float64), np.asarray(exact, np.float64)
    finite = np.isfinite(exact)
    if not np.array_equal(finite, np.isfinite(table)):
        return "its impossible values differ from the model's"
    if not np.isfinite(log_density):
        return None
    scale = np.maximum(1.0, np.abs(exact[finite]))
    error = np.abs(table[finite] - exact[finite]) / scale
    if error.size and float(error.max()) > 1e-3:
        return (
            "changing one coordinate changes terms outside its own plate element (a term "
            "over the whole site or across coordinates)"
        )
    return None


def not_plate_error(owner: str, name: Any, reason: str, alternatives: str) -> ValueError:
    """The refusal of a site that a plate-table sampler cannot update (``alternatives``: the
    PPL's Gibbs composite and kernels, e.g. ``"a pyro_ext.Gibbs block of px.GWG"``)."""
    return ValueError(
        f"{owner}: site {name!r} is not conditionally independent in its coordinates: "
        f"{reason}. Sample it with another kernel ({alternatives}) and keep {owner} for the "
        "sites in plates."
    )


def first_order_proposal_error(
    delta_gradient: Array, delta_exact: Array, valid: Array | None = None
) -> float:
    """Mean total variation between the locally balanced single-coordinate proposals that the
    gradient's and the exact local differences imply: ``softmax(delta / 2)`` per coordinate.

    0 when the gradient is exact (e.g. binary sites of a quadratic energy without
    self-coupling); near 1 when it points the wrong way (a value used through a comparison
    has gradient 0; a strongly curved relaxation overstates the effect of a flip). Setup-time
    diagnostic on concrete arrays.

    Parameters
    ----------
    delta_gradient, delta_exact : arrays, shape (k, S)
        Local differences of ``k`` coordinates (0 at each current value).
    valid : bool array broadcastable to (k, S), optional
        Candidates inside each coordinate's support.

    Returns
    -------
    float in [0, 1]
    """
    xp = array_namespace(delta_exact)
    usable = xp.isfinite(delta_exact) & xp.isfinite(delta_gradient)
    if valid is not None:
        usable = usable & valid
    minus_inf = xp.full_like(delta_exact, -xp.inf)
    p = xp.exp(log_softmax(xp.where(usable, delta_gradient / 2, minus_inf)))
    q = xp.exp(log_softmax(xp.where(usable, delta_exact / 2, minus_inf)))
    per_coordinate = 0.5 * xp.sum(xp.abs(p - q), axis=-1)
    return float(xp.mean(per_coordinate))


def first_order_error_at(
    domain: Domain, x, gradient, chosen: Sequence[int], delta_exact
) -> tuple[float, float]:
    """How wrong a leaf's first-order local differences are at the ``chosen`` coordinates.

    Parameters
    ----------
    domain : Domain
    x, gradient : numpy arrays, shape (n...)
    chosen : k flat coordinate indices
    delta_exact : numpy array, shape (k, S)
        ``f(x with x_c = v) - f(x)`` for each chosen coordinate ``c`` and candidate ``v``.

    Returns
    -------
    (total_variation, median_error)
        :func:`first_order_proposal_error`, and the median over the changes ``v != x_c``
        inside the support of ``|delta_gradient - delta_exact|`` in nats.
    """
    import numpy as np

    x_chosen = np.reshape(x, (-1,))[list(chosen)]
    estimate = local_delta(domain, x_chosen, np.reshape(gradient, (-1,))[list(chosen)], False)
    exact = np.asarray(delta_exact, np.float64)
    valid = np.ones(exact.shape, bool)
    if isinstance(domain, Ordinal):
        table = domain.valid_candidates(np.zeros(np.shape(x), np.float64))
        if table is not None:
            table = np.broadcast_to(table, np.shape(x) + (domain.num_values,))
            valid = table.reshape(-1, domain.num_values)[list(chosen)]
    tv = first_order_proposal_error(estimate, exact, valid)
    changes = valid & (estimate != 0) | valid & (exact != 0)
    errors = np.abs(estimate - exact)[changes & np.isfinite(exact)]
    return tv, float(np.median(errors)) if errors.size else 0.0


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
