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
from numpyro_ext import _plate_setup, _plates
from numpyro_ext._dependence import interaction_graph_of, output_dependence

from ..core.transition import colour_sweep_matrix
from .test_block_gibbs import CHECKERBOARD, driver_setup, hmm_model, lattice_model
from .test_summed_factor_gibbs import dense_model, summed_lattice_model, tables_at

X = np.random.default_rng(1).normal(size=(7, 3))

FUNCTIONS = {
    "network rows": lambda w: [jnp.tanh(X @ w).sum(-1)],
    "hidden units": lambda w: [jnp.tanh(X @ w)],
    "element-wise prior": lambda w: [jax.nn.softplus(w) + jax.scipy.special.xlogy(w, 2.0)],
    "size-1 broadcast": lambda w: [(jnp.tanh(X @ w) * w[:1, :]).sum(-1)],
    "transposed slice": lambda w: [jnp.log1p(w[1:, ::2].T ** 2)],
    "concatenation": lambda w: [jnp.concatenate([w[0], jnp.zeros(2), w[2, :1]])],
    "stack": lambda w: [jnp.stack([w[0], jnp.ones(5), w[2] ** 2], axis=-1)],
    "split": lambda w: [jnp.exp(piece) for piece in jnp.split(w[:, ::-1], [2], axis=-1)],
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


MATRIX = np.random.default_rng(4).normal(size=(3, 3))

#: scalar functions of six coordinates as log densities write them, and whether the program's
#: reading of their interactions is exact (else it may list more pairs than interact)
SCALAR_FUNCTIONS = {
    "lattice pairs summed": (lambda x: jnp.sum(x[1:] * x[:-1]) - jnp.sum((x - 0.3) ** 2), True),
    "a pair through exp": (lambda x: jnp.exp(x[0] - 2.0 * x[1]) + 3.0 * x[2], True),
    "a triple product": (lambda x: x[0] * x[1] * x[2] + x[3], True),
    "contraction of two slices": (lambda x: x[:3] @ x[3:], True),
    "batched contraction": (
        lambda x: jnp.einsum("bi,bi->", x[:4].reshape(2, 2), x[2:].reshape(2, 2)),
        True,
    ),
    "quadratic form of a constant": (lambda x: x[:3] @ jnp.asarray(MATRIX) @ x[:3], True),
    "division by the site": (lambda x: x[0] / (1.0 + x[1] + x[2]) + x[5], True),
    "select on the site": (lambda x: jnp.where(x[0] > 0.5, x[1], 2.0 * x[2]) + x[3], False),
    "maximum": (lambda x: jnp.max(x[:3]) + 0.5 * x[4], True),
    "rounding a sum": (lambda x: jnp.floor((x[0] + x[1]) / 2.0).astype(jnp.int32) + x[2], True),
    "square of a sum": (lambda x: (x[0] + x[1]) ** 2 - (x[2] - x[3]) ** 2, True),
    "comparison": (lambda x: jnp.where(x[0] == x[1], 1.0, 0.0) + x[2], True),
    "softplus of a sum": (lambda x: jax.nn.softplus(x[0] + x[4]), True),
    "nested jit": (lambda x: jax.jit(lambda y: y[1] * y[5])(x) + jnp.sum(x), True),
    "logsumexp": (lambda x: jax.nn.logsumexp(x[:3]) + x[3] * x[4], True),
    "stacked and split pairs": (
        lambda x: jnp.sum(jnp.prod(jnp.stack(jnp.split(x, [3])), axis=0)) + x[0] ** 2,
        True,
    ),
}


def conditional_interactions(fn, values: int = 3, size: int = 6) -> np.ndarray:
    """(N, N): pairs ``(i, k)`` such that moving ``k`` changes a difference of ``fn`` between
    two values of ``i`` at some state (the exact conditional of ``i``), by enumeration."""
    states = np.array(list(itertools.product(range(values), repeat=size)), np.int32)
    grid = np.asarray(jax.vmap(fn)(jnp.asarray(states)), np.float64)
    grid = grid.reshape((values,) * size)
    graph = np.zeros((size, size), bool)
    for i, k in itertools.permutations(range(size), 2):
        graph[i, k] = np.abs(np.diff(np.diff(grid, axis=i), axis=k)).max() > 1e-4
    return graph


@pytest.mark.parametrize("name", list(SCALAR_FUNCTIONS))
def test_the_interaction_reading_lists_every_pair_that_interacts(name):
    fn, exact = SCALAR_FUNCTIONS[name]
    read = interaction_graph_of(fn, jnp.zeros(6, jnp.int32))
    assert read is not None
    np.testing.assert_array_equal(read, read.T)
    truth = conditional_interactions(fn)
    off = ~np.eye(6, dtype=bool)
    assert not np.any(truth & ~read), np.argwhere(truth & ~read)
    if exact:
        np.testing.assert_array_equal(read[off], truth[off])


def test_the_interaction_reading_is_unknown_where_the_dependence_is():
    assert interaction_graph_of(lambda x: jnp.sum(jnp.cumsum(x) ** 2), jnp.ones(5)) is None
    assert interaction_graph_of(lambda x: jnp.sum(x[jnp.argmax(x) % 3] * x), jnp.ones(5)) is None


def test_a_summed_lattice_is_coloured_from_its_program_without_the_tables_probe(monkeypatch):
    """The 3x3 lattice's pair terms summed into one factor: the program reads as a sum of
    products of neighbours, so the checkerboard comes without the tables' probe (its sweep's
    stationarity: test_summed_factor_gibbs); a dense summed factor, every pair read, is still
    probed (the tables may find fewer)."""

    def probed(*args, **kwargs):
        raise AssertionError("probed")

    monkeypatch.setattr(_plate_setup, "probe_tables", probed)
    setup, _ = driver_setup(nx.PlateGibbs(summed_lattice_model))
    assert setup.leaves[0].mode == dk.sites.EXACT
    np.testing.assert_array_equal(setup.leaves[0].colours, CHECKERBOARD)
    with pytest.raises(AssertionError, match="probed"):
        driver_setup(nx.PlateGibbs(dense_model))


#: per-term functions of a site as plate and pair ``factor`` terms write them, with the site's
#: domain and the (coordinate, term) cells the program's reading lists beyond the probe's (a
#: dependence multiplied by zero: the reading is formal); elsewhere the two must be equal
TERM_FUNCTIONS = {
    "pair products": (
        lambda z: jnp.concatenate([(2 * z[1:] - 1) * (2 * z[:-1] - 1), 0.3 * z]),
        dk.Binary(),
        [],
    ),
    "a product vanishing at integers": (
        lambda z: jnp.stack([z[0] * z[1] * z[2], z[3] - 0.5 * z[2], 1.0 + 0.0 * z[4]]),
        dk.Binary(),
        [(4, 2)],
    ),
    "agreement of neighbours": (
        lambda c: jnp.concatenate([(c[1:] == c[:-1]).astype(jnp.float32), 0.2 * c]),
        dk.Categorical(3),
        [],
    ),
}


@pytest.mark.parametrize("name", list(TERM_FUNCTIONS))
def test_the_terms_dependence_read_from_the_program_equals_the_probe(name):
    fn, domain, formal_only = TERM_FUNCTIONS[name]
    spec = dk.sites.LeafSpec("z", domain, dk.sites.PLATE)
    points = [(jnp.array([0, 1, 0, 1, 1], jnp.int32),), (jnp.array([1, 1, 0, 0, 1], jnp.int32),)]

    def all_terms(leaves):
        return fn(leaves[0])

    # the reading is known here, so term_dependence does not fall back to the probe
    assert output_dependence(lambda z: [fn(z)], points[0][0]) is not None
    read = _plates.term_dependence(all_terms, 0, spec, points)
    probed = _plates.probed_term_dependence(all_terms, 0, spec, points)
    expected = probed.copy()
    for cell in formal_only:
        assert not probed[cell]
        expected[cell] = True
    np.testing.assert_array_equal(read, expected)


def test_a_lattice_of_pair_factors_is_coloured_from_its_program_and_a_scan_is_probed(
    monkeypatch,
):
    """The 3x3 lattice's pair factors read from the program (no probe compiled) give the
    checkerboard; the HMM written with ``scan`` has no exact reading, so it is probed."""

    def probed(*args, **kwargs):
        raise AssertionError("probed")

    monkeypatch.setattr(_plates, "probed_term_dependence", probed)
    setup, _ = driver_setup(nx.PlateGibbs(lattice_model))
    np.testing.assert_array_equal(setup.leaves[0].colours, CHECKERBOARD)
    with pytest.raises(AssertionError, match="probed"):
        driver_setup(nx.PlateGibbs(hmm_model))
