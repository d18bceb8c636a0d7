"""Colourings from term dependences: a chain gets even/odd, a lattice a checkerboard, a term
over three coordinates three colours; a clash is named; each term has one owner per colour."""

import numpy as np

from discrete_kernels.colouring import check_colouring, greedy_colouring, term_owners


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


def test_each_term_has_its_one_owner_of_each_colour():
    d = chain_dependence(3)  # terms: u0 u1 u2 p01 p12
    owners = term_owners(d, np.array([0, 1, 0]))
    np.testing.assert_array_equal(owners[0], [0, 3, 2, 0, 2])  # 3: no coordinate of colour 0
    np.testing.assert_array_equal(owners[1], [3, 1, 3, 1, 1])
