"""PairedGibbs (Pyro): an indicator and its coefficient drawn together, alone and as a block
of ``pyro_ext.Gibbs`` next to NUTS. The exact answers: :mod:`tests.paired_exact`."""

from __future__ import annotations

import warnings

import numpy as np
import pyro
import pyro.distributions as pdist
import pytest
import torch
from pyro.infer import MCMC, NUTS

import pyro_ext as px
from discrete_kernels.samplers import paired as core
from tests import paired_exact as exact
from tests.mc import assert_mc_close


def data() -> tuple[torch.Tensor, torch.Tensor]:
    x, y = exact.selection_data()
    return torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)


def selection(x, y):
    with pyro.plate("predictors", x.shape[1]):
        gamma = pyro.sample("gamma", pdist.Bernoulli(torch.tensor(exact.INCLUSION)))
        beta = pyro.sample("beta", pdist.Normal(torch.tensor(0.0), 1.0))
    with pyro.plate("rows", x.shape[0]):
        mean = x @ (gamma * beta).to(x.dtype)
        pyro.sample("y", pdist.StudentT(exact.DF, mean, exact.SCALE), obs=y)


def with_scale(x, y):
    sigma = pyro.sample("sigma", pdist.HalfNormal(torch.tensor(1.0, dtype=x.dtype)))
    with pyro.plate("predictors", x.shape[1]):
        gamma = pyro.sample("gamma", pdist.Bernoulli(torch.tensor(exact.INCLUSION)))
        beta = pyro.sample("beta", pdist.Normal(torch.tensor(0.0, dtype=x.dtype), 1.0))
    with pyro.plate("rows", x.shape[0]):
        pyro.sample("y", pdist.Normal(x @ (gamma.to(x.dtype) * beta), sigma), obs=y)


def run(kernel, draws: int, warmup: int = 200, seed: int = 0) -> MCMC:
    pyro.set_rng_seed(seed)
    mcmc = MCMC(kernel, num_samples=draws, warmup_steps=warmup, disable_progbar=True)
    mcmc.run(*data())
    return mcmc


def alone(draws: int) -> np.ndarray:
    samples = run(px.PairedGibbs(selection, pairs={"gamma": "beta"}), draws).get_samples()
    stats = exact.statistics(samples["gamma"].cpu().numpy(), samples["beta"].cpu().numpy())
    return stats[None]


def test_alone_matches_the_exact_posterior():
    # 500 draws: the power test below detects a wrong reverse proposal with as many (measured
    # max |z| 6.0 broken against 1.9 right; 300 draws were too few: 4.0)
    assert_mc_close(alone(500), exact.exact_moments(), num_se=4.0)


def test_a_wrong_reverse_proposal_is_detected(monkeypatch):
    # power, as in the NumPyro test: the coefficient's density left out of the proposal's
    # log probability
    def value_only(log_weight, mean, precision, index, coefficient):
        return log_weight[index] - torch.logsumexp(log_weight, 0)

    monkeypatch.setattr(core, "pair_proposal_log_prob", value_only)
    with pytest.raises(AssertionError):
        assert_mc_close(alone(500), exact.exact_moments(), num_se=4.0)


def test_beside_nuts_in_gibbs_matches_the_exact_posterior():
    # the pairs in one block, NUTS on the noise scale; the Gaussian model's answer is exact
    # (coefficients integrated in closed form, sigma on a grid). Power at 300 draws after 100
    # warmup steps: with the wrong reverse proposal of the test below, max |z| 8.8 (1.2 right)
    kernel = px.Gibbs(
        [
            (px.PairedGibbs(with_scale, pairs={"gamma": "beta"}), ["gamma", "beta"]),
            (NUTS(with_scale), None),
        ]
    )
    samples = run(kernel, 300, warmup=100).get_samples()
    gamma, beta, sigma = (samples[n].cpu().numpy() for n in ("gamma", "beta", "sigma"))
    stats = np.concatenate([gamma, beta, sigma[:, None]], -1)[None]
    assert_mc_close(stats, exact.exact_moments_with_scale(), num_se=4.0)


@pytest.mark.parametrize("form", ["plate", "to_event"])
def test_a_gaussian_conditional_is_proposed_exactly(form):
    # a Gaussian likelihood given its scale: the proposal is the pair's exact conditional
    # (sites in a plate, or written with expand and to_event)
    def gaussian(x, y):
        inclusion = pdist.Bernoulli(torch.tensor(exact.INCLUSION))
        prior = pdist.Normal(torch.tensor(0.0, dtype=x.dtype), 1.0)
        if form == "plate":
            with pyro.plate("predictors", x.shape[1]):
                gamma = pyro.sample("gamma", inclusion)
                beta = pyro.sample("beta", prior)
        else:
            gamma = pyro.sample("gamma", inclusion.expand([x.shape[1]]).to_event(1))
            beta = pyro.sample("beta", prior.expand([x.shape[1]]).to_event(1))
        with pyro.plate("rows", x.shape[0]):
            pyro.sample("y", pdist.Normal(x @ (gamma.to(x.dtype) * beta), exact.SCALE), obs=y)

    kernel = px.PairedGibbs(gaussian, pairs={"gamma": "beta"})
    run(kernel, 30, warmup=10)
    accept = kernel.diagnostics()["sample_stats"]["accept_prob"]
    assert accept.numel() == 30 and float(accept.min()) > 0.999


@pytest.mark.parametrize(
    "pairs, match",
    [
        ({"beta": "gamma"}, "must be discrete"),
        ({"gamma": "y"}, "not a latent sample site"),
        ({}, "pairs= maps"),
        ({"gamma": "beta"}, r"latent sites \['sigma'\].*pyro_ext.Gibbs"),
    ],
)
def test_bad_pairs_are_refused_with_the_site(pairs, match):
    with pytest.raises(ValueError, match=f"PairedGibbs.*{match}"):
        run(px.PairedGibbs(with_scale, pairs=pairs), 2, warmup=2)


def test_a_chain_whose_paired_moves_all_fail_says_so(monkeypatch):
    # every proposed coefficient NaN: every move rejected, and the kernel says so at the end
    # of warmup; with the real proposal (the same run) it does not
    def messages() -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run(px.PairedGibbs(selection, pairs={"gamma": "beta"}), 5, warmup=40)
        return [str(w.message) for w in caught if "paired move" in str(w.message)]

    assert messages() == []
    real = core.laplace_pair_proposal

    def nan_mean(*args):
        mean, precision, log_weight = real(*args)
        return mean * np.nan, precision, log_weight

    monkeypatch.setattr(core, "laplace_pair_proposal", nan_mean)
    (message,) = messages()
    assert "PairedGibbs: no paired move of ['beta', 'gamma']" in message


def test_a_block_whose_indicator_sets_a_coefficient_prior_names_the_paired_move():
    # SSVS: gamma sets beta's prior (a narrow spike); a DMALA block next to NUTS gets a note
    # with the joint move; in the Kuo-Mallick form (gamma only in the likelihood) it does not
    def ssvs(x, y):
        with pyro.plate("predictors", x.shape[1]):
            gamma = pyro.sample("gamma", pdist.Bernoulli(torch.tensor(exact.INCLUSION)))
            scale = torch.where(gamma == 1, 1.0, 0.01).to(x.dtype)
            beta = pyro.sample("beta", pdist.Normal(torch.zeros((), dtype=x.dtype), scale))
        with pyro.plate("rows", x.shape[0]):
            pyro.sample("y", pdist.Normal(x @ beta, exact.SCALE), obs=y)

    def notes(model) -> list[str]:
        kernel = px.Gibbs([(px.DMALA(model), ["gamma"]), (NUTS(model), None)])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run(kernel, 2, warmup=2)
        return [str(w.message) for w in caught if "sets the distribution" in str(w.message)]

    (note,) = notes(ssvs)
    assert "DMALA: site 'gamma' sets the distribution of 'beta'" in note
    assert "px.PairedGibbs(model, pairs={'gamma': 'beta'})" in note
    assert notes(with_scale) == []
