"""NumPyro adapter of discrete-kernels: drop-in ``MCMCKernel`` subclasses.

>>> import numpyro_ext as nx
>>> mcmc = MCMC(nx.DMALA(model), num_warmup=1000, num_samples=2000)  # doctest: +SKIP
"""

from discrete_kernels.domains import Binary, Categorical, Ordinal

from .kernels import DMALA, DULA, GWG, DLPState

__all__ = ["DLPState", "DMALA", "DULA", "GWG", "Binary", "Categorical", "Ordinal"]
