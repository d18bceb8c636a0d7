"""Whole-chain draws from pair tables (:mod:`discrete_kernels.chains`): the draw's log
probability equals the brute-force conditional on every state of small chains (impossible
values included) in NumPy, JAX and torch; the draws' frequencies match it (a chi-square whose
power is shown on the chain with its pair terms dropped); the parallel scans equal their
sequential definitions; the pair substitutions' layout; the chain-graph test and the cost
rule. A chain whose terms come one by one: its pair table from its terms at ``3 S^2`` states
equals the one from ``(N - 1) S^2`` evaluations (impossible values included, NumPy, JAX and
torch), and a layout that leaves out the pair terms does not (the power); a term over
coordinates that are not neighbours is not a chain."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from discrete_kernels.chains import (
    MAX_PAIR_TABLE_COST,
    ChainTerms,
    chain_draw,
    chain_log_prob,
    chain_potentials,
    chain_term_layout,
    chain_term_patterns,
    draws_chain,
    draws_chain_from_terms,
    forward_messages,
    is_chain_graph,
    pair_substitutions,
    pair_table_from_terms,
)
from discrete_kernels.domains import Categorical, Ordinal


def random_chain(size: int, num_values: int, seed: int, impossible: bool = False):
    """``f(x) = sum_i a_i(x_i) + sum_i b_i(x_i, x_{i+1})`` with random tables (some entries
    ``-inf`` with ``impossible``), its log conditional over every state, and ``f``."""
    rng = np.random.default_rng(seed)
    unary = rng.normal(size=(size, num_values))
    pair = 1.5 * rng.normal(size=(size - 1, num_values, num_values))
    if impossible:
        unary[1, 0] = -np.inf  # coordinate 1 never takes its first value
        pair[2, 1, 2] = -np.inf  # nor the pair (1, 2) at coordinates 2 and 3

    def f(x: np.ndarray) -> float:
        x = np.asarray(x)
        return float(
            unary[np.arange(size), x].sum() + pair[np.arange(size - 1), x[:-1], x[1:]].sum()
        )

    states = np.array(list(itertools.product(range(num_values), repeat=size)))
    logp = np.array([f(s) for s in states])
    log_conditional = logp - np.logaddexp.reduce(logp[np.isfinite(logp)])
    return f, states, log_conditional


def pair_table_at(f, x: np.ndarray, num_values: int) -> np.ndarray:
    batch = np.asarray(pair_substitutions(Categorical(num_values), x))
    return np.array([f(s) for s in batch]).reshape(len(x) - 1, num_values, num_values)


def _torch(a):
    torch = pytest.importorskip("torch")  # the newest-stack CI run has no torch
    return torch.as_tensor(np.asarray(a))


BACKENDS = {"numpy": np.asarray, "jax": lambda a: jnp.asarray(a), "torch": _torch}


def log_probs_of_states(backend: str, table: np.ndarray, x: np.ndarray, states: np.ndarray):
    """``chain_log_prob(table, x, y)`` for every ``y`` in ``states`` (``(S, n)``): JAX's by one
    jitted ``vmap``, as the library calls it (op by op, 243 calls took 3 s here), the
    others call by call."""
    to = BACKENDS[backend]
    if backend == "jax":
        batch = jax.jit(jax.vmap(lambda y: chain_log_prob(to(table), to(x), y)))
        return np.asarray(batch(to(states)), np.float64)
    return np.array([float(chain_log_prob(to(table), to(x), to(y))) for y in states])


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_log_prob_of_a_draw_is_the_exact_conditional_from_any_current_state(backend):
    f, states, log_conditional = random_chain(5, 3, seed=0)
    for start in (0, 100, 242):
        x = states[start]
        table = pair_table_at(f, x, 3)
        got = log_probs_of_states(backend, table, x, states)
        atol = 1e-5 if backend == "jax" else 1e-9  # float32 in JAX
        np.testing.assert_allclose(got, log_conditional, atol=atol)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_with_impossible_values_the_draw_is_a_proposal_that_never_draws_one(backend):
    """An impossible value (``-inf`` in the table) next to the current state's neighbour
    hides pair terms from the expansion: the draw is then a normalised proposal with no mass
    on impossible states, from which the current state can be drawn back (PlateGibbs's MH
    step makes the move exact)."""
    f, states, log_conditional = random_chain(5, 3, seed=0, impossible=True)
    possible = np.isfinite(log_conditional)
    for start in np.flatnonzero(possible)[::20]:
        x = states[start]
        table = pair_table_at(f, x, 3)
        with np.errstate(invalid="ignore", divide="ignore"):
            got = log_probs_of_states(backend, table, x, states)
        assert not np.any(np.isnan(got))
        assert np.all(got[~possible] == -np.inf)
        np.testing.assert_allclose(np.exp(got).sum(), 1.0, rtol=1e-5)
        assert np.isfinite(got[start])  # the current state can always be drawn back


def test_the_draws_match_the_conditional_and_a_chain_without_its_pair_terms_does_not():
    """20,000 jitted draws from one state against the conditional: a chi-square within its
    bound; the same draws' statistic against the chain's product of single-site marginals
    (what a draw ignoring the pair terms would target) far beyond it."""
    f, states, log_conditional = random_chain(5, 3, seed=1)
    x = states[77]
    table = jnp.asarray(pair_table_at(f, x, 3), jnp.float32)
    num = 20000
    uniforms = jax.random.uniform(jax.random.key(3), (num, 5))
    draws = np.asarray(jax.jit(jax.vmap(lambda u: chain_draw(table, jnp.asarray(x), u)))(uniforms))
    counts = np.bincount(draws @ (3 ** np.arange(4, -1, -1)), minlength=len(states))

    def chi2(p: np.ndarray) -> tuple[float, float]:
        expected = p * num
        seen = expected > 5
        value = np.sum((counts[seen] - expected[seen]) ** 2 / expected[seen])
        return value, seen.sum() + 6 * np.sqrt(2 * seen.sum())

    value, bound = chi2(np.exp(log_conditional))
    assert value < bound, (value, bound)
    p = np.exp(log_conditional)
    marginals = [np.bincount(states[:, i], weights=p, minlength=3) for i in range(5)]
    independent = np.prod([marginals[i][states[:, i]] for i in range(5)], axis=0)
    value, bound = chi2(independent)
    assert value > 3 * bound, (value, bound)


@pytest.mark.parametrize("size", [2, 3, 7, 16])
def test_the_prefix_scan_equals_the_sequential_forward_filter(size):
    rng = np.random.default_rng(size)
    unary = rng.normal(size=(size, 4))
    pairwise = rng.normal(size=(size - 1, 4, 4))
    alpha = [unary[0]]
    for i in range(size - 1):
        alpha.append(unary[i + 1] + np.logaddexp.reduce(alpha[-1][:, None] + pairwise[i], axis=0))
    np.testing.assert_allclose(forward_messages(unary, pairwise), np.stack(alpha), rtol=1e-12)


def test_the_potentials_vanish_on_the_current_row_and_column():
    f, states, _ = random_chain(4, 3, seed=2)
    x = states[50]
    unary, pairwise = chain_potentials(pair_table_at(f, x, 3), x)
    np.testing.assert_array_equal(unary[np.arange(4), x], 0.0)
    np.testing.assert_array_equal(pairwise[np.arange(3), x[:-1], :], 0.0)
    np.testing.assert_array_equal(pairwise[np.arange(3), :, x[1:]], 0.0)


def test_pair_substitutions_lay_out_the_pairs_row_major():
    x = np.array([[4, 5], [6, 4]])  # an ordinal site {4, 5, 6}, shape (2, 2): 3 flat pairs
    batch = np.asarray(pair_substitutions(Ordinal(3, low=4), x))
    assert batch.shape == (3 * 9, 2, 2)
    i, a, b = 1, 2, 0  # flat coordinates 1 and 2 set to 6 and 4
    expected = x.reshape(-1).copy()
    expected[[1, 2]] = [6, 4]
    np.testing.assert_array_equal(batch[(i * 3 + a) * 3 + b].reshape(-1), expected)


def test_a_chain_graph_has_interactions_between_flat_neighbours_only():
    path = np.eye(5, k=1, dtype=bool) | np.eye(5, k=-1, dtype=bool)
    assert is_chain_graph(path)
    assert is_chain_graph(np.zeros((5, 5), bool))  # a plate
    skip = path.copy()
    skip[0, 2] = skip[2, 0] = True
    assert not is_chain_graph(skip)


def test_a_chain_is_drawn_whole_where_its_pair_table_costs_little_more_than_a_sweep():
    assert draws_chain(100, 3, 2)
    assert draws_chain(100, 2 * MAX_PAIR_TABLE_COST, 2)
    assert not draws_chain(100, 2 * MAX_PAIR_TABLE_COST + 1, 2)
    assert not draws_chain(1, 2, 1)


def term_chain(size: int, num_values: int, seed: int):
    """A chain given as terms, in a shuffled order: two terms per coordinate, one per
    neighbouring pair (one entry ``-inf``), one constant; ``(terms, dependence, f)``."""
    rng = np.random.default_rng(seed)
    own = rng.normal(size=(size, 2, num_values))
    pair = rng.normal(size=(size - 1, num_values, num_values))
    pair[2, 1, 2] = -np.inf
    num_terms = 2 * size + size - 1 + 1
    order = rng.permutation(num_terms)

    def terms(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        values = np.concatenate(
            [
                own[np.arange(size), :, x].reshape(-1),
                pair[np.arange(size - 1), x[:-1], x[1:]],
                [0.7],
            ]
        )
        return values[order]

    depends = np.zeros((size, num_terms), bool)
    for i in range(size):
        depends[i, 2 * i : 2 * i + 2] = True
    for i in range(size - 1):
        depends[i : i + 2, 2 * size + i] = True
    return terms, depends[:, order], lambda x: float(np.sum(terms(x)))


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_the_pair_table_from_terms_equals_the_one_from_pair_substitutions(backend):
    to = BACKENDS[backend]
    size, num_values = 7, 3
    terms, depends, f = term_chain(size, num_values, seed=3)
    layout = chain_term_layout(depends)
    assert layout is not None
    rng = np.random.default_rng(4)
    for x in [rng.integers(0, num_values, size) for _ in range(3)] + [
        np.array([0, 0, 1, 0, 2, 1, 1])
    ]:
        patterns = np.asarray(chain_term_patterns(to(x), num_values))
        assert patterns.shape == (3, num_values, num_values, size)
        pattern_terms = np.stack([terms(p) for p in patterns.reshape(-1, size)])
        pattern_terms = pattern_terms.reshape(3, num_values, num_values, -1)
        got = pair_table_from_terms(to(f(x)), to(terms(x)), to(pattern_terms), layout, to(x))
        want = pair_table_at(f, x, num_values)
        np.testing.assert_array_equal(np.isinf(np.asarray(got)), np.isinf(want))
        finite = np.isfinite(want)
        np.testing.assert_allclose(np.asarray(got)[finite], want[finite], rtol=1e-5, atol=1e-5)
    # the power: without its pair terms the table is another one
    blind = ChainTerms(layout.singles, np.full_like(layout.pairs, depends.shape[1]))
    got = pair_table_from_terms(f(x), terms(x), pattern_terms, blind, x)
    assert np.max(np.abs(np.where(finite, np.asarray(got) - want, 0.0))) > 0.5


def test_the_patterns_put_a_and_b_on_every_third_pair_and_keep_the_rest():
    x = np.array([2, 2, 2, 2, 2])
    patterns = chain_term_patterns(x, 3)
    np.testing.assert_array_equal(patterns[0, 0, 1], [0, 1, 2, 0, 1])
    np.testing.assert_array_equal(patterns[1, 0, 1], [2, 0, 1, 2, 0])
    np.testing.assert_array_equal(patterns[2, 0, 1], [1, 2, 0, 1, 2])


def test_a_term_over_coordinates_that_are_not_neighbours_is_not_a_chain():
    depends = np.zeros((4, 3), bool)
    depends[[0, 1], 0] = depends[[1, 2], 1] = True  # two pairs: a chain
    assert chain_term_layout(depends) is not None
    skip = depends.copy()
    skip[[0, 2], 2] = True  # a term of coordinates 0 and 2
    assert chain_term_layout(skip) is None
    three = depends.copy()
    three[[1, 2, 3], 2] = True
    assert chain_term_layout(three) is None
    layout = chain_term_layout(depends)
    np.testing.assert_array_equal(layout.pairs, [[0], [1], [3]])  # 3 = E: no term
    np.testing.assert_array_equal(layout.singles, [[3]] * 4)


def test_a_chain_is_drawn_whole_from_its_terms_for_up_to_five_values_a_coordinate():
    assert all(draws_chain_from_terms(s, 2) for s in range(2, 6))
    assert not draws_chain_from_terms(6, 2)
