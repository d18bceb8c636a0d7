"""Pyro DULA, DMALA and GWG (core: :mod:`discrete_kernels.steps`; constructors:
:mod:`discrete_kernels.constructors`)."""

from __future__ import annotations

from discrete_kernels.constructors import DMALAConstructor, DULAConstructor, GWGConstructor

from .base import DiscreteKernel

__all__ = ["DMALA", "DULA", "GWG"]


class DMALA(DMALAConstructor, DiscreteKernel):
    """Discrete Metropolis-adjusted Langevin algorithm (Zhang et al., 2022) for Pyro.

    Every coordinate is proposed in parallel from the discrete Langevin proposal and the move
    is MH corrected. One model evaluation with its gradient per step (the current one is
    cached). Parameters as :class:`numpyro_ext.DMALA`; in potential mode ``potential_fn``
    takes a dict of site values, ``domain`` is one domain or a dict by site name, and
    ``initial_params`` (given to ``pyro.infer.MCMC``) fix the sites' shapes.
    """


class DULA(DULAConstructor, DiscreteKernel):
    """The DMALA proposal without the MH step (biased; see :class:`numpyro_ext.DULA`)."""


class GWG(GWGConstructor, DiscreteKernel):
    """Gibbs with gradients (Grathwohl et al., 2021): one coordinate per step, MH corrected.
    Parameters as :class:`numpyro_ext.GWG`."""
