"""Models users write, from NumPyro's and Pyro's own tests and examples, against their exact
posteriors: the cases where the first-order estimate of a site is badly wrong and the chain
used to freeze or stick without a word (issue 10).

The default run keeps one PPL per case (Pyro's Bernoulli-latent model, NumPyro's change point,
Pyro's spike-and-slab); the other PPL's runs and the power runs are marked ``slow``.

Each check is a z-test on chain-pooled means with ESS-based standard errors
(``assert_mc_close``). Its power is shown on the defect itself by the ``slow`` tests below: the
same run with the gradient forced (``exact_sites=[]``, the behaviour before
``exact_sites="auto"``) must fail it; where that run is slow but right at the test suite's
XLA optimisation level (the change point, Gibbs(AB, NUTS) on the spike-and-slab), with a
broken kernel (its MH ratio's proposal terms swapped).
"""

from __future__ import annotations

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
from numpyro.infer import NUTS as NNUTS  # noqa: E402
from numpyro.infer import Gibbs as NGibbs  # noqa: E402
from numpyro.infer.gibbs import discrete_latent_sites  # noqa: E402
from pyro.infer import MCMC as PMCMC  # noqa: E402
from pyro.infer import NUTS as PNUTS  # noqa: E402
from scipy.special import gammaln  # noqa: E402
from scipy.stats import multivariate_normal  # noqa: E402

import numpyro_ext as nx  # noqa: E402
import pyro_ext as px  # noqa: E402
from tests.mc import broken_mh  # noqa: E402
from tests.numpyro_ext.helpers import assert_mc_close  # noqa: E402


def _quietly(run, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run(*args)


def _fails(check, *args) -> bool:
    try:
        check(*args)
    except AssertionError:
        return True
    return False


# ------------------------------------------------------------------------------------------
# 1. a global Bernoulli that sets the prior of a plate of Bernoullis (Pyro's NUTS test model)

BERN_DATA = np.random.default_rng(0).normal(size=30)


def bernoulli_exact():
    """P(y = 1), E sum z and P(nuisance = 1) with y_prob ~ Beta(1, 1) integrated out."""
    from scipy.stats import norm

    log_marginal, mean_z = [], []
    for y in (0, 1):
        p = 0.65 * y + 0.1
        on = np.log(p) + norm.logpdf(BERN_DATA, 2.0, 1.0)
        off = np.log1p(-p) + norm.logpdf(BERN_DATA, 0.0, 1.0)
        log_marginal.append(np.logaddexp(on, off).sum())
        mean_z.append((1 / (1 + np.exp(off - on))).sum())
    p1 = 1 / (1 + np.exp(log_marginal[0] - log_marginal[1]))
    return np.array([p1, (1 - p1) * mean_z[0] + p1 * mean_z[1], 0.3])


def p_bernoulli_model(data):
    y_prob = pyro.sample("y_prob", pdist.Beta(1.0, 1.0))
    y = pyro.sample("y", pdist.Bernoulli(y_prob))
    with pyro.plate("data", data.shape[0]):
        z = pyro.sample("z", pdist.Bernoulli(0.65 * y + 0.1))
        pyro.sample("obs", pdist.Normal(2.0 * z, 1.0), obs=data)
    pyro.sample("nuisance", pdist.Bernoulli(0.3))


def n_bernoulli_model(data):
    y_prob = numpyro.sample("y_prob", ndist.Beta(1.0, 1.0))
    y = numpyro.sample("y", ndist.Bernoulli(y_prob))
    with numpyro.plate("data", data.shape[0]):
        z = numpyro.sample("z", ndist.Bernoulli(0.65 * y + 0.1))
        numpyro.sample("obs", ndist.Normal(2.0 * z, 1.0), obs=data)
    numpyro.sample("nuisance", ndist.Bernoulli(0.3))


def _bernoulli_features(y, z, nuisance):
    return np.stack([y, z.sum(-1), nuisance], -1).astype(np.float64)


def _pyro_bernoulli(exact_sites):
    pyro.set_rng_seed(1)
    data = torch.as_tensor(BERN_DATA, dtype=torch.float32)
    start = {  # the state the chain froze in: y = 1 and many z on
        "y": torch.tensor(1.0),
        "z": torch.as_tensor(np.arange(30) % 2, dtype=torch.float32),
        "nuisance": torch.tensor(0.0),
        "y_prob": torch.tensor(0.9),
    }
    dmala = px.DMALA(p_bernoulli_model, exact_sites=exact_sites)
    kernel = px.Gibbs([(dmala, px.discrete_sites), (PNUTS(p_bernoulli_model), None)])
    # 400 draws: right, max |z| 1.4; the gradient forced (exact_sites=[]), |z| 1.4e4
    mcmc = PMCMC(
        kernel, num_samples=400, warmup_steps=200, initial_params=start, disable_progbar=True
    )
    mcmc.run(data)
    s = mcmc.get_samples(group_by_chain=True)
    return _bernoulli_features(s["y"].numpy(), s["z"].numpy(), s["nuisance"].numpy())


def _pyro_bernoulli_gwg_esh(exact_sites):
    """Issue 10's second Pyro failure on this model: px.Gibbs with GWG and ESH."""
    pyro.set_rng_seed(4)
    data = torch.as_tensor(BERN_DATA, dtype=torch.float32)
    gwg = px.GWG(p_bernoulli_model, exact_sites=exact_sites)
    esh = px.ESH(p_bernoulli_model, step_size=0.3, num_steps=8)
    kernel = px.Gibbs([(gwg, px.discrete_sites), (esh, None)])
    mcmc = PMCMC(kernel, num_samples=1500, warmup_steps=300, disable_progbar=True)
    mcmc.run(data)
    s = mcmc.get_samples(group_by_chain=True)
    return _bernoulli_features(s["y"].numpy(), s["z"].numpy(), s["nuisance"].numpy())


def _numpyro_bernoulli_acs_esh(exact_sites):
    """Issue 10's NumPyro failure on this model: Gibbs with ACS and ESH froze z."""
    data = jnp.asarray(BERN_DATA, dtype=jnp.float32)
    acs = nx.ACS(n_bernoulli_model, exact_sites=exact_sites)
    esh = nx.ESH(n_bernoulli_model, step_size=0.3, num_steps=8)
    kernel = NGibbs([(acs, discrete_latent_sites), (esh, None)])
    mcmc = NMCMC(kernel, num_warmup=1000, num_samples=3000, progress_bar=False)
    mcmc.run(jax.random.key(5), data)
    s = mcmc.get_samples(group_by_chain=True)
    return _bernoulli_features(np.asarray(s["y"]), np.asarray(s["z"]), np.asarray(s["nuisance"]))


def _numpyro_bernoulli(exact_sites):
    data = jnp.asarray(BERN_DATA, dtype=jnp.float32)
    dmala = nx.DMALA(n_bernoulli_model, exact_sites=exact_sites)
    kernel = NGibbs([(dmala, discrete_latent_sites), (NNUTS(n_bernoulli_model), None)])
    mcmc = NMCMC(kernel, num_warmup=200, num_samples=1000, progress_bar=False)
    start = {"y": jnp.asarray(1), "z": jnp.asarray(np.arange(30) % 2), "nuisance": jnp.asarray(0)}
    mcmc.run(jax.random.key(1), data, init_params=start)
    s = mcmc.get_samples(group_by_chain=True)
    return _bernoulli_features(np.asarray(s["y"]), np.asarray(s["z"]), np.asarray(s["nuisance"]))


@pytest.mark.parametrize(
    "run",
    [
        _pyro_bernoulli,
        pytest.param(_numpyro_bernoulli, marks=pytest.mark.slow),
        pytest.param(_pyro_bernoulli_gwg_esh, marks=pytest.mark.slow),
        pytest.param(_numpyro_bernoulli_acs_esh, marks=pytest.mark.slow),
    ],
    ids=["pyro", "numpyro", "pyro-gwg-esh", "numpyro-acs-esh"],
)
def test_bernoulli_latent_model_in_gibbs_with_nuts(run):
    expected = bernoulli_exact()
    with pytest.warns(UserWarning, match="site 'y'.*Sampling 'y' with exact differences"):
        got = run("auto")
    assert_mc_close(got, expected)


# ------------------------------------------------------------------------------------------
# 2. change point with an index-like discrete site (the text-message example's structure)

# daily text-message counts (Davidson-Pilon, "Bayesian Methods for Hackers", ch. 1), as in
# NumPyro's own tests (which carry a 1 where the book has 18, day 55); its posterior of tau
# has a distant secondary mode that a chain moving tau by +-1 cannot leave
CP_COUNTS = np.array(
    [13, 24, 8, 24, 7, 35, 14, 11, 15, 11, 22, 22, 11, 57, 11, 19, 29, 6, 19, 12, 22, 12, 18,
     72, 32, 9, 7, 13, 19, 23, 27, 20, 6, 17, 13, 10, 14, 6, 16, 15, 7, 2, 15, 15, 19, 70, 49,
     7, 53, 22, 21, 31, 19, 11, 1, 20, 12, 35, 17, 23, 17, 4, 2, 31, 30, 13, 27, 0, 39, 37, 5,
     14, 13, 22],
    dtype=np.float32,
)  # fmt: skip
CP_T = CP_COUNTS.shape[0]
CP_ALPHA = 1.0 / float(CP_COUNTS.mean())


def n_changepoint_model(counts):
    early = numpyro.sample("early", ndist.Exponential(CP_ALPHA))
    late = numpyro.sample("late", ndist.Exponential(CP_ALPHA))
    tau = numpyro.sample("tau", ndist.DiscreteUniform(0, CP_T - 1))
    rate = jnp.where(jnp.arange(CP_T) < tau, early, late)  # tau has no gradient here
    numpyro.sample("obs", ndist.Poisson(rate), obs=counts)


def changepoint_exact():
    """E tau and E tau^2 with both rates integrated out (Gamma-Poisson conjugacy)."""
    sums = np.concatenate([[0.0], np.cumsum(CP_COUNTS)])

    def segment(total, length):
        return np.log(CP_ALPHA) + gammaln(total + 1) - (total + 1) * np.log(length + CP_ALPHA)

    log_p = np.array(
        [segment(sums[t], t) + segment(sums[-1] - sums[t], CP_T - t) for t in range(CP_T)]
    )
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    t = np.arange(CP_T)
    return np.array([p @ t, p @ t**2])


def _numpyro_changepoint(exact_sites):
    dmala = nx.DMALA(n_changepoint_model, exact_sites=exact_sites)
    kernel = NGibbs([(dmala, discrete_latent_sites), (NNUTS(n_changepoint_model), None)])
    mcmc = NMCMC(kernel, num_warmup=300, num_samples=1500, progress_bar=False)
    mcmc.run(jax.random.key(2), CP_COUNTS, init_params={"tau": jnp.asarray(CP_T - 5)})
    tau = np.asarray(mcmc.get_samples(group_by_chain=True)["tau"], np.float64)
    return np.stack([tau, tau**2], -1)


def test_change_point_site_used_through_a_comparison():
    expected = changepoint_exact()
    with pytest.warns(UserWarning, match="site 'tau'.*Sampling 'tau' with exact differences"):
        got = _numpyro_changepoint("auto")
    assert_mc_close(got, expected)


# ------------------------------------------------------------------------------------------
# 3. spike-and-slab regression with the coefficients integrated out

SS_RNG = np.random.default_rng(5)
SS_X = SS_RNG.normal(size=(40, 5))
SS_Y = SS_X @ np.array([1.5, 0.0, -1.0, 0.0, 0.0]) + SS_RNG.normal(size=40)


def _ss_covariance(gamma, xp):
    return xp.eye(40) + 4.0 * (SS_X * gamma) @ SS_X.T  # slab variance 4, noise variance 1


def n_spike_slab(y):
    gamma = numpyro.sample("gamma", ndist.Bernoulli(0.3).expand([5]))
    cov = _ss_covariance(gamma, jnp)
    numpyro.sample("y", ndist.MultivariateNormal(jnp.zeros(40), cov), obs=y)


def p_spike_slab(y):
    gamma = pyro.sample("gamma", pdist.Bernoulli(0.3).expand([5]).to_event(1))
    cov = (
        torch.eye(40, dtype=torch.float64)
        + 4.0 * (torch.as_tensor(SS_X) * gamma.double()) @ torch.as_tensor(SS_X).T
    )
    pyro.sample("y", pdist.MultivariateNormal(torch.zeros(40, dtype=torch.float64), cov), obs=y)


def spike_slab_exact():
    states = np.array(np.meshgrid(*[[0, 1]] * 5, indexing="ij")).reshape(5, -1).T
    log_p = np.array(
        [
            multivariate_normal(np.zeros(40), _ss_covariance(g, np)).logpdf(SS_Y)
            + np.sum(g * np.log(0.3) + (1 - g) * np.log(0.7))
            for g in states
        ]
    )
    p = np.exp(log_p - log_p.max())
    return (p / p.sum()) @ states


def _numpyro_spike_slab(exact_sites):
    mcmc = NMCMC(
        nx.DMALA(n_spike_slab, exact_sites=exact_sites),
        num_warmup=200,
        num_samples=1200,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(3), jnp.asarray(SS_Y, dtype=jnp.float32))
    return np.asarray(mcmc.get_samples(group_by_chain=True)["gamma"], np.float64)


def _pyro_spike_slab(exact_sites):
    pyro.set_rng_seed(3)
    mcmc = PMCMC(
        px.GWG(p_spike_slab, exact_sites=exact_sites),
        num_samples=600,
        warmup_steps=100,
        disable_progbar=True,
    )
    mcmc.run(torch.as_tensor(SS_Y))
    return mcmc.get_samples(group_by_chain=True)["gamma"].numpy().astype(np.float64)


@pytest.mark.parametrize(
    "run",
    [pytest.param(_numpyro_spike_slab, marks=pytest.mark.slow), _pyro_spike_slab],
    ids=["numpyro-dmala", "pyro-gwg"],
)
def test_spike_and_slab_with_coefficients_integrated_out(run):
    expected = spike_slab_exact()
    with pytest.warns(UserWarning, match="site 'gamma'.*Sampling 'gamma' with exact differences"):
        got = run("auto")
    assert_mc_close(got, expected)


# ------------------------------------------------------------------------------------------
# power: the same checks fail on the behaviour before the fix (the gradient forced)

POWER_CASES = {
    "bernoulli-pyro": (_pyro_bernoulli, bernoulli_exact),
    "bernoulli-numpyro": (_numpyro_bernoulli, bernoulli_exact),
    "spike-slab-numpyro": (_numpyro_spike_slab, spike_slab_exact),
    "spike-slab-pyro": (_pyro_spike_slab, spike_slab_exact),
}
# The change point is not among them: with the gradient forced its chain is a valid random walk
# in tau whose path depends on the compiled code's rounding. At XLA's default optimisation it
# stayed in the distant secondary mode (tau 69-73) and failed the check; at the level the test
# suite runs (tests/conftest.py) it reached the main mode in warmup and gave the right answer
# (E tau 44.17 against 44.01, ESS 201). Its power is shown with a broken kernel instead (below).


@pytest.mark.slow
@pytest.mark.parametrize("case", list(POWER_CASES))
def test_the_checks_fail_with_the_gradient_forced(case):
    run, exact = POWER_CASES[case]
    assert _fails(assert_mc_close, _quietly(run, []), exact())


@pytest.mark.slow
@pytest.mark.parametrize("case", ["change-point-numpyro", "spike-slab-ab-numpyro"])
def test_the_checks_fail_for_a_broken_kernel(monkeypatch, case):
    """The runs of the change point and of Gibbs(AB, NUTS) with exact_sites="auto", their MH
    ratio's proposal terms swapped (``tests/mc.broken_mh``): measured max |z| 12.3 and 24.7 (at
    XLA's optimisation level 0; 12.8 and 16.0 at its default)."""
    run, exact = {
        "change-point-numpyro": (_numpyro_changepoint, changepoint_exact),
        "spike-slab-ab-numpyro": (_numpyro_spike_slab_ab, spike_slab_exact),
    }[case]
    broken_mh(monkeypatch)
    assert _fails(assert_mc_close, _quietly(run, "auto"), exact())


# ------------------------------------------------------------------------------------------
# 3b. spike-and-slab with continuous coefficients: Gibbs(AB, NUTS) (issue 10's case 3)


def n_spike_slab_coefficients(y):
    gamma = numpyro.sample("gamma", ndist.Bernoulli(0.3).expand([5]))
    beta = numpyro.sample("beta", ndist.Normal(0.0, 2.0).expand([5]))  # slab variance 4
    mean = jnp.asarray(SS_X, jnp.float32) @ (gamma * beta)
    numpyro.sample("y", ndist.Normal(mean, 1.0), obs=y)


def _numpyro_spike_slab_ab(exact_sites):
    ab = nx.AB(n_spike_slab_coefficients, exact_sites=exact_sites)
    kernel = NGibbs([(ab, ["gamma"]), (NNUTS(n_spike_slab_coefficients), None)])
    mcmc = NMCMC(
        kernel,
        num_warmup=1000,
        num_samples=3000,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), jnp.asarray(SS_Y, jnp.float32))
    return np.asarray(mcmc.get_samples(group_by_chain=True)["gamma"], np.float64)


@pytest.mark.slow
def test_spike_and_slab_with_coefficients_in_gibbs_with_ab():
    """The coefficients integrate out to the marginal model above, so the exact inclusion
    probabilities are the same. Measured: max |z| 1.89 with exact_sites="auto" (AB-1st switches
    gamma). With the gradient forced (exact_sites=[]) the chain under-includes (0.015, 0.018
    and 0.056 against 0.039, 0.039 and 0.103) but its low ESS (408, 236, 70) keeps it within
    the check at the suite's XLA optimisation level (|z| 6.08 at the default level): that run
    is slow, not wrong, and the check's power is shown with a broken kernel instead
    (``test_the_checks_fail_for_a_broken_kernel``)."""
    expected = spike_slab_exact()
    with pytest.warns(UserWarning, match="site 'gamma'.*Sampling 'gamma' with exact differences"):
        got = _numpyro_spike_slab_ab("auto")
    assert_mc_close(got, expected)


def p_spike_slab_coefficients(y):
    gamma = pyro.sample("gamma", pdist.Bernoulli(0.3).expand([5]).to_event(1))
    beta = pyro.sample("beta", pdist.Normal(0.0, 2.0).expand([5]).to_event(1))
    mean = torch.as_tensor(SS_X, dtype=torch.float32) @ (gamma * beta)
    pyro.sample("y", pdist.Normal(mean, 1.0).to_event(1), obs=y)


def _pyro_spike_slab_ab(exact_sites):
    pyro.set_rng_seed(6)
    ab = px.AB(p_spike_slab_coefficients, exact_sites=exact_sites)
    kernel = px.Gibbs([(ab, ["gamma"]), (PNUTS(p_spike_slab_coefficients), None)])
    mcmc = PMCMC(kernel, num_samples=1500, warmup_steps=600, disable_progbar=True)
    mcmc.run(torch.as_tensor(SS_Y, dtype=torch.float32))
    return mcmc.get_samples(group_by_chain=True)["gamma"].numpy().astype(np.float64)


@pytest.mark.slow
def test_spike_and_slab_with_coefficients_in_pyro_gibbs_with_ab():
    """Issue 10's case 3 in Pyro: ``px.Gibbs([(px.AB, ["gamma"]), (NUTS, None)])``."""
    expected = spike_slab_exact()
    with pytest.warns(UserWarning, match="site 'gamma'.*Sampling 'gamma' with exact differences"):
        got = _pyro_spike_slab_ab("auto")
    assert_mc_close(got, expected)
