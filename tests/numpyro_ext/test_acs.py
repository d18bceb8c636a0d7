"""numpyro_ext.ACS through numpyro.infer.MCMC: moments, tuning in warmup, schedules, Gibbs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC, NUTS, Gibbs
from numpyro.infer.gibbs import discrete_latent_sites

import discrete_kernels as dk
import numpyro_ext as nx

from ..mc import mixed_model_exact
from .helpers import assert_mc_close
from .test_moments import _ising_exact, ising_model, mixed_model


def test_ising_3x3_moments_and_tuned_cycle():
    mean_s, mean_pair, iu = _ising_exact()
    kernel = nx.ACS(ising_model)
    mcmc = MCMC(
        kernel,
        num_warmup=dk.samplers.acs_schedule.tuning_steps(kernel.spec.config) + 100,
        num_samples=4000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0))
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"], dtype=np.float64)
    s = 2.0 * x - 1.0
    pair = np.einsum("cni,cnj->cnij", s, s)[..., iu[0], iu[1]]
    assert_mc_close(s, mean_s)
    assert_mc_close(pair, mean_pair)
    stats = mcmc.get_extra_fields(group_by_chain=True)
    positions = np.asarray(stats["cycle_position"])
    assert set(np.unique(positions)) == set(range(kernel.spec.config.steps_per_cycle))
    alpha = np.asarray(stats["step_size"])
    beta = np.asarray(stats["balance"])
    # each chain tuned its own cycle, which then repeats exactly with the position
    for chain in range(2):
        for k in range(kernel.spec.config.steps_per_cycle):
            at_k = positions[chain] == k
            assert np.allclose(alpha[chain][at_k], alpha[chain][at_k][0])
            assert np.allclose(beta[chain][at_k], beta[chain][at_k][0])
    state = jax.tree.map(lambda a: a[0], mcmc.last_state)
    schedule = kernel.schedule(state)
    assert bool(schedule["tuned"])
    assert np.all(np.diff(np.asarray(schedule["alpha"])) <= 1e-7)
    assert np.all(np.diff(np.asarray(schedule["beta"])) <= 1e-7)


def test_explicit_cycle_is_used_as_given():
    beta = [0.9, 0.8, 0.6, 0.5]
    kernel = nx.ACS(
        ising_model, steps_per_cycle=4, alpha_max=2.0, alpha_min=0.3, beta_schedule=beta
    )
    mcmc = MCMC(kernel, num_warmup=0, num_samples=12, progress_bar=False)
    mcmc.run(jax.random.key(1))
    stats = mcmc.get_extra_fields()
    np.testing.assert_array_equal(np.asarray(stats["cycle_position"]), np.arange(12) % 4)
    np.testing.assert_allclose(np.asarray(stats["balance"]), np.tile(beta, 3), rtol=1e-6)
    assert np.isclose(float(stats["step_size"][0]), 2.0)
    assert np.isclose(float(stats["step_size"][3]), max(1.0 * (np.cos(np.pi * 3 / 4) + 1), 0.3))


def test_short_warmup_warns():
    with pytest.warns(UserWarning, match="shorter than the .* steps the automatic tuning"):
        mcmc = MCMC(nx.ACS(ising_model), num_warmup=20, num_samples=10, progress_bar=False)
        mcmc.run(jax.random.key(0))


# behind slow for the default run's time (9 s): as AB's Gibbs-block test
@pytest.mark.slow
def test_acs_as_gibbs_block_matches_exact_posterior():
    y = jnp.array([0.3, 1.1, 0.8])
    mean_z, mean_mu, second_mu = mixed_model_exact(y)
    kernel = Gibbs([(nx.ACS(mixed_model), discrete_latent_sites), (NUTS(mixed_model), None)])
    mcmc = MCMC(
        kernel,
        num_warmup=400,
        num_samples=3000,
        num_chains=2,
        progress_bar=False,
        chain_method="sequential",
    )
    mcmc.run(jax.random.key(1), y)
    samples = mcmc.get_samples(group_by_chain=True)
    assert_mc_close(np.asarray(samples["z"], dtype=np.float64), mean_z)
    mu = np.asarray(samples["mu"], dtype=np.float64)
    assert_mc_close(np.stack([mu, mu**2], axis=-1), np.array([mean_mu, second_mu]))


def test_bad_acs_arguments():
    with pytest.raises(ValueError, match="needs all of alpha_max, alpha_min and beta_schedule"):
        nx.ACS(ising_model, alpha_max=1.0)
    with pytest.raises(ValueError, match="beta_max must be a finite number in \\[0.5, 1\\)"):
        nx.ACS(ising_model, beta_max=1.2)
    with pytest.raises(ValueError, match="beta_schedule must have"):
        nx.ACS(ising_model, alpha_max=1.0, alpha_min=0.1, beta_schedule=[0.9, 0.5])


@pytest.mark.slow
def test_defaults_mix_on_the_demo_bnn_from_its_random_start():
    """Issue 35: the README demo's network (992 sign weights, 4 chains, its 300 warmup steps
    and its key): every chain reaches the posterior and ACS's cycle does not freeze a chain
    (before the trend-watched burn-in: R-hat 3.4 and two chains without a move)."""
    import sys
    import warnings
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from binary_bnn import evaluate, model
    from bnn_data import load
    from numpyro.diagnostics import split_gelman_rubin

    data = load("breast_cancer")
    kernel = nx.ACS(model, exact_sites=[])
    mcmc = MCMC(
        kernel,
        num_warmup=300,
        num_samples=2000,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the frozen-chain warning fails the test
        mcmc.run(
            jax.random.key(1),
            jnp.asarray(data.x_train),
            jnp.asarray(data.y_train),
            hidden=32,
            task=data.task,
        )
    train_ll, _ = evaluate(mcmc.get_samples(group_by_chain=True), data)
    assert float(split_gelman_rubin(np.asarray(train_ll))) < 1.05
    assert abs(float(train_ll.mean()) - (-0.080)) < 0.005  # DMALA's and Gibbs's answer
    stats = mcmc.get_extra_fields(group_by_chain=True)
    assert stats["alpha_max"].shape == (4, 2000)  # each chain's own cycle, per draw
