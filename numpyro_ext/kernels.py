"""The NumPyro kernels: each is the driver (:class:`numpyro_ext.DiscreteKernel`) and a core
sampler spec, registered in one line. Their options are documented with the specs (in
:mod:`discrete_kernels.samplers`); every kernel also takes ``model`` or ``potential_fn`` with
``domain``, and ``exact_sites`` (:class:`discrete_kernels.sites.SiteOptions`)."""

from __future__ import annotations

from discrete_kernels.samplers import ab, acs, dlp, gwg, plate_gibbs

from .driver import DiscreteKernel

__all__ = ["AB", "ACS", "DMALA", "DULA", "GWG", "PlateGibbs"]


class DMALA(DiscreteKernel, sampler=dlp.DMALA):
    """NumPyro kernel of DMALA (:class:`discrete_kernels.samplers.dlp.DMALA`)."""


class DULA(DiscreteKernel, sampler=dlp.DULA):
    """NumPyro kernel of DULA (:class:`discrete_kernels.samplers.dlp.DULA`)."""


class GWG(DiscreteKernel, sampler=gwg.GWG):
    """NumPyro kernel of GWG (:class:`discrete_kernels.samplers.gwg.GWG`)."""


class AB(DiscreteKernel, sampler=ab.AB):
    """NumPyro kernel of AB (:class:`discrete_kernels.samplers.ab.AB`)."""


class ACS(DiscreteKernel, sampler=acs.ACS):
    """NumPyro kernel of ACS (:class:`discrete_kernels.samplers.acs.ACS`); ``schedule(state)``
    is the cycle in use (``alpha`` and ``beta`` of length ``steps_per_cycle``, whether the
    tuning finished)."""

    schedule = DiscreteKernel.tuned_parameters


class PlateGibbs(DiscreteKernel, sampler=plate_gibbs.PlateGibbs):
    """NumPyro kernel of PlateGibbs (:class:`discrete_kernels.samplers.plate_gibbs.PlateGibbs`):
    model mode only (the plates come from the model's trace)."""
