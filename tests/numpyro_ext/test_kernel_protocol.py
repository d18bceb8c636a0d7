"""Chain methods, resuming, ArviZ statistics, compile discipline and input errors."""

import os
import subprocess
import sys
import textwrap

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC, NUTS, Gibbs
from numpyro.infer.gibbs import discrete_latent_sites

import numpyro_ext as nx

KERNELS = [nx.DMALA, nx.DULA, nx.GWG]


def small_model():
    x = numpyro.sample("x", dist.Bernoulli(0.4).expand([4]))
    numpyro.factor("f", 0.5 * x[0] * x[1] - 0.3 * x[2] * x[3])
    numpyro.deterministic("total", x.sum())


@pytest.mark.parametrize("kernel_cls", KERNELS)
@pytest.mark.parametrize("chain_method", ["sequential", "vectorized"])
def test_chain_methods_and_shapes(kernel_cls, chain_method):
    mcmc = MCMC(
        kernel_cls(small_model),
        num_warmup=20,
        num_samples=30,
        num_chains=3,
        chain_method=chain_method,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0))
    samples = mcmc.get_samples(group_by_chain=True)
    assert samples["x"].shape == (3, 30, 4)
    np.testing.assert_array_equal(samples["total"], samples["x"].sum(-1))
    fields = mcmc.get_extra_fields(group_by_chain=True)
    for name in ["potential_energy", "accept_prob", "accepted", "step_size", "hamming_distance"]:
        assert fields[name].shape == (3, 30), name
    # chains differ
    assert not np.array_equal(samples["x"][0], samples["x"][1])


def test_parallel_chain_method_with_host_devices():
    code = textwrap.dedent(
        """
        import jax, numpyro, numpyro.distributions as dist
        from numpyro.infer import MCMC
        import numpyro_ext as nx
        assert jax.local_device_count() == 2
        def model():
            x = numpyro.sample("x", dist.Bernoulli(0.4).expand([4]))
            numpyro.factor("f", 0.5 * x[0] * x[1])
        mcmc = MCMC(nx.DMALA(model), num_warmup=20, num_samples=25, num_chains=2,
                    chain_method="parallel", progress_bar=False)
        mcmc.run(jax.random.key(0))
        s = mcmc.get_samples(group_by_chain=True)["x"]
        assert s.shape == (2, 25, 4), s.shape
        print("ok")
        """
    )
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ok" in out.stdout


@pytest.mark.parametrize("kernel_cls", [nx.DMALA, nx.GWG])
def test_resume_from_last_state_continues_exactly(kernel_cls):
    full = MCMC(kernel_cls(small_model), num_warmup=50, num_samples=60, progress_bar=False)
    full.run(jax.random.key(4))
    first = MCMC(kernel_cls(small_model), num_warmup=50, num_samples=30, progress_bar=False)
    first.run(jax.random.key(4))
    state = first.last_state
    first.post_warmup_state = state
    first.run(state.rng_key)
    both = np.concatenate([np.asarray(first.get_samples()["x"])], axis=0)
    np.testing.assert_array_equal(np.asarray(full.get_samples()["x"])[30:], both)


def test_step_size_adapts_in_warmup_and_is_frozen_after():
    mcmc = MCMC(
        nx.DMALA(small_model, step_size=0.05), num_warmup=300, num_samples=100, progress_bar=False
    )
    mcmc.run(jax.random.key(5))
    steps = np.asarray(mcmc.get_extra_fields()["step_size"])
    assert np.all(steps == steps[0])
    assert steps[0] > 0.05  # acceptance near 1 at a tiny step: adaptation grows it
    off = MCMC(
        nx.DMALA(small_model, step_size=0.05, adapt_step_size=False),
        num_warmup=50,
        num_samples=10,
        progress_bar=False,
    )
    off.run(jax.random.key(5))
    np.testing.assert_allclose(np.asarray(off.get_extra_fields()["step_size"]), 0.05)


def test_arviz_sample_stats_without_extra_arguments():
    mcmc = MCMC(
        nx.DMALA(small_model),
        num_warmup=20,
        num_samples=40,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(6))
    idata = az.from_numpyro(mcmc)
    stats = idata.sample_stats
    for name in ["acceptance_rate", "step_size", "lp", "hamming_distance", "accepted"]:
        assert name in stats, name
        assert stats[name].shape == (2, 40)
    assert "diverging" not in stats and "energy" not in stats
    lp = stats["lp"].values
    assert np.all(np.isfinite(lp))
    assert idata.posterior["x"].shape == (2, 40, 4)


def test_potential_is_traced_a_bounded_number_of_times():
    calls = {"n": 0}

    def counting_model():
        calls["n"] += 1
        x = numpyro.sample("x", dist.Bernoulli(0.4).expand([4]))
        numpyro.factor("f", 0.5 * x[0] * x[1])

    for num_samples in (50, 500):
        calls["n"] = 0
        mcmc = MCMC(
            nx.DMALA(counting_model),
            num_warmup=num_samples,
            num_samples=num_samples,
            progress_bar=False,
        )
        mcmc.run(jax.random.key(0))
        assert calls["n"] <= 12, calls["n"]


def test_gibbs_block_refresh_uses_the_new_conditioning():
    def model():
        z = numpyro.sample("z", dist.Bernoulli(0.5))
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.factor("f", 3.0 * mu * z)

    from numpyro.infer import gibbs  # (not numpyro.infer.gibbs: see numpyro_ext/arviz.py)

    kernel = nx.DMALA(model).wrap_model(gibbs.conditioned)
    kwargs = gibbs.with_conditioning({}, {"mu": jnp.array(1.0)})
    state = kernel.init(jax.random.key(0), 0, {"z": jnp.array(0)}, (), kwargs)
    assert np.isclose(float(state.local[0]), 3.0)
    kwargs = gibbs.with_conditioning({}, {"mu": jnp.array(-2.0)})
    state = kernel.refresh(state, (), kwargs)
    assert np.isclose(float(state.local[0]), -6.0)


def test_gibbs_composite_runs_all_kernels():
    def model():
        z = numpyro.sample("z", dist.Bernoulli(0.5).expand([2]))
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu + z.sum(), 1.0), obs=1.0)

    for kernel_cls in KERNELS:
        kernel = Gibbs([(kernel_cls(model), discrete_latent_sites), (NUTS(model), None)])
        mcmc = MCMC(kernel, num_warmup=10, num_samples=10, progress_bar=False)
        mcmc.run(jax.random.key(0))
        assert mcmc.get_samples()["z"].shape == (10, 2)


# ------------------------------------------------------------------------- errors


def test_error_no_discrete_site():
    def model():
        numpyro.sample("mu", dist.Normal(0, 1))

    with pytest.raises(ValueError, match="continuous latent sites \\['mu'\\].*Gibbs"):
        MCMC(nx.DMALA(model), num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.key(0)
        )

    def observed_only():
        numpyro.sample("x", dist.Bernoulli(0.5), obs=1)

    with pytest.raises(ValueError, match="no discrete latent site"):
        MCMC(nx.DMALA(observed_only), num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.key(0)
        )


def test_error_continuous_site_points_to_gibbs():
    def model():
        numpyro.sample("x", dist.Bernoulli(0.5))
        numpyro.sample("sigma", dist.HalfNormal(1.0))

    with pytest.raises(ValueError, match="continuous latent sites \\['sigma'\\].*Gibbs"):
        MCMC(nx.GWG(model), num_warmup=1, num_samples=1, progress_bar=False).run(jax.random.key(0))


def test_error_unsupported_discrete_distribution():
    def model():
        numpyro.sample("n", dist.Multinomial(5, jnp.array([0.2, 0.3, 0.5])))

    with pytest.raises(ValueError, match="Site 'n' has distribution Multinomial.*supported"):
        MCMC(nx.DMALA(model), num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.key(0)
        )


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "big"])
def test_error_non_positive_step_size(bad):
    with pytest.raises(ValueError, match="step_size must be a positive finite number"):
        nx.DMALA(small_model, step_size=bad)


def test_error_potential_mode_needs_domain_and_init_params():
    with pytest.raises(ValueError, match="needs `domain=`"):
        nx.DMALA(potential_fn=lambda z: jnp.sum(z))
    mcmc = MCMC(
        nx.DMALA(potential_fn=lambda z: jnp.sum(z), domain=nx.Binary()),
        num_warmup=1,
        num_samples=1,
        progress_bar=False,
    )
    with pytest.raises(ValueError, match="pass `init_params`"):
        mcmc.run(jax.random.key(0))
    with pytest.raises(TypeError, match="expected Binary"):
        MCMC(
            nx.DMALA(potential_fn=lambda z: jnp.sum(z), domain="binary"),
            num_warmup=1,
            num_samples=1,
            progress_bar=False,
        ).run(jax.random.key(0), init_params=jnp.zeros(3))


def test_nan_potential_rejects_and_chain_continues():
    def potential(z):
        zf = z.astype(jnp.float32)
        # NaN whenever the first two coordinates are both 1
        return jnp.where(zf[0] * zf[1] > 0, jnp.nan, -0.3 * jnp.sum(zf))

    mcmc = MCMC(
        nx.DMALA(potential_fn=potential, domain=nx.Binary(), step_size=2.0, adapt_step_size=False),
        num_warmup=0,
        num_samples=500,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), init_params=jnp.zeros(4, jnp.int32))
    z = np.asarray(mcmc.get_samples())
    assert not np.any(z[:, 0] * z[:, 1] > 0)
    assert np.all(np.isfinite(np.asarray(mcmc.get_extra_fields()["potential_energy"])))
    assert np.mean(np.asarray(mcmc.get_extra_fields()["accepted"])) > 0.1  # it still moves


def test_error_site_used_as_index_suggests_exact_sites():
    def model():
        k = numpyro.sample("k", dist.Binomial(2, 0.5))
        numpyro.factor("f", jnp.array([0.1, 0.5, -0.3])[k])

    # an explicit list that leaves the index site out: the error names the fix
    with pytest.raises(TypeError, match="exact_sites"):
        MCMC(nx.DMALA(model, exact_sites=[]), num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.key(0)
        )
    mcmc = MCMC(
        nx.DMALA(model, exact_sites=["k"]), num_warmup=10, num_samples=10, progress_bar=False
    )
    mcmc.run(jax.random.key(0))
    # "auto" (the default) finds the index site and samples it exactly, saying so
    with pytest.warns(UserWarning, match="uses site 'k' as an index"):
        mcmc = MCMC(nx.DMALA(model), num_warmup=10, num_samples=200, progress_bar=False)
        mcmc.run(jax.random.key(0))
    values = np.asarray(mcmc.get_samples()["k"])
    assert set(np.unique(values)) == {0, 1, 2}


def _spike_and_slab(x, y=None):
    gamma = numpyro.sample("gamma", dist.Bernoulli(0.1).expand([x.shape[1]]))
    beta = numpyro.sample("beta", dist.Normal(0.0, 2.0).expand([x.shape[1]]))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    numpyro.sample("y", dist.Normal(x @ (gamma * beta), sigma), obs=y)


@pytest.mark.filterwarnings("ignore")
def test_auto_exact_decision_is_shared_by_the_chains_of_a_kernel():
    """exact_sites="auto" judges the gradient at each chain's start; as a Gibbs block the
    starts differ per chain (the continuous sites' values), and so did the decision (here:
    gamma exact at start 1, not at start 0), giving the chains' states different structures that
    NumPyro's sequential chains cannot stack. The first decision is kept for the kernel."""
    from numpyro.infer.gibbs import GIBBS_SITES_KWARG

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((50, 8)), jnp.float32)
    y = x[:, :5].sum(1) + 0.5 * jnp.asarray(rng.standard_normal(50), jnp.float32)

    def local_shapes(kernel, forget):
        shapes = set()
        for seed in range(2):  # starts 0 and 1: gradient and exact when judged apart
            if forget:
                kernel._auto_exact_decisions.clear()
            others = {
                "beta": random.uniform(random.key(100 + seed), (8,), minval=-2, maxval=2),
                "sigma": jnp.exp(random.uniform(random.key(200 + seed), (), minval=-2, maxval=2)),
            }
            state = kernel.init(random.key(seed), 10, None, (x, y), {GIBBS_SITES_KWARG: others})
            shapes.add(tuple(np.shape(local) for local in state.local))
        return shapes

    assert len(local_shapes(nx.DMALA(_spike_and_slab), forget=True)) == 2  # the test's power
    assert len(local_shapes(nx.DMALA(_spike_and_slab), forget=False)) == 1


@pytest.mark.parametrize("last_leaf", [200, 4001], ids=["even total", "odd total"])
def test_step_uniforms_are_one_flat_draw_in_leaf_order(last_leaf):
    """A step's uniforms are one flat draw cut into the leaves' shapes in order, the MH
    uniform last (the layout the cross-PPL parity tests feed both drivers); an odd total is
    drawn one longer (XLA's CPU threefry is slower for odd counts) with the same values."""
    from numpyro_ext._noise import _uniforms

    key = random.key(3)
    pieces, last = _uniforms(key, [(3, 5), (last_leaf,)])
    flat = random.uniform(key, (15 + last_leaf + 1,))
    assert jnp.array_equal(jnp.concatenate([pieces[0].ravel(), pieces[1], last[None]]), flat)
