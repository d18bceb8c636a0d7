"""NumPyro adapter of discrete-kernels: drop-in ``MCMCKernel`` subclasses.

>>> import numpyro_ext as nx
>>> mcmc = MCMC(nx.DMALA(model), num_warmup=1000, num_samples=2000)  # doctest: +SKIP
"""

from discrete_kernels.domains import Binary, Categorical, Ordinal

from .ab import AB, ABAdaptState
from .acs import ACS, ACSState
from .arviz import gibbs_fields, to_arviz
from .base import DiscreteKernel, DiscreteState, DLPState
from .esh import ESH, ESHState, JarzynskiResult, esh_jarzynski
from .steps import DMALA, DULA, GWG

__all__ = [
    "gibbs_fields",
    "to_arviz",
    "ESH",
    "ESHState",
    "JarzynskiResult",
    "esh_jarzynski",
    "AB",
    "ABAdaptState",
    "ACS",
    "ACSState",
    "DLPState",
    "DiscreteKernel",
    "DiscreteState",
    "DMALA",
    "DULA",
    "GWG",
    "Binary",
    "Categorical",
    "Ordinal",
]
