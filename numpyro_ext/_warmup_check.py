"""The warmup's check of gradient sites in NumPyro (:mod:`discrete_kernels.gradient_check`).

NumPyro compiles the whole run, warmup and sampling, as one loop over draws, so a site cannot
change how its local information is computed between two draws by rebuilding the kernel.
Instead, a *watched* site keeps its gradient and, for each site that may be switched, a flag
in the chain state selects (``lax.cond``) between the gradient and its exact differences in
gradient form (a binary site: :func:`~discrete_kernels.gradient_check.binary_gradient_from_table`,
from its plate table at ``S`` evaluations when its plates make its coordinates conditionally
independent, from ``N * S`` single-site evaluations within
:data:`~discrete_kernels.sites.AUTO_EXACT_BUDGET` otherwise). The chain state's shapes never
change.

At the draws of the :class:`~discrete_kernels.gradient_check.CheckSchedule` (the first half
of warmup) each watched site's gradient is compared with exact differences at the current
state and its last change is looked at; a site badly estimated or stuck is switched, with a
warning, or (a non-binary site, or one too costly) reported at the end of warmup. With
vectorized chains the verdicts of all chains are pooled (any chain's finding switches the site
on every chain), so that the flags stay the same on every chain and the ``cond`` a real
branch; each of ``sequential`` or ``parallel`` chains decides on its own draws. Nothing is
checked after warmup: the sampling phase runs one fixed kernel.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from discrete_kernels import gradient_check as gc
from discrete_kernels.domains import Domain, Ordinal, is_windowed
from discrete_kernels.sites import (
    AUTO_EXACT_BUDGET,
    EXACT,
    GRADIENT,
    PLATE,
    LeafSpec,
    table_evaluations,
)
from discrete_kernels.tables import substitutions_at

from . import _host_warnings
from ._plates import element_terms_fn
from ._target import make_local_fn

if TYPE_CHECKING:
    from ._setup import SiteSetup

__all__ = ["CheckState", "WarmupCheck", "WatchedLeaf", "check_step", "plan_warmup_check"]

#: rows of the coordinates schedule of a site checked on a few coordinates (cycled)
_COORDINATE_ROWS = 32

#: a site whose single-site exact table has more entries (N x S) than this uses its plate
#: table when its plates allow it (verified at setup; the verification compiles the model
#: twice)
_PLATE_FROM = 2 * gc.CHECKED_COORDINATES


@dataclass(frozen=True, eq=False)
class WatchedLeaf:
    """One watched gradient leaf (static).

    - **index**, **spec** - the leaf's position and spec.
    - **switch** - whether the warmup may switch it to exact differences.
    - **plate_dims** - ``{plate: dim}`` when its exact table comes from its plates (verified at
      setup), else None.
    - **coordinates** - (rows, k) flat coordinates the successive checks look at (sites
      checked on a few coordinates).
    - **evaluations** - log-density evaluations per step of its exact differences.
    """

    index: int
    spec: LeafSpec
    switch: bool
    plate_dims: dict | None
    coordinates: np.ndarray
    evaluations: int


@dataclass(frozen=True, eq=False)
class WarmupCheck:
    """The watched leaves of a kernel (decided at setup, the same for every chain)."""

    leaves: tuple[WatchedLeaf, ...]

    @property
    def switchable(self) -> np.ndarray:
        return np.array([w.switch for w in self.leaves], bool)


class CheckState(NamedTuple):
    """The warmup check's part of a chain state, one entry per watched leaf.

    - **exact** - the leaf uses exact differences (bool).
    - **flagged_at** - the draw at which the warmup found it badly estimated or stuck (-1:
      never).
    - **report** - the check's :class:`~discrete_kernels.gradient_check.FirstOrderCheck`
      then, as an array of 4 (NaN: stuck).
    - **quiet_since** - the first check draw since which the leaf has had the same value at
      every check (a leaf that has not changed since then, as far as the checks see).
    - **snapshot** - the watched leaves' values at the last check.
    """

    exact: jax.Array
    flagged_at: jax.Array
    report: jax.Array
    quiet_since: jax.Array
    snapshot: tuple


def plan_warmup_check(
    leaves: Sequence[LeafSpec],
    leaf_shapes: Sequence[tuple[int, ...]],
    structural: dict,
    verify_plates: Callable[[list[str]], dict],
) -> WarmupCheck | None:
    """The watched leaves: every gradient leaf left by ``exact_sites="auto"`` at setup (but
    windowed leaves: no table of all their values exists).

    Parameters
    ----------
    leaves, leaf_shapes : the leaves after the setup's decisions, and their shapes
    structural : ``{name: (plate dims, reason or None)}`` from the trace's plates
    verify_plates : ``names -> {name: plate dims}`` of those whose plate tables are verified

    Returns
    -------
    WarmupCheck, or None when no leaf is watched.
    """
    # a windowed (count) leaf has no table of all values to check its gradient against
    candidates = [
        j for j, s in enumerate(leaves) if s.mode == GRADIENT and not is_windowed(s.domain)
    ]
    if not candidates:
        return None
    sizes = {j: math.prod(leaf_shapes[j]) for j in candidates}
    want_plates = [
        leaves[j].name
        for j in candidates
        if structural.get(leaves[j].name, ({}, "none"))[1] is None
        and sizes[j] * leaves[j].domain.num_values > _PLATE_FROM
    ]
    plates = verify_plates(want_plates) if want_plates else {}
    out = []
    for j in candidates:
        spec = leaves[j]
        dims = plates.get(spec.name)
        evaluations = table_evaluations(spec.domain, sizes[j], plate=dims is not None)
        switch = gc.switchable(spec.domain, evaluations, AUTO_EXACT_BUDGET, same_shape=True)
        coordinates = gc.checked_coordinates(sizes[j], _COORDINATE_ROWS, seed=j)
        out.append(WatchedLeaf(j, spec, switch, dims, coordinates, evaluations))
    return WarmupCheck(tuple(out))


def initial_check_state(plan: WarmupCheck | None, leaves: tuple) -> Any:
    """One chain's check state at its start ``leaves`` (``()`` without watched leaves)."""
    if plan is None:
        return ()
    w = len(plan.leaves)
    return CheckState(
        exact=jnp.zeros((w,), bool),
        flagged_at=jnp.full((w,), -1, jnp.int32),
        report=jnp.full((w, 4), jnp.nan, jnp.result_type(float)),
        quiet_since=jnp.zeros((w,), jnp.int32),
        snapshot=tuple(leaves[w.index] for w in plan.leaves),
    )


def _exact_table_fn(
    setup: Any, watched: WatchedLeaf, model_args: tuple, model_kwargs: dict | None
) -> Callable[[tuple], jax.Array]:
    """``leaves -> T`` (n..., S), the exact table of one watched leaf, by the setup's own
    ``make_local_fn`` on the leaf alone (its plate table, or its single-site table)."""
    j, spec = watched.index, watched.spec
    log_density = setup.log_density_fn(model_args, model_kwargs)
    terms = None
    if watched.plate_dims is not None:
        terms = element_terms_fn(
            setup.prepared_model,
            setup.names,
            j,
            watched.plate_dims,
            setup.leaf_shapes[j],
            model_args,
            model_kwargs,
        )
    mode = EXACT if terms is None else PLATE
    alone = (LeafSpec(spec.name, spec.domain, mode),)

    def table(leaves: tuple) -> jax.Array:
        def put(one: tuple) -> tuple:
            return leaves[:j] + one + leaves[j + 1 :]

        element = None if terms is None else {0: lambda one, v: terms(put(one), v)}
        local_fn = make_local_fn(lambda one: log_density(put(one)), alone, element)
        return local_fn((leaves[j],))[1][0]

    return table


def switching_local_fn(
    setup: Any,
    base: Callable[[tuple], tuple],
    exact: Any,
    model_args: tuple,
    model_kwargs: dict | None,
) -> Callable[[tuple], tuple]:
    """``base`` with each switchable watched leaf's gradient replaced by its exact
    differences in gradient form where ``exact`` (per watched leaf, a traced bool) holds."""
    plan: WarmupCheck | None = setup.warmup_check
    if plan is None or exact is None:
        return base
    switching = [(k, w) for k, w in enumerate(plan.leaves) if w.switch]
    if not switching:
        return base
    tables = {w.index: _exact_table_fn(setup, w, model_args, model_kwargs) for _, w in switching}

    def local_fn(leaves: tuple) -> tuple:
        f, local = base(leaves)
        local = list(local)
        for k, w in switching:
            gradient = local[w.index]

            def exact_gradient(xs: tuple, j: int = w.index, like: Any = gradient) -> Any:
                return gc.binary_gradient_from_table(tables[j](xs)).astype(like.dtype)

            local[w.index] = jax.lax.cond(
                exact[k], exact_gradient, lambda xs, g=gradient: g, leaves
            )
        return f, tuple(local)

    return local_fn


def _valid_rows(domain: Domain, shape: tuple) -> np.ndarray | None:
    """(N, S) candidates inside each coordinate's bounds, or None when all are."""
    if not isinstance(domain, Ordinal):
        return None
    valid = domain.valid_candidates(np.zeros((), np.float64))
    if valid is None:
        return None
    return np.broadcast_to(np.asarray(valid), tuple(shape) + (domain.num_values,)).reshape(
        -1, domain.num_values
    )


def check_chain(
    setup: Any,
    leaves: tuple,
    log_density_value: jax.Array,
    local: tuple,
    check_number: jax.Array,
    model_args: tuple,
    model_kwargs: dict | None,
) -> tuple[jax.Array, tuple]:
    """One chain's check of every watched leaf at its current state (its local information
    holds the gradient).

    A switchable leaf (and one with a plate table) is compared on every coordinate, from its
    exact table (``S`` evaluations for a plate table, at most ``AUTO_EXACT_BUDGET``
    otherwise), which also gives its exact differences in gradient form should the check
    switch it; another on the coordinates of this check's row of its schedule.

    Returns
    -------
    reports : array, shape (w, 4)
        The :class:`~discrete_kernels.gradient_check.FirstOrderCheck` of each watched leaf.
    gradients : tuple
        Per watched leaf, its exact differences in gradient form (switchable leaves), or None.
    """
    plan: WarmupCheck = setup.warmup_check
    log_density = setup.log_density_fn(model_args, model_kwargs)
    f = log_density_value
    rows, gradients = [], []
    for w in plan.leaves:
        j, domain = w.index, w.spec.domain
        x = jnp.reshape(leaves[j], (-1,))
        gradient = jnp.reshape(local[j], (-1,))
        valid = _valid_rows(domain, setup.leaf_shapes[j])
        exact_gradient = None
        if w.switch or w.plate_dims is not None:  # every coordinate
            table = _exact_table_fn(setup, w, model_args, model_kwargs)(leaves)
            delta = jnp.reshape(table, (x.shape[0], -1)) - f
            mask = None if valid is None else jnp.asarray(valid)
            found = gc.first_order_check(domain, x, gradient, delta, mask)
            if w.switch:
                exact_gradient = gc.binary_gradient_from_table(table).astype(local[j].dtype)
        else:  # a few coordinates, k * S evaluations
            coordinates = jnp.asarray(w.coordinates)
            chosen = coordinates[check_number % coordinates.shape[0]]
            batch = substitutions_at(domain, leaves[j], chosen)
            size = batch.shape[0]
            full = tuple(
                batch if k == j else jnp.broadcast_to(y, (size,) + jnp.shape(y))
                for k, y in enumerate(leaves)
            )
            delta = jnp.reshape(jax.vmap(log_density)(full), (chosen.shape[0], -1)) - f
            mask = None if valid is None else jnp.asarray(valid)[chosen]
            found = gc.first_order_check(domain, x[chosen], gradient[chosen], delta, mask)
        rows.append(jnp.stack([jnp.asarray(v, f.dtype) for v in found]))
        gradients.append(exact_gradient)
    return jnp.stack(rows), tuple(gradients)


def switched_locals(plan: WarmupCheck, local: tuple, gradients: tuple, newly: jax.Array) -> tuple:
    """One chain's locals with the leaves switched by this check (``newly``, per watched
    leaf) holding their exact differences (from :func:`check_chain`)."""
    out = list(local)
    for k, (w, g) in enumerate(zip(plan.leaves, gradients)):
        if g is not None:
            out[w.index] = jnp.where(newly[k], g, out[w.index])
    return tuple(out)


def changed_leaves(plan: WarmupCheck, state: CheckState, leaves: tuple) -> jax.Array:
    """(w,) whether each watched leaf of one chain differs from its value at the last check."""
    return jnp.stack(
        [jnp.any(old != leaves[w.index]) for old, w in zip(state.snapshot, plan.leaves)]
    )


def decide(
    plan: WarmupCheck,
    state: CheckState,
    reports: jax.Array,
    leaves: tuple,
    index: jax.Array,
    window: int,
) -> CheckState:
    """One chain's check state after the check at draw ``index``: leaves newly found badly
    estimated, or switchable ones with the same value at every check of the last ``window``
    draws and a gradient off by more than ``STUCK_ERROR_NATS`` somewhere, are flagged, and
    switched where they may be; the snapshot moves to ``leaves``."""
    found = jax.vmap(lambda r: gc.badly_wrong(gc.FirstOrderCheck(*r)))(reports)
    quiet_since = jnp.where(changed_leaves(plan, state, leaves), index, state.quiet_since)
    switchable = jnp.asarray(plan.switchable)
    inexact = reports[:, 3] > gc.STUCK_ERROR_NATS
    stuck = (index - quiet_since >= window) & switchable & inexact
    new = (found | stuck) & (state.flagged_at < 0) & ~state.exact
    report = jnp.where(
        (new & found)[:, None], reports, jnp.where(new[:, None], jnp.nan, state.report)
    )
    return state._replace(
        exact=state.exact | (new & switchable),
        flagged_at=jnp.where(new, index, state.flagged_at),
        report=report,
        quiet_since=quiet_since,
        snapshot=tuple(leaves[w.index] for w in plan.leaves),
    )


def _check_or_none(report: np.ndarray) -> gc.FirstOrderCheck | None:
    if np.isnan(report).any():
        return None
    return gc.FirstOrderCheck(*[float(v) for v in report])


def _rows(state: CheckState, count: int) -> tuple[np.ndarray, ...]:
    """The check state's flags on the host, one row per chain."""
    return (
        np.asarray(state.exact).reshape(-1, count),
        np.asarray(state.flagged_at).reshape(-1, count),
        np.asarray(state.report).reshape(-1, count, 4),
    )


def warn_switched(
    owner: str, plan: WarmupCheck, window: int, before: Any, state: CheckState
) -> None:
    """Host side: a warning for each leaf this check switched (the record of the first chain
    that found it)."""
    exact, flagged_at, report = _rows(state, len(plan.leaves))
    was = np.asarray(before).reshape(-1, len(plan.leaves))
    for k, w in enumerate(plan.leaves):
        chains = np.flatnonzero(exact[:, k] & ~was[:, k] & (flagged_at[:, k] >= 0))
        if not chains.size:
            continue
        c = int(chains[0])
        check = _check_or_none(report[c, k])
        message = gc.switch_message(
            owner, w.spec.name, int(flagged_at[c, k]), check, window, w.evaluations
        )
        warnings.warn(message, stacklevel=1)


def warn_unswitched(
    owner: str,
    plan: WarmupCheck,
    num_warmup: int,
    quiet_draws: int,
    state: CheckState,
    moved: Any,
    num_leaves: int,
) -> None:
    """Host side, at the last warmup draw: a warning for each leaf that was found badly
    estimated but not switched, or (in a block of ``num_leaves > 1`` leaves: the frozen-chain
    check speaks for a block of one) that is not switched and has not changed (``moved``, per
    chain and leaf) in the ``quiet_draws`` draws since the last check, on any chain."""
    exact, flagged_at, report = _rows(state, len(plan.leaves))
    unmoved = ~np.asarray(moved).reshape(-1, len(plan.leaves))
    for k, w in enumerate(plan.leaves):
        why = (
            "exact differences are switched on only where the gradient's were off by more "
            f"than {gc.STUCK_ERROR_NATS:g} nat at a check in the first half of warmup"
            if w.switch
            else gc.not_switched_because(w.spec.domain, w.evaluations, AUTO_EXACT_BUDGET)
        )
        bad = np.flatnonzero((flagged_at[:, k] >= 0) & ~exact[:, k])
        quiet = np.flatnonzero(unmoved[:, k] & ~exact[:, k] & (num_leaves > 1))
        if bad.size:
            c = int(bad[0])
            check = _check_or_none(report[c, k])
            message = gc.unswitched_message(
                owner, w.spec.name, int(flagged_at[c, k]), check, quiet_draws, why
            )
        elif quiet.size:
            message = gc.unswitched_message(owner, w.spec.name, num_warmup, None, quiet_draws, why)
        else:
            continue
        warnings.warn(message, stacklevel=1)


def check_step(
    plan: WarmupCheck,
    setup: SiteSetup,
    num_warmup: int,
    owner: str,
    replicate: Callable[[Any], Any],
    state: Any,
    index: Any,
    model_args: tuple,
    model_kwargs: dict,
    vectorized: bool,
) -> Any:
    """Before draw ``index``: at the warmup's check draws, each watched leaf's gradient
    against exact differences at the current state, and whether it changed since the last
    check; leaves badly estimated or stuck are flagged and, where they may be, switched
    (pooled over vectorized chains), their cached locals replaced by the exact
    differences the check computed, with a warning. At the last warmup draw, a warning
    for each leaf flagged but not switched, or not switched and unchanged since the last
    check. One ``cond`` per draw otherwise. ``replicate``: a tree made readable by a host
    callback from one device."""
    schedule = gc.check_schedule(num_warmup)
    last_check = (schedule.stop - 1) // schedule.every * schedule.every
    batch = jax.vmap if vectorized else (lambda f, **_: f)
    num_leaves = len(setup.leaves)

    def check(state):
        before = state.warmup_check
        number = index // schedule.every

        def one(s, c):
            leaves = setup.to_leaves(s.z)
            reports, gradients = check_chain(
                setup, leaves, -s.potential_energy, s.local, number, model_args, model_kwargs
            )
            return decide(plan, c, reports, leaves, index, schedule.window), gradients

        after, gradients = batch(one)(state, before)
        if vectorized:  # one decision for every chain
            pooled = jnp.any(after.exact, 0)
            after = after._replace(exact=jnp.broadcast_to(pooled, after.exact.shape))
        newly = after.exact & ~before.exact
        switch = batch(lambda loc, g, n: switched_locals(plan, loc, g, n))
        state = state._replace(warmup_check=after, local=switch(state.local, gradients, newly))

        def warn(was, now):
            warn_switched(owner, plan, schedule.window, was, now)

        fire = gc.is_check_draw(schedule, index) & jnp.any(newly)
        jax.lax.cond(
            jnp.any(newly),
            lambda args: _host_warnings.callback_when(fire, warn, *args),
            lambda args: None,
            replicate((before.exact, after)),
        )
        return state

    def end(state):
        c = state.warmup_check
        moved = batch(lambda s, c: changed_leaves(plan, c, setup.to_leaves(s.z)))(state, c)

        def warn(c, moved):
            quiet = num_warmup - 1 - last_check
            warn_unswitched(owner, plan, num_warmup, quiet, c, moved, num_leaves)

        _host_warnings.callback_when(index + 1 == num_warmup, warn, *replicate((c, moved)))

    def bookkeeping(state):
        state = jax.lax.cond(gc.is_check_draw(schedule, index), check, lambda s: s, state)
        jax.lax.cond(index + 1 == num_warmup, end, lambda s: None, state)
        return state

    due = gc.is_check_draw(schedule, index) | (index + 1 == num_warmup)
    return jax.lax.cond(due, bookkeeping, lambda s: s, state)
