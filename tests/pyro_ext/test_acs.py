"""pyro_ext.ACS through pyro.infer.MCMC: moments against enumeration, tuning in warmup."""

import numpy as np
import pytest
import torch

import discrete_kernels as dk
import pyro_ext as px

from ..mc import assert_mc_close
from .test_pyro_kernels import _run, enumerate_pyro, ising_model


# tests/test_adapter_parity.py checks this kernel against NumPyro's step by step, and the
# NumPyro moment tests run by default: this Pyro run of the same check is behind slow
@pytest.mark.slow
def test_ising_3x3_moments_and_tuned_cycle():
    states, probs = enumerate_pyro(ising_model, {"x": ((9,), (0, 1))})
    s_all = np.stack([2.0 * st[0].cpu().numpy() - 1.0 for st in states])
    kernel = px.ACS(ising_model)
    mcmc = _run(kernel, 4000, dk.samplers.acs_schedule.tuning_steps(kernel.spec.config) + 100)
    x = mcmc.get_samples(group_by_chain=True)["x"].cpu().numpy().astype(np.float64)
    assert_mc_close(2.0 * x - 1.0, probs @ s_all)
    schedule = kernel.schedule()
    assert schedule["tuned"]
    assert torch.all(schedule["alpha"][1:] <= schedule["alpha"][:-1] + 1e-7)
    assert torch.all(schedule["beta"][1:] <= schedule["beta"][:-1] + 1e-7)
    stats = px.to_arviz(mcmc).sample_stats
    positions = stats["cycle_position"].values[0].astype(int)
    s = kernel.spec.config.steps_per_cycle
    np.testing.assert_array_equal((positions[1:] - positions[:-1]) % s, 1)  # walks the cycle
    np.testing.assert_allclose(
        stats["balance"].values[0], schedule["beta"].cpu().numpy()[positions], rtol=1e-6
    )
    np.testing.assert_allclose(
        stats["step_size"].values[0], schedule["alpha"].cpu().numpy()[positions], rtol=1e-5
    )


def test_defaults_start_the_alpha_max_search_at_the_ordinal_scale():
    # the Pyro driver passes its sites to the tuner: a Binomial(300) site is Ordinal(301),
    # whose range search starts at 300^2 and settles far above the binary ceiling of 5
    import pyro
    import pyro.distributions as dist

    def model():
        pyro.sample("n", dist.Binomial(300, torch.tensor(0.5)))

    kernel = px.ACS(model)
    _run(kernel, 20, dk.samplers.acs_schedule.tuning_steps(kernel.spec.config))
    alpha = kernel.schedule()["alpha"]
    assert kernel.schedule()["tuned"]
    # Binomial(300, 1/2) has variance 75: the acceptance-1/2 step sizes are tens to hundreds
    assert float(alpha[0]) > 20.0, alpha
