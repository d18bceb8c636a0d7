"""A model's trace at a prior draw by one compiled program (``numpyro_ext._prior_trace``):
the trace NumPyro's eager ``prototype_trace`` gives, the program kept for the next key, and
the eager trace for what the program cannot hold."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.contrib.control_flow import scan
from numpyro.infer.gibbs import conditioned, prototype_trace

from numpyro_ext import _prior_trace
from numpyro_ext._prior_trace import prior_trace


def mixed_model(x, y, scale=1.0):
    """Plates, a factor, a deterministic site, an ``Expanded`` and a masked site, a keyword."""
    w = numpyro.sample("w", dist.Normal(0.0, scale).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        z = numpyro.sample("z", dist.Bernoulli(0.3))
        numpyro.deterministic("mean", x @ w + z)
        numpyro.sample("y", dist.Normal(x @ w + z, 1.0), obs=y)
    numpyro.factor("prior_z", -0.1 * jnp.sum(z))
    with numpyro.handlers.mask(mask=jnp.arange(3) > 0):
        numpyro.sample("c", dist.Categorical(jnp.ones(4) / 4).expand([3]))


def scan_model(y):
    """An HMM written with NumPyro's ``scan``: sites stacked over time."""

    def transition(previous, y_t):
        probs = jnp.array([[0.9, 0.1], [0.2, 0.8]])[previous]
        state = numpyro.sample("state", dist.Categorical(probs))
        numpyro.sample("obs", dist.Normal(2.0 * state, 1.0), obs=y_t)
        return state, None

    scan(transition, jnp.array(0), y)


def _compare(model, args, kwargs, key):
    eager = prototype_trace(conditioned(model), key, args, kwargs)
    compiled = prior_trace(model, key, args, kwargs)
    assert list(compiled) == list(eager)
    for name, site in eager.items():
        again = compiled[name]
        assert again["type"] == site["type"]
        if site["type"] != "sample":
            continue
        assert again["is_observed"] == site["is_observed"]
        assert [f.name for f in again["cond_indep_stack"]] == [
            f.name for f in site["cond_indep_stack"]
        ]
        assert type(again["fn"]) is type(site["fn"])
        assert again["fn"].batch_shape == site["fn"].batch_shape
        np.testing.assert_allclose(np.asarray(again["value"]), np.asarray(site["value"]), 1e-6)
        np.testing.assert_allclose(
            np.asarray(again["fn"].log_prob(site["value"])),
            np.asarray(site["fn"].log_prob(site["value"])),
            rtol=1e-5,
        )


# the compiled prior trace is the CPU's path (elsewhere the eager trace is used as it is)
ON_CPU = pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's compiled path")


@ON_CPU
def test_the_compiled_trace_is_the_eager_one_and_its_program_is_kept():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((6, 2)), jnp.float32)
    y = jnp.asarray(rng.standard_normal(6), jnp.float32)
    _prior_trace._KEPT.clear()
    for seed in (0, 1, 2):
        _compare(mixed_model, (x, y), {"scale": 2.0}, random.key(seed))
    assert len(_prior_trace._KEPT) == 1 and None not in _prior_trace._KEPT.values()
    _compare(scan_model, (jnp.asarray(rng.standard_normal(5), jnp.float32),), {}, random.key(3))
    assert None not in _prior_trace._KEPT.values()


@ON_CPU
def test_models_the_program_cannot_hold_get_the_eager_trace():
    def needs_values(n):  # a Python condition on an argument's value
        if int(n) > 2:
            numpyro.sample("z", dist.Bernoulli(0.5).expand([3]))
        else:
            numpyro.sample("z", dist.Bernoulli(0.5))

    _prior_trace._KEPT.clear()
    _compare(needs_values, (jnp.asarray(3),), {}, random.key(0))
    assert list(_prior_trace._KEPT.values()) == [None]

    class Loaded(dist.BernoulliProbs):  # a parameter outside the declared fields
        def __init__(self, probs, extra):
            self.extra = extra
            super().__init__(probs=probs)

    def user_distribution(p):
        numpyro.sample("z", Loaded(p, "kept"))

    _compare(user_distribution, (jnp.asarray(0.4),), {}, random.key(0))
    assert (
        prior_trace(user_distribution, random.key(1), (jnp.asarray(0.4),), {})["z"]["fn"].extra
        == "kept"
    )

    class Options:  # an argument neither an array nor hashable: not cached
        __hash__ = None
        p = 0.5

    def unhashable(y, options):
        numpyro.sample("z", dist.Bernoulli(options.p))

    kept = len(_prior_trace._KEPT)
    _compare(unhashable, (None, Options()), {}, random.key(0))
    assert len(_prior_trace._KEPT) == kept


@pytest.mark.parametrize("chain_method", ["vectorized", "sequential"])
def test_a_kernel_set_up_from_the_compiled_trace_samples_as_before(chain_method):
    import numpyro_ext as nx

    def model():
        with numpyro.plate("n", 5):
            numpyro.sample("z", dist.Bernoulli(jnp.array([0.1, 0.3, 0.5, 0.7, 0.9])))

    _prior_trace._KEPT.clear()
    mcmc = numpyro.infer.MCMC(
        nx.PlateGibbs(model),
        num_warmup=50,
        num_samples=1000,
        num_chains=2,
        chain_method=chain_method,
        progress_bar=False,
    )
    mcmc.run(random.key(0))
    means = np.asarray(mcmc.get_samples()["z"]).mean(0)
    np.testing.assert_allclose(means, [0.1, 0.3, 0.5, 0.7, 0.9], atol=0.06)
    if jax.default_backend() == "cpu":  # the kernel's setup went through the compiled trace
        assert any(program is not None for program in _prior_trace._KEPT.values())
