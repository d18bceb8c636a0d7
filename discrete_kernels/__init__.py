"""Backend-neutral core of discrete-kernels: gradient-based discrete MCMC as pure functions.

Every function acts on arrays of any array-API library (numpy, jax.numpy under ``jit`` and
``vmap``, torch) and never imports a framework. Randomness and gradients come in as arrays or
callables supplied by the adapters (:mod:`numpyro_ext`, :mod:`pyro_ext`). Each sampler's spec
(:mod:`discrete_kernels.samplers`) and constructor (:mod:`discrete_kernels.constructors`) are
what the adapters' one driver each runs.
"""

from . import ab, constructors, samplers
from ._xp import precise_matmul
from .ab import (
    AB_VARIANTS,
    ABConfig,
    ABStepInfo,
    ABTunerState,
    QuadraticProposal,
    QuadraticStats,
    ab_step,
)
from .acs import (
    ACSConfig,
    ACSTunerState,
    acs_finish_tuning,
    acs_options,
    acs_step_parameters,
    acs_tuner_init,
    acs_tuner_update,
    acs_warmup_update,
    cyclical_balance,
    cyclical_step_size,
    tuning_steps,
)
from .adaptation import (
    DualAveragingState,
    StepSizeAdaptation,
    dlp_step_size_bounds,
    dual_averaging_init,
    dual_averaging_update,
    step_size_adaptation_update,
)
from .domains import Binary, Categorical, Domain, Ordinal, as_domain, domain_step_scale
from .gibbs import gibbs_site_proposal
from .mh import accept_probability, metropolis_accept, mh_log_ratio
from .proposals import (
    dlp_leaf_log_prob,
    dlp_leaf_logits,
    dlp_leaf_sample,
    gwg_log_prob,
    gwg_move_logits,
    gwg_sample,
    local_delta,
    single_site_substitutions,
    squared_distance,
)
from .steps import (
    ChainState,
    StepInfo,
    dlp_noise_shapes,
    dlp_propose,
    dlp_step,
    gwg_step,
    hamming_distance,
    mh_finish,
)

__version__ = "0.1.0"

__all__ = [
    "AB_VARIANTS",
    "ABConfig",
    "ABStepInfo",
    "ABTunerState",
    "QuadraticProposal",
    "QuadraticStats",
    "ab",
    "constructors",
    "samplers",
    "ab_step",
    "mh_finish",
    "ACSConfig",
    "ACSTunerState",
    "acs_finish_tuning",
    "acs_options",
    "acs_step_parameters",
    "acs_tuner_init",
    "acs_tuner_update",
    "acs_warmup_update",
    "cyclical_balance",
    "cyclical_step_size",
    "tuning_steps",
    "Binary",
    "Categorical",
    "ChainState",
    "Domain",
    "DualAveragingState",
    "Ordinal",
    "StepInfo",
    "StepSizeAdaptation",
    "accept_probability",
    "as_domain",
    "dlp_leaf_log_prob",
    "dlp_step_size_bounds",
    "domain_step_scale",
    "dlp_leaf_logits",
    "dlp_leaf_sample",
    "dlp_noise_shapes",
    "dlp_propose",
    "dlp_step",
    "dual_averaging_init",
    "dual_averaging_update",
    "gibbs_site_proposal",
    "gwg_log_prob",
    "gwg_move_logits",
    "gwg_sample",
    "gwg_step",
    "hamming_distance",
    "local_delta",
    "metropolis_accept",
    "mh_log_ratio",
    "single_site_substitutions",
    "squared_distance",
    "step_size_adaptation_update",
    "precise_matmul",
]
