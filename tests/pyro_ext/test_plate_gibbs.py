"""PlateGibbs and plate-mode exact tables in Pyro: the table from S evaluations equals
single-site changes (terms of inner plates included), the kernel is exactly stationary (its
transition matrix through the Pyro driver), matches exact posteriors alone and as a
``pyro_ext.Gibbs`` block next to HMC, and refuses a site whose coordinates are coupled; the
test's power shown by forcing plate mode on a coupled site. ``exact_sites`` and the automatic
switch use the plate table."""

import itertools

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import HMC, MCMC

import discrete_kernels as dk
import pyro_ext as px
from pyro_ext import _plates

from ..core.transition import spec_transition_matrix
from ..mc import assert_mc_close, plate_model_exact

W = (1.0, -2.0, 1.5)
Y = (0.8, -1.4, 2.1)
PRIOR = 0.4
ITEM_SCORES = ((0.0, 1.0, -1.0), (2.0, 0.0, 0.5), (-1.0, 0.3, 0.0))


def plate_model(y):
    """z_i ~ Bernoulli(0.4) and y_i ~ N(mu + w_i z_i, 1) per row: z conditionally independent."""
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("rows", 3):
        z = pyro.sample("z", dist.Bernoulli(PRIOR))
        pyro.sample("y", dist.Normal(mu + torch.tensor(W) * z, 1.0), obs=y)


def discrete_plate_model():
    """Three categorical items, each with its own likelihood: independent given nothing."""
    with pyro.plate("items", 3):
        c = pyro.sample("c", dist.Categorical(torch.tensor([0.2, 0.3, 0.5])))
        pyro.factor("lik", torch.tensor(ITEM_SCORES)[torch.arange(3), c])


def coupled_model():
    """A factor over the whole site couples the coordinates: not conditionally independent."""
    with pyro.plate("rows", 3):
        z = pyro.sample("z", dist.Bernoulli(0.5))
    pyro.factor("pair", 0.8 * z[0] * z[1] - 0.6 * z[1] * z[2])


def capture_model(y):
    """Capture-recapture with data augmentation: z_i (present) per individual, y_ti per
    occasion (an inner plate at dim -2), so z's terms are summed over occasions."""
    with pyro.plate("individuals", y.shape[-1]):
        z = pyro.sample("z", dist.Bernoulli(0.5))
        with pyro.plate("occasions", y.shape[-2], dim=-2):
            pyro.sample("y", dist.Bernoulli(0.3 * z + 1e-3), obs=y)


def driver_setup(kernel, *args):
    """The Pyro driver's setup (as MCMC calls it; its start a seeded prior draw) and its
    ``local_fn``."""
    pyro.set_rng_seed(0)
    kernel.setup(0, *args)
    return kernel._setup, kernel._local_fn()


def enumerated(setup, name, states):
    """The posterior mass of each state of one site (every other site fixed)."""
    logp = np.array([float(setup.log_density({name: s[0]})) for s in states])
    pi = np.exp(logp - logp.max())
    return pi / pi.sum()


class CountingModel:
    """A model that counts its evaluations."""

    def __init__(self, model):
        self.model, self.calls = model, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.model(*args, **kwargs)


def test_plate_table_costs_s_evaluations_and_equals_single_site_changes():
    model = CountingModel(discrete_plate_model)
    setup, local_fn = driver_setup(px.PlateGibbs(model))
    assert [s.mode for s in setup.leaves] == [dk.sites.PLATE]
    x = torch.tensor([0, 2, 1])
    model.calls = 0
    f, (table,) = local_fn((x,))
    assert model.calls == 1 + 3  # f, then one evaluation per value (not per coordinate)
    for i in range(3):
        for v in range(3):
            changed = x.clone()
            changed[i] = v
            expected = float(setup.log_density({"c": changed}))
            assert float(table[i, v]) == pytest.approx(expected, abs=1e-5)


def test_terms_of_an_inner_plate_are_summed_to_the_site():
    torch.manual_seed(0)
    y = (torch.rand(4, 6) < 0.3).float() * (torch.arange(6) < 3)
    setup, local_fn = driver_setup(px.DMALA(capture_model, exact_sites=["z"]), y)
    assert [s.mode for s in setup.leaves] == [dk.sites.PLATE]
    x = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    _, (table,) = local_fn((x,))
    exact_fn = px._target.make_local_fn(
        setup.log_density, (dk.sites.LeafSpec("z", dk.Binary(), dk.sites.EXACT),)
    )
    _, (exact,) = exact_fn((x,))
    assert torch.allclose(table, exact, atol=1e-4)


def binomial_model():
    """Per-coordinate supports (total counts 2, 3, 4): values beyond a count are impossible."""
    with pyro.plate("rows", 3):
        k = pyro.sample("k", dist.Binomial(torch.tensor([2.0, 3.0, 4.0]), 0.5))
        pyro.sample("y", dist.Normal(k, 1.0), obs=torch.tensor([1.0, 2.0, 0.5]))


def test_per_coordinate_supports_keep_plate_mode_and_impossible_values():
    setup, local_fn = driver_setup(px.PlateGibbs(binomial_model))
    assert [s.mode for s in setup.leaves] == [dk.sites.PLATE]
    _, (table,) = local_fn((torch.tensor([1.0, 0.0, 4.0]),))
    beyond = torch.arange(5) > torch.tensor([2, 3, 4])[:, None]
    assert torch.all(table[beyond] == -torch.inf) and torch.all(torch.isfinite(table[~beyond]))


def test_plate_gibbs_is_exactly_stationary():
    kernel = px.PlateGibbs(discrete_plate_model)
    setup, local_fn = driver_setup(kernel)
    states = [(torch.tensor(c),) for c in itertools.product(range(3), repeat=3)]
    params = kernel.spec.parameters(())
    p, _ = spec_transition_matrix(kernel.spec, states, local_fn, params, setup.sites)
    pi = enumerated(setup, "c", states)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-6)
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    assert np.all(np.diag(p) < 1.0)  # it moves


def test_forcing_plate_mode_on_a_coupled_site_breaks_stationarity(monkeypatch):
    """The power of the test above: with the setup's check bypassed, the block update of a
    coupled site is not stationary (and the check refuses it: next test)."""
    monkeypatch.setattr("pyro_ext._plate_setup.verify_plate_table", lambda *a, **k: None)
    kernel = px.PlateGibbs(coupled_model)
    setup, local_fn = driver_setup(kernel)
    assert [s.mode for s in setup.leaves] == [dk.sites.PLATE]
    states = [(torch.tensor(z, dtype=torch.float32),) for z in itertools.product((0, 1), repeat=3)]
    p, _ = spec_transition_matrix(
        kernel.spec, states, local_fn, kernel.spec.parameters(()), setup.sites
    )
    pi = enumerated(setup, "z", states)
    assert np.max(np.abs(pi @ p - pi)) > 1e-3


def test_a_coupled_site_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="'z' is not conditionally independent.*outside its own"):
        driver_setup(px.PlateGibbs(coupled_model))
    one_hot = dist.OneHotCategorical(torch.ones(3) / 3)
    with pytest.raises(ValueError, match="'c' is not conditionally independent.*one-hot"):
        driver_setup(px.PlateGibbs(lambda: pyro.sample("c", one_hot)))


def test_potential_mode_is_refused():
    kernel = px.PlateGibbs(potential_fn=lambda z: -z["x"].sum(), domain=px.Binary())
    kernel.initial_params = {"x": torch.zeros(3)}
    with pytest.raises(ValueError, match="PlateGibbs: needs a model"):
        kernel.setup(0)


def _run(kernel, num_samples, warmup, *args, seed):
    pyro.set_rng_seed(seed)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, disable_progbar=True)
    mcmc.run(*args)
    return mcmc


def test_plate_gibbs_alone_matches_exact_marginals():
    setup, _ = driver_setup(px.PlateGibbs(discrete_plate_model))
    states = [(torch.tensor(c),) for c in itertools.product(range(3), repeat=3)]
    pi = enumerated(setup, "c", states)
    onehot = np.array([np.eye(3)[list(s[0].tolist())].ravel() for s in states])
    mcmc = _run(px.PlateGibbs(discrete_plate_model), 1500, 50, seed=1)
    c = mcmc.get_samples(group_by_chain=True)["c"].cpu().numpy()
    assert_mc_close(np.eye(3)[c].reshape(c.shape[:2] + (9,)), pi @ onehot)
    assert float(mcmc.kernel.diagnostics()["sample_stats"]["accepted"].mean()) > 0.5


def hmc(model):
    """Pyro's HMC with a fixed short trajectory: cheap, and exact for any step size."""
    return HMC(model, step_size=0.5, num_steps=3, adapt_step_size=False)


@pytest.mark.parametrize("discrete", ["PlateGibbs", "DMALA"])
def test_a_gibbs_block_next_to_hmc_matches_the_exact_posterior(discrete):
    """PlateGibbs, and DMALA with ``exact_sites`` on the plate site (its table from S
    evaluations), each as the discrete block of ``px.Gibbs`` next to Pyro's HMC. Measured
    power: PlateGibbs drawing from its table at temperature 2, max |z| 5.9 at 1,000 draws
    (4.6 at 500; 0.7 right); DMALA with its MH ratio's proposal terms swapped, 3.6 at 1,000
    and 3.8 at 500 (1.2 right), no MH step at all 4.6 at 500: on this small model its
    proposal is nearly its exact conditional, so DMALA's run is 500 draws and checks the
    composition, which it catches (each block conditioned on the other's values of the setup,
    ``px.Gibbs`` not passing them on: 5.6 at 500)."""
    y = torch.tensor(Y)
    kernel = (
        px.PlateGibbs(plate_model)
        if discrete == "PlateGibbs"
        else px.DMALA(plate_model, exact_sites=["z"])
    )
    gibbs = px.Gibbs([(kernel, px.discrete_sites), (hmc(plate_model), None)])
    mcmc = _run(gibbs, 1000 if discrete == "PlateGibbs" else 500, 100, y, seed=2)
    assert [s.mode for s in kernel._setup.leaves] == [dk.sites.PLATE]
    samples = mcmc.get_samples(group_by_chain=True)
    mean_z, mean_mu, second = plate_model_exact(Y, W, PRIOR)
    assert_mc_close(samples["z"].cpu().numpy().astype(float), mean_z)
    mu = samples["mu"].cpu().numpy().astype(float)
    assert_mc_close(np.stack([mu, mu**2], -1), np.array([mean_mu, second]))


def zero_inflated(y):
    """One Bernoulli indicator per row; its gradient misleads (a rate near 0 at z = 1)."""
    with pyro.plate("rows", y.shape[0]):
        z = pyro.sample("z", dist.Bernoulli(0.3))
        pyro.sample("y", dist.Poisson(3.0 * (1 - z) + 0.05 * z), obs=y)


def test_the_automatic_switch_uses_the_plate_table_beyond_the_single_site_budget():
    """300 binary coordinates: 300 single-site evaluations exceed the budget, S = 2 do not."""
    y = torch.tensor([0.0, 4.0, 5.0, 6.0] * 75)
    assert dk.sites.table_evaluations(dk.Binary(), y.numel()) > dk.sites.AUTO_EXACT_BUDGET
    with pytest.warns(UserWarning, match="'z' with exact differences instead \\(2 log-density"):
        setup, _ = driver_setup(px.GWG(zero_inflated), y)
    assert [s.mode for s in setup.leaves] == [dk.sites.PLATE]
    setup, _ = driver_setup(px.DMALA(discrete_plate_model))  # categorical: exact by default
    assert [s.mode for s in setup.leaves] == [dk.sites.PLATE]


def test_plate_dims_reads_the_plates():
    with poutine.trace() as tracer:
        with pyro.plate("a", 4, dim=-2), pyro.plate("b", 3):
            pyro.sample("x", dist.Bernoulli(0.5))
        pyro.sample("e", dist.Bernoulli(0.5).expand([3]).to_event(1))
    tr = tracer.trace
    assert _plates.plate_dims(tr.nodes["x"]) == ({"a": -2, "b": -1}, None)
    assert "event" in _plates.plate_dims(tr.nodes["e"])[1]
