"""numpyro_ext.AB through numpyro.infer.MCMC: moments of every variant, the burn-in fit of W,
the (sigma, alpha) tuning in warmup, Gibbs blocks, ArviZ and errors."""

import arviz as az
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
from .helpers import assert_mc_close, enumerate_posterior
from .test_moments import _ising_exact, ising_model, mixed_model


@pytest.mark.parametrize(
    "variant",
    # shift and max differ from trace only in the D solver, tested in tests/core
    [
        # AB-1st's moments with its defaults run in test_defaults.py (3x3 Ising, 2 chains)
        pytest.param("1st", marks=pytest.mark.slow),
        "trace",
        pytest.param("shift", marks=pytest.mark.slow),
        pytest.param("max", marks=pytest.mark.slow),
    ],
)
def test_ising_3x3_moments(variant):
    mean_s, mean_pair, iu = _ising_exact()
    kernel = nx.AB(ising_model, variant=variant)
    mcmc = MCMC(
        kernel,
        num_warmup=1200,
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
    sigma, alpha = np.asarray(stats["step_size"]), np.asarray(stats["balance"])
    # frozen after warmup, per chain
    assert np.all(sigma == sigma[:, :1]) and np.all(alpha == alpha[:, :1])
    assert np.all((alpha >= 0.5) & (alpha <= 1.0))
    adapt = mcmc.last_state.adapt_state
    if variant != "1st":
        assert np.all(np.asarray(adapt.stats.count) == 600)  # half the warmup
        m = np.asarray(adapt.quadratic.root)
        for chain in range(2):
            w_plus_d = m[chain] @ m[chain]
            assert np.linalg.eigvalsh(w_plus_d)[0] > -1e-4
            assert np.all(np.asarray(adapt.quadratic.diag[chain]) >= 0)


def test_tuner_grows_sigma_where_larger_jumps_are_free():
    """Independent fair coins: the gradient is zero and every proposal is accepted, so the
    jump distance grows with sigma and the tuner must raise it from 0.1."""

    def coins():
        numpyro.sample("x", dist.Bernoulli(0.5).expand([30]))

    kernel = nx.AB(coins, block_size=50)  # ten rounds of six blocks
    mcmc = MCMC(kernel, num_warmup=3000, num_samples=10, progress_bar=False)
    mcmc.run(jax.random.key(2))
    tuner = mcmc.last_state.adapt_state.tuner
    # at most 1.2**10 = 6.2x in ten rounds; the jump estimates are noisy, so ask for most
    assert float(tuner.sigma) > 0.1 * 1.2**6
    assert float(mcmc.get_extra_fields()["hamming_distance"].mean()) > 10


def ordinal_model():
    x = numpyro.sample("x", dist.Binomial(4, 0.5).expand([3]))
    c = x - 2.0
    numpyro.factor("coupled", -0.4 * (c[0] - c[1]) ** 2 - 0.3 * (c[1] + c[2]) ** 2)


def test_quadratic_on_ordinal_sites_matches_enumeration():
    states, probs = enumerate_posterior(ordinal_model, {"x": ((3,), tuple(range(5)))})
    values = np.stack([st[0] for st in states]).astype(float)
    expected = np.concatenate([probs @ values, probs @ values**2])
    mcmc = MCMC(
        nx.AB(ordinal_model, variant="trace"),
        num_warmup=1000,
        num_samples=4000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(3))
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"], dtype=np.float64)
    assert_mc_close(np.concatenate([x, x**2], axis=-1), expected)


def test_known_coupling_skips_the_burn_in_and_arviz_has_the_statistics():
    d = 9
    from .test_moments import A, W

    coupling = 8 * A * np.asarray(W)  # Hessian of A s^T W s in x, s = 2x - 1
    kernel = nx.AB(ising_model, variant="shift", coupling=coupling, adapt=False, step_size=1.0)
    mcmc = MCMC(kernel, num_warmup=0, num_samples=50, progress_bar=False)
    mcmc.run(jax.random.key(4))
    diag = np.asarray(mcmc.last_state.adapt_state.quadratic.diag)
    np.testing.assert_allclose(diag, -np.linalg.eigvalsh(coupling)[0], rtol=1e-5)
    assert diag.shape == (d,)
    idata = az.from_numpyro(mcmc)
    for name in ("acceptance_rate", "step_size", "balance", "hamming_distance", "lp"):
        assert name in idata.sample_stats
    assert np.allclose(idata.sample_stats["step_size"], 1.0)


# behind slow for the default run's time (10 s): the one driver runs every kernel inside
# Gibbs the same way (test_mixed_model_with_gibbs_and_nuts and the composite protocol test
# run by default), and AB's step has its own moment tests
@pytest.mark.slow
def test_ab_as_gibbs_block_matches_exact_posterior():
    y = jnp.array([0.3, 1.1, 0.8])
    mean_z, mean_mu, second_mu = mixed_model_exact(y)
    kernel = Gibbs(
        [(nx.AB(mixed_model, variant="trace"), discrete_latent_sites), (NUTS(mixed_model), None)]
    )
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


def test_ab_errors():
    with pytest.raises(ValueError, match="variant must be one of"):
        nx.AB(ising_model, variant="second")
    with pytest.raises(ValueError, match="balance must be a finite number in \\(0, 1\\]"):
        nx.AB(ising_model, balance=1.5)
    # the balance has one name (an unreleased `alpha=` alias was removed)
    with pytest.raises(TypeError, match=r"AB: unknown option\(s\) \['alpha'\]; its options"):
        nx.AB(ising_model, alpha=0.7)
    assert nx.AB(ising_model, balance=0.7).spec.config.balance == 0.7
    with pytest.raises(ValueError, match=r"step_size \(sigma\) must be a positive finite"):
        nx.AB(ising_model, step_size=-1.0)

    def categorical_model():
        numpyro.sample("c", dist.Categorical(jnp.ones(3) / 3).expand([2]))

    mcmc = MCMC(nx.AB(categorical_model, variant="trace"), num_warmup=10, num_samples=10)
    with pytest.raises(ValueError, match="\\['c'\\] are categorical or exact"):
        mcmc.run(jax.random.key(0))
    mcmc = MCMC(
        nx.AB(ising_model, variant="trace", coupling=np.eye(3)), num_warmup=0, num_samples=1
    )
    with pytest.raises(ValueError, match="coupling must have shape \\(9, 9\\)"):
        mcmc.run(jax.random.key(0))
    with pytest.warns(UserWarning, match="runs as AB-1st"):
        MCMC(
            nx.AB(ising_model, variant="trace"), num_warmup=0, num_samples=2, progress_bar=False
        ).run(jax.random.key(0))


def test_ab_first_order_on_categorical_sites_matches_enumeration():
    probs = jnp.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])

    def categorical_model():
        c = numpyro.sample("c", dist.Categorical(probs))
        numpyro.factor("pair", 0.8 * (c[0] == c[1]))

    states, post = enumerate_posterior(categorical_model, {"c": ((2,), (0, 1, 2))})
    onehot = np.stack([np.eye(3)[st[0]].ravel() for st in states])
    mcmc = MCMC(
        nx.AB(categorical_model),
        num_warmup=600,
        num_samples=3000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(5))
    c = np.asarray(mcmc.get_samples(group_by_chain=True)["c"])
    assert_mc_close(np.eye(3)[c].reshape(*c.shape[:2], 6), post @ onehot)
