"""numpyro_ext.ESH through numpyro.infer.MCMC and esh_jarzynski: moments, Gibbs next to a
discrete kernel, log Z, statistics and errors."""

import math

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, Gibbs
from numpyro.infer.gibbs import discrete_latent_sites

import numpyro_ext as nx

from ..mc import mixed_model_exact
from .helpers import assert_mc_close
from .test_moments import mixed_model

COV = jnp.array([[1.0, 0.9, 0.3], [0.9, 1.5, 0.2], [0.3, 0.2, 0.5]])
MEAN = jnp.array([1.0, -2.0, 0.5])


def correlated_model():
    numpyro.sample("x", dist.MultivariateNormal(MEAN, COV))
    numpyro.sample("scale", dist.LogNormal(0.0, 0.5))  # constrained: sampled in log space


#: behind -m slow (7 s; default suite time): the moment tests below in every dimension and on the
#: mixture are its default twins
@pytest.mark.slow
def test_correlated_gaussian_and_constrained_site_moments():
    mcmc = MCMC(
        nx.ESH(correlated_model, step_size=0.3, num_steps=10),
        num_warmup=100,
        num_samples=1000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0))
    samples = mcmc.get_samples(group_by_chain=True)
    x = np.asarray(samples["x"], np.float64)
    iu = np.triu_indices(3)
    second = np.einsum("cni,cnj->cnij", x, x)[..., iu[0], iu[1]]
    expected_second = (np.asarray(COV) + np.outer(MEAN, MEAN))[iu]
    assert_mc_close(x, np.asarray(MEAN))
    assert_mc_close(second, expected_second)
    scale = np.asarray(samples["scale"], np.float64)[..., None]
    assert_mc_close(np.concatenate([scale, scale**2], -1), [math.exp(0.125), math.exp(0.5)])
    stats = mcmc.get_extra_fields()
    assert float(np.max(stats["hamiltonian_drift"])) < 0.5
    assert np.all(np.asarray(stats["num_grad_evals"]) == 10)
    idata = az.from_numpyro(mcmc)
    for name in ("hamiltonian_drift", "trajectory_length", "num_grad_evals", "lp"):
        assert name in idata.sample_stats


def mixture_model():
    # two well-overlapping 2-D Gaussians: mixing between them is within reach of a kernel
    mix = dist.MixtureSameFamily(
        dist.Categorical(jnp.array([0.3, 0.7])),
        dist.MultivariateNormal(
            jnp.array([[-1.2, 0.0], [1.2, 0.5]]), jnp.stack([jnp.eye(2), 0.5 * jnp.eye(2)])
        ),
    )
    numpyro.sample("x", mix)


# behind slow for the default run's time (13 s): the correlated-Gaussian and default-settings
# moment tests, and the core's exact-invariance tests of the orbit kernel, run by default
@pytest.mark.slow
def test_two_dimensional_mixture_moments():
    mcmc = MCMC(
        nx.ESH(mixture_model, step_size=0.3, num_steps=10),
        num_warmup=100,
        num_samples=2000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(1))
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"], np.float64)
    mean = 0.3 * np.array([-1.2, 0.0]) + 0.7 * np.array([1.2, 0.5])
    second = 0.3 * (np.eye(2) + np.outer([-1.2, 0.0], [-1.2, 0.0])) + 0.7 * (
        0.5 * np.eye(2) + np.outer([1.2, 0.5], [1.2, 0.5])
    )
    stats = np.concatenate([x, x**2, x[..., :1] * x[..., 1:]], -1)
    assert_mc_close(stats, np.r_[mean, np.diag(second), second[0, 1]])


def test_dmala_and_esh_gibbs_blocks_match_the_exact_posterior():
    y = jnp.array([0.3, 1.1, 0.8])
    mean_z, mean_mu, second_mu = mixed_model_exact(y)
    kernel = Gibbs(
        [(nx.DMALA(mixed_model), discrete_latent_sites), (nx.ESH(mixed_model, step_size=0.2), None)]
    )
    mcmc = MCMC(
        kernel,
        num_warmup=300,
        num_samples=2000,
        num_chains=2,
        progress_bar=False,
        chain_method="sequential",
    )
    mcmc.run(jax.random.key(2), y)
    samples = mcmc.get_samples(group_by_chain=True)
    assert_mc_close(np.asarray(samples["z"], dtype=np.float64), mean_z)
    mu = np.asarray(samples["mu"], dtype=np.float64)
    assert_mc_close(np.stack([mu, mu**2], axis=-1), np.array([mean_mu, second_mu]))


def test_jarzynski_log_evidence_of_a_conjugate_model_within_three_standard_errors():
    y = 1.3

    def model():
        x = numpyro.sample("x", dist.Normal(0.0, 2.0).expand([2]).to_event(1))
        numpyro.sample("y", dist.Normal(x.sum(), 1.0), obs=y)

    # y ~ N(0, 1 + 4 + 4)
    exact = float(dist.Normal(0.0, 3.0).log_prob(y))
    result = nx.esh_jarzynski(
        jax.random.key(3), model=model, num_particles=20000, num_steps=30, base_scale=3.0
    )
    assert abs(float(result.log_z) - exact) < 3 * float(result.log_z_se)
    assert float(result.log_z_se) < 0.05
    assert result.samples["x"].shape == (20000, 2)
    np.testing.assert_allclose(float(jax.nn.logsumexp(result.log_weights)), 0.0, atol=1e-5)
    # weighted posterior mean of x.sum(): 8/9 y
    weights = np.exp(np.asarray(result.log_weights, np.float64))
    total = np.asarray(result.samples["x"], np.float64).sum(-1)
    assert abs(weights @ total - 8 / 9 * y) < 0.05


def test_potential_mode_and_the_papers_reservoir_option():
    def potential(z):
        return 0.5 * jnp.sum(z["a"] ** 2)

    for exact in (True, False):
        mcmc = MCMC(
            nx.ESH(potential_fn=potential, exact=exact),
            num_warmup=10,
            num_samples=50,
            progress_bar=False,
        )
        mcmc.run(jax.random.key(4), init_params={"a": jnp.zeros(3)})
        a = np.asarray(mcmc.get_samples()["a"])
        assert a.shape == (50, 3) and np.all(np.isfinite(a))
        assert len(np.unique(a[:, 0])) > 40  # the chain moves at (nearly) every draw
        assert 0.5 < a.std() < 2.0  # a standard normal, roughly


def test_esh_errors():
    with pytest.raises(ValueError, match="exactly one of"):
        nx.ESH()
    with pytest.raises(ValueError, match="step_size must be a positive"):
        nx.ESH(correlated_model, step_size=0.0)
    with pytest.raises(ValueError, match="num_steps must be an integer >= 1"):
        nx.ESH(correlated_model, num_steps=0)
    mcmc = MCMC(nx.ESH(mixed_model), num_warmup=1, num_samples=1, progress_bar=False)
    with pytest.raises(ValueError, match=r"discrete latent sites \['z'\].*Gibbs"):
        mcmc.run(jax.random.key(0), jnp.array([0.3]))


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_default_options_move_and_match_the_moments_in_every_dimension(dim):
    """Regression: in one dimension the direction never turns and the leapfrog conserves H
    exactly on a Gaussian, so adapting on the energy error alone grew the step until no orbit
    point but the start had weight: 4,000 identical draws, no warning."""
    loc, scale = jnp.arange(1.0, dim + 1.0), jnp.linspace(1.0, 2.0, dim)

    def model():
        numpyro.sample("x", dist.Normal(loc, scale).to_event(1))

    mcmc = MCMC(
        nx.ESH(model),
        num_warmup=500,
        num_samples=1500,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(dim))
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"], np.float64)
    assert len(np.unique(x[..., 0])) > 1000
    c = x - np.asarray(loc)
    expected_var = np.asarray(scale, np.float64) ** 2
    assert_mc_close(np.concatenate([x, c**2], -1), np.r_[np.asarray(loc), expected_var])
    step = np.asarray(mcmc.last_state.adapt_state.step_size)
    assert np.all(np.isfinite(step)) and np.all(step < 10.0)


def test_esh_as_a_gibbs_block_on_one_continuous_site_with_default_options():
    """Regression: Gibbs(AB, ESH) with one continuous site returned every draw identical."""
    y = jnp.array([0.3, 1.1, 0.8])
    mean_z, mean_mu, second_mu = mixed_model_exact(y)
    kernel = Gibbs([(nx.AB(mixed_model), discrete_latent_sites), (nx.ESH(mixed_model), None)])
    mcmc = MCMC(
        kernel,
        num_warmup=500,
        num_samples=2000,
        num_chains=2,
        progress_bar=False,
        chain_method="sequential",
    )
    mcmc.run(jax.random.key(5), y)
    samples = mcmc.get_samples(group_by_chain=True)
    mu = np.asarray(samples["mu"], dtype=np.float64)
    assert len(np.unique(mu)) > 1000
    assert_mc_close(np.asarray(samples["z"], dtype=np.float64), mean_z)
    assert_mc_close(np.stack([mu, mu**2], axis=-1), np.array([mean_mu, second_mu]))
