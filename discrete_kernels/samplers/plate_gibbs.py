"""Exact block Gibbs updates of conditionally independent sites (plates).

In the models users write, the coordinates of a discrete site in a plate (one indicator per
row, one class per item) are conditionally independent given the other sites: every term of
the log density that depends on the site is indexed by the plate, so

    p(x | rest) = prod_i p(x_i | rest),   p(x_i = v | rest) ∝ exp(T[i, v]),

with ``T[i, v] = f(x with x_i = v)`` the site's exact table
(:func:`discrete_kernels.tables.table_from_element_terms`; the drivers compute it from ``S``
evaluations of the per-coordinate terms and verify the independence at setup). A draw of every
coordinate from its row of ``T`` is then an exact Gibbs update of the whole site: no MH
correction, every proposal accepted. :class:`PlateGibbs` updates the leaves in turn (a
systematic scan), each from the table at the current values of the others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from array_api_compat import device as _device

from .._xp import Array, array_namespace, categorical_from_uniform, log_softmax
from ..chains import chain_draw, chain_log_prob
from ..domains import Domain
from ..kernel import (
    LOG_DENSITY_ONLY,
    PYTHON_CONTROL,
    ChainState,
    ControlFlow,
    LocalFn,
    LocalFnByLeaf,
    LocalFnWithRows,
    NoiseShapes,
    Sampler,
    Sites,
    StepInfo,
    StepParameters,
)
from ..metropolis import (
    hamming_distance,
    mh_finish,
)
from ..validation import check_step_arguments

__all__ = ["MAX_COLOURS", "UNROLLED_COLOURS", "PlateGibbs", "plate_gibbs_step", "sweeps_by_rows"]

#: a leaf of at most this many colours is swept by an unrolled loop (one program per colour
#: is fastest to run); more (one coordinate at a time: 20 colours of a 20-weight network took
#: 11 s to compile unrolled) go through the adapter's loop
UNROLLED_COLOURS = 4


def sweeps_by_rows(colours: Any) -> bool:
    """Whether a leaf coloured ``colours`` (None: a plate) is swept one coordinate at a time
    from its rows where the adapter gives them (:class:`~discrete_kernels.LocalFnWithRows`):
    every coordinate its own colour, more than :data:`UNROLLED_COLOURS`. The step never reads
    such a leaf's table (:meth:`PlateGibbs.unread_tables`)."""
    if colours is None:
        return False
    num_colours = int(colours.max()) + 1
    return num_colours > UNROLLED_COLOURS and num_colours == int(colours.size)


def plate_gibbs_step(
    state: ChainState,
    uniforms: Sequence[Array],
    *,
    local_fn: LocalFn,
    domains: Sequence[Domain],
    colourings: Sequence[Any] | None = None,
    chains: Sequence[bool] | None = None,
    control: ControlFlow = PYTHON_CONTROL,
) -> tuple[ChainState, StepInfo]:
    """One systematic scan: each leaf in turn, colour by colour (or, a chain, whole), drawn
    from its exact conditional.

    Parameters
    ----------
    state : ChainState
        Its locals are the leaves' exact tables, shape ``(n..., S)`` per leaf: per-element
        (a plate's, or a colouring's) or single-site ones (a coloured site whose terms hide
        its structure); row ``i`` is coordinate ``i``'s conditional given all others, so the
        rows of one colour, whose coordinates do not interact, are a joint conditional.
    uniforms : per leaf, uniforms in [0, 1) of the leaf's shape; with chain leaves, then one
        array of one uniform per chain leaf (their MH decisions)
    local_fn : ``leaves -> (f, tables)``; evaluated once per leaf and colour
    domains : per leaf
    colourings : per leaf, None (one block: a plate) or an integer array of the leaf's shape;
        the coordinates of one colour are drawn together, the colours in turn
    chains : per leaf, whether its local is its pair table (shape (N - 1, S, S)); such a leaf
        is drawn whole, by forward filtering and backward sampling
        (:func:`discrete_kernels.chains.chain_draw`), its colouring unused
    control : the adapter's loop: a leaf of more than :data:`UNROLLED_COLOURS` colours (one
        coordinate per colour where every coordinate interacts) is swept by ``control.loop``

    Returns
    -------
    (ChainState, StepInfo)
        ``accept_prob`` 1 (a Gibbs update; with chain leaves, the product of their MH
        acceptance probabilities), ``accepted`` whether any coordinate changed,
        ``hamming_distance`` how many did.

    Raises
    ------
    ValueError, TypeError
        Uniforms of the wrong number, shape or array library (checked at trace time).
    """
    chains = [False] * len(domains) if chains is None else chains
    check_step_arguments("plate_gibbs_step", state.x, uniforms[: len(domains)], None)
    colourings = [None] * len(domains) if colourings is None else colourings
    with_rows = isinstance(local_fn, LocalFnWithRows)
    unread = [with_rows and not c and sweeps_by_rows(k) for c, k in zip(chains, colourings)]
    if any(local is None and not u for local, u in zip(state.local, unread)):
        # the last sweep left them unread
        # what the first draw reads: leaf 0's table (or its first colour's rows)
        need = _need_of_leaf(local_fn, 0, colourings, chains)
        f, local = _evaluate(local_fn, state.x, need)
        state = ChainState(state.x, f, tuple(local))
    chain = state
    accept_prob = None
    for j, (domain, u, colours) in enumerate(zip(domains, uniforms, colourings)):
        x = chain.x[j]
        xp = array_namespace(x)
        if chains[j]:
            mh_uniform = uniforms[len(domains)][sum(bool(c) for c in chains[:j])]
            chain, prob = _chain_move(chain, j, domain, xp.reshape(u, (-1,)), mh_uniform, local_fn)
            accept_prob = prob if accept_prob is None else accept_prob * prob
            continue
        num_colours = 1 if colours is None else int(colours.max()) + 1
        if unread[j]:  # one coordinate per colour: its row only
            assert isinstance(local_fn, LocalFnWithRows)
            flat_colours = [int(c) for c in colours.reshape(-1)]
            order = sorted(range(num_colours), key=flat_colours.__getitem__)
            chain = _sweep_by_rows(chain, j, domain, u, order, local_fn, control)
            continue
        colour_of = None if colours is None else xp.asarray(colours, device=_device(x))
        draw = partial(_draw_colour, j=j, domain=domain, uniforms=u, colour_of=colour_of)
        draw = partial(draw, local_fn=local_fn)
        if num_colours <= UNROLLED_COLOURS:
            for colour in range(num_colours):
                need = _needed_next(local_fn, j, colour, colourings, chains)
                chain = draw(chain, colour, needed=need)
        else:  # one coordinate at a time, say: a loop, not a program per colour
            first = xp.asarray(0, device=_device(x))
            chain = control.loop(num_colours, partial(_next_colour, draw=draw), (first, chain))[1]
    distance = hamming_distance(state.x, chain.x, chain.log_density)
    xp = array_namespace(distance)
    if accept_prob is None:  # no chain leaf: Gibbs updates only
        accept_prob = xp.ones_like(distance)
    return chain, StepInfo(xp.astype(accept_prob, distance.dtype), distance > 0, distance)


def _draw_colour(
    chain: ChainState,
    colour: Any,
    *,
    j: int,
    domain: Domain,
    uniforms: Array,
    colour_of: Array | None,
    local_fn: LocalFn,
    needed: Need = None,
) -> ChainState:
    """Leaf ``j``'s coordinates of ``colour`` drawn from their rows of its table (all of them
    where ``colour_of`` is None: a plate), and the tables recomputed: what ``needed`` names
    (:func:`_evaluate`)."""
    x = chain.x[j]
    xp = array_namespace(x)
    value = xp.astype(categorical_from_uniform(chain.local[j], uniforms) + domain.low, x.dtype)
    if colour_of is not None:  # only this colour's rows are conditionals now
        value = xp.where(colour_of == colour, value, x)
    leaves = chain.x[:j] + (value,) + chain.x[j + 1 :]
    f, local = _evaluate(local_fn, leaves, needed)
    return ChainState(leaves, f, tuple(local))


#: what a draw reads of the tables (:func:`_needed_next`): None, every leaf's table; a leaf's
#: index, that leaf's (:data:`~discrete_kernels.local_fns.LOG_DENSITY_ONLY`: none); a pair
#: ``(leaf, colour)``, that colour's rows of the leaf's table
Need = int | tuple[int, int] | None


def _evaluate(local_fn: LocalFn, leaves: tuple, need: Need) -> tuple:
    """``(f, locals)`` at ``leaves`` with the tables ``need`` names (the others None)."""
    if need is None:
        return local_fn(leaves)
    assert isinstance(local_fn, LocalFnByLeaf)
    if isinstance(need, tuple):
        assert local_fn.colour_local is not None
        return local_fn.colour_local(leaves, *need)
    return local_fn.leaf_local(leaves, need)


def _needed_next(
    local_fn: LocalFn, j: int, colour: int, colourings: Sequence[Any], chains: Sequence[bool]
) -> Need:
    """What the draw after colour ``colour`` of leaf ``j`` reads: leaf ``j``'s next colour
    while it has colours left, then what leaf ``j + 1``'s first draw reads; after the last
    leaf nothing (:data:`~discrete_kernels.local_fns.LOG_DENSITY_ONLY`: the next step computes
    the tables where it reads them), or every table where the step must return them
    (:attr:`~discrete_kernels.LocalFnByLeaf.complete_at_end`); None (every table) where
    ``local_fn`` evaluates all leaves at once."""
    if not isinstance(local_fn, LocalFnByLeaf):
        return None
    colours = colourings[j]
    if colours is not None and colour + 1 < int(colours.max()) + 1:
        return (j, colour + 1) if local_fn.colour_local is not None else j
    if j + 1 < len(colourings):
        return _need_of_leaf(local_fn, j + 1, colourings, chains)
    return None if local_fn.complete_at_end else LOG_DENSITY_ONLY


def _need_of_leaf(
    local_fn: LocalFn, j: int, colourings: Sequence[Any], chains: Sequence[bool]
) -> Need:
    """What leaf ``j``'s first draw reads: its first colour's rows where it is drawn colour
    by colour in the unrolled sweep and ``local_fn`` computes one colour's rows
    (:attr:`~discrete_kernels.LocalFnByLeaf.colour_local`), else its whole table (a chain's
    pair table, a plate's table, a sweep by rows or in a loop); None where ``local_fn``
    evaluates all leaves at once."""
    if not isinstance(local_fn, LocalFnByLeaf):
        return None
    colours = colourings[j]
    by_colour = (
        local_fn.colour_local is not None
        and not chains[j]
        and colours is not None
        and 1 < int(colours.max()) + 1 <= UNROLLED_COLOURS
    )
    return (j, 0) if by_colour else j


def _sweep_by_rows(
    chain: ChainState,
    j: int,
    domain: Domain,
    uniforms: Array,
    order: list[int],
    local_fn: LocalFnWithRows,
    control: ControlFlow,
) -> ChainState:
    """Leaf ``j`` swept one coordinate at a time in ``order``, each drawn from its row of the
    exact table at the current state (``S`` evaluations, :attr:`LocalFnWithRows.row`, not the
    whole table's ``N (S - 1)``); the tables recomputed once at the end (the adapter may leave
    unread ones None, :meth:`PlateGibbs.unread_tables`)."""
    x = chain.x[j]
    xp = array_namespace(x)
    device = _device(x)
    flat_uniforms = xp.reshape(uniforms, (-1,))
    positions = xp.arange(len(order), device=device)
    coordinates = xp.asarray(order, device=device)

    def body(carry: tuple) -> tuple:
        step, flat = carry
        i = coordinates[step]
        leaves = chain.x[:j] + (xp.reshape(flat, x.shape),) + chain.x[j + 1 :]
        row = local_fn.row(leaves, j, i)
        value = categorical_from_uniform(row, flat_uniforms[i]) + domain.low
        return step + 1, xp.where(positions == i, xp.astype(value, flat.dtype), flat)

    start = (xp.asarray(0, device=device), xp.reshape(x, (-1,)))
    flat = control.loop(len(order), body, start)[1]
    leaves = chain.x[:j] + (xp.reshape(flat, x.shape),) + chain.x[j + 1 :]
    f, local = local_fn(leaves)
    return ChainState(leaves, f, tuple(local))


def _next_colour(carry: tuple, draw: Callable) -> tuple:
    colour, chain = carry
    return colour + 1, draw(chain, colour)


def _chain_move(
    chain: ChainState, j: int, domain: Domain, uniforms: Array, mh_uniform: Array, local_fn: LocalFn
) -> tuple[ChainState, Array]:
    """Leaf ``j`` (a chain) drawn whole from its pair table, then an MH decision.

    The draw is the exact conditional where the site's log density is a chain in it (the
    setup checks that at probed states), up to the table's rounding; the MH ratio, with the
    reverse probability read from the pair table at the draw (which the next step needs
    anyway), makes the move exact whatever the rounding, and where an impossible value at a
    neighbour hides part of the chain from the table (those states are not proposed from
    there). Returns the new state and the acceptance probability."""
    x = chain.x[j]
    xp = array_namespace(x)
    positions = xp.reshape(x, (-1,)) - domain.low
    drawn = chain_draw(chain.local[j], positions, uniforms)
    value = xp.reshape(xp.astype(drawn + domain.low, x.dtype), x.shape)
    leaves = chain.x[:j] + (value,) + chain.x[j + 1 :]
    f, local = local_fn(leaves)
    forward = chain_log_prob(chain.local[j], positions, drawn)
    reverse = chain_log_prob(local[j], drawn, positions)
    kept, info = mh_finish(
        chain, ChainState(leaves, f, tuple(local)), forward, reverse, mh_uniform, True
    )
    return kept, info.accept_prob


#: most colours of one site PlateGibbs takes: a sweep costs ``(2C - 1) x S`` evaluations per
#: site in NumPyro, ``C x S`` in Pyro (:class:`~discrete_kernels.LocalFnByLeaf`)
#: (``C x N x (S - 1)`` for a site coloured from its single-site tables)
MAX_COLOURS = 16


@dataclass(frozen=True, eq=False)
class PlateGibbs(Sampler):
    """Exact Gibbs updates of whole blocks: every coordinate of a site whose coordinates are
    conditionally independent given the rest (one indicator per row, one class per item) is
    drawn at once from its exact conditional, the sites in turn; a site whose coordinates
    interact locally (a chain, a ``scan`` over time, a lattice) is drawn colour by colour,
    the coordinates of one colour at once.

    A step costs ``S`` vectorised evaluations of the model per plate site (``S`` values), and
    ``(2C - 1) x S`` for a site of ``C`` colours (two for a chain or a 4-neighbour lattice;
    ``C x S`` in Pyro: each colour's draw evaluates its own rows alone, and NumPyro's step
    ends with the whole table, :class:`~discrete_kernels.LocalFnByLeaf`), not ``N x S`` as a
    one-coordinate-at-a-time sweep does. At setup the drivers read each site's
    plates from the model's trace; for a site that is not a plate they find which terms each
    coordinate changes and colour the coordinates so that no term depends on two of one colour
    (greedily, in row-major order: even/odd for a chain, a checkerboard for a lattice); both
    are verified numerically against single-site changes. Where the terms hide the structure
    (a ``factor`` of a sum over a chain or a lattice is one term that every coordinate
    changes), they find which coordinates interact from the site's single-site exact tables
    instead (moving each coordinate in turn and comparing the others' conditionals:
    ``3 x N x N x S`` evaluations at setup, at most
    :data:`~discrete_kernels.colouring.MAX_TABLE_PROBE_EVALUATIONS` per probed state); such a
    site keeps those tables, ``N (S - 1)`` evaluations (vmapped) per colour and step. Where those
    tables show a chain (every coordinate interacts only with its flat neighbours: an HMM's
    transitions summed into one ``factor``), the site is drawn whole instead: from its pair
    table (``(N - 1) x S^2`` evaluations, used where that is at most
    :data:`~discrete_kernels.chains.MAX_PAIR_TABLE_COST` times a sweep's), by forward
    filtering and backward sampling, followed by an MH step that keeps the move exact
    (acceptance 1 up to rounding; :mod:`discrete_kernels.chains`). A chain whose terms the
    model gives one by one (an HMM's transitions as an array of terms, an HMM written with
    ``scan``) is drawn whole the same way, its pair table built from its terms at ``3 S^2``
    states (:func:`~discrete_kernels.chains.pair_table_from_terms`; used for up to ``S = 5``
    values, where that costs at most four colour sweeps). ``blocks=`` keeps the colour sweep.
    A site whose every coordinate interacts with every other (a dense quadratic form, a small
    network's weights) is swept one coordinate at a time, the last resort, up to
    :data:`MAX_COLOURS` coordinates (``N x S`` evaluations per sweep where the adapter gives
    each coordinate's row, :class:`~discrete_kernels.LocalFnWithRows`; ``N^2 (S - 1)`` from the
    tables otherwise), and refused with the reason past that.
    Use it alone or as a block of ``Gibbs`` next to NUTS for the continuous sites. Nothing is
    adapted.

    Parameters
    ----------
    blocks : dict, optional
        ``{site name: integer array of the site's shape}``: a colouring to use instead of the
        greedy one (checked at setup: no term may depend on two coordinates of one colour, or,
        where a term depends on all of them, no two of one colour may interact).
    """

    blocks: Mapping[str, Any] | None = None
    name: ClassVar[str] = "PlateGibbs"
    draws_chains: ClassVar[bool] = True
    reported: ClassVar[tuple[str, ...]] = ("accepted", "hamming_distance")
    progress: ClassVar[tuple[tuple[str, str, str], ...]] = (("changed", "hamming_distance", ".3g"),)
    site_options: ClassVar[tuple[str, ...]] = ()
    needs_plate_tables: ClassVar[bool] = True
    steps_with_control: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.blocks is not None and not isinstance(self.blocks, Mapping):
            raise TypeError(
                f"{self.name}: blocks must be a dict {{site name: integer array of the site's "
                f"shape}}, got {type(self.blocks).__name__}."
            )

    def check_sites(self, sites: Sites, flat_dim: int) -> None:
        super().check_sites(sites, flat_dim)
        if not all(sites.is_table):
            missing = [n for n, t in zip(sites.names, sites.is_table) if not t]
            raise ValueError(
                f"{self.name}: sites {missing} have no exact conditional table; every site "
                "must be conditionally independent in its coordinates."
            )
        single = sites.single_site_tables or (False,) * len(sites.names)
        coupled = [
            n
            for j, (n, t) in enumerate(zip(sites.names, single))
            if t and sites.colouring(j) is None
        ]
        # a single-site table's rows are not a joint conditional of the site; those of one
        # colour of a colouring the setup verified are
        if coupled:
            raise ValueError(
                f"{self.name}: sites {coupled} are not conditionally independent in their "
                "coordinates (nor in colour blocks); sample them with another kernel."
            )
        unknown = sorted(set(self.blocks or {}) - set(sites.names))
        if unknown:
            raise ValueError(
                f"{self.name}: blocks names {unknown}, not sites of this kernel "
                f"({list(sites.names)})."
            )
        for j, name in enumerate(sites.names):
            colours = sites.colouring(j)
            if colours is not None and int(colours.max()) + 1 > MAX_COLOURS:
                raise ValueError(
                    f"{self.name}: site {name!r} needs {int(colours.max()) + 1} colours (its "
                    f"coordinates interact widely); at most {MAX_COLOURS}, since a sweep "
                    "recomputes its table once per colour. Sample it with nx.GWG or nx.DMALA in a "
                    "numpyro.infer.Gibbs block."
                )

    def noise_shapes(self, sites: Sites, leaf_shapes: Sequence[tuple[int, ...]]) -> NoiseShapes:
        shapes = tuple(tuple(shape) for shape in leaf_shapes)
        chains = sum(sites.is_chain(j) for j in range(len(shapes)))
        # a chain's draw ends in an MH decision (:func:`_chain_move`): one uniform each
        return NoiseShapes(shapes + (((chains,),) if chains else ()))

    def unread_tables(self, sites: Sites) -> frozenset[int]:
        """The leaves swept one coordinate at a time from their rows (:func:`sweeps_by_rows`;
        not a chain): the step reads their rows, never their tables (``N (S - 1)`` evaluations
        after the sweep's own ``N x S`` row evaluations)."""
        return frozenset(
            j
            for j in range(len(sites.names))
            if not sites.is_chain(j) and sweeps_by_rows(sites.colouring(j))
        )

    def init_for_step(self, x: tuple, local_fn: LocalFn) -> ChainState:
        """With a :class:`~discrete_kernels.LocalFnByLeaf` (an eager adapter) the tables are
        left None: the step computes what its first draw reads (a ``Gibbs`` block starts
        every step from new conditioning, where every table would be computed for one to be
        read)."""
        if isinstance(local_fn, LocalFnByLeaf) and not local_fn.complete_at_end:
            f, local = local_fn.leaf_local(x, LOG_DENSITY_ONLY)
            return ChainState(tuple(x), f, tuple(local))
        return self.init(x, local_fn)

    def adapt_init(self, like, num_warmup, sites, flat_dim, control: ControlFlow) -> Any:
        return ()

    def parameters(self, adapt_state: Any) -> StepParameters:
        # no MH on the sweep as a whole: its colour draws are exact conditionals, and a chain's
        # draw ends in its own MH decision inside the step (_chain_move)
        return StepParameters(1.0, 0.5, False)

    def adapt_final(self, adapt_state: Any) -> dict:
        return {}

    def step(self, chain, noise, params, adapt_state, sites, local_fn, control=PYTHON_CONTROL):
        return plate_gibbs_step(
            chain,
            noise.uniforms,
            local_fn=local_fn,
            domains=sites.domains,
            colourings=sites.colourings,
            chains=sites.chain_tables,
            control=control,
        )

    def log_proposal(self, chain: ChainState, ys: tuple, params: StepParameters, sites: Sites):
        """``log q(ys | chain)`` of one scan (for exact tests), the leaves' tables recomputed
        along the scan only through ``chain``: valid for one leaf, where the scan is one draw
        from the table."""
        if len(ys) == 1 and sites.is_chain(0):
            low = sites.domains[0].low
            xp = array_namespace(ys[0])
            flat = [xp.reshape(v, (-1,)) - low for v in (chain.x[0], ys[0])]
            return chain_log_prob(chain.local[0], flat[0], flat[1])
        if len(ys) != 1 or sites.colouring(0) is not None:
            raise NotImplementedError(
                "log_proposal of PlateGibbs: one uncoloured leaf, or one chain, only"
            )
        table = chain.local[0]
        xp = array_namespace(table)
        values = xp.arange(table.shape[-1]) + sites.domains[0].low
        chosen = values == xp.astype(ys[0], values.dtype)[..., None]
        log_p = log_softmax(table)
        return xp.sum(xp.where(chosen, log_p, xp.zeros_like(log_p)))
