"""Pyro single-site Gibbs (core: :mod:`discrete_kernels.gibbs`; spec:
``samplers.GibbsSpec``)."""

from __future__ import annotations

from collections.abc import Callable

from discrete_kernels.constructors import DiscreteGibbsConstructor

from ._target import to_user
from .base import DiscreteKernel

__all__ = ["DiscreteGibbs"]


class DiscreteGibbs(DiscreteGibbsConstructor, DiscreteKernel):
    """One coordinate at a time, in a random order each sweep (Pyro has no such kernel).

    Each coordinate is resampled from its exact conditional (``S`` model evaluations for
    ``S`` candidate values), or with Liu's modified (Metropolised) or a random-walk
    proposal. One MCMC draw is one sweep over every discrete coordinate. The update rule is
    :func:`discrete_kernels.gibbs_site_proposal`.

    Parameters
    ----------
    model, potential_fn, domain
        As in :class:`DMALA`.
    random_walk : bool
        Uniform proposals over the coordinate's values, MH corrected.
    modified : bool
        Never propose the current value (Liu, 1996).
    """

    def _local_fn(self) -> Callable:
        """The log density only (no gradient): ``leaves -> (f, ())``."""
        log_density, specs = self._log_density(), self._specs

        def local_fn(leaves: tuple) -> tuple:
            values = {s.name: to_user(s, x) for s, x in zip(specs, leaves)}
            return log_density(values).detach(), ()

        return local_fn
