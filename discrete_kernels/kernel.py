"""What every discrete sampler shares: the chain state, the sites, the noise of a step, its
parameters, the propose skeleton, and :class:`Sampler`, the spec that the one driver per PPL
runs (the MH decision is :mod:`discrete_kernels.metropolis`).

A spec (a frozen dataclass whose fields are the kernel's options, defaults written once there)
says, for one sampler, which noise a step takes (:meth:`Sampler.noise_shapes`), how a step maps
``(chain, noise, parameters)`` to the next chain and its statistics (:meth:`Sampler.step`),
which parameters the next step uses (:meth:`Sampler.parameters`) and how warmup adapts them,
as a list of :class:`~discrete_kernels.warmup.Phase` (:meth:`Sampler.phases`). Nothing random
happens here: the adapter draws the noise with its own RNG in the shapes the spec asks for,
and its control flow (``jax.lax.cond`` and ``fori_loop``, or plain Python) comes in as a
:class:`ControlFlow`. The drivers call, for every sampler::

    adapt = spec.adapt_init(like, num_warmup, sites, flat_dim, control)   # once
    phases = spec.phases(num_warmup, control)
    adapt = warmup.start_phases(phases, adapt)
    params = spec.parameters(adapt)                                    # every step
    chain, info = spec.step(chain, noise, params, adapt, sites, local_fn)
    adapt = warmup.run_phases(phases, adapt, Feedback(info, params, chain, index), control)

``index`` is the index of the draw just made (0 for the first warmup draw), shared by all
chains. The statistics a kernel records per draw are the fields of its ``Info`` named in
:attr:`Sampler.statistics`; the drivers derive their state fields, default fields, progress
text and Pyro's records from them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

from ._xp import Array, array_namespace, python_loop
from .domains import Binary, Domain
from .local_fns import (
    LOG_DENSITY_ONLY,
    ElementTermsFn,
    LocalFn,
    LocalFnByLeaf,
    LocalFnWithRows,
    LocalFnWithTerms,
)
from .sites import CHAIN, check_windowed_sites
from .tables import check_exact_table_memory

#: the ``mode`` of a leaf record whose table is evaluated at every single-coordinate change
#: (:data:`discrete_kernels.sites.EXACT`)
SINGLE_SITE_TABLE_MODE = "exact"

__all__ = [
    "LOG_DENSITY_ONLY",
    "PYTHON_CONTROL",
    "ChainState",
    "ControlFlow",
    "ElementTermsFn",
    "LocalFn",
    "LocalFnByLeaf",
    "LocalFnWithRows",
    "LocalFnWithTerms",
    "NoiseShapes",
    "Sampler",
    "Sites",
    "StepInfo",
    "StepNoise",
    "StepParameters",
    "propose",
    "take_step",
]


class ChainState(NamedTuple):
    """Position of one chain with its cached log density and local information.

    - **x** - tuple of leaves, each of shape (n_j...).
    - **log_density** - scalar ``f(x)``.
    - **local** - tuple, per leaf the gradient (n_j...) or table (n_j..., S_j).
    """

    x: tuple[Array, ...]
    log_density: Array
    local: tuple[Array, ...]


class StepInfo(NamedTuple):
    """What an MH decision reports; all scalar arrays.

    - **accept_prob** - ``min(1, exp(log A))`` of the proposal (for an unadjusted move: the
      MH acceptance it would have had).
    - **accepted** - whether the chain moved: the proposal was accepted *and* differs from the
      current state (accepting a copy of the current state is not a move).
    - **hamming_distance** - number of coordinates the proposal changes.
    """

    accept_prob: Array
    accepted: Array
    hamming_distance: Array


class Sites(NamedTuple):
    """What a step needs to know about the sampled sites (leaves), fixed at setup.

    - **names** - site names, for messages.
    - **domains** - one :class:`~discrete_kernels.Domain` per leaf.
    - **is_table** - per leaf, whether its local information is a table of exact local
      differences (categorical and exact sites) rather than a gradient.
    - **preconditioner** - per-leaf multipliers of the step size (arrays or None), or None.
    - **colourings** - per leaf, None (its table's rows are exact conditionals all at once:
      a plate) or an integer array of the leaf's shape whose coordinates of one colour are
      conditionally independent given the rest (a chain, a lattice); None: no leaf coloured.
    - **sizes** - per leaf, its number of coordinates (for the setup's memory checks), or
      None where the adapter did not give the shapes.
    - **single_site_tables** - per leaf, whether its table comes from one evaluation of the
      model per single-coordinate change (``N (S - 1)`` of them, an exact site that is not a
      plate), or None (no such leaf known).
    - **chain_tables** - per leaf, whether its local information is its pair table
      (``(N - 1, S, S)``: :mod:`discrete_kernels.chains`, a site whose coordinates interact
      only with their neighbours in flat order), or None (no such leaf).
    - **per_coordinate_mh** - every coordinate of every leaf is conditionally independent of
      all the others and its local information depends on its own value only (verified by
      the adapter, which then passes a :class:`LocalFnWithTerms`): the MH decision is made
      coordinate by coordinate (:func:`mh_finish_per_coordinate`).
    - **chains_in_rows** - every leaf is Binary with a gradient and has shape (C, n): row
      ``c`` is chain ``c``'s leaf, and the C chains step at once without a vectorising
      transform (eager torch's ``vmap`` pays per operation); the log density, the step's
      parameters and its statistics then have shape (C, 1), and each chain makes its own MH
      decision. Only samplers with :attr:`Sampler.steps_chains_in_rows` take it (DMALA,
      DULA, GWG, ACS, and AB-1st without its warmup tuner); a scalar of their
      noise (GWG's move uniform, the MH uniform) has shape (C, 1), a leaf-shaped one (C, n).
    """

    names: tuple
    domains: tuple[Domain, ...]
    is_table: tuple[bool, ...]
    preconditioner: tuple | None = None
    colourings: tuple | None = None
    sizes: tuple[int, ...] | None = None
    single_site_tables: tuple[bool, ...] | None = None
    per_coordinate_mh: bool = False
    chains_in_rows: bool = False
    chain_tables: tuple[bool, ...] | None = None

    @classmethod
    def from_leaves(
        cls,
        leaves: Sequence[Any],
        preconditioner: tuple | None = None,
        shapes: Sequence[Sequence[int]] | None = None,
    ) -> Sites:
        """From the adapter's per-leaf records (anything with ``name``, ``domain`` and
        ``is_table``, such as :class:`discrete_kernels.sites.LeafSpec`; a ``mode`` of
        ``"exact"`` marks a single-site table) and, optionally, the leaves' shapes."""
        colourings = tuple(getattr(s, "colours", None) for s in leaves)
        single = tuple(getattr(s, "mode", None) == SINGLE_SITE_TABLE_MODE for s in leaves)
        chains = tuple(getattr(s, "mode", None) == CHAIN for s in leaves)
        return cls(
            tuple(s.name for s in leaves),
            tuple(s.domain for s in leaves),
            tuple(s.is_table for s in leaves),
            preconditioner,
            colourings if any(c is not None for c in colourings) else None,
            None if shapes is None else tuple(math.prod(shape) for shape in shapes),
            single if any(single) else None,
            chain_tables=chains if any(chains) else None,
        )

    def is_chain(self, j: int) -> bool:
        """Whether leaf ``j``'s local information is its pair table (a chain)."""
        return self.chain_tables is not None and self.chain_tables[j]

    def colouring(self, j: int) -> Any:
        """Leaf ``j``'s colours (an integer array of its shape), or None (one block)."""
        return None if self.colourings is None else self.colourings[j]


class NoiseShapes(NamedTuple):
    """The noise of one step: uniforms of these shapes (one array per entry), one MH uniform,
    ``num_normals`` standard normals and a random permutation of ``range(permutation)``
    (0: none of them)."""

    uniforms: tuple[tuple[int, ...], ...]
    num_normals: int = 0
    permutation: int = 0


class StepNoise(NamedTuple):
    """The noise of one step, drawn by the adapter in the shapes of :class:`NoiseShapes`."""

    uniforms: tuple[Array, ...]
    accept_uniform: Array
    normals: Array | None = None
    permutation: Array | None = None


class StepParameters(NamedTuple):
    """Parameters of one proposal: its step size and balance (the AB paper's ``sigma`` and
    ``alpha``), and whether the proposal as a whole is MH corrected (False for DULA and ACS's
    burn-in, and for ``PlateGibbs``, whose colour draws are exact conditionals and whose chain
    draws end in an MH decision of their own)."""

    step_size: Array
    balance: Array
    metropolis: Array | bool = True


Cond = Callable[[Any, Callable, Callable, Any], Any]
Loop = Callable[[int, Callable, Any], Any]


def _python_cond(predicate: Any, true_fn: Callable, false_fn: Callable, operand: Any) -> Any:
    return true_fn(operand) if bool(predicate) else false_fn(operand)


class ControlFlow(NamedTuple):
    """The adapter's branch and loop: ``cond(pred, true_fn, false_fn, operand)`` and
    ``loop(num, body, carry)`` (``jax.lax.cond``/``fori_loop`` under jit, Python otherwise).

    ``step``: the draw's index as a Python int where the adapter knows it on the host (Python
    control); warmup branches then decide on it instead of on the index array, which on a GPU
    would wait for the device at every step."""

    cond: Cond = _python_cond
    loop: Loop = python_loop
    step: int | None = None


PYTHON_CONTROL = ControlFlow()


Logits = list
"""Per leaf, whatever a proposal's sampler and density need (logits of its candidates)."""


def propose(
    state: ChainState,
    local_fn: LocalFn,
    logits_at: Callable[[ChainState, ChainState | None], Logits],
    sample: Callable[[ChainState, Logits], tuple[tuple[Array, ...], Array]],
    log_prob: Callable[[tuple, tuple, Logits], Array],
) -> tuple[ChainState, Array, Array]:
    """The skeleton of every gradient-informed proposal: ``(proposal, log q(y|x), log q(x|y))``.

    ``logits_at(chain, origin)`` gives a side's logits (``origin`` is None for the forward
    side, the current state for the reverse one), ``sample(state, logits) -> (ys, log
    q(y|x))`` draws the proposed leaves and ``log_prob(xs, ys, logits)`` is ``log q(ys | xs)``
    under logits taken at ``xs``. The proposal is evaluated once (``local_fn``), and its cached
    log density and locals give the reverse side.
    """
    forward = logits_at(state, None)
    ys, log_q_forward = sample(state, forward)
    f_y, local_y = local_fn(ys)
    proposal = ChainState(ys, f_y, tuple(local_y))
    log_q_reverse = log_prob(ys, state.x, logits_at(proposal, state))
    return proposal, log_q_forward, log_q_reverse


# ------------------------------------------------------------------------------------------
# the spec


def _format(value: Any, spec: str) -> str:
    return format(float(value), spec)


class Sampler:
    """Base of the samplers' specs; subclasses are frozen dataclasses whose fields are the
    kernel's options (validated in ``__post_init__``) and implement :meth:`noise_shapes`,
    :meth:`adapt_init`, :meth:`parameters` and :meth:`step`.

    Class attributes:

    - **name** - the kernel's name, for messages.
    - **statistics** - the fields of the step's info recorded per draw (state fields in
      NumPyro, Pyro's records); **reported** - those NumPyro collects by default.
    - **progress** - ``(label, field, format)`` of the progress bar's text.
    - **site_options** - which of the drivers' site options (``exact_sites``,
      ``preconditioner``; :class:`discrete_kernels.sites.SiteOptions`) the kernel takes.
    - **uses_locals** - whether the step reads the leaves' local information (False: the
      drivers' ``local_fn`` returns the log density only, ``(f, ())``).
    - **needs_plate_tables** - whether every leaf must be conditionally independent in its
      coordinates with its exact table as local information (the drivers verify it at setup
      and refuse a site that is not, with the reason).
    - **draws_chains** - whether the step takes a chain's pair table as a leaf's local
      information (:data:`Sites.chain_tables`) and draws the whole chain from it; the drivers
      then give one to a site whose coordinates interact only with their flat neighbours.
    - **windowed_domains** - whether the step samples windowed leaves
      (:class:`~discrete_kernels.Integer`: counts, proposed around the current value); the
      others are refused at setup with the kernels that do.
    - **steps_chains_in_rows** - whether the step takes many chains as the rows of each
      leaf (:attr:`Sites.chains_in_rows`); the others are vectorised over the chains.
    - **steps_with_control** - whether :meth:`step` takes the adapter's control flow as its
      ``control`` keyword (a loop inside the step; :func:`take_step` passes it).

    A sampler refuses a model whose plates subsample (a minibatch estimate of the log
    density and its gradient, new at every step) unless :meth:`minibatch_refusal` says
    otherwise.
    """

    name: ClassVar[str] = "sampler"
    statistics: ClassVar[tuple[str, ...]] = StepInfo._fields
    reported: ClassVar[tuple[str, ...]] = StepInfo._fields
    progress: ClassVar[tuple[tuple[str, str, str], ...]] = (("acc. prob", "accept_prob", ".2f"),)
    site_options: ClassVar[tuple[str, ...]] = ("exact_sites",)
    uses_locals: ClassVar[bool] = True
    needs_plate_tables: ClassVar[bool] = False
    steps_with_control: ClassVar[bool] = False
    draws_chains: ClassVar[bool] = False
    windowed_domains: ClassVar[bool] = False
    steps_chains_in_rows: ClassVar[bool] = False

    @property
    def per_coordinate(self) -> bool:
        """Whether each step makes one MH decision per coordinate
        (``DMALA(per_coordinate_mh=True)``): the adapters then verify that the model's
        coordinates are conditionally independent, set :attr:`Sites.per_coordinate_mh` and
        pass a :class:`LocalFnWithTerms`."""
        return False

    @property
    def needs_plates(self) -> bool:
        """Whether the sampler reads the model's plates (plate tables or per-coordinate
        decisions), which a ``potential_fn`` does not have."""
        return self.needs_plate_tables or self.per_coordinate

    @property
    def auto_exact(self) -> bool:
        """Whether ``exact_sites="auto"`` may switch badly estimated sites to exact
        differences (a sampler that needs every gradient says False)."""
        return "exact_sites" in self.site_options

    def check_sites(self, sites: Sites, flat_dim: int) -> None:
        """Refuse sites this sampler cannot handle (setup, outside compiled code).

        The base refuses a single-site exact table that cannot fit in memory
        (:func:`discrete_kernels.tables.check_exact_table_memory`); a subclass that
        adds checks calls it first (``super().check_sites(sites, flat_dim)``).
        """
        check_windowed_sites(
            self.name, self.windowed_domains, sites.names, sites.domains, sites.is_table
        )
        if self.uses_locals:
            check_exact_table_memory(self.name, sites)
        if sites.chains_in_rows and (not self.steps_chains_in_rows or sites.per_coordinate_mh):
            raise ValueError(
                f"{self.name}: its step takes one chain at a time (vectorise it over the "
                "chains); chains in the rows of one leaf (Sites.chains_in_rows) are for DMALA, "
                "DULA, GWG, AB-1st and ACS with one MH decision per chain."
            )
        if sites.chains_in_rows and not all(
            isinstance(d, Binary) and not t for d, t in zip(sites.domains, sites.is_table)
        ):
            # a (C, n, S) table would broadcast a (C, 1) step size along the wrong axis
            raise ValueError(
                f"{self.name}: chains in the rows of one leaf (Sites.chains_in_rows) take "
                "Binary leaves with gradients only, each of shape (C, n); got "
                + ", ".join(
                    f"{name!r}: {type(d).__name__}{' (exact table)' if t else ''}"
                    for name, d, t in zip(sites.names, sites.domains, sites.is_table)
                )
                + "."
            )

    def minibatch_refusal(self) -> str | None:
        """Why this sampler, with its options, cannot run on a minibatch estimate of the log
        density (a subsampling plate), or None when it can (stochastic-gradient DULA).

        The base refuses: an MH ratio, an exact table or a tuner that reads the acceptance
        compares log densities, and a minibatch estimate of their difference is not exact.
        """
        return (
            "an MH ratio (or an exact difference) on a minibatch log density is not exact, "
            "so the chain would not target the posterior"
        )

    def check_warmup(self, num_warmup: int, option: str) -> None:
        """Refuse or warn about a warmup this sampler cannot use (``option``: how the PPL
        names the warmup length)."""

    def noise_shapes(self, sites: Sites, leaf_shapes: Sequence[tuple[int, ...]]) -> NoiseShapes:
        raise NotImplementedError

    def init(self, x: tuple, local_fn: LocalFn) -> ChainState:
        """The chain at leaves ``x`` with its log density and locals."""
        f, local = local_fn(x)
        return ChainState(tuple(x), f, tuple(local))

    def unread_tables(self, sites: Sites) -> frozenset[int]:
        """Leaves whose local information the step never reads where the adapter gives each
        coordinate's row (:class:`LocalFnWithRows`): its ``local_fn`` may then leave those
        entries None, at every call (a compiled loop's carry keeps its structure). No leaf by
        default."""
        return frozenset()

    def init_for_step(self, x: tuple, local_fn: LocalFn) -> ChainState:
        """The chain at leaves ``x`` for the next :meth:`step` alone: :meth:`init`, except
        for a sampler whose step computes the locals it finds None (it may leave them None;
        a driver that reads the locals itself calls :meth:`init`)."""
        return self.init(x, local_fn)

    def adapt_init(
        self, like: Array, num_warmup: int, sites: Sites, flat_dim: int, control: ControlFlow
    ) -> Any:
        """The adaptation state before the first draw (``like``: a float scalar of the backend,
        dtype and device to use), before the phases' ``init``."""
        raise NotImplementedError

    def phases(self, num_warmup: int, control: ControlFlow) -> tuple:
        """The adaptation as :class:`~discrete_kernels.warmup.Phase` objects over step ranges
        (none: the parameters stay as :meth:`adapt_init` set them)."""
        return ()

    def parameters(self, adapt_state: Any) -> StepParameters:
        """The parameters of the next draw."""
        raise NotImplementedError

    def step(
        self,
        chain: ChainState,
        noise: StepNoise,
        params: StepParameters,
        adapt_state: Any,
        sites: Sites,
        local_fn: LocalFn,
    ) -> tuple[ChainState, Any]:
        """One transition: the next chain and the step's info (its :attr:`statistics` and
        whatever the phases read)."""
        raise NotImplementedError

    def initial_info(self, params: StepParameters, adapt_state: Any, like: Array) -> dict:
        """The statistics of the initial state (no draw yet): zeros, no move, and the
        parameters of the first draw (a sampler with other statistics adds them)."""
        xp = array_namespace(like)
        zero = xp.zeros_like(like)
        values = {
            "accept_prob": zero,
            "accepted": xp.zeros_like(like, dtype=xp.bool),
            "hamming_distance": zero,
            "step_size": xp.asarray(params.step_size, dtype=like.dtype) + zero,
            "balance": xp.asarray(params.balance, dtype=like.dtype) + zero,
        }
        return {name: values[name] for name in self.statistics if name in values}

    def adapt_final(self, adapt_state: Any) -> dict:
        """What the warmup settled on (read it after warmup), as a dict of arrays."""
        return {"step_size": self.parameters(adapt_state).step_size}

    def progress_text(self, stats: dict) -> str:
        """The progress bar's text from the last draw's statistics."""
        return ", ".join(f"{label} {_format(stats[f], fmt)}" for label, f, fmt in self.progress)

    # -- the EBM trainers' hooks (:mod:`discrete_kernels.ebm`)

    def pcd_schedule(self) -> Any:
        """How PCD runs this sampler: None to step it at its own (unadapted) parameters, or a
        schedule object of the training iteration (ACS's App. B schedule)."""
        return None

    def check_coupling(self, kernel_hint: str) -> None:
        """Refuse to serve as UCD's coupling unless the sampler can couple two chains exactly
        (``kernel_hint``: how the trainer's PPL spells a kernel that can)."""
        raise ValueError(
            f"UCD: coupling must be BlockGibbs() (RBM) or a DMALA kernel ({kernel_hint}("
            f"step_size=...)), got {self.name}: the estimator needs one fixed kernel that "
            "leaves the model invariant (no DULA, no cyclical or tuned step sizes)."
        )

    def coupled_step(
        self,
        xi: ChainState,
        eta: ChainState,
        noise: StepNoise,
        params: StepParameters,
        adapt_state: Any,
        sites: Sites,
        local_fn: LocalFn,
    ) -> tuple[ChainState, ChainState, Any, Any]:
        """One step of two coupled chains on common noise (UCD)."""
        raise NotImplementedError(f"{self.name} has no coupled step.")


# ------------------------------------------------------------------------------------------
# the step, as a driver calls it


def take_step(
    spec: Sampler,
    chain: ChainState,
    noise: StepNoise,
    params: StepParameters,
    adapt_state: Any,
    sites: Sites,
    local_fn: LocalFn,
    control: ControlFlow,
) -> tuple[ChainState, Any]:
    """``spec.step(...)``, given the adapter's ``control`` where the sampler takes it
    (:attr:`Sampler.steps_with_control`)."""
    if spec.steps_with_control:
        return spec.step(chain, noise, params, adapt_state, sites, local_fn, control=control)  # type: ignore[call-arg]
    return spec.step(chain, noise, params, adapt_state, sites, local_fn)
