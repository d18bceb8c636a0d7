"""Reading which coordinates of a site each element of a value depends on from the program
(:mod:`numpyro_ext._dependence`), and what PlateGibbs's setup spares with it.

The reading is checked against the non-zeros of the Jacobian at a random point on functions
written as models write them (contractions, broadcasting, slices, nested ``jit`` and
custom-derivative calls): equal, element by element. What it has no exact rule for (a
``gather``, a ``scan``) makes it unknown. A site whose every pair of coordinates shares an
element of a likelihood term (a small network's weights) is swept one coordinate at a time
without the setup's probes; the sweep's exact transition matrix keeps the posterior, and
forcing one colour on the same site does not (the power). A summed ``factor`` and a site of
two coordinates still go through the tables (they may be chains)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import discrete_kernels as dk
import numpyro_ext as nx
from numpyro_ext import _plate_setup
from numpyro_ext._dependence import output_dependence

from ..core.transition import colour_sweep_matrix
from .test_block_gibbs import driver_setup
from .test_summed_factor_gibbs import dense_model, tables_at

X = np.random.default_rng(1).normal(size=(7, 3))

FUNCTIONS = {
    "network rows": lambda w: [jnp.tanh(X @ w).sum(-1)],
    "hidden units": lambda w: [jnp.tanh(X @ w)],
    "element-wise prior": lambda w: [jax.nn.softplus(w) + jax.scipy.special.xlogy(w, 2.0)],
    "size-1 broadcast": lambda w: [(jnp.tanh(X @ w) * w[:1, :]).sum(-1)],
    "transposed slice": lambda w: [jnp.log1p(w[1:, ::2].T ** 2)],
    "concatenation": lambda w: [jnp.concatenate([w[0], jnp.zeros(2), w[2, :1]])],
    "batched contraction": lambda w: [jnp.einsum("bi,bij->bj", w[:2], jnp.ones((2, 5, 4)))],
    "left contraction": lambda w: [w.T @ jnp.ones((3, 2))],
    "reductions": lambda w: [jnp.prod(w, 0), jnp.sum(jnp.exp(w), 1)],
    "independent of the site": lambda w: [jnp.ones(3), w.sum()],
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_the_reading_equals_the_jacobians_non_zeros(name):
    fn = FUNCTIONS[name]
    w = jnp.asarray(np.random.default_rng(2).normal(size=(3, 5)), jnp.float32)
    read = output_dependence(fn, w)
    assert read is not None
    jacobians = jax.jacfwd(fn)(w)
    for got, jacobian in zip(read, jacobians):
        nonzero = np.asarray(jacobian).reshape(*np.shape(jacobian)[:-2], 15) != 0
        if got is None:
            assert not nonzero.any()
        else:
            np.testing.assert_array_equal(got, nonzero)


def test_the_reading_is_formal():
    """``max`` is computed from every element, though its derivative picks one."""
    (read,) = output_dependence(lambda w: [jnp.max(w, 0)], jnp.arange(15.0).reshape(3, 5))
    assert read.sum() == 15


@pytest.mark.parametrize(
    "fn",
    [
        lambda w: [w[jnp.argmax(w[0]) % 3]],  # an index computed from the site: a gather
        lambda w: [jax.lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(5), w)[1]],
    ],
    ids=["gather", "scan"],
)
def test_an_operation_without_an_exact_rule_makes_the_reading_unknown(fn):
    assert output_dependence(fn, jnp.ones((3, 5))) is None


NET_X = np.random.default_rng(3).normal(size=(12, 2))
NET_Y = (np.random.default_rng(4).random(12) < 0.5).astype(np.float32)
NET_STATES = np.array(list(itertools.product((0, 1), repeat=6)))


def network_model():
    """Six sign weights of a 2-3-1 tanh network, a Bernoulli likelihood per row: every row
    is computed from every weight."""
    b1 = numpyro.sample("b1", dist.Bernoulli(0.5).expand([2, 3]))
    hidden = jnp.tanh(jnp.asarray(NET_X) @ (2.0 * b1 - 1.0))
    with numpyro.plate("rows", 12):
        numpyro.sample("y", dist.Bernoulli(logits=2.0 * hidden.sum(-1)), obs=NET_Y)


def network_posterior() -> np.ndarray:
    w = 2.0 * NET_STATES.reshape(-1, 2, 3) - 1.0
    logits = 2.0 * np.tanh(np.einsum("ri,sih->srh", NET_X, w)).sum(-1)
    logp = (NET_Y * logits - np.logaddexp(0.0, logits)).sum(-1)
    pi = np.exp(logp - logp.max())
    return pi / pi.sum()


def test_a_network_site_is_swept_one_weight_at_a_time_without_the_probes(monkeypatch):
    def probed(*args, **kwargs):
        raise AssertionError("probed")

    monkeypatch.setattr(_plate_setup, "probe_tables", probed)
    monkeypatch.setattr(_plate_setup, "terms_colouring", probed)
    kernel = nx.PlateGibbs(network_model)
    setup, local_fn = driver_setup(kernel)
    (leaf,) = setup.leaves
    assert leaf.mode == dk.sites.EXACT
    colours = np.asarray(leaf.colours).reshape(-1)
    assert sorted(colours.tolist()) == list(range(6))
    tables = tables_at(setup.local_fn((), {}), NET_STATES.reshape(-1, 2, 3), (2, 3))
    tables = tables.reshape(-1, 6, 2)
    pi = network_posterior()
    p = colour_sweep_matrix(NET_STATES, tables, colours)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    # the power: the same tables drawn as one colour do not keep the posterior
    one = colour_sweep_matrix(NET_STATES, tables, np.zeros(6, int))
    assert np.max(np.abs(pi @ one - pi)) > 1e-3


def test_a_summed_factor_and_a_pair_still_go_through_the_tables(monkeypatch):
    calls = []
    probe = _plate_setup.probe_tables

    def counted(*args, **kwargs):
        calls.append(1)
        return probe(*args, **kwargs)

    monkeypatch.setattr(_plate_setup, "probe_tables", counted)
    driver_setup(nx.PlateGibbs(dense_model))  # one element computed from the whole site
    assert calls
    calls.clear()

    def pair_model():
        z = numpyro.sample("z", dist.Bernoulli(0.5).expand([2]))
        with numpyro.plate("rows", 12):
            numpyro.sample("y", dist.Normal(jnp.asarray(NET_X) @ z, 1.0), obs=NET_Y)

    driver_setup(nx.PlateGibbs(pair_model))  # two coordinates: a pair may be drawn whole
    assert calls
