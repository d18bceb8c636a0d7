"""Colourings of a site whose coordinates interact locally (a chain, a lattice, a ``scan``).

When no log-density term depends on two coordinates of the same colour, the coordinates of
one colour are conditionally independent given the others, and a term depends on at most one
of them: its *owner*. Then, with every coordinate of colour ``c`` set to ``v``, the terms
summed by owner give ``g_i(v)`` for every coordinate ``i`` of colour ``c`` at once, and the
site's exact table ``T[i, v] = f(x with x_i = v)`` costs ``C x S`` evaluations
(:func:`discrete_kernels.sites.table_from_element_terms`) instead of ``N x S``. A chain needs
two colours (even and odd positions), a 4-neighbour lattice two (a checkerboard), a plate one.

Everything here runs once, at setup, on numpy arrays: the adapters measure which terms each
coordinate changes (``dependence``, from single-coordinate changes of the model) and evaluate
the terms; the graph bookkeeping is the same for both.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "MAX_DEPENDENCE_ENTRIES",
    "check_colouring",
    "greedy_colouring",
    "interaction_graph",
    "term_owners",
]

MAX_DEPENDENCE_ENTRIES = 2**26
"""At most this many (coordinate, term) pairs are compared at setup to find a colouring."""


def interaction_graph(dependence: np.ndarray) -> np.ndarray:
    """``A[i, k]``: some term depends on both coordinates ``i`` and ``k`` (``i != k``).

    Parameters
    ----------
    dependence : bool array, shape (N, E)
        ``dependence[i, e]``: term ``e`` changes when coordinate ``i`` does.

    Returns
    -------
    bool array, shape (N, N), symmetric, False on the diagonal
    """
    counts = dependence.astype(np.float32)
    shared = (counts @ counts.T) > 0
    np.fill_diagonal(shared, False)
    return shared


def greedy_colouring(dependence: np.ndarray) -> np.ndarray:
    """A colouring with no two interacting coordinates of one colour, each coordinate in turn
    given the smallest colour its earlier neighbours leave free (in row-major order this is
    the even/odd colouring of a chain and the checkerboard of a lattice).

    Parameters
    ----------
    dependence : bool array, shape (N, E)

    Returns
    -------
    int array, shape (N,): colours ``0 .. C-1``
    """
    graph = interaction_graph(dependence)
    colours = np.full(graph.shape[0], -1, dtype=np.int64)
    for i in range(graph.shape[0]):
        taken = set(colours[graph[i] & (colours >= 0)].tolist())
        colour = 0
        while colour in taken:
            colour += 1
        colours[i] = colour
    return colours


def check_colouring(dependence: np.ndarray, colours: np.ndarray) -> str | None:
    """None when no term depends on two coordinates of one colour, else the reason (naming
    one such pair, as flat indices).

    Parameters
    ----------
    dependence : bool array, shape (N, E)
    colours : int array, shape (N,)
    """
    colours = np.asarray(colours).reshape(-1)
    if colours.shape[0] != dependence.shape[0]:
        return f"it has {colours.shape[0]} colours for {dependence.shape[0]} coordinates"
    if colours.min() < 0:
        return "its colours must be non-negative integers"
    graph = interaction_graph(dependence)
    clash = np.argwhere(graph & (colours[:, None] == colours[None, :]))
    if clash.size:
        i, k = clash[0]
        return (
            f"coordinates {int(i)} and {int(k)} share a colour ({int(colours[i])}) but a term "
            "depends on both"
        )
    return None


def term_owners(dependence: np.ndarray, colours: np.ndarray) -> np.ndarray:
    """Per colour, the coordinate of that colour each term depends on (``N``: none).

    Parameters
    ----------
    dependence : bool array, shape (N, E)
    colours : int array, shape (N,), a colouring that passes :func:`check_colouring`

    Returns
    -------
    int array, shape (C, E)
    """
    num_coordinates = dependence.shape[0]
    num_colours = int(colours.max()) + 1
    owners = np.full((num_colours, dependence.shape[1]), num_coordinates, dtype=np.int64)
    for colour in range(num_colours):
        members = np.flatnonzero(colours == colour)
        hit = dependence[members]  # (n_c, E): at most one True per column
        owned = hit.any(axis=0)
        owners[colour, owned] = members[np.argmax(hit[:, owned], axis=0)]
    return owners
