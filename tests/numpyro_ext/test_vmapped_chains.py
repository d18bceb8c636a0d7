"""Chains under a transform of the whole run: ``MCMC(..., chain_method=jax.vmap)``, what
NumPyro's ``Gibbs`` suggests for several chains. The kernels' setup then sees a traced key and
traced conditioned values; it decides from a fixed key and a prior draw of those values
(:func:`numpyro_ext._setup.concrete_setup_inputs`), and the chains run with the traced ones.
``PlateGibbs`` next to NUTS matches the exact posterior so; and since a ``cond`` with a batched
predicate runs both branches, the warmup's warnings are checked again on the host
(:func:`numpyro_ext._host_warnings.callback_when`): without that check the frozen-chain
warning fires at the first draw of chains that move (the power)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC, NUTS, Gibbs
from numpyro.infer.gibbs import GIBBS_SITES_KWARG, discrete_latent_sites

import numpyro_ext as nx
from numpyro_ext import _host_warnings
from numpyro_ext._setup import concrete_setup_inputs

from ..mc import assert_mc_close
from .test_block_gibbs import chain_mu_exact, chain_mu_model


def run_vmapped(draws: int) -> tuple[dict, list[str]]:
    kernel = Gibbs(
        [(nx.PlateGibbs(chain_mu_model), discrete_latent_sites), (NUTS(chain_mu_model), None)]
    )
    mcmc = MCMC(
        kernel,
        num_warmup=100,
        num_samples=draws,
        num_chains=2,
        chain_method=jax.vmap,
        progress_bar=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.key(7))
    return mcmc.get_samples(group_by_chain=True), [str(w.message) for w in caught]


def test_plate_gibbs_in_a_vmapped_gibbs_sweep_matches_the_exact_posterior_without_warnings():
    samples, messages = run_vmapped(1000)
    assert not [m for m in messages if "PlateGibbs" in m], messages
    z = np.asarray(samples["z"], float)
    assert z.shape[0] == 2 and np.all(np.abs(np.diff(z, axis=1)).sum((1, 2)) > 100)
    mean_z, mean_mu, second = chain_mu_exact()
    assert_mc_close(z, mean_z)
    mu = np.asarray(samples["mu"], float)
    assert_mc_close(np.stack([mu, mu**2], -1), np.array([mean_mu, second]))


def test_unchecked_callbacks_would_warn_of_a_freeze_that_did_not_happen(monkeypatch):
    def unchecked(fire, fn, *args):
        jax.debug.callback(fn, *args)

    monkeypatch.setattr(_host_warnings, "callback_when", unchecked)
    _, messages = run_vmapped(20)
    assert [m for m in messages if "made no move" in m]


def test_the_setup_reads_concrete_values_and_refuses_traced_model_arguments():
    conditioning = {GIBBS_SITES_KWARG: {"mu": jnp.zeros(())}}

    def inside(key, mu, arg):
        kwargs = {GIBBS_SITES_KWARG: {"mu": mu}}
        setup_key, setup_kwargs = concrete_setup_inputs(
            "PlateGibbs", chain_mu_model, key, (), kwargs
        )
        assert not isinstance(setup_key, jax.core.Tracer)
        value = setup_kwargs[GIBBS_SITES_KWARG]["mu"]
        assert not isinstance(value, jax.core.Tracer) and np.isfinite(value)
        with pytest.raises(ValueError, match="PlateGibbs: the model's arguments are traced"):
            concrete_setup_inputs("PlateGibbs", chain_mu_model, key, (arg,), kwargs)
        return mu

    keys = jax.random.split(jax.random.key(0), 2)
    jax.vmap(inside)(keys, jnp.ones(2), jnp.ones(2))
    key = jax.random.key(1)  # nothing traced: given back as it is
    assert concrete_setup_inputs("PlateGibbs", chain_mu_model, key, (), conditioning) == (
        key,
        conditioning,
    )
