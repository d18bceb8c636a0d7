"""NumPyro adapter of discrete-kernels: drop-in ``MCMCKernel`` subclasses.

>>> import numpyro_ext as nx
>>> mcmc = MCMC(nx.DMALA(model), num_warmup=1000, num_samples=2000)  # doctest: +SKIP
"""

from discrete_kernels.domains import Binary, Categorical, Ordinal

from .kernels import ACS, DMALA, DULA, GWG, ACSState, DLPState

__all__ = [
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
