"""Pyro ACS (core: :mod:`discrete_kernels.acs`; spec: ``samplers.ACSSpec``)."""

from __future__ import annotations

from collections import OrderedDict

from discrete_kernels.acs import DONE
from discrete_kernels.constructors import ACSConstructor

from .base import DiscreteKernel

__all__ = ["ACS"]


class ACS(ACSConstructor, DiscreteKernel):
    """Automatic cyclical scheduling for Pyro: DLP proposals on a cycle of step sizes and
    balances, tuned automatically during warmup (one proposal per warmup step). Options,
    statistics and the tuning as :class:`numpyro_ext.ACS`; ``kernel.schedule()`` returns the
    cycle in use."""

    def _log_entries(self) -> OrderedDict:
        log = super()._log_entries()
        phase = int(self._adapt_state.phase)
        log["phase"] = "tuned" if phase == DONE else f"tuning {phase}"
        return log

    def schedule(self) -> dict:
        """The cycle in use: ``alpha`` and ``beta`` tensors of length ``steps_per_cycle``, and
        whether the tuning finished."""
        final = self._spec.adapt_final(self._adapt_state)
        return {**final, "tuned": bool(final["tuned"])}
