"""The guide's "Adding a sampler" section, executed: its code defines a sampler and registers it
in both PPLs; the new kernels pass the exact transition-matrix test (with the PPL's own
``local_fn`` of a model) and match the exact posterior through each PPL's ``MCMC``."""

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
pytest.importorskip("numpyro")
pytest.importorskip("pyro")

import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as ndist  # noqa: E402
import pyro  # noqa: E402
import pyro.distributions as pdist  # noqa: E402

import discrete_kernels as dk  # noqa: E402
import numpyro_ext as nx  # noqa: E402
import pyro_ext as px  # noqa: E402

from .core.transition import (  # noqa: E402
    assert_rows_match,
    empirical_transitions,
    spec_transition_matrix,
)
from .mc import assert_mc_close  # noqa: E402

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"


def guide_code() -> str:
    """The first python block after "Adding a sampler" in the guide."""
    text = GUIDE.read_text()
    section = text[text.index("Adding a sampler `Foo`") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def guide():
    namespace = {"nx": nx, "px": px, "__name__": "guide_example"}
    exec(compile(guide_code(), str(GUIDE), "exec"), namespace)  # noqa: S102
    return namespace


W = np.array([[0.0, 0.8, -0.4], [0.8, 0.0, 0.6], [-0.4, 0.6, 0.0]])
H = np.array([0.3, -0.2, 0.1])


def log_density(z, k):
    """An Ising triangle ``z`` and an ordinal ``k`` on {0, 1, 2} coupled to it."""
    s = 2.0 * z - 1.0
    return 0.5 * s @ W @ s + H @ s + 0.7 * k * s[0] - 0.4 * (k - 1.0) ** 2


def n_model():
    z = numpyro.sample("z", ndist.Bernoulli(0.5).expand([3]))
    k = numpyro.sample("k", ndist.Binomial(2, 0.5))
    s = 2.0 * z - 1.0
    numpyro.factor("f", 0.5 * s @ jnp.asarray(W) @ s + jnp.asarray(H) @ s + 0.7 * k * s[0]
                   - 0.4 * (k - 1.0) ** 2 - ndist.Binomial(2, 0.5).log_prob(k))  # fmt: skip


def p_model():
    z = pyro.sample("z", pdist.Bernoulli(0.5).expand([3]).to_event(1))
    k = pyro.sample("k", pdist.Binomial(2, 0.5))
    s = 2.0 * z - 1.0
    w, h = torch.as_tensor(W, dtype=s.dtype), torch.as_tensor(H, dtype=s.dtype)
    pyro.factor("f", 0.5 * s @ w @ s + h @ s + 0.7 * k * s[0] - 0.4 * (k - 1.0) ** 2
                - pdist.Binomial(2, 0.5).log_prob(k))  # fmt: skip


STATES = [
    (np.array(z), np.array(k))
    for k in range(3)
    for z in itertools.product([0, 1], repeat=3)  # a site is a leaf: z (3,), then k ()
]


def exact():
    """Posterior probabilities of STATES (uniform Bernoulli prior: only the factor)."""
    logp = np.array([log_density(np.asarray(z, float), float(k)) for z, k in STATES])
    pi = np.exp(logp - logp.max())
    return pi / pi.sum()


def ppl_setup(ppl, guide):
    """The kernel of Foo in one PPL on its model: its spec, sites and ``local_fn``, and the
    states in that PPL's arrays and site order."""
    if ppl == "numpyro":
        kernel = guide["FooNumPyro"](n_model, exact_sites=[])
        kernel._setup = kernel._site_setup(jax.random.key(0), None, (), {})
        local_fn = kernel._local_fn((), {})
        convert = jnp.asarray
    else:
        kernel = guide["FooPyro"](p_model, exact_sites=[])
        kernel.setup(0)
        local_fn = kernel._local_fn()
        convert = torch.as_tensor
    order = [["z", "k"].index(name) for name in kernel._setup.names]
    states = [tuple(convert(state[j]) for j in order) for state in STATES]
    return kernel.spec, kernel._setup.sites, local_fn, states


@pytest.mark.parametrize("ppl", ["numpyro", "pyro"])
def test_guide_sampler_is_exactly_stationary_in_both_ppls(guide, ppl):
    spec, sites, local_fn, states = ppl_setup(ppl, guide)
    assert spec.name == "Foo" and float(spec.balance) == 0.7
    like = np.float64(1.0)
    adapt = spec.adapt_init(like, 0, sites, 4, dk.PYTHON_CONTROL)
    params = spec.parameters(adapt)
    p, proposal = spec_transition_matrix(spec, states, local_fn, params, sites)
    np.testing.assert_allclose(proposal.sum(axis=1), 1.0, atol=1e-6)
    pi = exact()
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    if ppl == "numpyro":  # the step itself moves by that matrix (numpy-speed check once)
        step = jax.jit(lambda chain, noise: spec.step(chain, noise, params, adapt, sites, local_fn))
        counts = empirical_transitions(spec, states, local_fn, params, adapt, sites, 150, 1, step)
        assert_rows_match(counts, p)


@pytest.mark.slow  # 6 s; the exact stationarity test above is its default twin
def test_guide_sampler_matches_the_posterior_in_both_ppls(guide):
    pi = exact()
    z_all = np.array([z for z, _ in STATES], float)
    k_all = np.array([k for _, k in STATES], float)
    expected = np.concatenate([pi @ z_all, [pi @ k_all]])
    mcmc = numpyro.infer.MCMC(
        guide["FooNumPyro"](n_model),
        num_warmup=300,
        num_samples=3000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(1))
    draws = mcmc.get_samples(group_by_chain=True)
    got = np.concatenate(
        [np.asarray(draws["z"], float), np.asarray(draws["k"], float)[..., None]], -1
    )
    assert_mc_close(got, expected)
    step_size = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["step_size"])
    assert np.all(step_size == step_size[:, :1])  # adapted in warmup, then frozen per chain
    pyro.set_rng_seed(1)
    pmcmc = pyro.infer.MCMC(
        guide["FooPyro"](p_model), num_samples=1500, warmup_steps=300, disable_progbar=True
    )
    pmcmc.run()
    samples = pmcmc.get_samples()
    got = np.concatenate([samples["z"].numpy(), samples["k"].numpy()[:, None]], -1)[None]
    assert_mc_close(got, expected)
