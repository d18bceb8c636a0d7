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

import numpyro_ext as nx

from ..coordinatewise_models import (
    DETECTION,
    DETECTIONS,
    GATE,
    INDICATOR_DATA,
    RATE,
    counts_exact,
    counts_with_detection_exact,
    indicator_exact,
)
from ..mc import assert_mc_close


def zero_inflated_counts(detection=DETECTION):
    """Abundance ``n_j ~ ZeroInflatedPoisson(0.3, 8)`` at each site, ``y_jk ~ Binomial(n_j,
    p)`` per survey."""
    with numpyro.plate("sites", DETECTIONS.shape[0], dim=-2):
        n = numpyro.sample("n", dist.ZeroInflatedPoisson(GATE, RATE))
        with numpyro.plate("surveys", DETECTIONS.shape[1], dim=-1):
            numpyro.sample("y", dist.Binomial(n, detection), obs=jnp.asarray(DETECTIONS))


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
        num_samples=2000,
        num_chains=1,  # one compilation (each sequential chain compiles its own loop)
        progress_bar=False,
    )
    start = DETECTIONS.max(1, keepdims=True) + 3
    mcmc.run(jax.random.key(1), init_params={"n": jnp.asarray(start), "p": jnp.asarray(0.3)})
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
    y = jnp.asarray(INDICATOR_DATA)
    exact = indicator_exact(INDICATOR_DATA)
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
