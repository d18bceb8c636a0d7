"""The warmup's check of gradient sites in Pyro (:mod:`discrete_kernels.gradient_check`).

Pyro calls the kernel once per draw from Python, so a site found badly estimated during
warmup is switched by rebuilding the kernel's leaves: its local information becomes the
exact single-site table (``N (S - 1)`` model evaluations per step, within
:data:`~discrete_kernels.sites.AUTO_EXACT_BUDGET`; any domain), and the cached chain is
recomputed. A site whose table would cost more is reported at the end of warmup instead
(Pyro has no plate tables yet). The checks run at the draws of the
:class:`~discrete_kernels.gradient_check.CheckSchedule`, on every coordinate of a switchable
site and on a few coordinates of the others; nothing is checked after warmup.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import torch

from discrete_kernels import ChainState, Sites
from discrete_kernels import gradient_check as gc
from discrete_kernels.domains import Ordinal, is_windowed
from discrete_kernels.sites import AUTO_EXACT_BUDGET, EXACT, GRADIENT, LeafSpec, table_evaluations
from discrete_kernels.tables import substitutions_at

from ._target import to_user

__all__ = ["WarmupCheck", "switched_setup"]

#: rows of the coordinates schedule of a site checked on a few coordinates (cycled)
_COORDINATE_ROWS = 32


@dataclasses.dataclass
class _Watched:
    index: int
    spec: LeafSpec
    size: int
    switch: bool
    evaluations: int
    snapshot: torch.Tensor
    quiet_since: int = 0
    flagged_at: int = -1
    report: gc.FirstOrderCheck | None = None
    exact: bool = False


class WarmupCheck:
    """The watched gradient leaves of one Pyro kernel and their check state (host values).

    Parameters
    ----------
    owner : the kernel's name, for messages
    leaves : the kernel's leaves after setup
    start : the chain at the start of warmup
    num_warmup : warmup draws
    """

    def __init__(
        self, owner: str, leaves: tuple[LeafSpec, ...], start: ChainState, num_warmup: int
    ) -> None:
        self.owner = owner
        self.num_warmup = int(num_warmup)
        self.schedule = gc.check_schedule(num_warmup)
        self.watched = []
        for j, spec in enumerate(leaves):
            if spec.mode != GRADIENT or is_windowed(spec.domain):  # no table of all values
                continue
            size = int(start.x[j].numel())
            evaluations = table_evaluations(spec.domain, size)
            switch = gc.switchable(spec.domain, evaluations, AUTO_EXACT_BUDGET, same_shape=False)
            self.watched.append(_Watched(j, spec, size, switch, evaluations, start.x[j].clone()))
        self.num_leaves = len(leaves)

    def __bool__(self) -> bool:
        return bool(self.watched)

    def due(self, draw: int) -> bool:
        """Whether draw ``draw`` (from 0) starts with a check."""
        return bool(gc.is_check_draw(self.schedule, draw))

    def check(self, draw: int, setup: Any, state: ChainState) -> tuple[LeafSpec, ...] | None:
        """The check before draw ``draw`` at ``state``: the new leaves when it switches a
        leaf to exact differences (warned about), else None."""
        leaves = list(setup.leaves)
        switched = False
        for w in self.watched:
            if w.exact or w.flagged_at >= 0:
                continue
            found = self._first_order_check(w, setup, state, draw // self.schedule.every)
            changed = bool((state.x[w.index] != w.snapshot).any())
            if changed:
                w.quiet_since = draw
            w.snapshot = state.x[w.index].clone()
            stuck = (
                w.switch
                and draw - w.quiet_since >= self.schedule.window
                and float(found.max_error) > gc.STUCK_ERROR_NATS
            )
            bad = bool(gc.badly_wrong(found))
            if not (bad or stuck):
                continue
            w.flagged_at, w.report = draw, found if bad else None
            if w.switch:
                w.exact = switched = True
                leaves[w.index] = LeafSpec(w.spec.name, w.spec.domain, EXACT)
                message = gc.switch_message(
                    self.owner,
                    w.spec.name,
                    draw,
                    w.report,
                    self.schedule.window,
                    w.evaluations,
                )
                warnings.warn(message, stacklevel=3)
        return tuple(leaves) if switched else None

    def _first_order_check(
        self, w: _Watched, setup: Any, state: ChainState, number: int
    ) -> gc.FirstOrderCheck:
        """Gradient against exact differences of one leaf at check ``number``: every
        coordinate of a switchable leaf, a row of its schedule for the others."""
        j, domain = w.index, w.spec.domain
        x = state.x[j]
        if w.switch:
            chosen = list(range(w.size))
        else:
            rows = gc.checked_coordinates(w.size, _COORDINATE_ROWS, seed=j)
            chosen = rows[number % rows.shape[0]].tolist()
        values = {s.name: to_user(s, v) for s, v in zip(setup.leaves, state.x)}
        batch = substitutions_at(domain, x, chosen)
        flat = x.reshape(-1)[chosen]
        with torch.no_grad():
            table = torch.stack(
                [setup.log_density({**values, w.spec.name: v}) for v in batch]
            ).reshape(len(chosen), -1)
        delta = table.double() - state.log_density.double()
        gradient = state.local[j].reshape(-1)[chosen].double()
        valid = None
        if isinstance(domain, Ordinal):
            table_valid = domain.valid_candidates(delta)
            if table_valid is not None:
                shape = tuple(x.shape) + (domain.num_values,)
                valid = table_valid.expand(shape).reshape(-1, domain.num_values)[chosen]
        return gc.first_order_check(domain, flat, gradient, delta, valid)

    def end_of_warmup(self, state: ChainState) -> None:
        """At the last warmup draw: a warning for each leaf found badly estimated but not
        switched, or (in a block of several leaves) not switched and unchanged since the last
        check."""
        last_check = (self.schedule.stop - 1) // self.schedule.every * self.schedule.every
        quiet = self.num_warmup - 1 - last_check
        for w in self.watched:
            if w.exact:
                continue
            why = (
                "exact differences are switched on only where the gradient's were off by more "
                f"than {gc.STUCK_ERROR_NATS:g} nat at a check in the first half of warmup"
                if w.switch
                else gc.not_switched_because(w.spec.domain, w.evaluations, AUTO_EXACT_BUDGET)
            )
            if w.flagged_at >= 0:
                message = gc.unswitched_message(
                    self.owner, w.spec.name, w.flagged_at, w.report, quiet, why
                )
            elif self.num_leaves > 1 and not bool((state.x[w.index] != w.snapshot).any()):
                message = gc.unswitched_message(
                    self.owner, w.spec.name, self.num_warmup, None, quiet, why
                )
            else:
                continue
            warnings.warn(message, stacklevel=3)


def switched_setup(setup: Any, leaves: tuple[LeafSpec, ...], sampler: Any) -> Any:
    """The Pyro setup with new leaves (the sites rebuilt with the same preconditioner, and the
    sampler's checks)."""
    sites = Sites.from_leaves(leaves, setup.sites.preconditioner)
    sampler.check_sites(sites, sum(math.prod(x.shape) for x in setup.chain.x))
    return dataclasses.replace(setup, leaves=leaves, sites=sites)
