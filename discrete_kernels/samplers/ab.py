"""Any-scale balanced (AB) samplers (Sun, Dai, Sutton, Schuurmans and Dai, ICLR 2023).

The proposal weights ``(pi(y) / pi(x))^balance`` with a heat kernel of scale ``sigma`` (the
paper's ``alpha`` is called ``balance`` here, as in every sampler of this library, and its
``sigma`` is the kernels' ``step_size``):

- **AB-1st** approximates ``f(y) - f(x)`` to first order, which is the DLP proposal with this
  balance and step size ``sigma`` (:func:`discrete_kernels.samplers.dlp.dlp_step`).
- **Quadratic AB** adds ``(y - x)^T W (y - x) / 2`` with one symmetric ``W`` fitted to burn-in
  pairs ``(y - x, grad f(y) - grad f(x))`` (:mod:`discrete_kernels.samplers.ab_linalg`). The
  resulting pairwise proposal is sampled with the Gaussian integral trick: for a diagonal
  ``D`` with ``M = W + D`` positive semi-definite and ``S = M^{1/2}``, an auxiliary
  ``u = sqrt(balance) S x + xi``, ``xi ~ N(0, I)``, makes ``y | x, u`` factorise:

  ``log q(y_i | x, u) = delta_i (balance g_i + sqrt(balance) (S xi)_i)
  - delta_i^2 (balance D_i + 1/sigma) / 2 + const``, with ``delta = y - x``.

  (Derivation: the joint ``Q(y, u | x) ∝ exp(balance delta^T g - balance delta^T D delta / 2
  - |delta|^2 / (2 sigma) + sqrt(balance) u^T S y - |u|^2 / 2)`` has the paper's Eq. 11 as its
  ``y``-marginal up to the ``x``-dependent factor that ``u`` absorbs.) The chain is MH on the
  extended space ``pi(x) N(u; sqrt(balance) S x, I)`` with ``u`` kept fixed and then refreshed,
  so ``log A = f(y) - f(x) + log q(x | y, u) - log q(y | x, u) + |xi|^2/2 - |xi'|^2/2`` with
  ``xi' = u - sqrt(balance) S y = xi - sqrt(balance) S (y - x)``.

``(sigma, balance)`` adapt during warmup by coordinate ascent on the mean jump distance
(App. A.2, :mod:`discrete_kernels.samplers.ab_tuner`), after a first phase of dual averaging of
``sigma``. Quadratic variants need numeric leaves (binary, ordinal) with gradients;
categorical leaves have only AB-1st here (the one-hot algebra carries over, but it is not
implemented).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np
from array_api_compat import device as _device

from .._xp import Array, array_namespace
from ..domains import Categorical, Domain, domain_step_scale
from ..kernel import (
    ChainState,
    ControlFlow,
    LocalFn,
    NoiseShapes,
    Sampler,
    Sites,
    StepParameters,
)
from ..metropolis import (
    mh_finish,
)
from ..validation import (
    check_bool,
    check_int,
    check_noise,
    check_number,
    check_step_arguments,
    check_symmetric_matrix,
    format_bytes,
)
from ..warmup import (
    Feedback,
    Phase,
    StepSizeAdaptation,
    dlp_step_size_bounds,
    dual_averaging_init,
    dual_averaging_phase,
)
from .ab_linalg import (
    MAX_QUADRATIC_BYTES,
    QUADRATIC_MATRICES,
    VARIANTS,
    QuadraticProposal,
    fit_quadratic_proposal,
    flatten_leaves,
    max_quadratic_dim,
    quadratic_bytes,
    quadratic_from_coupling,
    quadratic_stats_init,
    quadratic_stats_update,
)
from .ab_quadratic import ab_quadratic_propose
from .ab_tuner import (
    ABAdaptState,
    ABConfig,
    ABWarmupPlan,
    ab_tuner_init,
    ab_tuner_parameters,
    ab_tuner_restart,
    ab_tuner_update,
    jump_distance,
)
from .dlp import DMALA
from .dlp_proposal import dlp_propose

__all__ = [
    "AB",
    "ABAdaptState",
    "ABInfo",
    "ABWarmupPlan",
    "MAX_QUADRATIC_BYTES",
    "QUADRATIC_MATRICES",
    "ab_step",
    "balanced_exponent",
]


def balanced_exponent(r: Array | float) -> Array | float:
    """``balance(r) = (r - 2 + sqrt(r^2 + 4)) / (2 r)``, ``r = sigma / sigma_0``: the exponent that
    balances a heat kernel of scale ``sigma`` on a Gaussian of variance ``sigma_0`` (Eq. 6);
    1/2 as ``r -> 0`` and 1 as ``r -> inf``."""
    return (r - 2 + (r * r + 4) ** 0.5) / (2 * r)


class ABInfo(NamedTuple):
    """Statistics of one AB draw (:class:`~discrete_kernels.StepInfo`, **step_size** and
    **balance**) and what its warmup reads.

    - **jump** - ``accept_prob * jump_distance(x, y)``: expected jump of this step.
    - **dx**, **dg** - (d,) ``y - x`` and ``grad f(y) - grad f(x)`` of the proposal (zeros
      when a leaf has no gradient).
    """

    accept_prob: Array
    accepted: Array
    hamming_distance: Array
    step_size: Array
    balance: Array
    jump: Array
    dx: Array
    dg: Array


def ab_step(
    state: ChainState,
    proposal_uniforms: Sequence[Array],
    normals: Array | None,
    accept_uniform: Array,
    *,
    local_fn: LocalFn,
    domains: Sequence[Domain],
    is_table: Sequence[bool],
    sigma: Array | float,
    balance: Array | float,
    quadratic: QuadraticProposal | None = None,
    chains_in_rows: bool = False,
) -> tuple[ChainState, ABInfo]:
    """One AB transition, MH corrected: AB-1st when ``quadratic`` is None, otherwise the
    quadratic proposal with the Gaussian integral trick (``normals`` of shape (d,)).
    ``chains_in_rows`` (AB-1st only): the leaves hold C chains in their rows, shape (C, n);
    the MH uniform, the parameters, the log density and the statistics then have shape
    (C, 1), ``dx`` and ``dg`` (C, d) (:attr:`~discrete_kernels.Sites.chains_in_rows`).

    Returns
    -------
    (ChainState, ABInfo)

    Raises
    ------
    ValueError, TypeError
        Proposal uniforms of the wrong number, shape or array library, normals (quadratic)
        not of shape (d,), or ``sigma`` (given as a number) not positive and finite (checked
        at trace time).
    """
    check_step_arguments("ab_step", state.x, proposal_uniforms, sigma, step_option="sigma")
    if quadratic is not None:
        dim = sum(math.prod(x.shape) for x in state.x)
        check_noise("ab_step", "the normals", normals, (dim,), state.x[0])
    if quadratic is None:
        proposal, log_q_forward, log_q_reverse = dlp_propose(
            state,
            proposal_uniforms,
            local_fn=local_fn,
            domains=domains,
            is_table=is_table,
            step_size=sigma,
            balance=balance,
            chains_in_rows=chains_in_rows,
        )
    else:
        if chains_in_rows:
            raise ValueError(
                "ab_step: chains in rows take AB-1st only (quadratic is None); vectorise "
                "a quadratic variant over the chains."
            )
        if any(is_table) or any(isinstance(d, Categorical) for d in domains):
            raise ValueError(
                "quadratic AB proposals need binary or ordinal leaves with gradients; use "
                "variant='1st' for categorical or exact (table) sites."
            )
        proposal, log_q_forward, log_q_reverse = ab_quadratic_propose(
            state,
            proposal_uniforms,
            normals,
            local_fn=local_fn,
            domains=domains,
            quadratic=quadratic,
            sigma=sigma,
            balance=balance,
        )
    new, info = mh_finish(
        state, proposal, log_q_forward, log_q_reverse, accept_uniform, True, chains_in_rows
    )
    like = proposal.log_density
    xp = array_namespace(like)
    rows = chains_in_rows
    dx = flatten_leaves(proposal.x, like, rows) - flatten_leaves(state.x, like, rows)
    if not any(is_table):
        dg = flatten_leaves(proposal.local, like, rows) - flatten_leaves(state.local, like, rows)
        dg = xp.where(xp.isfinite(dg), dg, xp.zeros_like(dg))
    else:
        dg = xp.zeros_like(dx)
    distance = jump_distance(domains, state.x, proposal.x, rows)
    jump = info.accept_prob * xp.astype(distance, like.dtype)
    if rows:  # the tuner's shared parameters, one per chain as every statistic
        sigma, balance = sigma + xp.zeros_like(like), balance + xp.zeros_like(like)
    return new, ABInfo(*info, sigma, balance, jump, dx, dg)


# --------------------------------------------------------------------------------------------
# the warmup


@dataclass(frozen=True, eq=False)
class AB(Sampler):
    """Any-scale balanced sampler (Sun et al., ICLR 2023): proposals weighted by
    ``(pi(y) / pi(x))^balance`` under a heat kernel of scale ``step_size`` (the paper's
    ``alpha`` and ``sigma``), MH corrected.

    ``variant="1st"`` uses the first-order (gradient) approximation: the DLP proposal with
    this balance and step size, one ``value_and_grad`` per step like DMALA. ``"trace"``,
    ``"shift"`` and ``"max"`` add a quadratic term ``W`` fitted by least squares to the pairs
    ``(y - x, grad f(y) - grad f(x))`` of a burn-in inside warmup (AB-1st until then) and
    sample it with the Gaussian integral trick, with the diagonal ``D`` chosen by trace
    minimisation, a ``lambda`` shift or by minimising the largest eigenvalue of ``W + D``. A
    quadratic step adds ``O(d^2)`` work (two matrix-vector products) and ``d`` Gaussian draws
    to the ``value_and_grad``.

    During warmup ``(step_size, balance)`` adapt by coordinate ascent on the expected jump
    distance (App. A.2: probes ``theta (1 +- gamma)`` in blocks of steps, ``gamma`` shrinking
    by ``decay`` when a round changes nothing); they are frozen for sampling. A direction that
    keeps winning doubles its exponent (``max_doublings``) so a start far from the optimum is
    left in a few rounds. Before the search, ``initial_steps`` adapt ``step_size`` by DMALA's
    dual averaging, so the search starts at the right scale.

    Parameters
    ----------
    variant : {"1st", "trace", "shift", "max"}
    step_size : float
        Initial step size, the paper's ``sigma`` (its start, 0.1).
    balance : float
        Initial balance exponent in (0, 1], the paper's ``alpha``.
    adapt : bool
        Tune ``(step_size, balance)`` during warmup.
    rate, decay : float
        ``gamma`` of the search and its decay.
    block_size : int, optional
        Steps per probe (None: the paper's 100, shortened so that the warmup holds twenty
        rounds, at least 20).
    burn_in : int, optional
        Warmup steps whose proposals fit ``W`` (None: half the warmup).
    max_doublings : int
        Expansion of the search while a direction keeps winning (0 is the paper's rule).
    initial_steps : int, optional
        Warmup steps of dual averaging of ``step_size`` (acceptance 0.574 at the initial
        balance) before the search; None: a quarter of the warmup, at most 500; 0: the
        paper's search from ``step_size``.
    coupling : array, optional
        A known symmetric ``W`` (d, d) over the flattened sites (in the order of the model's
        sites or of the potential's leaves): no burn-in fit.
    """

    variant: str = "1st"
    step_size: float = 0.1
    balance: float = 0.5
    adapt: bool = True
    rate: float = 0.2
    decay: float = 0.9
    block_size: int | None = None
    burn_in: int | None = None
    max_doublings: int = 3
    initial_steps: int | None = None
    coupling: Any = None
    name: ClassVar[str] = "AB"
    steps_chains_in_rows: ClassVar[bool] = True  # AB-1st; quadratic variants refuse
    statistics: ClassVar[tuple[str, ...]] = ABInfo._fields[:5]
    reported: ClassVar[tuple[str, ...]] = ABInfo._fields[:5]
    progress: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("acc. prob", "accept_prob", ".2f"),
        ("step size", "step_size", ".3g"),
        ("balance", "balance", ".3g"),
    )
    config: ABConfig = field(init=False, repr=False)

    def __post_init__(self) -> None:
        name = self.name
        if self.variant not in ("1st", *VARIANTS):
            raise ValueError(
                f"{name}: variant must be one of {('1st', *VARIANTS)}, got {self.variant!r}."
            )

        def count(option: str, minimum: int) -> int | None:
            value = getattr(self, option)
            return None if value is None else check_int(name, option, value, minimum=minimum)

        max_doublings = check_int(name, "max_doublings", self.max_doublings)
        if max_doublings > 10:
            raise ValueError(
                f"{name}: max_doublings must be an int in [0, 10], got {max_doublings}."
            )
        if self.coupling is not None and self.variant == "1st":
            raise ValueError(f"{name}: coupling is a W for the quadratic variants; variant='1st'.")
        config = ABConfig(
            variant=self.variant,
            sigma=check_number(name, "step_size (sigma)", self.step_size),
            balance=check_number(name, "balance", self.balance, high=1.0, high_inclusive=True),
            rate=check_number(name, "rate", self.rate, high=1.0),
            decay=check_number(name, "decay", self.decay, high=1.0, high_inclusive=True),
            block_size=count("block_size", 1),
            burn_in=count("burn_in", 1),
            max_doublings=max_doublings,
            initial_steps=count("initial_steps", 0),
        )
        object.__setattr__(self, "step_size", config.sigma)
        object.__setattr__(self, "balance", config.balance)
        object.__setattr__(self, "adapt", check_bool(name, "adapt", self.adapt))
        object.__setattr__(self, "config", config)
        if self.coupling is not None and not hasattr(self.coupling, "shape"):
            object.__setattr__(self, "coupling", np.asarray(self.coupling, dtype=np.float64))

    @property
    def quadratic(self) -> bool:
        """Whether this is a quadratic variant."""
        return self.variant != "1st"

    @property
    def auto_exact(self) -> bool:
        # AB-1st takes exact differences like DMALA; quadratic proposals need every gradient
        return not self.quadratic

    def plan(self, num_warmup: int) -> ABWarmupPlan:
        """The warmup schedule of a run of ``num_warmup`` steps.

        Refuses a ``burn_in`` longer than the warmup (``W`` would be fitted in the middle of
        sampling). The tuner restarts at ``(sigma x restart_sigma_factor, balance = 1)`` after
        the fit only when warmup steps remain to tune from there.
        """
        config = self.config
        fit_w = self.quadratic and self.coupling is None
        if fit_w and config.burn_in is not None and config.burn_in > num_warmup:
            raise ValueError(
                f"{self.name}: burn_in={config.burn_in} is longer than the warmup ({num_warmup} "
                "steps); W is fitted from warmup steps only. Lower burn_in or lengthen the warmup."
            )
        burn_in = 0
        if fit_w and num_warmup > 0:
            burn_in = max(1, num_warmup // 2) if config.burn_in is None else config.burn_in
        initial = 0
        if self.adapt:  # dual averaging settles in about a hundred steps
            initial = min(num_warmup // 4, 500)
            if config.initial_steps is not None:
                initial = min(config.initial_steps, num_warmup)
        block_size = config.block_size
        if block_size is None:  # twenty rounds of six blocks, blocks of 20 to 100 steps
            block_size = int(max(20, min(100, (num_warmup - initial) // 120)))
        restart = self.adapt and 0 < burn_in < num_warmup
        return ABWarmupPlan(block_size, burn_in, restart, initial)

    def check_sites(self, sites: Sites, flat_dim: int) -> None:
        """Besides the base's checks, a quadratic variant refuses categorical or exact sites
        and ``d x d`` matrices above :data:`MAX_QUADRATIC_BYTES`, and checks ``coupling``."""
        super().check_sites(sites, flat_dim)
        if not self.quadratic:
            return
        if sites.chains_in_rows:
            raise ValueError(
                f"{self.name}: chains in the rows of one leaf (Sites.chains_in_rows) take "
                f"variant='1st' only; vectorise variant={self.variant!r} over the chains."
            )
        tables = [n for n, table in zip(sites.names, sites.is_table) if table]
        if tables:
            raise ValueError(
                f"{self.name}: variant={self.variant!r} needs binary or ordinal sites with "
                f"gradients; {tables} are categorical or exact. Use variant='1st'."
            )
        need = quadratic_bytes(flat_dim)
        if need > MAX_QUADRATIC_BYTES:
            raise ValueError(
                f"{self.name}: variant={self.variant!r} keeps {QUADRATIC_MATRICES} matrices of "
                f"d x d for the d = {flat_dim} coordinates of sites {list(sites.names)} (the "
                "fit's statistics and the proposal's square root): at least "
                f"{format_bytes(need)} per chain; at most {format_bytes(MAX_QUADRATIC_BYTES)} "
                f"(MAX_QUADRATIC_BYTES, about {max_quadratic_dim():,} coordinates). Use "
                "variant='1st' (the first-order AB proposal: no matrix)."
            )
        if self.coupling is not None:
            check_symmetric_matrix(self.name, "coupling", self.coupling, flat_dim)

    def check_warmup(self, num_warmup: int, option: str) -> None:
        plan = self.plan(num_warmup)  # refuses a burn-in longer than the warmup
        one_round = 6 * plan.block_size  # three probes of sigma, then three of balance
        if self.adapt and 0 < num_warmup < one_round:
            warnings.warn(
                f"{self.name}: {option}={num_warmup} is shorter than one round of the step-size "
                f"search ({one_round} steps: 6 blocks of {plan.block_size}); the step size stays "
                f"near its start ({self.config.sigma}), where the chain may barely move. "
                "Lengthen the warmup, pass a smaller block_size=, or pass step_size= with "
                "adapt=False.",
                stacklevel=3,
            )
        if self.quadratic and num_warmup == 0 and self.coupling is None:
            warnings.warn(
                f"{self.name}: variant={self.variant!r} fits W during warmup; with "
                f"{option}=0 it runs as AB-1st (or pass coupling=W).",
                stacklevel=3,
            )

    def noise_shapes(self, sites: Sites, leaf_shapes: Sequence[tuple[int, ...]]) -> NoiseShapes:
        normals = sum(math.prod(s) for s in leaf_shapes) if self.quadratic else 0
        return NoiseShapes(tuple(tuple(s) for s in leaf_shapes), normals)

    def adapt_init(self, like, num_warmup, sites, flat_dim, control: ControlFlow) -> ABAdaptState:
        if sites.chains_in_rows and (self.adapt or self.quadratic) and num_warmup > 0:
            # the tuner keeps one (sigma, balance) and one jump statistic: it would pool the
            # chains' jumps instead of tuning each chain
            raise ValueError(
                f"{self.name}: its warmup tunes one chain at a time; with chains in the rows "
                "of one leaf (Sites.chains_in_rows) give num_warmup=0 or vectorise it over "
                "the chains."
            )
        xp = array_namespace(like)
        config = self.config
        tuner = ab_tuner_init(config, like)
        step_size, balance = ab_tuner_parameters(tuner, config, False)
        high = xp.full_like(like, dlp_step_size_bounds(domain_step_scale(sites.domains))[1])
        dual = dual_averaging_init(step_size)
        if not self.quadratic:
            return ABAdaptState(tuner, None, None, step_size, balance, dual, high)
        stats = quadratic_stats_init(flat_dim, like)
        if self.coupling is None:  # AB-1st until W is fitted
            device = _device(like)
            zeros = xp.zeros((flat_dim,), dtype=like.dtype, device=device)
            matrix = xp.zeros((flat_dim, flat_dim), dtype=like.dtype, device=device)
            quadratic = QuadraticProposal(matrix, zeros)
        else:
            w = xp.asarray(self.coupling, dtype=like.dtype, device=_device(like))
            quadratic = quadratic_from_coupling(w, self.variant, control.loop)
        return ABAdaptState(tuner, stats, quadratic, step_size, balance, dual, high)

    def phases(self, num_warmup: int, control: ControlFlow) -> tuple[Phase, ...]:
        """Dual averaging of ``sigma``, then the jump-distance search (both when ``adapt``);
        pairs collected over the burn-in and ``W`` fitted at its end (quadratic variants)."""
        plan, config = self.plan(num_warmup), self.config
        out: list[Phase] = []
        if self.adapt and num_warmup > 0:
            low = dlp_step_size_bounds(0.0)[0]
            out.append(
                dual_averaging_phase(
                    0,
                    plan.initial_steps,
                    StepSizeAdaptation(),
                    lambda state, feedback: feedback.info.accept_prob,
                    lambda state: (low, state.max_step_size),
                )
            )

            def start_search(state: ABAdaptState) -> ABAdaptState:
                # the search starts at the step size the dual averaging settled on
                sigma = state.step_size
                tuner = state.tuner._replace(sigma=sigma, round_sigma=sigma)
                step_size, balance = ab_tuner_parameters(tuner, config, True)
                return state._replace(tuner=tuner, step_size=step_size, balance=balance)

            def search(state: ABAdaptState, feedback: Feedback) -> ABAdaptState:
                tuner = ab_tuner_update(state.tuner, feedback.info.jump, config, plan.block_size)
                step_size, balance = ab_tuner_parameters(tuner, config, True)
                return state._replace(tuner=tuner, step_size=step_size, balance=balance)

            def freeze(state: ABAdaptState) -> ABAdaptState:
                step_size, balance = ab_tuner_parameters(state.tuner, config, False)
                return state._replace(step_size=step_size, balance=balance)

            out.append(Phase(plan.initial_steps, num_warmup, search, start_search, freeze))
        if plan.burn_in > 0:

            def collect(state: ABAdaptState, feedback: Feedback) -> ABAdaptState:
                assert state.stats is not None  # a quadratic variant
                info = feedback.info
                return state._replace(stats=quadratic_stats_update(state.stats, info.dx, info.dg))

            def fit(state: ABAdaptState, feedback: Feedback) -> ABAdaptState:
                assert state.stats is not None
                quadratic, _ = fit_quadratic_proposal(state.stats, self.variant, control.loop)
                if not plan.restart:
                    return state._replace(quadratic=quadratic)
                tuner = ab_tuner_restart(state.tuner, config)
                step_size, balance = ab_tuner_parameters(tuner, config, True)
                return state._replace(
                    quadratic=quadratic, tuner=tuner, step_size=step_size, balance=balance
                )

            out.append(Phase(0, plan.burn_in, collect))
            out.append(Phase(plan.burn_in - 1, plan.burn_in, fit))
        return tuple(out)

    def parameters(self, adapt_state: ABAdaptState) -> StepParameters:
        return StepParameters(adapt_state.step_size, adapt_state.balance, True)

    def step(self, chain, noise, params, adapt_state, sites, local_fn):
        return ab_step(
            chain,
            noise.uniforms,
            noise.normals,
            noise.accept_uniform,
            local_fn=local_fn,
            domains=sites.domains,
            is_table=sites.is_table,
            sigma=params.step_size,
            balance=params.balance,
            quadratic=adapt_state.quadratic,
            chains_in_rows=sites.chains_in_rows,
        )

    def log_proposal(self, chain: ChainState, ys: tuple, params: StepParameters, sites: Sites):
        """``log q(ys | chain)`` of AB-1st with these parameters (for exact tests); the
        quadratic proposal has a density only jointly with its auxiliary variable."""
        if self.quadratic:
            raise NotImplementedError(f"{self.name}: variant={self.variant!r} has no log q(y|x).")
        return DMALA.log_proposal(self, chain, ys, params, sites)  # type: ignore[arg-type]

    def adapt_final(self, adapt_state: ABAdaptState) -> dict:
        """The tuned ``step_size`` and ``balance`` (frozen after warmup)."""
        return {"step_size": adapt_state.tuner.sigma, "balance": adapt_state.tuner.balance}
