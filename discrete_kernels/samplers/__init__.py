"""One module per sampler family: its proposal and step as pure functions, its spec (a frozen
dataclass of the kernel's options, defaults written once there), its statistics and its warmup
phases.

- :mod:`~discrete_kernels.samplers.dlp` - DMALA and DULA (the discrete Langevin proposal
  itself in :mod:`~discrete_kernels.samplers.dlp_proposal`);
- :mod:`~discrete_kernels.samplers.gwg` - Gibbs with gradients;
- :mod:`~discrete_kernels.samplers.ab` - any-scale balanced samplers (with
  :mod:`~discrete_kernels.samplers.ab_linalg` and :mod:`~discrete_kernels.samplers.ab_tuner`);
- :mod:`~discrete_kernels.samplers.acs` - automatic cyclical scheduling (with
  :mod:`~discrete_kernels.samplers.acs_schedule`, the cycle, and
  :mod:`~discrete_kernels.samplers.acs_tuner`, its tuning);
- :mod:`~discrete_kernels.samplers.gibbs` - single-site Gibbs;
- :mod:`~discrete_kernels.samplers.plate_gibbs` - exact block Gibbs of conditionally
  independent sites (plates);
- :mod:`~discrete_kernels.samplers.paired` - paired sites (an indicator and the coefficient
  it gates) updated together;
- :mod:`~discrete_kernels.samplers.esh` - ESH for continuous sites (with
  :mod:`~discrete_kernels.samplers.esh_dynamics`).
"""

from . import ab, acs, dlp, esh, gibbs, gwg, paired, plate_gibbs

__all__ = ["ab", "acs", "dlp", "esh", "gibbs", "gwg", "paired", "plate_gibbs"]
