"""Pyro adapter of discrete-kernels: drop-in ``pyro.infer.mcmc.MCMCKernel`` subclasses.

>>> import pyro_ext as px
>>> mcmc = pyro.infer.MCMC(px.DMALA(model), num_samples=2000, warmup_steps=1000)  # doctest: +SKIP
>>> idata = px.to_arviz(mcmc)  # doctest: +SKIP
"""

from discrete_kernels.domains import Binary, Categorical, Integer, Ordinal

from ._target import discrete_sites
from .arviz import to_arviz
from .driver import DiscreteKernel
from .esh import ESH
from .gibbs import Gibbs
from .kernels import AB, ACS, DMALA, DULA, GWG, DiscreteGibbs, PlateGibbs
from .paired import PairedGibbs

__all__ = [
    "AB",
    "ACS",
    "DMALA",
    "DULA",
    "ESH",
    "GWG",
    "Binary",
    "Categorical",
    "DiscreteGibbs",
    "DiscreteKernel",
    "Gibbs",
    "Integer",
    "Ordinal",
    "PairedGibbs",
    "PlateGibbs",
    "discrete_sites",
    "to_arviz",
]
