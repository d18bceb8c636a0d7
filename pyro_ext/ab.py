"""Pyro AB (core: :mod:`discrete_kernels.ab`; spec: ``samplers.ABSpec``)."""

from __future__ import annotations

from collections import OrderedDict

from discrete_kernels.constructors import ABConstructor

from .base import DiscreteKernel

__all__ = ["AB"]


class AB(ABConstructor, DiscreteKernel):
    """Any-scale balanced sampler for Pyro: ``variant="1st" | "trace" | "shift" | "max"``,
    ``(step_size, balance)`` tuned on the jump distance during warmup and ``W`` fitted from a
    burn-in inside warmup, as :class:`numpyro_ext.AB` (same options and statistics)."""

    @property
    def quadratic(self):
        """The quadratic proposal in use (:class:`discrete_kernels.QuadraticProposal`; None
        for AB-1st)."""
        return None if self._adapt_state is None else self._adapt_state.quadratic

    def _log_entries(self) -> OrderedDict:
        log = super()._log_entries()
        final = self._spec.adapt_final(self._adapt_state)
        log["step size"] = f"{float(final['step_size']):.3g}"
        log["balance"] = f"{float(final['balance']):.3g}"
        return log

    def parameters(self) -> dict:
        """The tuned ``step_size`` and ``balance`` (frozen after warmup)."""
        return {k: float(v) for k, v in self._spec.adapt_final(self._adapt_state).items()}
