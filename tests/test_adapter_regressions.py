"""Regression tests for defects where the two adapters' copies of one logic drifted apart."""

from __future__ import annotations

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

import numpyro_ext as nx  # noqa: E402
import pyro_ext as px  # noqa: E402
from discrete_kernels.samplers import ab as ab_core  # noqa: E402


def n_bits():
    numpyro.sample("z", ndist.Bernoulli(0.3).expand([4]))


def p_bits():
    pyro.sample("z", pdist.Bernoulli(0.3).expand([4]).to_event(1))


@pytest.mark.parametrize("ppl", ["numpyro", "pyro"])
@pytest.mark.parametrize("burn_in, restarts", [(40, 1), (60, 0)])
def test_ab_restarts_its_tuner_only_when_warmup_remains(ppl, burn_in, restarts, monkeypatch):
    """With burn_in == num_warmup the Pyro kernel used to restart its tuner after the fit and
    sample at the restart values (sigma x 100, alpha = 1)."""
    calls = []
    original = ab_core.ab_tuner_restart

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(ab_core, "ab_tuner_restart", counting)
    if ppl == "numpyro":
        kernel = nx.AB(n_bits, variant="trace", burn_in=burn_in)
        mcmc = NMCMC(kernel, num_warmup=60, num_samples=20, progress_bar=False)
        mcmc.run(jax.random.key(0), extra_fields=("balance",))
        alpha = np.asarray(mcmc.get_extra_fields()["balance"])
        traced = 1  # jitted: the restart is traced once whether or not it runs
        assert len(calls) == traced * restarts
        if not restarts:
            assert np.all(alpha < 1.0)  # the tuned alpha, not the restart's 1
    else:
        pyro.set_rng_seed(0)
        kernel = px.AB(p_bits, variant="trace", burn_in=burn_in)
        PMCMC(kernel, num_samples=20, warmup_steps=60, disable_progbar=True).run()
        assert len(calls) == restarts


def test_numpyro_preconditioner_runs_and_scales_the_step():
    """The preconditioner's check used to run inside the jitted step and always fail.
    A constant preconditioner c is the step size multiplied by c: same draws."""

    def run(step_size, preconditioner):
        kernel = nx.DMALA(
            n_bits, step_size=step_size, adapt_step_size=False, preconditioner=preconditioner
        )
        mcmc = NMCMC(kernel, num_warmup=0, num_samples=200, progress_bar=False)
        mcmc.run(jax.random.key(3))
        return np.asarray(mcmc.get_samples()["z"])

    with_preconditioner = run(0.25, {"z": jnp.full(4, 2.0)})
    np.testing.assert_array_equal(with_preconditioner, run(0.5, None))
    assert with_preconditioner.std() > 0
    with pytest.raises(ValueError, match="preconditioner of 'z' must be finite and positive"):
        run(0.5, {"z": jnp.asarray([1.0, -1.0, 1.0, 1.0])})


def test_pyro_gibbs_keeps_every_blocks_statistics():
    """pyro_ext.Gibbs used to keep only the last block's statistics (ESH's, hiding DMALA's)."""

    def model():
        z = pyro.sample("z", pdist.Bernoulli(0.5).expand([3]).to_event(1))
        mu = pyro.sample("mu", pdist.Normal(0.0, 1.0))
        pyro.sample("y", pdist.Normal(mu + z.sum(), 1.0), obs=torch.tensor(1.0))

    pyro.set_rng_seed(0)
    kernel = px.Gibbs([(px.DMALA(model), px.discrete_sites), (px.ESH(model), None)])
    mcmc = PMCMC(kernel, num_samples=30, warmup_steps=20, disable_progbar=True)
    mcmc.run()
    stats = px.to_arviz(mcmc).sample_stats
    assert stats["dmala_acceptance_rate"].shape == (1, 30)
    assert stats["dmala_accepted"].dtype == bool
    assert stats["esh_hamiltonian_drift"].shape == (1, 30)
    assert "acceptance_rate" not in stats  # no unlabelled field: which block would it be?
