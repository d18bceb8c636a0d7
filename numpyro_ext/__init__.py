"""NumPyro adapter of discrete-kernels: drop-in ``MCMCKernel`` subclasses.

>>> import numpyro_ext as nx
>>> mcmc = MCMC(nx.DMALA(model), num_warmup=1000, num_samples=2000)  # doctest: +SKIP
"""

from discrete_kernels.domains import Binary, Categorical, Integer, Ordinal

from .arviz import gibbs_fields, to_arviz
from .driver import DiscreteKernel, DiscreteState
from .esh import ESH, ESHState, JarzynskiResult, esh_jarzynski
from .kernels import AB, ACS, DMALA, DULA, GWG, PlateGibbs
from .marginal import MarginalNUTS, MarginalNUTSState
from .paired import PairedGibbs, PairedGibbsState
from .paired_nuts import PairedNUTS, PairedNUTSState

__all__ = [
    "AB",
    "ACS",
    "DMALA",
    "DULA",
    "ESH",
    "GWG",
    "Binary",
    "Categorical",
    "DiscreteKernel",
    "DiscreteState",
    "ESHState",
    "Integer",
    "JarzynskiResult",
    "MarginalNUTS",
    "MarginalNUTSState",
    "Ordinal",
    "PairedGibbs",
    "PairedGibbsState",
    "PairedNUTS",
    "PairedNUTSState",
    "PlateGibbs",
    "esh_jarzynski",
    "gibbs_fields",
    "to_arviz",
]
