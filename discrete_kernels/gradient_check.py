"""The gradient's first-order local differences checked along the warmup, written once for
both adapters.

``exact_sites="auto"`` judges each gradient site at setup, at the start and a prior draw. A
gradient can be fine there and badly wrong later: the coefficients next to inclusion
indicators move during warmup (and with them the curvature in each indicator), or the
start puts observed animals' indicators where a clamped probability makes the log density
flat. So during the first half of warmup the adapters compare, every
:attr:`CheckSchedule.every` draws, each gradient site's first-order local differences with
exact ones (a few coordinates, or every coordinate of a site in plates), and watch whether the
site changes at all. A site found badly estimated, or that made no change for
:attr:`CheckSchedule.window` draws, is switched to exact differences where that is affordable
and warned about otherwise. The check is a function of the chain alone, evaluated at fixed
draws, so it is deterministic given the chain's seed; the decisions freeze at the end of
warmup, so the sampling phase runs one fixed kernel.

Everything here acts on arrays of any array-API library (jitted and vmapped in NumPyro) or on
Python values (messages, the schedule).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ._xp import Array, array_namespace, log_softmax
from .domains import Binary, Domain, Ordinal
from .local import finite_local, local_delta

__all__ = [
    "first_order_error_at",
    "CHECKED_COORDINATES",
    "UPHILL_NATS",
    "CheckSchedule",
    "STUCK_ERROR_NATS",
    "FirstOrderCheck",
    "badly_wrong",
    "binary_gradient_from_table",
    "check_schedule",
    "checked_coordinates",
    "coordinate_total_variation",
    "first_order_check",
    "is_check_draw",
    "site_report",
    "switch_message",
    "switchable",
    "not_switched_because",
    "unswitched_message",
]

CHECKED_COORDINATES = 16
"""Coordinates of a site compared with exact differences at each check (every coordinate of
a site whose exact table comes from its plates, at the cost of ``S`` evaluations)."""

UPHILL_NATS = 10.0
"""A site is also judged badly estimated when one checked change gains more than this many
nats exactly while the gradient underestimates it by more than this: a change that a Gibbs
step would take at once and a first-order proposal hardly makes (a clamped probability's flat
gradient at an impossible state, an indicator whose effect saturates). At a stationary state a
coordinate sits that far below its alternative with probability at most ``exp(-10)``."""

STUCK_ERROR_NATS = 1.0
"""A site that stops changing during warmup is switched to exact differences only when its
gradient's largest error at the check exceeds this (nats): otherwise exact differences would
propose as the gradient does and change nothing (a strongly coupled lattice in an ordered
state, a site the data pin down)."""

TV_LIMIT = 0.3
"""Mean total variation between the proposals the gradient and the exact differences imply
above which a site is badly estimated (at setup and along the warmup)."""

NATS_LIMIT = 5.0
"""Median error of a single-coordinate change (nats) above which a site is badly estimated
(at setup and along the warmup)."""


class CheckSchedule(NamedTuple):
    """When the warmup checks a gradient site.

    - **every** - draws between two checks (the first at draw 0, the start).
    - **stop** - no check at or after this draw (half of the warmup), so that a site switched
      at the last check still has half of the warmup to settle.
    - **window** - a site that made no change in this many draws is stuck.
    """

    every: int
    stop: int
    window: int


def check_schedule(num_warmup: int) -> CheckSchedule:
    """The schedule of a warmup of ``num_warmup`` draws: about ten checks in its first half
    (every ``max(5, num_warmup // 20)`` draws), stuck after two check intervals."""
    every = max(5, int(num_warmup) // 20)
    return CheckSchedule(every, int(num_warmup) // 2, 2 * every)


def is_check_draw(schedule: CheckSchedule, index: Any) -> Any:
    """Whether draw ``index`` (an int or an integer scalar array) is a check."""
    return (index % schedule.every == 0) & (index < schedule.stop)


def checked_coordinates(size: int, num_checks: int, seed: int = 0) -> np.ndarray:
    """Flat coordinates each check of a site of ``size`` coordinates looks at.

    Parameters
    ----------
    size : int
        Coordinates of the site.
    num_checks : int
        Checks in the warmup (at least 1).
    seed : int
        Fixed: the same coordinates on every chain and run.

    Returns
    -------
    int array, shape (num_checks, k) with ``k = min(size, CHECKED_COORDINATES)``: every
    coordinate when ``size <= CHECKED_COORDINATES``, else successive slices of random
    permutations, so that the checks together cover the site.
    """
    k = min(int(size), CHECKED_COORDINATES)
    if size <= CHECKED_COORDINATES:
        return np.tile(np.arange(size), (max(num_checks, 1), 1))
    rng = np.random.default_rng(seed)
    needed = max(num_checks, 1) * k
    order = np.concatenate([rng.permutation(size) for _ in range(-(-needed // size))])
    return order[:needed].reshape(max(num_checks, 1), k)


class FirstOrderCheck(NamedTuple):
    """How wrong a site's gradient is at the checked coordinates (scalar arrays).

    - **total_variation** - mean over coordinates of the total variation between the locally
      balanced single-coordinate proposals the gradient and the exact differences imply.
    - **median_error** - median of ``|delta_gradient - delta_exact|`` (nats) over the changes
      inside the support.
    - **uphill** - the largest ``min(delta_exact, delta_exact - delta_gradient)`` over the
      changes: above :data:`UPHILL_NATS`, a change much better than the current value that
      the gradient does not see.
    - **max_error** - the largest ``|delta_gradient - delta_exact|`` over the changes: below
      :data:`STUCK_ERROR_NATS` exact differences would propose about as the gradient does.
    """

    total_variation: Array
    median_error: Array
    uphill: Array
    max_error: Array


def coordinate_total_variation(
    delta_gradient: Array, delta_exact: Array, valid: Array | None = None
) -> Array:
    """Per coordinate, the total variation between ``softmax(delta / 2)`` of the gradient's
    and of the exact local differences (the locally balanced proposals they imply).

    Parameters
    ----------
    delta_gradient, delta_exact : arrays, shape (k, S)
    valid : bool array broadcastable to (k, S), optional
        Candidates inside each coordinate's support.

    Returns
    -------
    array, shape (k,), in [0, 1]
    """
    xp = array_namespace(delta_exact)
    usable = xp.isfinite(delta_exact) & xp.isfinite(delta_gradient)
    if valid is not None:
        usable = usable & valid
    minus_inf = xp.full_like(delta_exact, -xp.inf)
    p = xp.exp(log_softmax(xp.where(usable, delta_gradient / 2, minus_inf)))
    q = xp.exp(log_softmax(xp.where(usable, delta_exact / 2, minus_inf)))
    return 0.5 * xp.sum(xp.abs(p - q), axis=-1)


def _masked_median(values: Array, mask: Array) -> Array:
    """Median of ``values[mask]`` (the mean of the two middle ones for an even count; 0 when
    the mask is empty), with no value-dependent control flow."""
    xp = array_namespace(values)
    flat = xp.reshape(values, (-1,))
    keep = xp.reshape(mask, (-1,))
    ordered = xp.sort(xp.where(keep, flat, xp.full_like(flat, xp.inf)))
    count = xp.sum(xp.astype(keep, xp.int32))
    low = xp.maximum((count - 1) // 2, xp.zeros_like(count))
    high = xp.maximum(count // 2, xp.zeros_like(count))
    middle = (
        xp.take(ordered, xp.reshape(low, (1,)))[0] + xp.take(ordered, xp.reshape(high, (1,)))[0]
    ) / 2
    return xp.where(count > 0, middle, xp.zeros_like(middle))


def first_order_check(
    domain: Domain, x: Array, gradient: Array, delta_exact: Array, valid: Array | None = None
) -> FirstOrderCheck:
    """The gradient's first-order local differences against exact ones at ``k`` coordinates.

    Parameters
    ----------
    domain : Domain
        Binary or ordinal (a gradient site).
    x, gradient : arrays, shape (k,)
        The coordinates' values and the gradient there (non-finite entries count as 0, as in
        the kernels' proposals).
    delta_exact : array, shape (k, S)
        ``f(x with x_c = v) - f(x)``.
    valid : bool array broadcastable to (k, S), optional
        Candidates inside each coordinate's support (ordinal sites with per-coordinate
        bounds).

    Returns
    -------
    FirstOrderCheck
    """
    xp = array_namespace(delta_exact)
    gradient = finite_local(xp.astype(gradient, delta_exact.dtype), False)
    estimate = local_delta(domain, x, gradient, False)
    tv = xp.mean(coordinate_total_variation(estimate, delta_exact, valid))
    inside = xp.isfinite(delta_exact)
    if valid is not None:
        inside = inside & valid
    changes = inside & ((estimate != 0) | (delta_exact != 0))
    median = _masked_median(xp.abs(estimate - delta_exact), changes)
    gain = xp.minimum(delta_exact, delta_exact - estimate)
    uphill = xp.max(xp.where(changes, gain, xp.full_like(gain, -xp.inf)))
    error = xp.abs(estimate - delta_exact)
    largest = xp.max(xp.where(changes, error, xp.zeros_like(error)))
    return FirstOrderCheck(tv, median, uphill, largest)


def first_order_error_at(
    domain: Domain, x, gradient, chosen: Sequence[int], delta_exact
) -> tuple[float, float]:
    """How wrong a leaf's first-order local differences are at the ``chosen`` coordinates (the
    setup's check of ``exact_sites="auto"``, on concrete numpy arrays).

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
        The mean of :func:`coordinate_total_variation` over the chosen coordinates, and the
        median over the changes ``v != x_c`` inside the support of
        ``|delta_gradient - delta_exact|`` in nats.
    """
    x_chosen = np.reshape(x, (-1,))[list(chosen)]
    estimate = local_delta(domain, x_chosen, np.reshape(gradient, (-1,))[list(chosen)], False)
    exact = np.asarray(delta_exact, np.float64)
    valid = np.ones(exact.shape, bool)
    if isinstance(domain, Ordinal):
        table = domain.valid_candidates(np.zeros(np.shape(x), np.float64))
        if table is not None:
            table = np.broadcast_to(table, np.shape(x) + (domain.num_values,))
            valid = table.reshape(-1, domain.num_values)[list(chosen)]
    tv = float(np.mean(coordinate_total_variation(estimate, exact, valid)))
    changes = valid & (estimate != 0) | valid & (exact != 0)
    errors = np.abs(estimate - exact)[changes & np.isfinite(exact)]
    return tv, float(np.median(errors)) if errors.size else 0.0


def badly_wrong(check: FirstOrderCheck) -> Array:
    """Whether a check calls for exact differences (a boolean scalar array)."""
    return (
        (check.total_variation > TV_LIMIT)
        | (check.median_error > NATS_LIMIT)
        | (check.uphill > UPHILL_NATS)
    )


def binary_gradient_from_table(table: Array) -> Array:
    """A binary leaf's exact table ``T[..., v] = f(x with x_i = v)`` as a gradient.

    For a binary coordinate the local difference of its only change is
    ``g_i * (1 - 2 x_i)`` from a gradient and ``T[i, 1 - x_i] - T[i, x_i]`` from a table; the
    two agree for every ``x_i`` with ``g_i = T[i, 1] - T[i, 0]``. So a binary gradient site
    switches to exact differences without changing the shape of its local information (what
    a compiled chain state holds).

    Parameters
    ----------
    table : array, shape (n..., 2)

    Returns
    -------
    array, shape (n...)
    """
    return table[..., 1] - table[..., 0]


def switchable(domain: Domain, evaluations: int, budget: int, *, same_shape: bool) -> bool:
    """Whether a gradient site can be switched to exact differences during warmup: its exact
    table costs at most ``budget`` evaluations per step, and (``same_shape``: an adapter whose
    compiled state cannot change shape, NumPyro) its exact differences fit a gradient's shape
    (binary sites: :func:`binary_gradient_from_table`)."""
    if evaluations > budget:
        return False
    return isinstance(domain, Binary) or not same_shape


def site_report(check: FirstOrderCheck) -> str:
    """A check's numbers in words (host values)."""
    return (
        f"median error {float(check.median_error):.3g} nats per change, total variation "
        f"{float(check.total_variation):.2f} between the proposals they imply, largest "
        f"underestimated gain {max(float(check.uphill), 0.0):.3g} nats"
    )


def _reason(name: Any, check: FirstOrderCheck | None, window: int) -> str:
    if check is None:
        return f"site {name!r} made no change in {window} draws"
    return (
        f"the gradient's local differences for site {name!r} were far from the exact ones "
        f"({site_report(check)})"
    )


def switch_message(
    owner: str,
    name: Any,
    draw: int,
    check: FirstOrderCheck | None,
    window: int,
    evaluations: int,
) -> str:
    """What a kernel says when the warmup switches a site to exact differences (``check``:
    None when the site was stuck rather than found badly estimated)."""
    return (
        f"{owner}: at warmup draw {draw}, {_reason(name, check, window)}. Sampling {name!r} "
        f"with exact differences from here on ({evaluations} log-density evaluations per "
        f"step); pass exact_sites=[{name!r}] to use them from the start, or exact_sites=[] "
        "to keep the gradient."
    )


def unswitched_message(
    owner: str, name: Any, draw: int, check: FirstOrderCheck | None, window: int, why: str
) -> str:
    """What a kernel says at the end of warmup about a site that the warmup found badly
    estimated (``check``) or that made no change in its last ``window`` draws (``check``
    None, ``draw`` the end of warmup) but could not switch to exact differences (``why``)."""
    return (
        f"{owner}: at warmup draw {draw}, {_reason(name, check, window)}, and it was not "
        f"switched to exact differences ({why}); its draws may be stuck or mix badly. Pass "
        f"exact_sites=[{name!r}] to evaluate its local differences exactly, or sample it "
        "with another kernel (a Gibbs block of DiscreteGibbs, or a plate kernel)."
    )


def not_switched_because(domain: Domain, evaluations: int, budget: int) -> str:
    """Why :func:`switchable` said no, in words."""
    if evaluations > budget:
        return (
            f"its exact differences cost {evaluations} log-density evaluations per step, "
            f"more than the automatic budget of {budget}"
        )
    return (
        f"the site is not binary ({type(domain).__name__}): its exact differences do not fit "
        "the compiled state of its gradient, and only binary sites switch during NumPyro's "
        "compiled warmup"
    )
