"""Moment tests through numpyro.infer.MCMC against exact enumeration."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS, Gibbs
from numpyro.infer.gibbs import discrete_latent_sites

import numpyro_ext as nx

from ..mc import mixed_model_exact
from .helpers import assert_mc_close, enumerate_posterior, ising_weights

A, B = 0.3, 0.2
W = jnp.asarray(ising_weights(3))


def ising_model():
    x = numpyro.sample("x", dist.Bernoulli(0.5).expand([9]))
    s = 2.0 * x - 1.0
    numpyro.factor("ising", A * s @ W @ s + B * jnp.sum(s))


def _ising_exact():
    states, probs = enumerate_posterior(ising_model, {"x": ((9,), (0, 1))})
    s = np.stack([2.0 * st[0] - 1.0 for st in states])
    iu = np.triu_indices(9, 1)
    pair = np.einsum("ni,nj->nij", s, s)[:, iu[0], iu[1]]
    return probs @ s, probs @ pair, iu


@pytest.mark.parametrize("kernel_cls", [nx.DMALA, nx.GWG])
def test_ising_3x3_marginals_and_pairwise_moments(kernel_cls):
    mean_s, mean_pair, iu = _ising_exact()
    mcmc = MCMC(
        kernel_cls(ising_model),
        num_warmup=500,
        num_samples=4000,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0))
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"], dtype=np.float64)
    s = 2.0 * x - 1.0
    pair = np.einsum("cni,cnj->cnij", s, s)[..., iu[0], iu[1]]
    assert_mc_close(s, mean_s)
    assert_mc_close(pair, mean_pair)
    stats = mcmc.get_extra_fields()
    assert 0.2 < float(np.mean(stats["accept_prob"])) < 0.95


def mixed_model(y):
    z = numpyro.sample("z", dist.Bernoulli(0.4).expand([3]))
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(mu + jnp.array([1.0, -2.0, 1.5]) @ z, 1.0), obs=y)


def test_mixed_model_with_gibbs_and_nuts_matches_exact_posterior():
    y = jnp.array([0.3, 1.1, 0.8])
    mean_z, mean_mu, second_mu = mixed_model_exact(y)
    kernel = Gibbs([(nx.DMALA(mixed_model), discrete_latent_sites), (NUTS(mixed_model), None)])
    mcmc = MCMC(
        kernel,
        num_warmup=500,
        num_samples=3000,
        num_chains=2,
        progress_bar=False,
        chain_method="sequential",
    )
    mcmc.run(jax.random.key(1), y)
    samples = mcmc.get_samples(group_by_chain=True)
    z = np.asarray(samples["z"], dtype=np.float64)
    mu = np.asarray(samples["mu"], dtype=np.float64)
    assert_mc_close(z, mean_z)
    assert_mc_close(np.stack([mu, mu**2], axis=-1), np.array([mean_mu, second_mu]))


def several_sites_model():
    with numpyro.plate("p", 3):
        x = numpyro.sample("x", dist.Bernoulli(0.3))
    k = numpyro.sample("k", dist.Binomial(jnp.array([2, 3]), 0.6))
    c = numpyro.sample("c", dist.Categorical(jnp.array([0.2, 0.3, 0.5])))
    u = numpyro.sample("u", dist.DiscreteUniform(-1, 1))
    locs = jnp.array([-0.5, 0.0, 0.7])
    numpyro.factor("f", 0.4 * x.sum() * k.sum() + locs[c] * u - 0.3 * x[0] * u)


# GWG's run behind slow: its driver is DMALA's, and the Ising tests cover GWG's step
@pytest.mark.parametrize("kernel_cls", [nx.DMALA, pytest.param(nx.GWG, marks=pytest.mark.slow)])
def test_several_site_types_in_plates(kernel_cls):
    sites = {
        "x": ((3,), (0, 1)),
        "k": ((2,), (0, 1, 2, 3)),
        "c": ((), (0, 1, 2)),
        "u": ((), (-1, 0, 1)),
    }
    states, probs = enumerate_posterior(several_sites_model, sites)
    valid = np.array([np.all(st[1] <= np.array([2, 3])) for st in states])
    assert np.isclose(probs[~valid].sum(), 0.0)

    def features(x, k, c, u):
        return np.concatenate(
            [
                x,
                k,
                (c[..., None] == np.arange(3)).astype(float),
                (u[..., None] == np.arange(-1, 2)),
            ],
            axis=-1,
        )

    expected = sum(
        p
        * features(
            np.asarray(st[0], float), np.asarray(st[1], float), np.asarray(st[2]), np.asarray(st[3])
        )
        for st, p in zip(states, probs)
    )
    mcmc = MCMC(
        # the gradient path on every ordinal site (exact_sites="auto" would switch the small k)
        kernel_cls(several_sites_model, exact_sites=[]),
        num_warmup=300,
        num_samples=1500,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(2))
    s = mcmc.get_samples(group_by_chain=True)
    assert np.all(np.asarray(s["k"]) <= np.array([2, 3]))
    got = features(
        np.asarray(s["x"], float), np.asarray(s["k"], float), np.asarray(s["c"]), np.asarray(s["u"])
    )
    assert_mc_close(got, expected)


@pytest.mark.parametrize(
    ("domain", "values"),
    [(nx.Binary(), (0, 1)), (nx.Ordinal(4, low=-1), (-1, 0, 1, 2)), (nx.Categorical(3), (0, 1, 2))],
    ids=["binary", "ordinal", "categorical"],
)
def test_potential_mode_matches_enumeration(domain, values):
    rng = np.random.default_rng(0)
    d = 3
    k = len(values)
    theta = jnp.asarray(rng.normal(size=(d, k)), jnp.float32)
    j = jnp.asarray(rng.normal(scale=0.6, size=(d, d)), jnp.float32)

    if isinstance(domain, nx.Categorical):

        def potential(z):
            return -(jnp.sum(theta * z) + jnp.sum(z[0] * z[1]) * j[0, 1] + z[1] @ z[2] * j[1, 2])

        def features(z_index):
            return (z_index[..., None] == np.arange(k)).reshape(z_index.shape[:-1] + (-1,))

        init = jnp.eye(k)[jnp.zeros(d, int)]
    else:

        def potential(z):
            zf = z.astype(jnp.float32)
            return -(zf @ j @ zf * 0.3 + theta[:, 0] @ zf - 0.2 * jnp.sum(zf**2))

        def features(z):
            return (z[..., None] == np.asarray(values)).reshape(z.shape[:-1] + (-1,))

        init = jnp.full(d, values[0], jnp.int32)

    combos = np.array(list(itertools.product(range(k), repeat=d)))
    if isinstance(domain, nx.Categorical):
        logp = np.array([-float(potential(jnp.eye(k)[c])) for c in combos])
        feats = np.stack([features(c) for c in combos])
    else:
        vals = np.asarray(values)[combos]
        logp = np.array([-float(potential(jnp.asarray(v))) for v in vals])
        feats = np.stack([features(v) for v in vals])
    p = np.exp(logp - logp.max())
    p /= p.sum()
    expected = p @ feats

    mcmc = MCMC(
        nx.DMALA(potential_fn=potential, domain=domain),
        num_warmup=400,
        num_samples=3000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(3), init_params=jnp.stack([init, init]))
    z = np.asarray(mcmc.get_samples(group_by_chain=True))
    if isinstance(domain, nx.Categorical):
        assert z.shape[-2:] == (d, k)
        np.testing.assert_array_equal(z.sum(-1), 1.0)
        z = z.argmax(-1)
    got = features(z).astype(float)
    assert_mc_close(got, expected)


def test_dula_always_moves_and_reports_the_mh_acceptance_it_skips():
    """DULA's bias is measured exactly in tests/core; here: the mechanics inside MCMC."""
    mcmc = MCMC(
        nx.DULA(several_sites_model, step_size=0.5, exact_sites=[]),
        num_warmup=0,
        num_samples=500,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(2))
    stats = mcmc.get_extra_fields()
    # DULA takes every proposal: it moves exactly when the proposal differs from the state
    moved_by_proposal = np.asarray(stats["hamming_distance"]) > 0
    np.testing.assert_array_equal(np.asarray(stats["accepted"]), moved_by_proposal)
    accept_prob = np.asarray(stats["accept_prob"])
    assert np.all((accept_prob >= 0) & (accept_prob <= 1))
    assert 0.05 < accept_prob.mean() < 1.0
    moved = np.asarray(stats["hamming_distance"]) > 0
    assert moved.mean() > 0.5
    np.testing.assert_allclose(np.asarray(stats["step_size"]), 0.5)
