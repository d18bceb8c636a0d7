"""Colourings of a site whose coordinates interact locally (a chain, a lattice, a ``scan``).

When no log-density term depends on two coordinates of the same colour, the coordinates of
one colour are conditionally independent given the others, and a term depends on at most one
of them: its *owner*. Then, with every coordinate of colour ``c`` set to ``v``, the terms
summed by owner give ``g_i(v)`` for every coordinate ``i`` of colour ``c`` at once, and the
site's exact table ``T[i, v] = f(x with x_i = v)`` costs ``C x S`` evaluations
(:func:`discrete_kernels.tables.table_from_element_terms`) instead of ``N x S``. A chain needs
two colours (even and odd positions), a 4-neighbour lattice two (a checkerboard), a plate one.

When the model sums its interactions into one term (a ``factor`` of a sum over a chain or a
lattice), the terms say nothing: every coordinate changes that term. The site's single-site
exact tables still do: row ``i`` is the conditional of coordinate ``i`` given all others, and
coordinates ``i`` and ``k`` interact iff moving ``x_k`` changes row ``i``
(:func:`table_interaction_graph`). Such a site keeps its single-site tables (``N (S - 1)``
evaluations each) and is drawn colour by colour from them.

Everything here runs once, at setup, on numpy arrays: the adapters measure which terms each
coordinate changes (``dependence``, from single-coordinate changes of the model) or evaluate
the tables; the graph bookkeeping is the same for both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._xp import array_namespace

__all__ = [
    "DEPENDENCE_TOLERANCE",
    "MAX_DEPENDENCE_ENTRIES",
    "MAX_TABLE_PROBE_EVALUATIONS",
    "TABLE_DEPENDENCE_TOLERANCE",
    "TABLE_ROUNDING_ULPS",
    "check_colouring",
    "check_graph_colouring",
    "colouring_from_terms",
    "given_colouring",
    "greedy_colouring",
    "greedy_graph_colouring",
    "interaction_graph",
    "table_interaction_graph",
    "term_probe_refusal",
    "term_owners",
    "terms_changed",
]

DEPENDENCE_TOLERANCE = 1e-5
"""Relative change of a term below which it is judged not to depend on a coordinate."""

MAX_DEPENDENCE_ENTRIES = 2**26
"""At most this many (coordinate, term) pairs are compared at setup to find a colouring."""

MAX_TABLE_PROBE_EVALUATIONS = 2**18
"""At most this many evaluations of the model (``N x N x S``: a single-site table after
moving each coordinate) per probed state to find from a site's exact tables which of its
coordinates interact (:func:`table_interaction_graph`)."""

TABLE_DEPENDENCE_TOLERANCE = 1e-5
"""Relative change of a conditional log probability below which it is judged unchanged."""

TABLE_ROUNDING_ULPS = 64
"""Rounding allowed on top, in units of the tables' machine epsilon times the size of the log
density: a table entry is a whole log density, so one that does not depend on a coordinate
still moves by a few of its ulps when a far coordinate does (float32: 1e-5 at ``|f| = 200``)."""


def terms_changed(before: Any, after: Any) -> Any:
    """Which terms changed between two evaluations, shape (E,) bool (NumPy, JAX or torch).

    Equal up to rounding counts as unchanged (XLA may fuse two evaluations of an unchanged
    term differently), and so do two NaNs.
    """
    xp = array_namespace(before, after)
    close = xp.abs(after - before) <= DEPENDENCE_TOLERANCE * (1.0 + xp.abs(before))
    same = (before == after) | close | (xp.isnan(before) & xp.isnan(after))
    return ~same


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
    """A colouring with no two interacting coordinates of one colour
    (:func:`greedy_graph_colouring` of the :func:`interaction_graph`).

    Parameters
    ----------
    dependence : bool array, shape (N, E)

    Returns
    -------
    int array, shape (N,): colours ``0 .. C-1``
    """
    return greedy_graph_colouring(interaction_graph(dependence))


def greedy_graph_colouring(graph: np.ndarray) -> np.ndarray:
    """A colouring with no two neighbours of one colour, each coordinate in turn given the
    smallest colour its earlier neighbours leave free (in row-major order this is the
    even/odd colouring of a chain and the checkerboard of a lattice).

    Parameters
    ----------
    graph : bool array, shape (N, N), symmetric: ``graph[i, k]`` coordinates ``i`` and ``k``
        interact (the diagonal is ignored)

    Returns
    -------
    int array, shape (N,): colours ``0 .. C-1``
    """
    graph = np.asarray(graph, bool).copy()
    np.fill_diagonal(graph, False)
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
    return check_graph_colouring(interaction_graph(dependence), colours, "a term depends on both")


def check_graph_colouring(
    graph: np.ndarray, colours: np.ndarray, why: str = "they interact"
) -> str | None:
    """None when no two neighbours share a colour, else the reason (naming one such pair, as
    flat indices, and ``why`` they are neighbours).

    Parameters
    ----------
    graph : bool array, shape (N, N), symmetric (the diagonal is ignored)
    colours : int array, shape (N,)
    why : str
    """
    colours = np.asarray(colours).reshape(-1)
    if colours.shape[0] != graph.shape[0]:
        return f"it has {colours.shape[0]} colours for {graph.shape[0]} coordinates"
    if colours.min() < 0:
        return "its colours must be non-negative integers"
    off_diagonal = np.asarray(graph, bool) & ~np.eye(graph.shape[0], dtype=bool)
    clash = np.argwhere(off_diagonal & (colours[:, None] == colours[None, :]))
    if clash.size:
        i, k = clash[0]
        return f"coordinates {int(i)} and {int(k)} share a colour ({int(colours[i])}) but {why}"
    return None


def term_probe_refusal(
    size: int, num_terms: int, limit: int = MAX_DEPENDENCE_ENTRIES
) -> str | None:
    """Why finding which of ``num_terms`` terms each of ``size`` coordinates changes would
    compare too many pairs (more than ``limit``), else None."""
    if size * num_terms <= limit:
        return None
    return (
        f"its {size} coordinates and the model's {num_terms} terms are too many to find which "
        "terms each coordinate changes"
    )


def given_colouring(name: str, shape: tuple, given: Any) -> tuple[np.ndarray | None, str | None]:
    """``(flat colours, None)`` of a user's ``blocks`` entry for site ``name`` of ``shape``,
    or ``(None, reason)`` when it is not an integer array of that shape."""
    colours = np.asarray(given)
    if colours.shape != tuple(shape) or not np.issubdtype(colours.dtype, np.integer):
        return None, (
            f"blocks[{name!r}] must be an integer array of the site's shape {tuple(shape)}, "
            f"got {colours.dtype} {colours.shape}"
        )
    return colours.reshape(-1), None


def colouring_from_terms(
    name: str, shape: tuple, dependence: np.ndarray, given: Any, factor: str, array: str
) -> tuple[np.ndarray | None, str | None]:
    """``(flat colours, None)`` of site ``name`` from the terms each coordinate changes
    (``dependence``, shape (N, E)): the user's ``given`` colouring, checked, or a greedy one;
    or ``(None, reason)``: ``given`` malformed or invalid, or every coordinate interacting
    with every other (no two may share a colour; ``factor`` and ``array``, the PPL's
    ``factor`` primitive and array type, name the rewrite that helps)."""
    if given is not None:
        colours, problem = given_colouring(name, shape, given)
        if colours is None:
            return None, problem
        problem = check_colouring(dependence, colours)
        if problem is not None:
            return None, f"blocks[{name!r}] is not a valid colouring: {problem}"
        return colours, None
    colours = greedy_colouring(dependence)
    if int(colours.max()) + 1 >= int(np.prod(shape)):
        return None, (
            f"every coordinate interacts with every other (a term over all of them; a {factor} "
            f"of a sum over the coordinates is one term: give the factor its unsummed {array} "
            "of terms and PlateGibbs can colour them)"
        )
    return colours, None


def table_interaction_graph(
    tables: np.ndarray, moved: np.ndarray, log_density: np.ndarray, eps: float
) -> np.ndarray:
    """Which coordinates interact, from single-site exact tables: ``A[i, k]`` when moving
    ``x_k`` changes the conditional of ``x_i`` (row ``i`` of the table up to its
    normaliser) at some probed state, or the other way round.

    A pair that does not interact leaves both rows unchanged, however the model writes its
    terms: in a chain ``x_{i-1}`` and ``x_{i+1}`` both change row ``i`` but not each other's
    rows, so they may share a colour (what a term-based graph would not allow).

    Parameters
    ----------
    tables : float array, shape (P, N, S)
        At each of ``P`` states, the single-site table ``T[i, v] = f(x with x_i = v)``.
    moved : float array, shape (P, N, N, S)
        ``moved[p, k]``: the table at state ``p`` with coordinate ``k`` moved to another value.
    log_density : float array, shape (P,)
        ``f`` at each state: the scale of the tables' rounding.
    eps : float
        The machine epsilon of the dtype the tables were computed in.

    Returns
    -------
    bool array, shape (N, N), symmetric, False on the diagonal
    """
    tables = np.asarray(tables, np.float64)
    moved = np.asarray(moved, np.float64)
    scale = np.abs(np.nan_to_num(np.asarray(log_density, np.float64), posinf=0.0, neginf=0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        before = _log_conditional(tables)[:, None]  # (P, 1, N, S)
        after = _log_conditional(moved)  # (P, N, N, S)
        allowed = TABLE_DEPENDENCE_TOLERANCE * (
            1.0 + np.abs(before)
        ) + TABLE_ROUNDING_ULPS * eps * (1.0 + scale[:, None, None, None])
        same = (
            (before == after)
            | (np.abs(after - before) <= allowed)
            | (np.isnan(before) & np.isnan(after))
        )
    changed = ~np.all(same, axis=-1)  # (P, k moved, i)
    graph = np.any(changed, axis=0).T  # (i, k)
    graph = graph | graph.T
    np.fill_diagonal(graph, False)
    return graph


def _log_conditional(tables: np.ndarray) -> np.ndarray:
    """Rows of ``tables`` (..., S) less their log normaliser; -inf where a value has no mass."""
    top = np.max(tables, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return tables - (top + np.log(np.sum(np.exp(tables - top), axis=-1, keepdims=True)))


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
