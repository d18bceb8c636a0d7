"""NumPyro adapter of discrete-kernels: drop-in ``MCMCKernel`` subclasses.

>>> import numpyro_ext as nx
>>> mcmc = MCMC(nx.DMALA(model), num_warmup=1000, num_samples=2000)  # doctest: +SKIP
"""

from discrete_kernels.domains import Binary, Categorical, Ordinal

from .arviz import gibbs_fields, to_arviz
from .esh import ESH, ESHState, JarzynskiResult, esh_jarzynski
from .kernels import AB, ACS, DMALA, DULA, GWG, ABAdaptState, ACSState, DLPState

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
    "DMALA",
    "DULA",
    "GWG",
    "Binary",
    "Categorical",
    "Ordinal",
]
