"""The Pyro kernels: each is the driver (:class:`pyro_ext.DiscreteKernel`) and a core sampler
spec, registered in one line. Their options are documented with the specs (in
:mod:`discrete_kernels.samplers`); every kernel also takes ``model`` or ``potential_fn`` with
``domain``, and the site options of :class:`discrete_kernels.sites.SiteOptions`."""

from __future__ import annotations

from discrete_kernels.samplers import ab, acs, dlp, gibbs, gwg, plate_gibbs

from .driver import DiscreteKernel

__all__ = ["AB", "ACS", "DMALA", "DULA", "GWG", "DiscreteGibbs", "PlateGibbs"]


class DMALA(DiscreteKernel, sampler=dlp.DMALA):
    """Pyro kernel of DMALA (:class:`discrete_kernels.samplers.dlp.DMALA`)."""


class DULA(DiscreteKernel, sampler=dlp.DULA):
    """Pyro kernel of DULA (:class:`discrete_kernels.samplers.dlp.DULA`)."""


class GWG(DiscreteKernel, sampler=gwg.GWG):
    """Pyro kernel of GWG (:class:`discrete_kernels.samplers.gwg.GWG`)."""


class AB(DiscreteKernel, sampler=ab.AB):
    """Pyro kernel of AB (:class:`discrete_kernels.samplers.ab.AB`); ``tuned_parameters()`` is
    the tuned ``step_size`` and ``balance``, ``adapt_state.quadratic`` the quadratic proposal
    in use."""


class ACS(DiscreteKernel, sampler=acs.ACS):
    """Pyro kernel of ACS (:class:`discrete_kernels.samplers.acs.ACS`); ``schedule()`` is the
    cycle in use (``alpha`` and ``beta`` of length ``steps_per_cycle``, whether the tuning
    finished)."""

    schedule = DiscreteKernel.tuned_parameters


class DiscreteGibbs(DiscreteKernel, sampler=gibbs.DiscreteGibbs):
    """One coordinate at a time, in a random order each sweep (Pyro has no such kernel):
    :class:`discrete_kernels.samplers.gibbs.DiscreteGibbs`."""


class PlateGibbs(DiscreteKernel, sampler=plate_gibbs.PlateGibbs):
    """Pyro kernel of PlateGibbs (:class:`discrete_kernels.samplers.plate_gibbs.PlateGibbs`):
    model mode only (the plates come from the model's trace); alone in ``pyro.infer.MCMC`` or
    as a block of :class:`pyro_ext.Gibbs` next to ``NUTS``. A site whose coordinates interact
    through terms given element by element (a chain's or a lattice's edges as a tensor) is
    drawn colour by colour (colours found at setup, or ``blocks={"x": colours}``)."""
