"""More models users write, against exact posteriors (issue 10's peer-model suite): a latent
index ``mu[z]`` (categorical assignments with known means), an HMM with sampled hidden states,
and Dawid–Skene annotators with known confusion matrices; through the discrete kernels of both
PPLs.

Each check is ``assert_mc_close`` (chain-pooled means within 5 ESS-based standard errors).
Power: the same check fails for a kernel whose MH ratio drops its reverse proposal term
(``broken_mh``), shown on each model.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")

import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as ndist  # noqa: E402
import pyro  # noqa: E402
import pyro.distributions as pdist  # noqa: E402
from numpyro.infer import MCMC as NMCMC  # noqa: E402
from pyro.infer import MCMC as PMCMC  # noqa: E402
from scipy.stats import norm  # noqa: E402

import numpyro_ext as nx  # noqa: E402
import pyro_ext as px  # noqa: E402
from discrete_kernels import metropolis as core_steps  # noqa: E402

from .mc import assert_mc_close  # noqa: E402

# ------------------------------------------------------------------------------------------
# models (one definition per PPL) and exact posteriors

MEANS = np.array([-2.0, 0.0, 2.5])
WEIGHTS = np.array([0.3, 0.5, 0.2])
INDEX_DATA = np.array([-1.8, 0.4, 1.1, 2.9, -0.6, 1.4])


def index_exact() -> np.ndarray:
    """P(z_i = k | y_i), (n, 3): the assignments factorise given the known means."""
    log_p = np.log(WEIGHTS) + norm.logpdf(INDEX_DATA[:, None], MEANS, 1.0)
    p = np.exp(log_p - log_p.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


def n_index_model(y):
    with numpyro.plate("i", y.shape[0]):
        z = numpyro.sample("z", ndist.Categorical(jnp.asarray(WEIGHTS)))
        numpyro.sample("y", ndist.Normal(jnp.asarray(MEANS)[z], 1.0), obs=y)


def p_index_model(y):
    with pyro.plate("i", y.shape[0]):
        z = pyro.sample("z", pdist.Categorical(torch.as_tensor(WEIGHTS, dtype=torch.float32)))
        pyro.sample("y", pdist.Normal(torch.as_tensor(MEANS, dtype=torch.float32)[z], 1.0), obs=y)


TRANSITION = np.array([[0.8, 0.2], [0.3, 0.7]])
EMISSION_MEANS = np.array([0.0, 1.5])
HMM_DATA = np.array([0.1, 1.7, 1.2, -0.4, 0.3, 1.9])


def hmm_exact() -> np.ndarray:
    """P(s_t = 1 | y), (T,), by enumerating the 2^T paths."""
    t_len = len(HMM_DATA)
    total, marginal = 0.0, np.zeros(t_len)
    for path in itertools.product((0, 1), repeat=t_len):
        log_p = np.log(0.5) + norm.logpdf(HMM_DATA[0], EMISSION_MEANS[path[0]], 1.0)
        for t in range(1, t_len):
            log_p += np.log(TRANSITION[path[t - 1], path[t]])
            log_p += norm.logpdf(HMM_DATA[t], EMISSION_MEANS[path[t]], 1.0)
        w = np.exp(log_p)
        total += w
        marginal += w * np.array(path)
    return marginal / total


def n_hmm_model(y):
    s = numpyro.sample("s0", ndist.Bernoulli(0.5))
    numpyro.sample("y0", ndist.Normal(jnp.asarray(EMISSION_MEANS)[s], 1.0), obs=y[0])
    for t in range(1, y.shape[0]):
        p = jnp.asarray(TRANSITION)[s, 1]
        s = numpyro.sample(f"s{t}", ndist.Bernoulli(p))
        numpyro.sample(f"y{t}", ndist.Normal(jnp.asarray(EMISSION_MEANS)[s], 1.0), obs=y[t])


def p_hmm_model(y):
    trans = torch.as_tensor(TRANSITION, dtype=torch.float32)
    means = torch.as_tensor(EMISSION_MEANS, dtype=torch.float32)
    s = pyro.sample("s0", pdist.Bernoulli(0.5)).long()
    pyro.sample("y0", pdist.Normal(means[s], 1.0), obs=y[0])
    for t in range(1, y.shape[0]):
        s = pyro.sample(f"s{t}", pdist.Bernoulli(trans[s, 1])).long()
        pyro.sample(f"y{t}", pdist.Normal(means[s], 1.0), obs=y[t])


# Dawid–Skene: 5 items, 3 annotators with known confusion matrices over 3 classes
CONFUSION = np.array(
    [
        [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]],
        [[0.6, 0.3, 0.1], [0.2, 0.6, 0.2], [0.1, 0.3, 0.6]],
        [[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.3, 0.3, 0.4]],
    ]
)
CLASS_PRIOR = np.array([0.5, 0.3, 0.2])
LABELS = np.array([[0, 0, 1], [1, 1, 2], [2, 1, 2], [0, 2, 2], [1, 0, 0]])


def dawid_skene_exact() -> np.ndarray:
    """P(c_i = k | labels), (items, 3)."""
    log_p = np.log(CLASS_PRIOR) + sum(
        np.log(CONFUSION[a][:, LABELS[:, a]]).T for a in range(CONFUSION.shape[0])
    )
    p = np.exp(log_p - log_p.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


def n_dawid_skene(labels):
    confusion = jnp.asarray(CONFUSION)
    with numpyro.plate("items", labels.shape[0]):
        c = numpyro.sample("c", ndist.Categorical(jnp.asarray(CLASS_PRIOR)))
        for a in range(confusion.shape[0]):
            numpyro.sample(f"l{a}", ndist.Categorical(confusion[a][c]), obs=labels[:, a])


def p_dawid_skene(labels):
    confusion = torch.as_tensor(CONFUSION, dtype=torch.float32)
    with pyro.plate("items", labels.shape[0]):
        c = pyro.sample("c", pdist.Categorical(torch.as_tensor(CLASS_PRIOR, dtype=torch.float32)))
        for a in range(confusion.shape[0]):
            pyro.sample(f"l{a}", pdist.Categorical(confusion[a][c]), obs=labels[:, a])


# ------------------------------------------------------------------------------------------
# runs


def one_hot_means(z, k):
    return (np.asarray(z)[..., None] == np.arange(k)).astype(np.float64)


def features(name, samples):
    if name == "index":
        return one_hot_means(samples["z"], 3).reshape(*np.shape(samples["z"])[:2], -1)
    if name == "hmm":
        return np.stack([np.asarray(samples[f"s{t}"]) for t in range(len(HMM_DATA))], -1) * 1.0
    return one_hot_means(samples["c"], 3).reshape(*np.shape(samples["c"])[:2], -1)


EXACT = {
    "index": lambda: index_exact().ravel(),
    "hmm": hmm_exact,
    "dawid_skene": lambda: dawid_skene_exact().ravel(),
}
NUMPYRO = {
    "index": (n_index_model, lambda: (jnp.asarray(INDEX_DATA),)),
    "hmm": (n_hmm_model, lambda: (jnp.asarray(HMM_DATA),)),
    "dawid_skene": (n_dawid_skene, lambda: (jnp.asarray(LABELS),)),
}
PYRO = {
    "index": (p_index_model, lambda: (torch.as_tensor(INDEX_DATA, dtype=torch.float32),)),
    "hmm": (p_hmm_model, lambda: (torch.as_tensor(HMM_DATA, dtype=torch.float32),)),
    "dawid_skene": (p_dawid_skene, lambda: (torch.as_tensor(LABELS),)),
}


def run_numpyro(name, kernel_name, num_samples=1500):
    model, args = NUMPYRO[name]
    kernel = getattr(nx, kernel_name)(model)
    mcmc = NMCMC(
        kernel,
        num_warmup=500,
        num_samples=num_samples,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.key(0), *args())
    return features(name, mcmc.get_samples(group_by_chain=True))


def run_pyro(name, kernel_name, num_samples=600):
    model, args = PYRO[name]
    pyro.set_rng_seed(0)
    kernel = getattr(px, kernel_name)(model)
    mcmc = PMCMC(kernel, num_samples=num_samples, warmup_steps=200, disable_progbar=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(*args())
    samples = {k: v.numpy()[None] for k, v in mcmc.get_samples().items()}
    return features(name, samples)


# by default each model runs in at least one PPL (index: NumPyro, hmm and Dawid-Skene: Pyro);
# the rest of the matrix is behind slow for the default run's time
CASES = [
    ("index", "numpyro", "DMALA"),
    ("index", "numpyro", "GWG"),
    ("hmm", "pyro", "DMALA"),
    ("dawid_skene", "pyro", "GWG"),
]
SLOW_CASES = [
    ("index", "pyro", "DMALA"),
    ("dawid_skene", "numpyro", "DMALA"),
    ("hmm", "numpyro", "DMALA"),
    ("hmm", "numpyro", "ACS"),
    ("hmm", "pyro", "DiscreteGibbs"),
    ("index", "numpyro", "AB"),
    ("index", "numpyro", "ACS"),
    ("index", "pyro", "GWG"),
    ("hmm", "numpyro", "GWG"),
    ("dawid_skene", "numpyro", "ACS"),
    ("dawid_skene", "pyro", "DMALA"),
]


@pytest.mark.parametrize(
    "case",
    CASES + [pytest.param(c, marks=pytest.mark.slow) for c in SLOW_CASES],
    ids=lambda c: "-".join(c),
)
def test_peer_model_matches_the_exact_posterior(case):
    name, ppl, kernel = case
    draws = (run_numpyro if ppl == "numpyro" else run_pyro)(name, kernel)
    assert_mc_close(draws, EXACT[name]())


def broken_mh(monkeypatch):
    """An MH ratio without its reverse proposal term: a wrong kernel the checks must catch."""
    original = core_steps.mh_log_ratio

    def without_reverse(log_x, log_y, log_q_forward, log_q_reverse):
        return original(log_x, log_y, log_q_forward, log_q_forward)

    monkeypatch.setattr(core_steps, "mh_log_ratio", without_reverse)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXACT))
def test_the_check_fails_for_a_broken_kernel(monkeypatch, name):
    broken_mh(monkeypatch)
    draws = run_numpyro(name, "DMALA")
    with pytest.raises(AssertionError):
        assert_mc_close(draws, EXACT[name]())
