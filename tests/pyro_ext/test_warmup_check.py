"""The warmup's check of gradient sites in Pyro (issue 31, item 5; :mod:`pyro_ext._warmup_check`).

The variable-selection model of the NumPyro test (tests/variable_selection.py), in
``px.Gibbs`` with NUTS, started where the gradient in the inclusions is exactly right:
coefficients 0 (``gamma`` then does not enter the likelihood) and a large noise scale. The
setup's check keeps the gradient there; once NUTS moves the coefficients the gradient is
hundreds of nats off, and the warmup switches ``gamma`` to exact differences (measured: at draw
0, where the chain meets NUTS's own start; max |z| 2.1 against the exact inclusions). Without
the check (measured, this start and seed): DMALA freezes every null predictor out (inclusion
0.00 against 0.02-0.04: max |z| only 0.7 at this ESS, so the warning is what the test checks
first) and AB freezes the third predictor in (1.00 against 0.595, max |z| 16.5), with only
the frozen-chain warning.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC, NUTS

import pyro_ext as px

from ..variable_selection import (
    INCLUSION,
    NOISE_SCALE,
    SEL_D,
    SEL_X,
    SEL_Y,
    SLAB,
    binary_z,
    selection_exact,
)


def selection_model(x, y):
    gamma = pyro.sample("gamma", dist.Bernoulli(INCLUSION * torch.ones(SEL_D)).to_event(1))
    beta = pyro.sample("beta", dist.Normal(torch.zeros(SEL_D), SLAB).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfCauchy(torch.tensor(NOISE_SCALE)))
    pyro.sample("y", dist.Normal(x @ (gamma * beta), sigma).to_event(1), obs=y)


@pytest.mark.slow  # default suite time: NumPyro's variable-selection runs cover the switch
@pytest.mark.cpu_only
def test_gibbs_switches_a_site_whose_gradient_goes_bad_during_warmup():
    pyro.set_rng_seed(0)
    kernel = px.Gibbs([(px.DMALA(selection_model), ["gamma"]), (NUTS(selection_model), None)])
    start = {"beta": torch.zeros(SEL_D), "sigma": torch.tensor(10.0)}
    mcmc = MCMC(
        kernel, num_samples=400, warmup_steps=200, initial_params=start, disable_progbar=True
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(torch.as_tensor(SEL_X, dtype=torch.float32), torch.as_tensor(SEL_Y).float())
    messages = [str(w.message) for w in caught]
    assert not any("checked at the start" in m for m in messages), messages  # setup kept it
    assert any(re.search(r"at warmup draw \d+.*'gamma'.*exact differences", m) for m in messages)
    gamma = mcmc.get_samples(group_by_chain=True)["gamma"].numpy()
    z = binary_z(gamma, selection_exact())
    assert np.all(z < 4), (np.round(gamma.mean((0, 1)), 3), z)
