"""Count sites (Poisson, negative binomial, ... : the Integer window domain) through Pyro."""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import MCMC
from scipy import special, stats

import pyro_ext as px
from pyro_ext._target import domain_of_site

from ..mc import assert_mc_close

COUNTS = [7, 5, 9, 6, 8]
RATE, DETECTION = 12.0, 0.55


def population_model():
    """Population size ``N ~ Poisson(12)``, each of 5 surveys counts ``Binomial(N, 0.55)``."""
    n = pyro.sample("N", dist.Poisson(RATE))
    with pyro.plate("surveys", len(COUNTS)):
        pyro.sample("y", dist.Binomial(n, DETECTION), obs=torch.tensor(COUNTS, dtype=n.dtype))


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
    pyro.set_rng_seed(0)
    mcmc = MCMC(
        px.DMALA(population_model),
        num_samples=2000,
        warmup_steps=300,
        initial_params={"N": torch.tensor(15.0)},  # above the largest count
        disable_progbar=True,
    )
    mcmc.run()
    n = mcmc.get_samples(group_by_chain=True)["N"].cpu().numpy().astype(np.float64)
    assert n.min() >= max(COUNTS)
    assert_mc_close(n[..., None], np.array([mean]))
    assert_mc_close(((n - mean) ** 2)[..., None], np.array([variance]))


@pytest.mark.parametrize(
    "make",
    [
        lambda: dist.Poisson(3.0),
        lambda: dist.Geometric(probs=torch.tensor(0.3)),
        lambda: dist.NegativeBinomial(3.0, probs=torch.tensor(0.4)),
        lambda: dist.GammaPoisson(2.0, 0.5),
        lambda: dist.ZeroInflatedPoisson(torch.tensor(3.0), gate=torch.tensor(0.3)),
        lambda: dist.ZeroInflatedNegativeBinomial(
            torch.tensor(3.0), probs=torch.tensor(0.4), gate=torch.tensor(0.2)
        ),
    ],
    ids=["Poisson", "Geometric", "NegativeBinomial", "GammaPoisson", "ZIP", "ZINB"],
)
def test_count_distributions_map_to_the_integer_domain(make):
    def model():
        pyro.sample("n", make())

    site = poutine.trace(model).get_trace().nodes["n"]
    domain, _ = domain_of_site("n", site)
    assert domain == px.Integer(low=0, high=None, window=1)


@pytest.mark.parametrize("kernel", [px.GWG, px.AB, px.DiscreteGibbs, px.PlateGibbs])
def test_kernels_without_a_window_refuse_count_sites(kernel):
    name = kernel.__name__
    with pytest.raises(ValueError, match=f"{name} cannot sample site 'N'.*DMALA, DULA or ACS"):
        kernel(population_model).setup(0)


def test_a_binomial_with_two_million_trials_is_sampled_in_a_window():
    """2^21 + 1 values are too many for a table: the site is an ``Integer(0, 2^21)`` window
    site (it used to be refused) and DMALA's draws stay in the support near the prior's
    mean."""

    def model():
        pyro.sample("x", dist.Binomial(2**21, 0.5))

    site = poutine.trace(model).get_trace().nodes["x"]
    assert domain_of_site("x", site)[0] == px.Integer(low=0, high=2**21, window=1)
    pyro.set_rng_seed(0)
    mcmc = MCMC(px.DMALA(model), num_samples=50, warmup_steps=20, disable_progbar=True)
    mcmc.run()
    x = mcmc.get_samples()["x"].cpu().numpy()
    assert np.all((x >= 0) & (x <= 2**21)) and np.all(np.abs(x - 2**20) < 10 * 2**9.5)
