"""Pyro kernels through pyro.infer.MCMC: moments against enumeration, mixed models, chains,
ArviZ export, warmup adaptation and input errors."""

import itertools
import pickle

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import MCMC, NUTS

import pyro_ext as px

from ..mc import assert_mc_close, ising_weights, mixed_model_exact

A, B = 0.3, 0.2
W = torch.tensor(ising_weights(3), dtype=torch.float32)


def ising_model():
    x = pyro.sample("x", dist.Bernoulli(0.5).expand([9]).to_event(1))
    s = 2.0 * x - 1.0
    weights = W.to(s.device)  # a module constant, made before a test picks the device
    pyro.factor("ising", A * s @ weights @ s + B * s.sum())


def enumerate_pyro(model, sites: dict, *args):
    """All joint values of ``sites`` with their posterior mass. ``sites[name]`` is
    ``(shape, values)`` or ``(shape, values, dtype)`` for a grid of every coordinate over
    ``values``, or a list of whole site values."""
    names = list(sites)
    grids = []
    for name in names:
        spec = sites[name]
        if isinstance(spec, list):
            grids.append(spec)
            continue
        shape, values, *dtype = spec
        dtype = dtype[0] if dtype else torch.float32
        n = int(np.prod(shape)) if shape else 1
        grids.append(
            [
                torch.tensor(c, dtype=dtype).reshape(shape)
                for c in itertools.product(values, repeat=n)
            ]
        )
    states, logp = [], []
    for combo in itertools.product(*grids):
        data = dict(zip(names, combo))
        tr = poutine.trace(poutine.condition(model, data=data)).get_trace(*args)
        states.append(combo)
        logp.append(float(tr.log_prob_sum()))
    logp = np.array(logp)
    w = np.exp(logp - logp.max())
    return states, w / w.sum()


def _run(kernel, num_samples, warmup, *args, num_chains=1, seed=0):
    pyro.set_rng_seed(seed)
    mcmc = MCMC(
        kernel,
        num_samples=num_samples,
        warmup_steps=warmup,
        num_chains=num_chains,
        disable_progbar=True,
    )
    mcmc.run(*args)
    return mcmc


# Pyro DMALA and GWG run the driver that tests/test_adapter_parity.py compares with NumPyro's
# step by step (and DMALA's moments run by default in test_several_site_types_in_plates):
# their Ising runs are behind slow; DiscreteGibbs, Pyro's own, runs by default
@pytest.mark.parametrize(
    ("kernel_cls", "num_samples"),
    [
        pytest.param(px.DMALA, 4000, marks=pytest.mark.slow),
        pytest.param(px.GWG, 4000, marks=pytest.mark.slow),
        (px.DiscreteGibbs, 800),
    ],
)
def test_ising_3x3_marginals_and_pairwise_moments(kernel_cls, num_samples):
    states, probs = enumerate_pyro(ising_model, {"x": ((9,), (0, 1))})
    s_all = np.stack([2.0 * st[0].cpu().numpy() - 1.0 for st in states])
    iu = np.triu_indices(9, 1)
    pair_all = np.einsum("ni,nj->nij", s_all, s_all)[:, iu[0], iu[1]]
    mcmc = _run(kernel_cls(ising_model), num_samples, 300)
    x = mcmc.get_samples(group_by_chain=True)["x"].cpu().numpy().astype(np.float64)
    s = 2.0 * x - 1.0
    pair = np.einsum("cni,cnj->cnij", s, s)[..., iu[0], iu[1]]
    assert_mc_close(s, probs @ s_all)
    assert_mc_close(pair, probs @ pair_all)


def mixed_model(y):
    z = pyro.sample("z", dist.Bernoulli(0.4).expand([3]).to_event(1))
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(mu + torch.tensor([1.0, -2.0, 1.5]) @ z, 1.0), obs=y)


# px.Gibbs(DMALA, NUTS) runs by default in tests/test_peer_models.py and test_esh.py
@pytest.mark.slow
def test_mixed_model_with_gibbs_and_nuts_matches_exact_posterior():
    y = torch.tensor([0.3, 1.1, 0.8])
    mean_z, mean_mu, second_mu = mixed_model_exact(y.cpu().numpy())
    kernel = px.Gibbs([(px.DMALA(mixed_model), px.discrete_sites), (NUTS(mixed_model), None)])
    mcmc = _run(kernel, 2000, 300, y)
    samples = mcmc.get_samples(group_by_chain=True)
    z = samples["z"].cpu().numpy().astype(np.float64)
    mu = samples["mu"].cpu().numpy().astype(np.float64)
    assert_mc_close(z, mean_z)
    assert_mc_close(np.stack([mu, mu**2], axis=-1), np.array([mean_mu, second_mu]))
    idata = px.to_arviz(mcmc)
    assert idata.sample_stats["dmala_acceptance_rate"].shape == (1, 2000)


def several_sites_model():
    with pyro.plate("p", 3):
        x = pyro.sample("x", dist.Bernoulli(0.3))
    k = pyro.sample("k", dist.Binomial(torch.tensor([2.0, 3.0]), 0.6).to_event(1))
    c = pyro.sample("c", dist.Categorical(torch.tensor([0.2, 0.3, 0.5])))
    h = pyro.sample("h", dist.OneHotCategorical(torch.tensor([0.5, 0.25, 0.25])))
    locs = torch.tensor([-0.5, 0.0, 0.7])
    pyro.factor(
        "f", 0.4 * x.sum() * k.sum() + locs[c] * h[1] - 0.3 * x[0] * h[2] + 0.2 * k[0] * h[0]
    )


# GWG (one coordinate per step) costs a minute: behind slow; its Pyro driver is the DMALA
# one (tests/test_adapter_parity.py compares both with NumPyro step by step)
@pytest.mark.parametrize("kernel_cls", [px.DMALA, pytest.param(px.GWG, marks=pytest.mark.slow)])
def test_several_site_types_in_plates(kernel_cls):
    one_hot = [torch.nn.functional.one_hot(torch.tensor(h), 3).float() for h in range(3)]
    sites = {
        "x": ((3,), (0, 1)),
        "k": [torch.tensor([a, b], dtype=torch.float32) for a in range(3) for b in range(4)],
        "c": ((), (0, 1, 2), torch.long),
        "h": one_hot,
    }
    states, probs = enumerate_pyro(several_sites_model, sites)

    def features(x, k, c, h):
        return np.concatenate(
            [x, k, (c[..., None] == np.arange(3)), (h[..., None] == np.arange(3))], -1
        ).astype(float)

    expected = sum(
        p * features(*(t.cpu().numpy() for t in st[:3]), st[3].cpu().numpy().argmax())
        for st, p in zip(states, probs)
    )
    # the gradient path on every ordinal site (exact_sites="auto" would switch the small k).
    # DMALA 500 draws (the check's tolerance follows the ESS): right, max |z| 2.5; its MH
    # ratio's proposal terms swapped (tests/mc.broken_mh), 19.2. GWG (slow) moves one
    # coordinate a step and keeps 1,000
    draws = 500 if kernel_cls is px.DMALA else 1000
    mcmc = _run(kernel_cls(several_sites_model, exact_sites=[]), draws, 150)
    smp = mcmc.get_samples(group_by_chain=True)
    assert np.all(smp["k"].cpu().numpy() <= np.array([2, 3]))
    np.testing.assert_array_equal(smp["h"].sum(-1).cpu().numpy(), 1.0)
    got = features(*(smp[n].cpu().numpy() for n in "xkc"), smp["h"].cpu().numpy().argmax(-1))
    assert_mc_close(got, expected)


def _check_two_chains_and_arviz(mcmc) -> None:
    samples = mcmc.get_samples(group_by_chain=True)
    assert samples["x"].shape == (2, 200, 9)
    assert not torch.equal(samples["x"][0], samples["x"][1])
    idata = px.to_arviz(mcmc)
    assert idata.posterior["x"].shape == (2, 200, 9)
    for name in ["acceptance_rate", "accepted", "step_size", "lp", "hamming_distance"]:
        assert idata.sample_stats[name].shape == (2, 200), name
    steps = idata.sample_stats["step_size"].values
    assert np.all(steps == steps[:, :1])  # frozen after warmup
    assert not np.allclose(steps[:, 0], 0.5)  # and adapted during it


def test_several_chains_and_arviz(monkeypatch):
    # Pyro runs the chains one after the other in this process when it sees no spare core
    # (CI's two cores); pretend so on any machine: forked workers fail once CUDA or
    # autograd's device threads are up (the spawned-worker test below covers workers)
    monkeypatch.setattr(pyro.infer.mcmc.api.mp, "cpu_count", lambda: 1)
    mcmc = _run(px.DMALA(ising_model), 200, 100, num_chains=2)
    assert type(mcmc.sampler).__name__ == "_UnarySampler"
    _check_two_chains_and_arviz(mcmc)


@pytest.mark.slow  # default suite time (8.6 s): the sequential chains' test covers ArviZ
@pytest.mark.cpu_only  # worker processes do not inherit torch's default device
def test_several_chains_in_spawned_workers_and_arviz(monkeypatch):
    # Pyro uses worker processes only with a spare core; pretend there is one, and spawn
    # (which pickles the kernel) rather than fork
    monkeypatch.setattr(pyro.infer.mcmc.api.mp, "cpu_count", lambda: 4)
    pyro.set_rng_seed(0)
    mcmc = MCMC(
        px.DMALA(ising_model),
        num_samples=200,
        warmup_steps=100,
        num_chains=2,
        mp_context="spawn",
        disable_progbar=True,
    )
    assert type(mcmc.sampler).__name__ == "_MultiSampler"
    mcmc.run()
    _check_two_chains_and_arviz(mcmc)


def test_single_chain_arviz_and_logging():
    kernel = px.DMALA(ising_model)
    mcmc = _run(kernel, 50, 20)
    idata = px.to_arviz(mcmc)
    assert idata.posterior["x"].shape == (1, 50, 9)
    assert np.all(np.isfinite(idata.sample_stats["lp"].values))
    log = kernel.logging()
    assert set(log) == {"step size", "acc. prob"}


def test_kernels_pickle():
    for kernel in [px.DMALA(ising_model), px.GWG(ising_model), px.DiscreteGibbs(ising_model)]:
        kernel.setup(10)
        clone = pickle.loads(pickle.dumps(kernel))
        clone.setup(10)


@pytest.mark.parametrize(
    "form",
    # the forms' exactness is tested on transition matrices in tests/core/test_gibbs.py and
    # Pyro's DiscreteGibbs driver by the Ising moment test: these runs are behind slow
    [
        pytest.param("modified", marks=pytest.mark.slow),
        pytest.param("random_walk", marks=pytest.mark.slow),
    ],
)
def test_discrete_gibbs_forms_are_exact_on_a_small_model(form):
    states, probs = enumerate_pyro(ising_model, {"x": ((9,), (0, 1))})
    s_all = np.stack([2.0 * st[0].cpu().numpy() - 1.0 for st in states])
    # the two spin-flip modes of this lattice swap rarely: several chains for the ESS
    mcmc = _run(px.DiscreteGibbs(ising_model, **{form: True}), 450, 100, num_chains=3)
    x = mcmc.get_samples(group_by_chain=True)["x"].cpu().numpy().astype(np.float64)
    assert_mc_close(2.0 * x - 1.0, probs @ s_all)


# ------------------------------------------------------------------------- errors


def test_error_continuous_site_points_to_gibbs():
    def model():
        pyro.sample("x", dist.Bernoulli(0.5))
        pyro.sample("sigma", dist.HalfNormal(1.0))

    with pytest.raises(ValueError, match=r"continuous latent sites \['sigma'\].*pyro_ext.Gibbs"):
        px.DMALA(model).setup(0)


def test_error_no_discrete_site_and_unsupported_distribution():
    def observed_only():
        pyro.sample("x", dist.Bernoulli(0.5), obs=torch.tensor(1.0))

    with pytest.raises(ValueError, match="no discrete latent site"):
        px.GWG(observed_only).setup(0)

    def multinomial():
        pyro.sample("n", dist.Multinomial(5, torch.tensor([0.2, 0.3, 0.5])))

    with pytest.raises(ValueError, match="Site 'n' has distribution Multinomial.*supported"):
        px.DMALA(multinomial).setup(0)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_error_non_positive_step_size(bad):
    with pytest.raises(ValueError, match="step_size must be a positive finite number"):
        px.DMALA(ising_model, step_size=bad)


def test_error_potential_mode_needs_domain_and_initial_params():
    with pytest.raises(ValueError, match="needs `domain=`"):
        px.DMALA(potential_fn=lambda z: z["x"].sum())
    with pytest.raises(ValueError, match="pass `initial_params`"):
        px.DMALA(potential_fn=lambda z: z["x"].sum(), domain=px.Binary()).setup(0)


def test_nan_potential_rejects_and_chain_continues():
    def potential(z):
        x = z["x"]
        value = -0.3 * x.sum()
        return torch.where(x[0] * x[1] > 0, torch.tensor(float("nan")), value)

    kernel = px.DMALA(
        potential_fn=potential, domain=px.Binary(), step_size=2.0, adapt_step_size=False
    )
    pyro.set_rng_seed(0)
    mcmc = MCMC(
        kernel,
        num_samples=300,
        warmup_steps=0,
        initial_params={"x": torch.zeros(4)},
        disable_progbar=True,
    )
    mcmc.run()
    x = mcmc.get_samples()["x"].cpu().numpy()
    assert not np.any(x[:, 0] * x[:, 1] > 0)
    stats = px.to_arviz(mcmc).sample_stats
    assert np.all(np.isfinite(stats["lp"].values))
    assert stats["accepted"].values.mean() > 0.1
