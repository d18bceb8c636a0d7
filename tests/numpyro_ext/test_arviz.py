"""``nx.to_arviz`` on ArviZ 0.2x (InferenceData) and 1.x (DataTree): the same groups and
variable names on both, every Gibbs block's statistics labelled. Needs no torch, so the
newest-stack CI job (ArviZ 1.x, no torch) runs it."""

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS, Gibbs
from numpyro.infer.gibbs import discrete_latent_sites

import numpyro_ext as nx
from discrete_kernels.arviz_export import arviz_major, group_dataset

az = pytest.importorskip("arviz")


def mixed_model():
    z = numpyro.sample("z", dist.Bernoulli(0.5).expand([3]))
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(mu + z.sum(), 1.0), obs=1.0)


def discrete_model():
    x = numpyro.sample("x", dist.Bernoulli(0.4).expand([4]))
    numpyro.sample("y", dist.Normal(x.sum(), 1.0), obs=1.5)


def group_names(idata) -> list[str]:
    return list(idata.groups()) if arviz_major() == 0 else list(idata.children)


@pytest.fixture(scope="module")
def gibbs_run():
    kernel = Gibbs([(nx.DMALA(mixed_model), discrete_latent_sites), (NUTS(mixed_model), None)])
    mcmc = MCMC(
        kernel,
        num_warmup=20,
        num_samples=30,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), extra_fields=nx.gibbs_fields(kernel))
    return mcmc


def test_numpyro_gibbs_statistics_reach_arviz(gibbs_run):
    """arviz.from_numpyro of a numpyro Gibbs run has only the raw ``block_states.<i>.<field>``
    variables; nx.to_arviz puts each block's statistics in sample_stats under its label, in
    the data itself (not as a Python attribute a DataTree ignores)."""
    idata = nx.to_arviz(gibbs_run)
    stats = group_dataset(idata, "sample_stats")
    expected = {
        "dmala_acceptance_rate",
        "dmala_accepted",
        "dmala_step_size",
        "dmala_lp",
        "dmala_hamming_distance",
        "nuts_diverging",
    }
    assert set(stats.data_vars) == expected
    for name in expected:
        assert stats[name].shape == (2, 30), name
    assert np.all(stats["dmala_lp"].values < 0)  # a log density of Bernoulli sites
    assert stats["dmala_accepted"].dtype == bool
    # the same through the ways users read a group, on both lines
    assert set(idata["sample_stats"].data_vars) == expected
    assert set(idata.sample_stats.data_vars) == expected
    names = group_names(idata)
    assert len(names) == len(set(names)), names  # sample_stats listed once
    assert set(names) == {"posterior", "sample_stats", "log_likelihood", "observed_data"}
    assert group_dataset(idata, "posterior")["z"].shape == (2, 30, 3)
    summary = az.summary(idata, group="sample_stats", var_names=["dmala_acceptance_rate"])
    assert 0 <= summary.loc["dmala_acceptance_rate", "mean"] <= 1


def test_kwargs_reach_from_numpyro(gibbs_run):
    idata = nx.to_arviz(gibbs_run, log_likelihood=False)
    assert "log_likelihood" not in group_names(idata)
    assert "dmala_lp" in group_dataset(idata, "sample_stats")


def test_a_kernel_alone_exports_as_from_numpyro_with_the_same_groups_on_both_lines():
    mcmc = MCMC(nx.DMALA(discrete_model), num_warmup=10, num_samples=15, progress_bar=False)
    mcmc.run(jax.random.key(1))
    idata = nx.to_arviz(mcmc)
    # ArviZ 1.x's from_numpyro leaves out log_likelihood unless asked; 0.2x adds it
    assert set(group_names(idata)) == {
        "posterior",
        "sample_stats",
        "log_likelihood",
        "observed_data",
    }
    stats = group_dataset(idata, "sample_stats")
    assert {"acceptance_rate", "accepted", "step_size", "lp", "hamming_distance"} <= set(
        stats.data_vars
    )
    assert group_dataset(idata, "log_likelihood")["y"].shape == (1, 15)


_ARVIZ_FIRST = """
import arviz, jax, numpyro.infer  # this order leaves numpyro.infer without its submodules
import numpyro, numpyro.distributions as dist
import numpyro_ext as nx

def model():
    numpyro.sample("x", dist.Bernoulli(0.4).expand([4]))

mcmc = numpyro.infer.MCMC(nx.DMALA(model), num_warmup=5, num_samples=5, progress_bar=False)
mcmc.run(jax.random.key(0))
print(sorted(nx.to_arviz(mcmc)["sample_stats"].data_vars)[:1])
"""


def test_to_arviz_works_when_arviz_was_imported_before_numpyro():
    """ArviZ 1.x's lazy import of numpyro, then jax, then numpyro.infer: numpyro.infer lacks
    its submodule attributes and ``arviz.from_numpyro`` fails; ``nx.to_arviz`` repairs them."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _ARVIZ_FIRST], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
