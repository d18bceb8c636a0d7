"""``PlateGibbs`` as the trainers' negative phase: exact Gibbs updates of an energy's
coordinates, the coordinates of one colour at once.

An energy ``E(x)`` on ``{0, 1}^d`` has no plates, but its coordinates often interact locally:
in a lattice Ising energy each spin meets its four neighbours only, so the two colours of a
checkerboard are each conditionally independent given the other, and a whole colour is drawn
at once from its exact conditionals (a checkerboard sweep). The trainers find which
coordinates interact from the energy's single-site tables (``T[i, v] = -E(x with x_i = v)``)
at a probe state, with every coordinate moved in turn
(:func:`discrete_kernels.colouring.table_interaction_graph`), at the initial parameters and at
:data:`PROBE_PERTURBATIONS` random perturbations of them (a coupling that starts at zero, or
too weak to show in float32, is found all the same), and
colour the graph greedily (or check the user's ``blocks={"x": colours}``). Each step is the
core :func:`~discrete_kernels.samplers.plate_gibbs.plate_gibbs_step` on one chain's binary
leaf ``"x"``: a colour's rows of the table are an exact joint conditional, so there is no MH
correction. Where every coordinate interacts with every other (an RBM's free energy, an MLP)
each coordinate is its own colour: a systematic scan of single-site Gibbs updates, each
coordinate's row (two evaluations) at the current state.

Everything here is a pure function of arrays; the trainers evaluate the energy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from array_api_compat import device as _device

from .._xp import Array, array_namespace
from ..colouring import (
    MAX_TABLE_PROBE_EVALUATIONS,
    check_graph_colouring,
    given_colouring,
    greedy_graph_colouring,
    table_interaction_graph,
)
from ..domains import Binary
from ..kernel import Sites
from ..local_fns import LOG_DENSITY_ONLY, LocalFnByLeaf, LocalFnWithRows
from ..samplers.plate_gibbs import MAX_COLOURS, sweeps_by_rows
from ..tables import coordinate_substitutions, single_site_substitutions

__all__ = [
    "LEAF_NAME",
    "PROBE_PARAMETER_SCALE",
    "PROBE_PERTURBATIONS",
    "check_probe_size",
    "energy_colouring",
    "flip_rows",
    "given_blocks",
    "interaction_probe_batch",
    "perturbed",
    "plate_gibbs_sites",
    "probe_evaluations",
    "table_local_fn",
    "training_sites",
]

#: the trainers' one leaf (``PlateGibbs(blocks={"x": colours})``)
LEAF_NAME = "x"

#: the random perturbations of the parameters at which the interactions are probed too:
#: ``theta + PROBE_PARAMETER_SCALE * (|theta| + 1) * N(0, 1)`` per entry. At 0.1, a 16 x 8
#: RBM initialised at scale 0.01 showed 230 of its 240 interacting pairs in float32 (the
#: others changed a conditional by 1e-5, under the tables' rounding tolerance); at 1, all 240
PROBE_PARAMETER_SCALE = 1.0
PROBE_PERTURBATIONS = 2

_DOMAIN = Binary()


def interaction_probe_batch(x: Array) -> Array:
    """The states at which the energy is evaluated to find which coordinates interact: the
    single-site substitutions of ``x``, then those of ``x`` with each coordinate flipped in
    turn.

    Parameters
    ----------
    x : array, shape (d,), of 0/1

    Returns
    -------
    array, shape ((d + 1) * d * 2, d): rows ``[0, 2 d)`` give the table at ``x``
    (:func:`~discrete_kernels.tables.single_site_substitutions`), rows
    ``[2 d (k + 1), 2 d (k + 2))`` the table with coordinate ``k`` flipped.
    """
    xp = array_namespace(x)
    dim = x.shape[0]
    flipped = xp.where(xp.eye(dim, dtype=xp.bool), 1 - x[None, :], x[None, :])  # (d, d)
    states = xp.concat([x[None, :], flipped], axis=0)  # (d + 1, d)
    return xp.concat([single_site_substitutions(_DOMAIN, s) for s in states], axis=0)


def given_blocks(owner: str, blocks: Mapping[str, Any] | None) -> Any:
    """The user's colouring of the trainers' one leaf from ``PlateGibbs(blocks=...)``
    (None: a greedy colouring); another site name is refused."""
    blocks = dict(blocks or {})
    unknown = sorted(set(blocks) - {LEAF_NAME})
    if unknown:
        raise ValueError(
            f"{owner}: blocks names {unknown}; in training the one site is {LEAF_NAME!r} "
            f"(blocks={{{LEAF_NAME!r}: colours}})."
        )
    return blocks.get(LEAF_NAME)


def probe_evaluations(dim: int, points: int) -> int:
    """Energy evaluations of the interaction probe at ``points`` parameter points."""
    return points * (dim + 1) * dim * _DOMAIN.num_values


def energy_colouring(
    log_densities: Sequence[Any], eps: float, given: Any = None, owner: str = "PlateGibbs"
) -> np.ndarray:
    """The colouring of an energy's coordinates that the trainers' ``PlateGibbs`` sweeps.

    Parameters
    ----------
    log_densities : per parameter point, the log density ``-E`` at
        :func:`interaction_probe_batch` of one probe state, shape ``((d + 1) * d * 2,)``
    eps : machine epsilon of the dtype the energy was evaluated in
    given : the user's ``blocks["x"]`` (an integer array of shape (d,)), or None for a greedy
        colouring (a checkerboard for a lattice, one colour per coordinate where every
        coordinate interacts with every other)
    owner : the name errors give

    Returns
    -------
    int array, shape (d,): colours ``0 .. C-1``, no two interacting coordinates of one colour

    Raises
    ------
    ValueError
        ``given`` malformed or a colouring that puts two interacting coordinates together, or
        more than :data:`~discrete_kernels.samplers.plate_gibbs.MAX_COLOURS` colours.
    """
    graph: np.ndarray | None = None
    for values in log_densities:
        flat = np.asarray(values, np.float64)
        dim = _dimension_of(flat.shape[0])
        tables = flat.reshape(dim + 1, dim, _DOMAIN.num_values)
        # the scale of the tables' rounding: one of a row's two entries is the state's own
        current = tables[0, 0].max()
        found = table_interaction_graph(
            tables[None, 0], tables[None, 1:], np.asarray([current]), eps
        )
        graph = found if graph is None else graph | found
    assert graph is not None, "at least one parameter point"
    dim = graph.shape[0]
    if given is not None:
        colours, problem = given_colouring(LEAF_NAME, (dim,), given)
        if colours is None:
            raise ValueError(f"{owner}: {problem}.")
        problem = check_graph_colouring(graph, colours)
        if problem is not None:
            raise ValueError(f"{owner}: blocks[{LEAF_NAME!r}] is not a valid colouring: {problem}.")
    else:
        colours = greedy_graph_colouring(graph)
    num_colours = int(colours.max()) + 1
    if num_colours > MAX_COLOURS:
        raise ValueError(
            f"{owner}: the energy's {dim} coordinates need {num_colours} colours (they "
            f"interact widely: every coordinate with every other where the energy is an RBM "
            f"or an MLP); at most {MAX_COLOURS}. Train with SiteGibbs(), BlockGibbs() (an RBM) "
            "or a gradient kernel such as nx.DMALA(step_size=0.2)."
        )
    return np.asarray(colours, np.int64)


def check_probe_size(dim: int, points: int, owner: str = "PlateGibbs") -> None:
    """Refuse an energy of so many coordinates that finding which interact costs more than
    :data:`~discrete_kernels.colouring.MAX_TABLE_PROBE_EVALUATIONS` evaluations."""
    needed = probe_evaluations(dim, points)
    if needed > MAX_TABLE_PROBE_EVALUATIONS:
        raise ValueError(
            f"{owner}: finding which of the energy's {dim} coordinates interact takes {needed} "
            f"energy evaluations, more than {MAX_TABLE_PROBE_EVALUATIONS}. Train with "
            "SiteGibbs() or a gradient kernel such as nx.DMALA(step_size=0.2)."
        )


def _dimension_of(rows: int) -> int:
    """``d`` from the probe batch's ``(d + 1) d S`` rows."""
    s = _DOMAIN.num_values
    dim = int(round((-1 + (1 + 4 * rows / s) ** 0.5) / 2))
    if (dim + 1) * dim * s != rows:
        raise ValueError(f"{rows} log densities are not an interaction probe's (d + 1) d 2")
    return dim


def training_sites(needs_tables: bool, colours: Any, owner: str) -> Sites:
    """The trainers' one binary leaf ``"x"`` of one chain: with its single-site table and
    ``colours`` for a sampler that reads tables (``PlateGibbs``; :func:`plate_gibbs_sites`),
    with its gradient otherwise."""
    if not needs_tables:
        return Sites((LEAF_NAME,), (_DOMAIN,), (False,))
    if colours is None:
        raise ValueError(
            f"{owner}: the energy's colouring comes from train (CD or PCD); elsewhere use a "
            "gradient kernel such as DMALA(step_size=0.2)."
        )
    return plate_gibbs_sites(colours)


def plate_gibbs_sites(colours: Any) -> Sites:
    """The trainers' one binary leaf ``"x"`` with its single-site table and ``colours``."""
    return Sites(
        (LEAF_NAME,),
        (_DOMAIN,),
        (True,),
        colourings=(np.asarray(colours, np.int64),),
        single_site_tables=(True,),
    )


def table_local_fn(
    log_density_batch: Callable[[Array], Array], colours: Any, complete_at_end: bool
) -> Callable | LocalFnWithRows | LocalFnByLeaf:
    """One chain's ``local_fn`` for ``PlateGibbs``: ``leaves -> (f, (table,))`` with the
    single-site table of the leaf, shape (d, 2), from ``log_density_batch`` (states (B, d) ->
    log densities (B,)): ``d + 1`` evaluations (:func:`flip_rows`).

    Where the sweep goes coordinate by coordinate
    (:func:`~discrete_kernels.samplers.plate_gibbs.sweeps_by_rows`) it also gives one
    coordinate's row (:class:`~discrete_kernels.LocalFnWithRows`, 2 evaluations); where it
    goes colour by colour, one colour's rows (:class:`~discrete_kernels.LocalFnByLeaf`,
    ``n_c + 1`` evaluations for the ``n_c`` coordinates of colour ``c``; a checkerboard sweep
    then costs about ``1.5 d`` evaluations with ``complete_at_end``, a compiled loop's carry,
    and ``d`` without)."""
    colours = np.asarray(colours, np.int64)
    dim = colours.shape[0]
    everything = np.arange(dim)

    def local_fn(leaves: tuple) -> tuple:
        x = leaves[0]
        f, table = flip_rows(log_density_batch, x, array_namespace(x).asarray(everything))
        return f, (table,)

    if sweeps_by_rows(colours):

        def row(leaves: tuple, j: int, i: Any) -> Array:
            return log_density_batch(coordinate_substitutions(_DOMAIN, leaves[j], i))

        return LocalFnWithRows(local_fn, row)
    num_colours = int(colours.max()) + 1
    if num_colours == 1:
        return local_fn
    members = [np.flatnonzero(colours == c) for c in range(num_colours)]
    # per colour, each coordinate's row among that colour's rows (the others' row 0, masked out)
    positions = []
    for m in members:
        position = np.zeros(dim, np.int64)
        position[m] = np.arange(m.shape[0])
        positions.append(position)

    def colour_local(leaves: tuple, j: int, c: int) -> tuple:
        x = leaves[0]
        xp = array_namespace(x)
        f, rows = flip_rows(log_density_batch, x, xp.asarray(members[c], device=_device(x)))
        spread = xp.take(rows, xp.asarray(positions[c], device=_device(x)), axis=0)
        mine = xp.asarray(colours == c, device=_device(x))[:, None]
        return f, (xp.where(mine, spread, xp.zeros_like(spread)),)  # other rows uniform

    def leaf_local(leaves: tuple, j: int) -> tuple:
        if j == LOG_DENSITY_ONLY:
            x = leaves[0]
            return log_density_batch(x[None, :])[0], (None,)
        return local_fn(leaves)

    return LocalFnByLeaf(local_fn, leaf_local, colour_local, complete_at_end)


def flip_rows(
    log_density_batch: Callable[[Array], Array], x: Array, coordinates: Array
) -> tuple[Array, Array]:
    """``(f, rows)``: the log density at the binary state ``x`` (d,) and the rows of the given
    coordinates (m,) of its single-site table, shape (m, 2), from one batch of ``m + 1``
    evaluations (``x`` and each coordinate flipped): a row's entry at the coordinate's current
    value is ``f`` itself, so only the other value costs an evaluation."""
    xp = array_namespace(x)
    at_site = xp.arange(x.shape[0], device=_device(x))[None, :] == coordinates[:, None]
    flipped_states = xp.where(at_site, 1 - x[None, :], x[None, :])  # (m, d)
    values = log_density_batch(xp.concat([x[None, :], flipped_states], axis=0))
    f, flipped = values[0], values[1:]
    is_one = xp.take(x, coordinates) == 1
    rows = xp.stack([xp.where(is_one, flipped, f), xp.where(is_one, f, flipped)], axis=1)
    return f, rows


def perturbed(value: Any, noise: Any) -> Any:
    """``value + PROBE_PARAMETER_SCALE * (|value| + 1) * noise`` (arrays of one library)."""
    xp = array_namespace(value)
    return value + PROBE_PARAMETER_SCALE * (xp.abs(value) + 1.0) * noise
