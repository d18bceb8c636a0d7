"""``px.DMALA(model, per_coordinate_mh=True)`` in Pyro: one MH decision per coordinate on models
whose discrete coordinates are conditionally independent, alone and as a block of
``px.Gibbs`` next to NUTS, against exact posteriors; and the models it must refuse."""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC, NUTS

import pyro_ext as px

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

START = torch.as_tensor(DETECTIONS.max(1, keepdims=True) + 3, dtype=torch.float32)


def zero_inflated_counts(detection=DETECTION):
    with pyro.plate("sites", DETECTIONS.shape[0], dim=-2):
        n = pyro.sample("n", dist.ZeroInflatedPoisson(torch.tensor(RATE), gate=torch.tensor(GATE)))
        with pyro.plate("surveys", DETECTIONS.shape[1], dim=-1):
            pyro.sample(
                "y", dist.Binomial(n, detection), obs=torch.as_tensor(DETECTIONS, dtype=n.dtype)
            )


def test_zero_inflated_counts_match_the_exact_posterior():
    pyro.set_rng_seed(0)
    mcmc = MCMC(
        px.DMALA(zero_inflated_counts, window={"n": 3}, per_coordinate_mh=True),
        num_samples=1500,
        warmup_steps=200,
        initial_params={"n": START},
        disable_progbar=True,
    )
    mcmc.run()
    n = mcmc.get_samples(group_by_chain=True)["n"].cpu().numpy().astype(np.float64)[..., 0]
    assert np.all(n >= DETECTIONS.max(1))
    seen = DETECTIONS.max(1) > 0
    # a site with no detection leaves 0 on rare, short excursions (posterior mean 0.004)
    assert np.all(n[..., ~seen].mean(axis=(0, 1)) < 0.05)
    assert_mc_close(n[..., seen], counts_exact()[seen])


def counts_with_detection():
    p = pyro.sample("p", dist.Beta(2.0, 2.0))
    zero_inflated_counts(p)


@pytest.mark.slow  # about 40 s: NUTS in Pyro; the kernel's composition runs in NumPyro by default
def test_a_gibbs_block_next_to_nuts_matches_the_exact_posterior():
    mean_p, mean_n = counts_with_detection_exact()
    pyro.set_rng_seed(1)
    kernel = px.Gibbs(
        [
            (px.DMALA(counts_with_detection, window={"n": 3}, per_coordinate_mh=True), ["n"]),
            (NUTS(counts_with_detection), None),
        ]
    )
    mcmc = MCMC(
        kernel,
        num_samples=1000,
        warmup_steps=300,
        initial_params={"n": START, "p": torch.tensor(0.5)},
        disable_progbar=True,
    )
    mcmc.run()
    samples = mcmc.get_samples(group_by_chain=True)
    n = samples["n"].cpu().numpy().astype(np.float64)[..., 0]
    p = samples["p"].cpu().numpy().astype(np.float64)
    seen = DETECTIONS.max(1) > 0
    assert np.all(n[..., ~seen].mean(axis=(0, 1)) < 0.05)
    assert_mc_close(
        np.concatenate([n[..., seen], p[..., None]], axis=-1), np.append(mean_n[seen], mean_p)
    )


def indicators(y):
    with pyro.plate("rows", y.shape[0]):
        z = pyro.sample("z", dist.Bernoulli(0.3))
        pyro.sample("y", dist.Normal(2.0 * z, 1.0), obs=y)


def test_binary_indicators_match_the_exact_posterior():
    pyro.set_rng_seed(2)
    y = torch.as_tensor(INDICATOR_DATA, dtype=torch.float32)
    mcmc = MCMC(
        px.DMALA(indicators, per_coordinate_mh=True),
        num_samples=1500,
        warmup_steps=200,
        disable_progbar=True,
    )
    mcmc.run(y)
    z = mcmc.get_samples(group_by_chain=True)["z"].cpu().numpy().astype(np.float64)
    assert_mc_close(z, indicator_exact(INDICATOR_DATA))
    # the warmup's gradient check (which may switch a site to exact tables) stays off
    assert mcmc.kernel._check is None


def coupled_counts():
    with pyro.plate("sites", 3):
        n = pyro.sample("n", dist.Poisson(4.0))
    pyro.factor("smooth", -0.2 * torch.sum(torch.diff(n) ** 2))


def shared_term(y):
    with pyro.plate("rows", y.shape[0]):
        z = pyro.sample("z", dist.Bernoulli(0.3))
    pyro.sample("y", dist.Normal(z.sum(), 1.0), obs=y)


def two_sites_one_term(y):
    with pyro.plate("rows", y.shape[0]):
        z = pyro.sample("z", dist.Bernoulli(0.3))
        w = pyro.sample("w", dist.Bernoulli(0.6))
        pyro.sample("y", dist.Normal(z + 2.0 * w, 1.0), obs=y)


def categorical_rows(y):
    with pyro.plate("rows", y.shape[0]):
        c = pyro.sample("c", dist.Categorical(torch.ones(3) / 3))
        pyro.sample("y", dist.Normal(torch.tensor([-1.0, 0.0, 1.0])[c], 1.0), obs=y)


Y4 = torch.tensor([0.2, 1.4, -0.3, 0.9])


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
    pyro.set_rng_seed(0)
    args = tuple(a.to(torch.get_default_device()) for a in args)  # the case's device
    with pytest.raises(ValueError, match=r"per_coordinate_mh=True\)") as error:
        px.DMALA(model, per_coordinate_mh=True).setup(0, *args)
    assert message in str(error.value)


def test_potential_mode_and_dula_are_refused():
    kernel = px.DMALA(
        potential_fn=lambda z: -z["x"].sum(), domain=px.Binary(), per_coordinate_mh=True
    )
    with pytest.raises(ValueError, match="needs a model"):
        MCMC(kernel, num_samples=2, initial_params={"x": torch.zeros(3)}).run()
    with pytest.raises(ValueError, match="DULA makes no MH decision"):
        px.DULA(indicators, per_coordinate_mh=True)
