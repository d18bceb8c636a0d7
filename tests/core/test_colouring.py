"""Colourings from term dependences: a chain gets even/odd, a lattice a checkerboard, a term
over three coordinates three colours; a clash is named; each term has one owner per colour.
From single-site tables: a chain's interaction graph links neighbours only (not the
coordinates two apart, which share a term-based neighbour), rounding is not an interaction."""

import numpy as np
import pytest

from discrete_kernels.colouring import (
    check_colouring,
    check_graph_colouring,
    colouring_from_terms,
    given_colouring,
    greedy_colouring,
    greedy_graph_colouring,
    table_interaction_graph,
    term_owners,
    term_probe_refusal,
    terms_changed,
)


def chain_dependence(n: int) -> np.ndarray:
    """Terms: n unary ones, then n-1 pair terms (i, i+1)."""
    d = np.zeros((n, 2 * n - 1), bool)
    for i in range(n):
        d[i, i] = True
        if i < n - 1:
            d[i, n + i] = d[i + 1, n + i] = True
    return d


def lattice_dependence(h: int, w: int) -> np.ndarray:
    index = np.arange(h * w).reshape(h, w)
    pairs = [(index[r, c], index[r, c + 1]) for r in range(h) for c in range(w - 1)]
    pairs += [(index[r, c], index[r + 1, c]) for r in range(h - 1) for c in range(w)]
    d = np.zeros((h * w, len(pairs)), bool)
    for e, (a, b) in enumerate(pairs):
        d[a, e] = d[b, e] = True
    return d


def test_a_chain_is_coloured_even_and_odd():
    np.testing.assert_array_equal(greedy_colouring(chain_dependence(5)), [0, 1, 0, 1, 0])


def test_a_lattice_is_coloured_as_a_checkerboard():
    colours = greedy_colouring(lattice_dependence(3, 4)).reshape(3, 4)
    np.testing.assert_array_equal(colours, np.indices((3, 4)).sum(0) % 2)


def test_a_term_over_three_coordinates_needs_three_colours():
    d = np.ones((3, 1), bool)
    np.testing.assert_array_equal(greedy_colouring(d), [0, 1, 2])


def test_a_clash_is_named_and_a_valid_colouring_passes():
    d = chain_dependence(4)
    assert check_colouring(d, np.array([0, 1, 0, 1])) is None
    assert "coordinates 1 and 2 share a colour (1)" in check_colouring(d, np.array([0, 1, 1, 0]))
    assert "3 colours for 4 coordinates" in check_colouring(d, np.array([0, 1, 0]))


def test_a_users_blocks_are_checked_and_a_term_over_all_coordinates_is_refused():
    """What both PPLs' PlateGibbs do with ``blocks=`` and with a summed factor."""
    d = chain_dependence(4)
    colours, problem = colouring_from_terms("z", (4,), d, None, "numpyro.factor", "array")
    np.testing.assert_array_equal(colours, [0, 1, 0, 1])
    assert problem is None
    colours, problem = colouring_from_terms("z", (2, 2), d, [[0, 1], [0, 1]], "f", "array")
    np.testing.assert_array_equal(colours, [0, 1, 0, 1])
    assert problem is None
    colours, problem = colouring_from_terms("z", (4,), d, [0, 1, 1, 0], "f", "array")
    assert colours is None and "blocks['z'] is not a valid colouring: coordinates 1" in problem
    colours, problem = colouring_from_terms("z", (4,), d, [0.0, 1.0, 0.0, 1.0], "f", "array")
    assert colours is None
    assert "blocks['z'] must be an integer array of the site's shape (4,)" in problem
    assert given_colouring("z", (4,), np.zeros(3, int))[1].endswith("got int64 (3,)")
    assert term_probe_refusal(4, 10, limit=40) is None
    assert "its 4 coordinates and the model's 11 terms are too many" in term_probe_refusal(
        4, 11, limit=40
    )
    summed = np.ones((4, 1), bool)  # one term that every coordinate changes
    colours, problem = colouring_from_terms("z", (4,), summed, None, "pyro.factor", "tensor")
    assert colours is None
    assert "every coordinate interacts" in problem
    assert "a pyro.factor of a sum" in problem and "unsummed tensor of terms" in problem


def test_each_term_has_its_one_owner_of_each_colour():
    d = chain_dependence(3)  # terms: u0 u1 u2 p01 p12
    owners = term_owners(d, np.array([0, 1, 0]))
    np.testing.assert_array_equal(owners[0], [0, 3, 2, 0, 2])  # 3: no coordinate of colour 0
    np.testing.assert_array_equal(owners[1], [3, 1, 3, 1, 1])


def chain_tables(x: np.ndarray, pair: np.ndarray, offset: float) -> np.ndarray:
    """Single-site tables (N, S) of ``f(x) = offset + sum_i pair[x_i, x_{i+1}]``."""
    n, s = len(x), pair.shape[0]
    out = np.empty((n, s))
    for i in range(n):
        for v in range(s):
            y = x.copy()
            y[i] = v
            out[i, v] = offset + pair[y[:-1], y[1:]].sum()
    return out


def test_a_chain_from_its_tables_links_neighbours_only_and_is_coloured_even_and_odd():
    rng = np.random.default_rng(0)
    pair = rng.normal(size=(3, 3))
    n, offset = 6, -300.0
    x = rng.integers(0, 3, n)
    tables = chain_tables(x, pair, offset)
    moved = np.stack(
        [chain_tables(np.where(np.arange(n) == k, (x + 1) % 3, x), pair, offset) for k in range(n)]
    )
    # float32-like rounding of every entry of a log density of size 300: not an interaction
    noise = 300 * 6e-8 * rng.uniform(-4, 4, size=moved.shape)
    graph = table_interaction_graph(tables[None], (moved + noise)[None], np.array([offset]), 1.2e-7)
    expected = np.abs(np.arange(n)[:, None] - np.arange(n)[None]) == 1
    np.testing.assert_array_equal(graph, expected)
    np.testing.assert_array_equal(greedy_graph_colouring(graph), [0, 1, 0, 1, 0, 1])
    assert check_graph_colouring(graph, np.array([0, 1, 0, 1, 0, 1])) is None
    assert "coordinates 0 and 1 share a colour (0) but they interact" in check_graph_colouring(
        graph, np.zeros(n, int)
    )


def test_a_coupling_seen_at_one_probed_state_only_counts():
    tables = np.zeros((2, 2, 2))
    moved = np.zeros((2, 2, 2, 2))
    moved[1, 0, 1] = [0.0, 0.5]  # at the second state, moving 0 changes row 1
    graph = table_interaction_graph(tables, moved, np.zeros(2), 1.2e-7)
    np.testing.assert_array_equal(graph, [[False, True], [True, False]])


@pytest.mark.parametrize("backend", ["numpy", "jax", "torch"])
def test_terms_changed_ignores_rounding_and_twin_nans_on_every_backend(backend):
    before = [1.0, 200.0, float("nan"), 3.0, float("-inf"), 0.0]
    after = [1.0, 200.0 * (1 + 1e-7), float("nan"), 3.01, float("-inf"), float("nan")]
    if backend == "numpy":
        changed = terms_changed(np.array(before), np.array(after))
    elif backend == "jax":
        import jax.numpy as jnp

        changed = terms_changed(jnp.array(before), jnp.array(after))
    else:
        torch = pytest.importorskip("torch")
        changed = terms_changed(torch.tensor(before), torch.tensor(after)).numpy()
    np.testing.assert_array_equal(np.asarray(changed), [False, False, False, True, False, True])
