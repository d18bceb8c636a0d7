"""Energy-based model learning: training methods, RBM quantities, couplings and estimators.

Notation as in :mod:`discrete_kernels`: a model ``p(x) ∝ exp(-E(x; theta))``. The gradient of
the average log-likelihood is ``-E_data[grad E] + E_model[grad E]``; CD-k, PCD and UCD differ in
how they estimate the model term. Everything here is a pure function of arrays (numpy,
jax.numpy or torch); the random numbers come in as arrays and the loops over chain steps
belong to the trainers (:mod:`numpyro_ext.ebm`, :mod:`pyro_ext.ebm`). The trainers take a
library kernel's sampler through its spec's hooks (:meth:`discrete_kernels.Sampler.
pcd_schedule`, :meth:`~discrete_kernels.Sampler.check_coupling`,
:meth:`~discrete_kernels.Sampler.coupled_step`).

- :mod:`~discrete_kernels.ebm.methods` - ``CD``, ``PCD``, ``UCD``, ``BlockGibbs``,
  ``SiteGibbs`` and their checks;
- :mod:`~discrete_kernels.ebm.rbm` - the Bernoulli RBM, the lattice Ising energy, data;
- :mod:`~discrete_kernels.ebm.couplings` - maximal couplings and coupled block Gibbs;
- :mod:`~discrete_kernels.ebm.estimators` - the UCD weights and AIS increments;
- :mod:`~discrete_kernels.ebm.plate` - ``PlateGibbs`` as the negative phase: an energy's
  coordinates coloured from its single-site tables.
"""

from . import couplings, estimators, methods, plate, rbm
from .couplings import (
    CouplingInfo,
    maximal_coupling,
    rbm_coupled_gibbs_step,
    same_state,
    site_gibbs_update,
    with_coordinate,
)
from .estimators import (
    ais_log_weight_increment,
    ucd_compaction_capacities,
    ucd_compaction_order,
    ucd_horizon,
    ucd_weights,
)
from .methods import (
    CD,
    PCD,
    UCD,
    BlockGibbs,
    SiteGibbs,
    check_first_update,
    check_method,
    check_training_inputs,
    check_ucd_coupling,
)
from .rbm import (
    RBMParams,
    RBMState,
    bars_and_stripes,
    bernoulli_from_uniform,
    bernoulli_log_prob,
    binary_states,
    lattice_ising_energy,
    lattice_ising_energy_and_input_grad,
    lattice_mask,
    rbm_free_energy,
    rbm_free_energy_and_input_grad,
    rbm_gibbs_step,
    rbm_hidden_logits,
    rbm_log_likelihood,
    rbm_log_partition,
    rbm_visible_logits,
    rbm_visible_sweep,
)

__all__ = [
    "CD",
    "PCD",
    "UCD",
    "BlockGibbs",
    "CouplingInfo",
    "RBMParams",
    "RBMState",
    "SiteGibbs",
    "ais_log_weight_increment",
    "bars_and_stripes",
    "bernoulli_from_uniform",
    "bernoulli_log_prob",
    "binary_states",
    "check_first_update",
    "check_method",
    "check_training_inputs",
    "check_ucd_coupling",
    "couplings",
    "estimators",
    "lattice_ising_energy",
    "lattice_ising_energy_and_input_grad",
    "lattice_mask",
    "maximal_coupling",
    "methods",
    "plate",
    "rbm",
    "rbm_coupled_gibbs_step",
    "rbm_free_energy",
    "rbm_free_energy_and_input_grad",
    "rbm_gibbs_step",
    "rbm_hidden_logits",
    "rbm_log_likelihood",
    "rbm_log_partition",
    "rbm_visible_logits",
    "rbm_visible_sweep",
    "same_state",
    "site_gibbs_update",
    "ucd_compaction_capacities",
    "ucd_compaction_order",
    "ucd_horizon",
    "ucd_weights",
    "with_coordinate",
]
