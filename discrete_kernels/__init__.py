"""Backend-neutral core of discrete-kernels: gradient-based discrete MCMC as pure functions.

Every function acts on arrays of any array-API library (numpy, jax.numpy under ``jit`` and
``vmap``, torch) and never imports a framework. Randomness and gradients come in as arrays or
callables supplied by the adapters (:mod:`numpyro_ext`, :mod:`pyro_ext`).

- the domains of a site's values: :class:`Binary`, :class:`Ordinal`, :class:`Categorical`,
  :class:`Integer` (counts, proposed in a window);
- the pieces every sampler shares (:mod:`discrete_kernels.kernel`): the chain state, the step's
  noise, parameters and statistics, and :class:`Sampler`, the spec one driver per PPL runs;
  the MH decision that ends a step (:mod:`discrete_kernels.metropolis`);
- one namespace per sampler family: :mod:`~discrete_kernels.samplers.dlp` (DMALA, DULA),
  :mod:`~discrete_kernels.samplers.gwg`, :mod:`~discrete_kernels.samplers.ab`,
  :mod:`~discrete_kernels.samplers.acs`, :mod:`~discrete_kernels.samplers.gibbs`,
  :mod:`~discrete_kernels.samplers.esh`;
- warmup as phases (:mod:`discrete_kernels.warmup`), site rules (:mod:`discrete_kernels.sites`),
  exact tables of a site (:mod:`discrete_kernels.tables`),
  the warmup's check of gradient sites (:mod:`discrete_kernels.gradient_check`) and EBM
  learning (:mod:`discrete_kernels.ebm`).
"""

from . import ebm, gradient_check, metropolis, sites, tables, warmup
from ._xp import precise_matmul
from .domains import Binary, Categorical, Domain, Integer, Ordinal
from .kernel import (
    PYTHON_CONTROL,
    ChainState,
    ControlFlow,
    LocalFnByLeaf,
    LocalFnWithRows,
    LocalFnWithTerms,
    NoiseShapes,
    Sampler,
    Sites,
    StepInfo,
    StepNoise,
    StepParameters,
)
from .samplers import ab, acs, dlp, esh, gibbs, gwg, plate_gibbs

__version__ = "0.1.0"

__all__ = [
    "PYTHON_CONTROL",
    "Binary",
    "Categorical",
    "ChainState",
    "ControlFlow",
    "Domain",
    "LocalFnByLeaf",
    "LocalFnWithRows",
    "LocalFnWithTerms",
    "NoiseShapes",
    "Integer",
    "Ordinal",
    "Sampler",
    "Sites",
    "StepInfo",
    "StepNoise",
    "StepParameters",
    "ab",
    "acs",
    "dlp",
    "ebm",
    "esh",
    "gibbs",
    "gradient_check",
    "gwg",
    "metropolis",
    "plate_gibbs",
    "precise_matmul",
    "sites",
    "tables",
    "warmup",
]
