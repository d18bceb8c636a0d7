"""Pyro models written with ``pyro.markov`` (one site per time step, the form of Pyro's HMM
tutorials without enumeration): every discrete kernel runs on them and matches the exact
marginals of the hidden states (brute-force enumeration of the 3^5 paths). The test's power:
the same check fails for a chain that never leaves its start."""

import itertools

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC

import discrete_kernels as dk
import pyro_ext as px

from ..mc import assert_mc_close

K, T = 3, 5
TRANSITION = torch.tensor([[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]])
MEANS = torch.tensor([-1.5, 0.0, 1.5])
Y = torch.tensor([-1.2, -0.4, 0.9, 1.7, 0.2])


def markov_hmm(y):
    """Hidden states drawn one step at a time inside ``pyro.markov``; the model's constants
    follow the data's device."""
    transition, means = TRANSITION.to(y.device), MEANS.to(y.device)
    state = torch.tensor(0, device=y.device)
    for t in pyro.markov(range(len(y))):
        probs = transition[state] if t else torch.ones(K, device=y.device) / K
        state = pyro.sample(f"s_{t}", dist.Categorical(probs))
        pyro.sample(f"y_{t}", dist.Normal(means[state], 1.0), obs=y[t])


def exact_marginals() -> np.ndarray:
    """P(s_t = k | y), shape (T, K), by enumerating every path."""
    paths = np.array(list(itertools.product(range(K), repeat=T)))
    log_t, means, y = np.log(TRANSITION.numpy()), MEANS.numpy(), Y.numpy()
    logp = np.full(len(paths), -np.log(K))
    logp += log_t[paths[:, :-1], paths[:, 1:]].sum(1)
    logp += (-0.5 * (y[None] - means[paths]) ** 2).sum(1)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    return np.stack([w @ (paths == k) for k in range(K)], -1)  # (T, K)


def state_draws(mcmc: MCMC) -> np.ndarray:
    """One-hot draws of every state, shape (chains, draws, T * K)."""
    samples = mcmc.get_samples(group_by_chain=True)
    s = np.stack([samples[f"s_{t}"].cpu().numpy() for t in range(T)], -1)  # (C, N, T)
    return np.eye(K)[s].reshape(*s.shape[:2], T * K)


#: draws per kernel: PlateGibbs draws each state from its exact conditional (32 model
#: traces per step in Pyro, about 28 ms); the gradient kernels move less per step
DRAWS = {px.PlateGibbs: 200, px.GWG: 1500, px.DMALA: 1500}


@pytest.mark.parametrize(
    "kernel",
    [
        px.PlateGibbs,
        pytest.param(px.GWG, marks=pytest.mark.slow),
        pytest.param(px.DMALA, marks=pytest.mark.slow),
    ],
    ids=["PlateGibbs", "GWG", "DMALA"],
)
def test_kernels_match_the_exact_marginals_of_a_markov_hmm(kernel, torch_device):
    pyro.set_rng_seed(0)
    mcmc = MCMC(
        kernel(markov_hmm), num_samples=DRAWS[kernel], warmup_steps=100, disable_progbar=True
    )
    mcmc.run(Y.to(torch_device))
    assert_mc_close(state_draws(mcmc), exact_marginals().ravel())


def test_the_check_fails_for_a_chain_that_stays_at_its_start(torch_device):
    """Power: DMALA with a step size too small to move (no adaptation) keeps its start, and
    the same comparison rejects it."""
    pyro.set_rng_seed(0)
    kernel = px.DMALA(markov_hmm, step_size=1e-4, adapt_step_size=False)
    # a chain that keeps its start fails the check at any length: 30 draws
    mcmc = MCMC(kernel, num_samples=30, warmup_steps=0, disable_progbar=True)
    mcmc.run(Y.to(torch_device))
    with pytest.raises(AssertionError):
        assert_mc_close(state_draws(mcmc), exact_marginals().ravel())


def test_the_sweep_evaluates_one_leafs_table_between_draws_and_draws_the_same():
    """Between two draws of its sweep PlateGibbs reads only the next leaf's table, and after
    its last draw none: the Pyro setup gives it a ``LocalFnByLeaf``, which evaluates that
    table alone (or the log density alone). The same draws and log density as evaluating
    every leaf's table after each draw, on the same noise, and the tables the next step
    computes where it reads them are those: ``(T - 1)(1 + K) + 1`` model traces a sweep
    instead of ``T (1 + T K)``, plus, at a step whose start has no tables, ``1 + K`` (the first
    leaf's table, which its first draw reads) instead of every table's ``1 + T K``."""
    calls = [0]

    def counted(y):
        calls[0] += 1
        markov_hmm(y)

    kernel = px.PlateGibbs(counted)
    pyro.set_rng_seed(0)
    kernel.setup(0, Y)
    setup, spec = kernel._setup, kernel.spec
    by_leaf = setup.local_fn()
    assert isinstance(by_leaf, dk.LocalFnByLeaf)
    every = by_leaf.local_fn
    params = spec.parameters(kernel.adapt_state)
    state = spec.init(setup.to_leaves(kernel.initial_params), every)
    moved = 0
    for _ in range(20):
        shapes = spec.noise_shapes(setup.sites, [tuple(x.shape) for x in state.x])
        noise = px.driver.draw_noise(shapes, setup.like)
        counts = []
        steps = []
        for local_fn in (by_leaf, every):
            calls[0] = 0
            steps.append(spec.step(state, noise, params, kernel.adapt_state, setup.sites, local_fn))
            counts.append(calls[0])
        (a, _), (b, _) = steps
        lazy = any(local is None for local in state.local)
        start_by_leaf, start_every = (1 + K, 1 + T * K) if lazy else (0, 0)
        assert counts == [
            start_by_leaf + (T - 1) * (1 + K) + 1,
            start_every + T * (1 + T * K),
        ]
        assert all(torch.equal(x, y) for x, y in zip(a.x, b.x))
        assert torch.equal(a.log_density, b.log_density)
        assert all(local is None for local in a.local)  # computed where the next step reads them
        f, tables = every(a.x)
        assert torch.equal(f, a.log_density)
        assert all(torch.equal(x, y) for x, y in zip(tables, b.local))
        moved += sum(int((x != y).sum()) for x, y in zip(a.x, state.x))
        state = a
    assert moved > 10  # the draws move: the comparison is not of unchanged states
