"""Pyro adapter of discrete-kernels: drop-in ``pyro.infer.mcmc.MCMCKernel`` subclasses.

>>> import pyro_ext as px
>>> mcmc = pyro.infer.MCMC(px.DMALA(model), num_samples=2000, warmup_steps=1000)  # doctest: +SKIP
>>> idata = px.to_arviz(mcmc)  # doctest: +SKIP
"""

from discrete_kernels.domains import Binary, Categorical, Ordinal

from ._target import discrete_sites
from .ab import AB
from .acs import ACS
from .arviz import to_arviz
from .base import DiscreteKernel
from .discrete_gibbs import DiscreteGibbs
from .esh import ESH
from .gibbs import Gibbs
from .steps import DMALA, DULA, GWG

__all__ = [
    "ESH",
    "AB",
    "ACS",
    "DMALA",
    "DULA",
    "GWG",
    "Binary",
    "Categorical",
    "DiscreteGibbs",
    "DiscreteKernel",
    "Gibbs",
    "Ordinal",
    "discrete_sites",
    "to_arviz",
]
