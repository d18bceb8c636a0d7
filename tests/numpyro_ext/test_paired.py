"""PairedGibbs (NumPyro): an indicator and its coefficient drawn together.

The exact answers: :mod:`tests.paired_exact`."""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC, NUTS, Gibbs

import numpyro_ext as nx
from benchmarks import user_models as um
from discrete_kernels.samplers import paired as core
from tests import paired_exact as exact
from tests.mc import assert_mc_close
from tests.paired_exact import DF, INCLUSION, SCALE, exact_moments, selection_data


def selection(x, y):
    with numpyro.plate("predictors", x.shape[1]):
        gamma = numpyro.sample("gamma", dist.Bernoulli(INCLUSION))
        beta = numpyro.sample("beta", dist.Normal(0.0, 1.0))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.StudentT(DF, x @ (gamma * beta), SCALE), obs=y)


def statistics(samples: dict) -> np.ndarray:
    return exact.statistics(samples["gamma"], samples["beta"])


def run_alone(seed: int = 0, draws: int = 3000) -> np.ndarray:
    data = selection_data()
    mcmc = MCMC(
        nx.PairedGibbs(selection, pairs={"gamma": "beta"}),
        num_warmup=300,
        num_samples=draws,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.key(seed), *data)
    return statistics(mcmc.get_samples(group_by_chain=True))


def test_the_grid_answer_is_resolved():
    # a grid twice as fine moves no moment by more than 1e-4
    coarse, fine = exact_moments(), exact_moments(points=801)
    assert np.abs(coarse - fine).max() < 1e-4
    assert 0.1 < coarse[1] < 0.9  # the second inclusion is uncertain: both states matter
    # the same for the unknown-scale model's sigma grid
    coarse, fine = exact.exact_moments_with_scale(750), exact.exact_moments_with_scale()
    assert np.abs(coarse - fine).max() < 1e-4


def test_paired_gibbs_alone_matches_the_exact_posterior():
    draws = run_alone()
    assert_mc_close(draws, exact_moments(), num_se=4.0)


def test_a_wrong_reverse_proposal_is_detected(monkeypatch):
    # power: the proposal's coefficient density left out of the MH ratio (an indicator flip
    # judged as if the coefficient were kept) targets another distribution
    def value_only(log_weight, mean, precision, index, coefficient):
        return log_weight[index] - core.logsumexp(log_weight)

    monkeypatch.setattr(core, "pair_proposal_log_prob", value_only)
    draws = run_alone(draws=1500)
    with pytest.raises(AssertionError):
        assert_mc_close(draws, exact_moments(), num_se=4.0)


@pytest.mark.parametrize("form", ["plate", "to_event"])
def test_a_gaussian_conditional_is_proposed_exactly(form):
    # the Kuo-Mallick regression with a Gaussian likelihood and a fixed noise scale: the
    # proposal is the pair's exact conditional, so every move is accepted (sites in a plate,
    # or written with expand and to_event)
    def gaussian(x, y):
        if form == "plate":
            with numpyro.plate("predictors", x.shape[1]):
                gamma = numpyro.sample("gamma", dist.Bernoulli(INCLUSION))
                beta = numpyro.sample("beta", dist.Normal(0.0, 1.0))
        else:
            p = x.shape[1]
            gamma = numpyro.sample("gamma", dist.Bernoulli(INCLUSION).expand([p]).to_event(1))
            beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([p]).to_event(1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(x @ (gamma * beta), SCALE), obs=y)

    mcmc = MCMC(
        nx.PairedGibbs(gaussian, pairs={"gamma": "beta"}),
        num_warmup=20,
        num_samples=50,
        progress_bar=False,
    )
    mcmc.run(random.key(1), *selection_data(), extra_fields=("accept_prob",))
    accept = np.asarray(mcmc.get_extra_fields()["accept_prob"])
    assert accept.min() > 0.999


@pytest.mark.slow  # 13 s; the default run has PairedGibbs beside NUTS against an exact answer
# (test_with_nuts_matches_the_exact_posterior_with_an_unknown_scale[Gibbs]) and this model
# with PairedNUTS (below)
def test_beside_nuts_matches_the_variable_selection_reference():
    # the suite's variable selection model (Student-t likelihood, unknown noise scale) at
    # its reduced size: the pairs in one Gibbs block, NUTS on sigma
    from tests.test_user_models import check

    check("variable_selection", "PairedGibbs", warmup=300, samples=1000, chains=2)


@pytest.mark.parametrize(
    "pairs, match",
    [
        ({"beta": "gamma"}, "must be discrete"),
        ({"gamma": "y"}, "not a latent sample site"),
        ({}, "pairs= maps"),
    ],
)
@pytest.mark.parametrize("kind", ["PairedGibbs", "PairedNUTS"])
def test_bad_pairs_are_refused_with_the_site(pairs, match, kind):
    # the error names the kernel the user built
    model = selection if kind == "PairedGibbs" else _with_scale
    with pytest.raises(ValueError, match=f"{kind}.*{match}"):
        kernel = getattr(nx, kind)(model, pairs=pairs)
        MCMC(kernel, num_warmup=2, num_samples=2, progress_bar=False).run(
            random.key(0), *selection_data()
        )


def test_other_latent_sites_need_a_gibbs_block():
    with pytest.raises(ValueError, match=r"latent sites \['sigma'\].*Gibbs"):
        MCMC(
            nx.PairedGibbs(_with_scale, pairs={"gamma": "beta"}),
            num_warmup=2,
            num_samples=2,
            progress_bar=False,
        ).run(random.key(0), *selection_data())
    kernel = Gibbs(
        [
            (nx.PairedGibbs(_with_scale, pairs={"gamma": "beta"}), ["gamma", "beta"]),
            (NUTS(_with_scale), None),
        ]
    )
    mcmc = MCMC(kernel, num_warmup=20, num_samples=20, progress_bar=False)
    mcmc.run(random.key(0), *selection_data())
    assert np.asarray(mcmc.get_samples()["sigma"]).std() > 0


def test_the_suite_offers_it_on_the_spike_and_slab_models():
    for name in ("spike_slab", "ssvs", "variable_selection"):
        assert "PairedGibbs" in um.MODELS[name].kernels


def test_paired_nuts_matches_the_variable_selection_reference():
    # the whole-model kernel: NUTS on sigma and the paired sweep in one program, chains
    # vectorised
    from tests.test_user_models import check

    check("variable_selection", "PairedNUTS", warmup=300, samples=1000, chains=2)


@pytest.mark.parametrize("kind", ["PairedNUTS", "Gibbs"])
def test_with_nuts_matches_the_exact_posterior_with_an_unknown_scale(kind):
    # the Gaussian model with sigma ~ HalfNormal(1): subsets enumerated, coefficients
    # integrated in closed form given sigma, sigma on a grid (tests.paired_exact); PairedNUTS
    # with two sweeps a step (one: the variable-selection test above)
    if kind == "PairedNUTS":
        kernel = nx.PairedNUTS(_with_scale, pairs={"gamma": "beta"}, sweeps=2)
        chains = {"num_chains": 4, "chain_method": "vectorized"}
    else:
        paired = nx.PairedGibbs(_with_scale, pairs={"gamma": "beta"})
        kernel = Gibbs([(paired, ["gamma", "beta"]), (NUTS(_with_scale), None)])
        chains = {"num_chains": 2, "chain_method": "sequential"}
    mcmc = MCMC(kernel, num_warmup=300, num_samples=1000, progress_bar=False, **chains)
    extra = ("num_moves",) if kind == "PairedNUTS" else ()
    mcmc.run(random.key(2), *selection_data(), extra_fields=extra)
    samples = mcmc.get_samples(group_by_chain=True)
    gamma, beta = np.asarray(samples["gamma"], float), np.asarray(samples["beta"])
    stats = np.concatenate([gamma, beta, np.asarray(samples["sigma"])[..., None]], -1)
    assert_mc_close(stats, exact.exact_moments_with_scale(), num_se=4.0)
    if kind == "PairedNUTS":  # both sweeps ran: more accepted moves in a step than indicators
        moves = np.asarray(mcmc.get_extra_fields()["num_moves"])
        assert moves.max() > gamma.shape[-1]


@pytest.mark.parametrize("sweeps", [0, True, 1.5, "2"])
def test_paired_nuts_refuses_a_sweep_count_that_is_not_a_positive_integer(sweeps):
    with pytest.raises(ValueError, match="PairedNUTS: sweeps must be an integer >= 1"):
        nx.PairedNUTS(_with_scale, pairs={"gamma": "beta"}, sweeps=sweeps)


def test_paired_nuts_refuses_a_model_without_other_sites():
    with pytest.raises(ValueError, match="no latent site outside the pairs"):
        MCMC(
            nx.PairedNUTS(selection, pairs={"gamma": "beta"}),
            num_warmup=2,
            num_samples=2,
            progress_bar=False,
        ).run(random.key(0), *selection_data())


def test_paired_nuts_takes_nuts_options_by_name():
    with pytest.raises(TypeError, match="PairedNUTS: unknown NUTS options"):
        nx.PairedNUTS(selection, pairs={"gamma": "beta"}, step=0.1)


def _with_scale(x, y):
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("predictors", x.shape[1]):
        gamma = numpyro.sample("gamma", dist.Bernoulli(INCLUSION))
        beta = numpyro.sample("beta", dist.Normal(0.0, 1.0))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ (gamma * beta), sigma), obs=y)


@pytest.mark.parametrize("kind", ["PairedGibbs", "PairedNUTS"])
def test_a_chain_whose_paired_moves_all_fail_says_so(monkeypatch, kind):
    # every proposed coefficient NaN: every paired move rejected, and the kernel says so at the
    # end of warmup; with the real proposal (the same run) it does not
    model = selection if kind == "PairedGibbs" else _with_scale

    def run() -> list[str]:
        kernel = getattr(nx, kind)(model, pairs={"gamma": "beta"})
        mcmc = MCMC(kernel, num_warmup=40, num_samples=10, progress_bar=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mcmc.run(random.key(0), *selection_data())
        return [str(w.message) for w in caught if "paired move" in str(w.message)]

    assert run() == []
    real = core.laplace_pair_proposal

    def nan_mean(*args):
        mean, precision, log_weight = real(*args)
        return mean * np.nan, precision, log_weight

    monkeypatch.setattr(core, "laplace_pair_proposal", nan_mean)
    (message,) = run()
    assert f"{kind}: no paired move of ['beta', 'gamma']" in message


def _gated_notes(model) -> list[str]:
    kernel = Gibbs([(nx.DMALA(model), ["gamma"]), (NUTS(model), None)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        MCMC(kernel, num_warmup=2, num_samples=2, progress_bar=False).run(
            random.key(0), *selection_data()
        )
    return [str(w.message) for w in caught if "sets the distribution" in str(w.message)]


def test_a_block_whose_indicator_sets_a_coefficient_prior_names_the_paired_move():
    # SSVS: gamma sets beta's prior (a narrow spike); a DMALA block next to NUTS gets a note
    # with the joint moves; in the Kuo-Mallick form (gamma only in the likelihood) it does not
    def ssvs(x, y):
        with numpyro.plate("predictors", x.shape[1]):
            gamma = numpyro.sample("gamma", dist.Bernoulli(INCLUSION))
            beta = numpyro.sample("beta", dist.Normal(0.0, jnp.where(gamma == 1, 1.0, 0.01)))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(x @ beta, SCALE), obs=y)

    (note,) = _gated_notes(ssvs)
    assert "DMALA: site 'gamma' sets the distribution of 'beta'" in note
    assert "nx.PairedGibbs(model, pairs={'gamma': 'beta'})" in note
    assert _gated_notes(_with_scale) == []  # the Kuo-Mallick form
