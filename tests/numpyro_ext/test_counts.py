"""Count sites (Poisson, negative binomial, ... : the Integer window domain) through NumPyro."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.handlers import seed, trace
from numpyro.infer import MCMC
from scipy import special, stats

import numpyro_ext as nx
from numpyro_ext._target import domain_of_site

from ..mc import assert_mc_close

COUNTS = np.array([7, 5, 9, 6, 8])
RATE, DETECTION = 12.0, 0.55


def population_model():
    """Population size ``N ~ Poisson(12)``, each of 5 surveys counts ``Binomial(N, 0.55)``."""
    n = numpyro.sample("N", dist.Poisson(RATE))
    with numpyro.plate("surveys", len(COUNTS)):
        numpyro.sample("y", dist.Binomial(n, DETECTION), obs=jnp.asarray(COUNTS))


def population_exact() -> tuple[float, float]:
    """Posterior mean and variance of ``N`` by summing over ``N = 0 .. 400``."""
    n = np.arange(401)
    log_post = stats.poisson.logpmf(n, RATE)
    for k in COUNTS:
        log_post = log_post + stats.binom.logpmf(k, n, DETECTION)
    p = np.exp(log_post - special.logsumexp(log_post))
    mean = float(p @ n)
    return mean, float(p @ (n - mean) ** 2)


def test_population_size_posterior_mean_and_variance():
    mean, variance = population_exact()
    mcmc = MCMC(
        nx.DMALA(population_model),
        num_warmup=500,
        num_samples=3000,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    # a prior draw of N below the largest count has zero posterior density: start above it
    mcmc.run(jax.random.key(0), init_params={"N": jnp.array([10, 14, 20, 30])})
    n = np.asarray(mcmc.get_samples(group_by_chain=True)["N"], dtype=np.float64)
    assert n.min() >= np.max(COUNTS)  # proposals below the counts have zero density
    assert_mc_close(n[..., None], np.array([mean]))
    # the variance as the mean of (N - E N)^2 (E N exact): its own ESS-based error
    assert_mc_close(((n - mean) ** 2)[..., None], np.array([variance]))
    accept = float(np.mean(mcmc.get_extra_fields()["accept_prob"]))
    assert 0.3 < accept <= 1.0


COUNT_DISTRIBUTIONS = {
    "Poisson": lambda: dist.Poisson(3.0),
    "Geometric": lambda: dist.Geometric(probs=0.3),
    "NegativeBinomial2": lambda: dist.NegativeBinomial2(3.0, 2.0),
    "NegativeBinomialProbs": lambda: dist.NegativeBinomialProbs(3.0, 0.4),
    "NegativeBinomialLogits": lambda: dist.NegativeBinomialLogits(3.0, 0.2),
    "GammaPoisson": lambda: dist.GammaPoisson(2.0, 0.5),
    "ZeroInflatedPoisson": lambda: dist.ZeroInflatedPoisson(0.3, 3.0),
    "ZeroInflatedNegativeBinomial2": lambda: dist.ZeroInflatedNegativeBinomial2(3.0, 2.0, gate=0.2),
    "ZeroInflated(GammaPoisson)": lambda: dist.ZeroInflatedDistribution(
        dist.GammaPoisson(2.0, 0.5), gate=0.3
    ),
    "Poisson, expanded": lambda: dist.Poisson(jnp.array([1.0, 4.0])).to_event(1),
}


@pytest.mark.parametrize("name", list(COUNT_DISTRIBUTIONS))
def test_count_distributions_map_to_the_integer_domain(name):
    def model():
        numpyro.sample("n", COUNT_DISTRIBUTIONS[name]())

    site = trace(seed(model, 0)).get_trace()["n"]
    assert domain_of_site("n", site) == nx.Integer(low=0, high=None, window=1)


def test_a_geometric_site_samples_its_prior():
    """Geometric(0.3) on {0, 1, ...}: mean 7/3, through the whole driver (prior only)."""

    def model():
        numpyro.sample("n", dist.Geometric(probs=0.3))

    mcmc = MCMC(
        nx.DMALA(model),
        num_warmup=300,
        num_samples=3000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(1))
    n = np.asarray(mcmc.get_samples(group_by_chain=True)["n"], dtype=np.float64)
    assert n.min() >= 0
    assert_mc_close(n[..., None], np.array([0.7 / 0.3]))


def test_a_discrete_uniform_over_a_billion_values_is_sampled_in_a_window():
    """``DiscreteUniform(0, 10**9)`` is too wide for a table of all values: it gets a window
    domain with both bounds, no int32 overflow at setup, and its draws stay in the support."""

    def model():
        numpyro.sample("k", dist.DiscreteUniform(0, 10**9))

    site = trace(seed(model, 0)).get_trace()["k"]
    assert domain_of_site("k", site) == nx.Integer(low=0, high=10**9)
    mcmc = MCMC(nx.DMALA(model), num_warmup=10, num_samples=50, progress_bar=False)
    mcmc.run(jax.random.key(0), init_params={"k": jnp.asarray(10**9, jnp.int32)})
    k = np.asarray(mcmc.get_samples()["k"], dtype=np.int64)
    assert k.min() >= 10**9 - 60 and k.max() <= 10**9


def test_potential_mode_with_an_integer_domain_and_a_wider_window():
    """``U(n) = -log Poisson(n; 6)`` on a pytree leaf of 3 counts, window 3: mean 6."""

    def potential(z):
        n = z["n"]
        return -jnp.sum(n * jnp.log(6.0) - jax.scipy.special.gammaln(n + 1.0))

    mcmc = MCMC(
        nx.DMALA(potential_fn=potential, domain=nx.Integer(window=3)),
        num_warmup=300,
        num_samples=2000,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(2), init_params={"n": jnp.array([0, 3, 20])})
    n = np.asarray(mcmc.get_samples()["n"], dtype=np.float64)
    assert n.min() >= 0
    assert_mc_close(n[None], np.full(3, 6.0))


@pytest.mark.parametrize(
    "kernel",
    [lambda m: nx.GWG(m), lambda m: nx.AB(m), lambda m: nx.PlateGibbs(m)],
    ids=["GWG", "AB", "PlateGibbs"],
)
def test_kernels_without_a_window_refuse_count_sites(kernel):
    spec = kernel(population_model)
    name = type(spec).__name__
    with pytest.raises(ValueError, match=f"{name} cannot sample site 'N'.*DMALA, DULA or ACS"):
        MCMC(spec, num_warmup=1, num_samples=1, progress_bar=False).run(jax.random.key(0))


def test_exact_differences_of_a_count_site_are_refused():
    with pytest.raises(ValueError, match="DMALA: site 'N' takes the integers >= 0.*exact_sites"):
        MCMC(
            nx.DMALA(population_model, exact_sites=["N"]),
            num_warmup=1,
            num_samples=1,
            progress_bar=False,
        ).run(jax.random.key(0))


def test_the_window_option_sets_a_count_site_s_window():
    """``window={"N": 3}`` on a model site: moves of up to 3 (never more), the posterior kept."""
    mean, _ = population_exact()
    mcmc = MCMC(
        nx.DMALA(population_model, window={"N": 3}),
        num_warmup=300,
        num_samples=1500,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(3), init_params={"N": jnp.array([10, 20])})
    n = np.asarray(mcmc.get_samples(group_by_chain=True)["N"], dtype=np.int64)
    jumps = np.abs(np.diff(n, axis=1))
    assert jumps.max() == 3  # a window of 1 never moves by more than 1
    assert_mc_close(n[..., None].astype(np.float64), np.array([mean]))


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ({"y": 2}, r"DMALA: window: \['y'\] are not discrete latent sites"),
        (0, r"DMALA: window 0: .*integer >= 1"),
        ({"N": 1.5}, r"DMALA: window 1.5: .*integer >= 1"),
    ],
)
def test_a_bad_window_option_is_refused(window, message):
    with pytest.raises(ValueError, match=message):
        MCMC(nx.DMALA(population_model, window=window), num_warmup=1, num_samples=1).run(
            jax.random.key(0)
        )


def test_the_window_option_refuses_a_finite_site_and_potential_mode():
    def model():
        numpyro.sample("b", dist.Bernoulli(0.5))
        numpyro.sample("n", dist.Poisson(3.0))

    with pytest.raises(ValueError, match="window names site 'b'.*count sites"):
        MCMC(nx.DULA(model, window={"b": 2}), num_warmup=1, num_samples=1).run(jax.random.key(0))
    with pytest.raises(ValueError, match="Integer\\(window=...\\)"):
        MCMC(
            nx.DMALA(potential_fn=lambda z: jnp.sum(z["n"]), domain=nx.Integer(), window=2),
            num_warmup=1,
            num_samples=1,
        ).run(jax.random.key(0), init_params={"n": jnp.array([1])})
