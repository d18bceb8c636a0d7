"""Stochastic-gradient DULA (Sec. 6 of the DLP paper): a subsampling plate in a NumPyro model.

Each step evaluates the log density and its gradient on a new minibatch (drawn from the chain's
key) scaled by ``N / b``; the kernels that compare log densities refuse the plate.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.handlers import scale, seed, substitute, trace
from numpyro.infer import MCMC

import numpyro_ext as nx
from discrete_kernels.minibatch import SubsamplePlate
from numpyro_ext import _setup
from numpyro_ext.driver import minibatch_key
from tests.sg_theory import (
    BATCH,
    FEATURES,
    LABELS,
    LOADINGS,
    N_ROWS,
    REFUSAL_IDS,
    REFUSALS,
    ROWS,
    SITES,
    STEP,
    TARGETS,
    B,
    D,
    by_hand,
    dula_theory,
    exact_means,
    z_scores,
)

# ---------------------------------------------------------------- a tiny regression


def regression(x, y, subsample_size=BATCH):
    """Binary weights ``w`` (3), ``y_n ~ Normal(x_n . w, 1)`` over a subsampling plate."""
    w = numpyro.sample("w", dist.Bernoulli(0.5).expand([D]).to_event(1))
    with numpyro.plate("data", N_ROWS, subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Normal(x[idx] @ w, 1.0), obs=y[idx])


def test_each_step_draws_a_new_minibatch_and_uses_its_scaled_gradient():
    kernel = nx.DULA(regression, step_size=0.4)
    args = (jnp.asarray(FEATURES), jnp.asarray(TARGETS))
    state = kernel.init(jax.random.key(0), 0, None, args, {})
    subsets = list(itertools.combinations(range(N_ROWS), BATCH))
    found = []
    for _ in range(8):
        # the rows the plate draws with this step's minibatch key (the log density is evaluated
        # with the latent sites given, so no key is split off for them)
        given = substitute(regression, data={"w": jnp.zeros(D)})
        model = seed(given, minibatch_key(state.rng_key))
        drawn = tuple(sorted(int(i) for i in trace(model).get_trace(*args)["data"]["value"]))
        state = kernel.sample(state, args, {})
        w = np.asarray(state.z["w"], dtype=np.float64)
        grad = np.asarray(state.local[0], dtype=np.float64)
        # the gradient the next step reads is the scaled gradient of exactly one minibatch
        matches = [s for s in subsets if np.allclose(by_hand(w, s)[1], grad, atol=1e-4)]
        assert matches == [drawn]
        # and the value beside it was computed on the same minibatch
        np.testing.assert_allclose(-float(state.potential_energy), by_hand(w, drawn)[0], rtol=1e-5)
        found.append(drawn)
    assert all(a != b for a, b in zip(found, found[1:]))
    assert len(set(found)) >= 6


def test_full_size_subsample_reproduces_full_batch_dula():
    args = (jnp.asarray(FEATURES), jnp.asarray(TARGETS))

    def draws(model, num_chains=2):
        # exact_sites=[]: the full-batch kernel would switch 'w' to exact differences here, which
        # a minibatch cannot have
        mcmc = MCMC(
            nx.DULA(model, step_size=0.4, exact_sites=[]),
            num_warmup=5,
            num_samples=30,
            num_chains=num_chains,
            chain_method="vectorized",
            progress_bar=False,
        )
        mcmc.run(jax.random.key(3), *args)
        return np.asarray(mcmc.get_samples()["w"])

    def full(x, y):
        return regression(x, y, subsample_size=None)

    def everything(x, y):
        return regression(x, y, subsample_size=N_ROWS)

    reference = draws(full)
    np.testing.assert_array_equal(draws(everything), reference)
    # the minibatch path itself (every evaluation seeded with the step's key), forced on a plate
    # that subsamples all its rows: the same draws, so the noise stream is unchanged
    forced = (SubsamplePlate("data", N_ROWS, N_ROWS),)
    original = _setup.subsample_plates
    try:
        _setup.subsample_plates = lambda model_trace: forced
        np.testing.assert_array_equal(draws(everything), reference)
    finally:
        _setup.subsample_plates = original


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("name, options, reason", REFUSALS, ids=REFUSAL_IDS)
def test_kernels_that_compare_log_densities_refuse_a_subsampling_plate(name, options, reason):
    k = getattr(nx, name)(regression, **options)
    mcmc = MCMC(k, num_warmup=2, num_samples=2, progress_bar=False)
    with pytest.raises(ValueError) as error:
        mcmc.run(jax.random.key(0), jnp.asarray(FEATURES), jnp.asarray(TARGETS))
    message = str(error.value)
    assert message.startswith(f"{k.spec.name}: ")
    assert "plate 'data' subsamples 4 of 12" in message
    assert reason in message
    assert "remove subsample_size=" in message


def test_latent_site_inside_a_subsampling_plate_is_refused():
    def model(y):
        with numpyro.plate("data", N_ROWS, subsample_size=BATCH) as idx:
            z = numpyro.sample("z", dist.Bernoulli(0.5))
            numpyro.sample("y", dist.Normal(z, 1.0), obs=y[idx])

    mcmc = MCMC(nx.DULA(model), num_warmup=2, num_samples=2, progress_bar=False)
    with pytest.raises(ValueError, match="latent site 'z' is inside subsampling plate 'data'"):
        mcmc.run(jax.random.key(0), jnp.asarray(TARGETS))


# ---------------------------------------------------------------- statistics


def independent(a, y, subsample_size=B):
    """Four independent binary sites; site ``j`` explains column ``j`` of 200 rows by
    ``y_nj ~ Bernoulli(logit = a_nj (2 w_j - 1))``."""
    w = numpyro.sample("w", dist.Bernoulli(0.5).expand([SITES]).to_event(1))
    with numpyro.plate("rows", ROWS, subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=a[idx] * (2 * w - 1)).to_event(1), obs=y[idx])


def run_means(model, chains=16, samples=1200) -> np.ndarray:
    mcmc = MCMC(
        nx.DULA(model, step_size=STEP),
        num_warmup=100,
        num_samples=samples,
        num_chains=chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), jnp.asarray(LOADINGS), jnp.asarray(LABELS))
    return np.asarray(mcmc.get_samples()["w"], dtype=np.float64).mean(0)


DRAWS = 16 * 1200


def test_sg_dula_matches_its_stationary_law_and_is_close_to_full_batch():
    exact = exact_means()
    full, sg = dula_theory(None), dula_theory(B)
    assert np.all((exact > 0.15) & (exact < 0.95))  # away from 1/2: the scale matters
    sg_mean = run_means(independent)
    full_mean = run_means(lambda a, y: independent(a, y, subsample_size=None))
    # each run against its own stationary law: 4.5 sd per site (4 sites, chains started
    # after 100 steps of a chain that forgets in a few)
    assert np.all(np.abs(z_scores(full_mean, full, DRAWS)) < 4.5)
    assert np.all(np.abs(z_scores(sg_mean, sg, DRAWS)) < 4.5)
    # SG-DULA is biased twice: DULA's step-size bias (the theory puts full-batch DULA within
    # 0.013 of the posterior here) and the minibatch's (SG-DULA's law within 0.035 of DULA's);
    # the bounds add 4.5 sd of the runs (0.05) to those
    assert np.all(np.abs(full[0] - exact) < 0.03) and np.all(np.abs(sg[0] - full[0]) < 0.05)
    assert np.all(np.abs(sg_mean - exact) < 0.1)
    assert np.all(np.abs(sg_mean - full_mean) < 0.1)


def test_a_gradient_scaled_by_b_over_n_fails_the_check():
    """Power: the likelihood scaled by ``b / N`` instead of ``N / b`` (a factor ``(b / N)^2`` on
    top of the plate's) is caught by the same check."""
    factor = (B / ROWS) ** 2

    def wrong(a, y):
        with scale(scale=factor):
            independent(a, y)

    mean = run_means(wrong, chains=8, samples=600)
    assert np.max(np.abs(z_scores(mean, dula_theory(B), 8 * 600))) > 4.5
    # and the run does follow the law of the wrongly scaled gradient
    assert np.all(np.abs(z_scores(mean, dula_theory(B, factor=B / ROWS), 8 * 600)) < 4.5)
