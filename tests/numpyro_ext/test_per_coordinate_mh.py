"""``nx.DMALA(model, per_coordinate_mh=True)``: one MH decision per coordinate on models whose
discrete coordinates are conditionally independent (counts or indicators in a plate), alone and
as a block of NumPyro's ``Gibbs`` next to NUTS, against exact posteriors; and the models it
must refuse, with the reason."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS, Gibbs
from scipy import special, stats

import numpyro_ext as nx

from ..mc import assert_mc_close

# detections of 6 sites over 3 surveys (two sites with none: there the count may be 0)
DETECTIONS = np.array([[3, 5, 2], [0, 0, 0], [6, 4, 7], [1, 0, 2], [0, 0, 0], [4, 4, 3]])
GATE, RATE, DETECTION = 0.3, 8.0, 0.45
BOUND = 400  # the exact sums run over n = 0 .. 400 (the tail beyond is below 1e-100)


def zero_inflated_counts(detection=DETECTION):
    """Abundance ``n_j ~ ZeroInflatedPoisson(0.3, 8)`` at each site, ``y_jk ~ Binomial(n_j,
    p)`` per survey."""
    with numpyro.plate("sites", DETECTIONS.shape[0], dim=-2):
        n = numpyro.sample("n", dist.ZeroInflatedPoisson(GATE, RATE))
        with numpyro.plate("surveys", DETECTIONS.shape[1], dim=-1):
            numpyro.sample("y", dist.Binomial(n, detection), obs=jnp.asarray(DETECTIONS))


def _count_log_prior() -> np.ndarray:
    values = np.arange(BOUND + 1)
    log_prior = np.log1p(-GATE) + stats.poisson.logpmf(values, RATE)
    log_prior[0] = np.logaddexp(np.log(GATE), log_prior[0])
    return log_prior


def _site_log_posterior(row: np.ndarray, detection: float | np.ndarray) -> np.ndarray:
    """Unnormalised log posterior of one site's count over ``0 .. BOUND`` (for each detection
    probability along a leading axis when ``detection`` is an array)."""
    values = np.arange(BOUND + 1)
    p = np.asarray(detection)[..., None]
    return _count_log_prior() + sum(stats.binom.logpmf(k, values, p) for k in row)


def counts_exact() -> np.ndarray:
    """Posterior mean of each site's count, detection known."""
    means = []
    for row in DETECTIONS:
        log_post = _site_log_posterior(row, DETECTION)
        means.append(np.exp(log_post - special.logsumexp(log_post)) @ np.arange(BOUND + 1))
    return np.asarray(means)


def test_zero_inflated_counts_match_the_exact_posterior():
    init = {"n": jnp.asarray(np.broadcast_to(DETECTIONS.max(1, keepdims=True) + 3, (4, 6, 1)))}
    mcmc = MCMC(
        nx.DMALA(zero_inflated_counts, window={"n": 3}, per_coordinate_mh=True),
        num_warmup=500,
        num_samples=2000,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), init_params=init)
    n = np.asarray(mcmc.get_samples(group_by_chain=True)["n"], np.float64)[..., 0]
    assert np.all(n >= DETECTIONS.max(1))  # counts below a detection have zero density
    assert_mc_close(n, counts_exact())
    extra = mcmc.get_extra_fields()
    # the mean acceptance of the counts' own moves, and a move at nearly every step
    assert 0.3 < float(np.mean(extra["accept_prob"])) < 0.95
    assert float(np.mean(extra["accepted"])) > 0.9


def counts_with_detection():
    """The counts model with the detection probability unknown, ``p ~ Beta(2, 2)``."""
    p = numpyro.sample("p", dist.Beta(2.0, 2.0))
    zero_inflated_counts(p)


def counts_with_detection_exact() -> tuple[float, np.ndarray]:
    """Posterior mean of ``p`` and of each count, by quadrature over ``p`` (2,000 points)
    with the counts summed out."""
    grid = (np.arange(2000) + 0.5) / 2000
    per_site = [_site_log_posterior(row, grid) for row in DETECTIONS]  # (G, BOUND + 1) each
    log_marginal = stats.beta.logpdf(grid, 2.0, 2.0) + sum(
        special.logsumexp(lp, axis=-1) for lp in per_site
    )
    weight = np.exp(log_marginal - special.logsumexp(log_marginal))
    values = np.arange(BOUND + 1)
    means = [
        weight @ (np.exp(lp - special.logsumexp(lp, axis=-1, keepdims=True)) @ values)
        for lp in per_site
    ]
    return float(weight @ grid), np.asarray(means)


def test_a_gibbs_block_next_to_nuts_matches_the_exact_posterior():
    mean_p, mean_n = counts_with_detection_exact()
    kernel = Gibbs(
        [
            (nx.DMALA(counts_with_detection, window={"n": 3}, per_coordinate_mh=True), ["n"]),
            (NUTS(counts_with_detection), None),
        ]
    )
    mcmc = MCMC(
        kernel,
        num_warmup=300,
        num_samples=1000,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    start = DETECTIONS.max(1, keepdims=True) + 3
    init = {"n": jnp.asarray(np.stack([start, start + 2])), "p": jnp.asarray([0.5, 0.3])}
    mcmc.run(jax.random.key(1), init_params=init)
    samples = mcmc.get_samples(group_by_chain=True)
    n = np.asarray(samples["n"], np.float64)[..., 0]
    p = np.asarray(samples["p"], np.float64)
    # a site with no detection leaves 0 on rare, short excursions (posterior mean 0.006):
    # too few for an ESS-based error, so its mean is bounded instead
    seen = DETECTIONS.max(1) > 0
    assert np.all(n[..., ~seen].mean(axis=(0, 1)) < 0.05)
    assert_mc_close(
        np.concatenate([n[..., seen], p[..., None]], axis=-1), np.append(mean_n[seen], mean_p)
    )


def indicators(y):
    """A Bernoulli indicator per row, each with its own Gaussian likelihood."""
    with numpyro.plate("rows", y.shape[0]):
        z = numpyro.sample("z", dist.Bernoulli(0.3))
        numpyro.sample("y", dist.Normal(2.0 * z, 1.0), obs=y)


def test_binary_indicators_match_the_exact_posterior():
    y = jnp.asarray([0.1, 2.5, 1.0, -0.7, 1.8, 3.1, 0.4, 1.2])
    log_on = np.log(0.3) + stats.norm.logpdf(np.asarray(y), 2.0, 1.0)
    log_off = np.log(0.7) + stats.norm.logpdf(np.asarray(y), 0.0, 1.0)
    exact = 1.0 / (1.0 + np.exp(log_off - log_on))
    mcmc = MCMC(
        nx.DMALA(indicators, per_coordinate_mh=True),
        num_warmup=300,
        num_samples=2000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(2), y)
    z = np.asarray(mcmc.get_samples(group_by_chain=True)["z"], np.float64)
    assert_mc_close(z, exact)


def coupled_counts():
    with numpyro.plate("sites", 3):
        n = numpyro.sample("n", dist.Poisson(4.0))
    numpyro.factor("smooth", -0.2 * jnp.sum(jnp.diff(n.astype(jnp.float32)) ** 2))


def shared_term(y):
    with numpyro.plate("rows", y.shape[0]):
        z = numpyro.sample("z", dist.Bernoulli(0.3))
    numpyro.sample("y", dist.Normal(jnp.sum(z), 1.0), obs=y)


def two_sites_one_term(y):
    with numpyro.plate("rows", y.shape[0]):
        z = numpyro.sample("z", dist.Bernoulli(0.3))
        w = numpyro.sample("w", dist.Bernoulli(0.6))
        numpyro.sample("y", dist.Normal(z + 2.0 * w, 1.0), obs=y)


def categorical_rows(y):
    with numpyro.plate("rows", y.shape[0]):
        c = numpyro.sample("c", dist.Categorical(jnp.ones(3) / 3))
        numpyro.sample("y", dist.Normal(jnp.asarray([-1.0, 0.0, 1.0])[c], 1.0), obs=y)


Y4 = jnp.asarray([0.2, 1.4, -0.3, 0.9])


@pytest.mark.parametrize(
    ("model", "args", "message"),
    [
        (coupled_counts, (), "a term outside the sites' plates depends on them"),
        (shared_term, (Y4,), "a term outside the sites' plates depends on them"),
        (two_sites_one_term, (Y4,), "change with other coordinates"),
        (categorical_rows, (Y4,), "site 'c' takes a table of exact differences"),
    ],
    ids=[
        "factor-across-coordinates",
        "term-outside-the-plate",
        "two-sites-one-term",
        "categorical",
    ],
)
def test_models_whose_coordinates_interact_are_refused(model, args, message):
    mcmc = MCMC(
        nx.DMALA(model, per_coordinate_mh=True), num_warmup=2, num_samples=2, progress_bar=False
    )
    with pytest.raises(ValueError, match="per_coordinate_mh=True") as error:
        mcmc.run(jax.random.key(0), *args)
    assert message in str(error.value)


def test_potential_mode_and_dula_are_refused():
    with pytest.raises(ValueError, match="needs a model"):
        MCMC(
            nx.DMALA(
                potential_fn=lambda z: -jnp.sum(z["x"]),
                domain=nx.Binary(),
                per_coordinate_mh=True,
            ),
            num_warmup=2,
            num_samples=2,
            progress_bar=False,
        ).run(jax.random.key(0), init_params={"x": jnp.zeros(3, jnp.int32)})
    with pytest.raises(ValueError, match="DULA makes no MH decision"):
        nx.DULA(indicators, per_coordinate_mh=True)
