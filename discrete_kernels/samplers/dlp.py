"""The discrete Langevin proposal (Zhang, Liu and Liu, ICML 2022): DMALA and DULA.

Every coordinate of every leaf is proposed in parallel from
``q_i(v) ∝ exp(balance * delta[i, v] - dist2(x_i, v) / (2 * step_size))`` (Eq. 3 with the
locally balanced weight ``balance = 1/2``, the reference code's "temperature 2"), with
``delta`` the local differences of :mod:`discrete_kernels.local`. DMALA corrects the move by
MH with the reverse proposal evaluated at the proposal; DULA moves without. A windowed leaf
(:class:`~discrete_kernels.Integer`, App. C of the paper) takes ``v`` in the window
``x_i - w .. x_i + w`` intersected with its support; the reverse proposal then uses the window
around the proposal, truncated at the support's ends, and each side is normalised over its own
window. One
``value_and_grad`` per step: the current log density and locals are cached in the chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from .._xp import Array, array_namespace
from ..domains import Binary, Domain, domain_step_scale
from ..kernel import (
    ChainState,
    ControlFlow,
    LocalFn,
    LocalFnWithTerms,
    NoiseShapes,
    Sampler,
    Sites,
    StepInfo,
    StepNoise,
    StepParameters,
)
from ..metropolis import mh_finish, mh_finish_per_coordinate
from ..validation import check_bool, check_number, check_step_arguments
from ..warmup import (
    DualAveragingState,
    Phase,
    StepSizeAdaptation,
    dlp_step_size_bounds,
    dual_averaging_init,
    dual_averaging_phase,
)
from .dlp_proposal import (
    binary_flip_logits,
    dlp_coordinate_log_prob,
    dlp_leaf_log_prob,
    dlp_leaf_logits,
    dlp_leaf_sample,
    dlp_noise_shapes,
    dlp_propose,
    per_leaf,
)

__all__ = [
    "DLPInfo",
    "DLPSampler",
    "DMALA",
    "DULA",
    "StepSizeState",
    "binary_flip_logits",
    "coupled_step",
    "dlp_coordinate_log_prob",
    "dlp_leaf_log_prob",
    "dlp_leaf_logits",
    "dlp_leaf_sample",
    "dlp_noise_shapes",
    "dlp_propose",
    "dlp_step",
    "dlp_step_per_coordinate",
    "synchronised_noise",
]


def dlp_step(
    state: ChainState,
    proposal_uniforms: Sequence[Array],
    accept_uniform: Array,
    *,
    local_fn: LocalFn,
    domains: Sequence[Domain],
    is_table: Sequence[bool],
    step_size: Array | float,
    balance: Array | float = 0.5,
    preconditioner: Sequence[Array | float | None] | None = None,
    metropolis: bool | Array = True,
    chains_in_rows: bool = False,
) -> tuple[ChainState, StepInfo]:
    """One DMALA (``metropolis=True``) or DULA (``metropolis=False``) transition.

    Parameters
    ----------
    state : ChainState
    proposal_uniforms : per leaf, uniforms in [0, 1) of shape :func:`dlp_noise_shapes`
    accept_uniform : scalar uniform in [0, 1)
    local_fn : callable
        ``leaves -> (f, locals)``.
    domains, is_table : per leaf
    step_size : scalar
        ``alpha`` > 0.
    balance : scalar
        ``beta``; 1/2 for DULA/DMALA.
    preconditioner : per leaf, None or an array broadcastable to the leaf
    metropolis : bool or boolean scalar array
        Whether to apply the MH correction (an array when decided at run time).
    chains_in_rows : bool
        The leaves hold C chains in their rows, shape (C, n); ``accept_uniform``, the step
        size, the balance, the log density and the statistics then have shape (C, 1)
        (:attr:`~discrete_kernels.Sites.chains_in_rows`).

    Returns
    -------
    (ChainState, StepInfo)

    Raises
    ------
    ValueError, TypeError
        Uniforms of the wrong number, shape or array library, or a step size (given as a
        number) that is not positive and finite.
    """
    check_step_arguments("dlp_step", state.x, proposal_uniforms, step_size)
    proposal, log_q_forward, log_q_reverse = dlp_propose(
        state,
        proposal_uniforms,
        local_fn=local_fn,
        domains=domains,
        is_table=is_table,
        step_size=step_size,
        balance=balance,
        preconditioner=preconditioner,
        chains_in_rows=chains_in_rows,
    )
    return mh_finish(
        state, proposal, log_q_forward, log_q_reverse, accept_uniform, metropolis, chains_in_rows
    )


def dlp_step_per_coordinate(
    state: ChainState,
    proposal_uniforms: Sequence[Array],
    accept_uniforms: Sequence[Array],
    *,
    local_fn: LocalFnWithTerms,
    domains: Sequence[Domain],
    is_table: Sequence[bool],
    step_size: Array | float,
    balance: Array | float = 0.5,
    preconditioner: Sequence[Array | float | None] | None = None,
) -> tuple[ChainState, StepInfo]:
    """One DMALA transition with an MH decision per coordinate
    (:func:`~discrete_kernels.metropolis.mh_finish_per_coordinate`), for a target whose
    coordinates are conditionally independent (:attr:`Sites.per_coordinate_mh`).

    The DLP proposal already factorises over coordinates, and coordinate ``i``'s logits read
    its own local information only, which such a target makes a function of ``x_i`` alone:
    the forward and reverse proposals are products of per-coordinate ones. Arguments as in
    :func:`dlp_step`, with ``accept_uniforms`` (per leaf, of the leaf's shape) in place of the
    one MH uniform and a ``local_fn`` that also evaluates the per-coordinate terms. Costs the
    proposal's ``value_and_grad`` and the terms at both states.
    """
    check_step_arguments("dlp_step_per_coordinate", state.x, proposal_uniforms, step_size)
    check_step_arguments("dlp_step_per_coordinate", state.x, accept_uniforms, None)
    if not isinstance(local_fn, LocalFnWithTerms):
        raise TypeError(
            "dlp_step_per_coordinate: local_fn must be a LocalFnWithTerms (the log density's "
            f"per-coordinate terms), got {type(local_fn).__name__}."
        )
    scales = per_leaf(preconditioner, len(domains), 1.0)
    leaves = list(zip(domains, is_table, scales))

    def logits_at(chain: ChainState) -> list:
        return [
            dlp_leaf_logits(d, x, loc, t, step_size, balance, p)
            for (d, t, p), x, loc in zip(leaves, chain.x, chain.local)
        ]

    forward = logits_at(state)
    ys = tuple(
        dlp_leaf_sample(d, x, lg, u)
        for d, x, lg, u in zip(domains, state.x, forward, proposal_uniforms)
    )
    f_y, local_y = local_fn(ys)
    proposal = ChainState(ys, f_y, tuple(local_y))
    reverse = logits_at(proposal)
    log_q_forward = [
        dlp_coordinate_log_prob(d, x, y, lg) for d, x, y, lg in zip(domains, state.x, ys, forward)
    ]
    log_q_reverse = [
        dlp_coordinate_log_prob(d, y, x, lg) for d, x, y, lg in zip(domains, state.x, ys, reverse)
    ]
    return mh_finish_per_coordinate(
        state,
        proposal,
        log_q_forward,
        log_q_reverse,
        local_fn.element_terms(state.x),
        local_fn.element_terms(ys),
        accept_uniforms,
    )


# ------------------------------------------------------------------------------------------
# coupled chains (UCD with gradient proposals)


def synchronised_noise(noise: StepNoise, chain: ChainState, sites: Sites) -> StepNoise:
    """``chain``'s half of the common noise of a coupled DLP step.

    A DLP proposal factorises over coordinates. A Binary leaf flips coordinate ``i`` when
    ``u_i < sigmoid(logit_i)``; written as a draw of the *new value*, ``y_i = 1`` iff
    ``u'_i < P(y_i = 1 | x)``, with ``u'_i = u_i`` where ``x_i = 0`` and ``1 - u_i`` where
    ``x_i = 1`` (still uniform). Two chains sharing ``u`` this way propose the same value with
    probability ``1 - |P_xi(y_i = 1) - P_eta(y_i = 1)|``: a maximal coupling of each
    coordinate. Other domains already draw the new value by inverse CDF from ``u_i`` (a common
    uniform coupling: valid, not maximal in general). The MH uniform is shared as is.
    """
    uniforms = []
    for domain, x, u in zip(sites.domains, chain.x, noise.uniforms):
        if isinstance(domain, Binary):
            xp = array_namespace(u)
            u = xp.where(x == 1, 1.0 - u, u)
        uniforms.append(u)
    return noise._replace(uniforms=tuple(uniforms))


def coupled_step(
    sampler: Sampler,
    xi: ChainState,
    eta: ChainState,
    noise: StepNoise,
    params: StepParameters,
    adapt_state: Any,
    sites: Sites,
    local_fn: LocalFn,
) -> tuple[ChainState, ChainState, Any, Any]:
    """One step of two coupled chains of a DLP sampler on common noise
    (:func:`synchronised_noise`); each chain is marginally an exact step of ``sampler``, and two
    chains in the same state stay together. Returns ``(xi_next, eta_next, info_xi,
    info_eta)``."""
    xi, info_xi = sampler.step(
        xi, synchronised_noise(noise, xi, sites), params, adapt_state, sites, local_fn
    )
    eta, info_eta = sampler.step(
        eta, synchronised_noise(noise, eta, sites), params, adapt_state, sites, local_fn
    )
    return xi, eta, info_xi, info_eta


# ------------------------------------------------------------------------------------------
# the samplers


class DLPInfo(NamedTuple):
    """Statistics of one DLP draw: :class:`~discrete_kernels.StepInfo` and the **step_size**
    and **balance** of its proposal."""

    accept_prob: Array
    accepted: Array
    hamming_distance: Array
    step_size: Array
    balance: Array


class StepSizeState(NamedTuple):
    """Adaptation state of the DLP samplers and GWG: the **step_size** of the next draw,
    **dual_averaging** of its log, **max_step_size**, the upper end of the adapted range
    (:func:`discrete_kernels.warmup.dlp_step_size_bounds`), and the constant **balance**
    1/2 (an array made once: eager torch would make it at every step)."""

    step_size: Array
    dual_averaging: DualAveragingState
    max_step_size: Array
    balance: Array


class DLPSampler(Sampler):
    """The DLP step for any sampler whose adaptation state gives its parameters (DMALA, DULA,
    ACS, and samplers that add a schedule of ``(step_size, balance)``)."""

    statistics: ClassVar[tuple[str, ...]] = DLPInfo._fields
    reported: ClassVar[tuple[str, ...]] = (
        "accept_prob",
        "accepted",
        "step_size",
        "hamming_distance",
    )
    progress: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("acc. prob", "accept_prob", ".2f"),
        ("step size", "step_size", ".3g"),
    )
    windowed_domains: ClassVar[bool] = True

    def noise_shapes(self, sites: Sites, leaf_shapes: Sequence[tuple[int, ...]]) -> NoiseShapes:
        shapes = dlp_noise_shapes(sites.domains, leaf_shapes)
        if sites.per_coordinate_mh:  # and an MH uniform per coordinate
            shapes = shapes + tuple(tuple(shape) for shape in leaf_shapes)
        return NoiseShapes(shapes)

    def step(self, chain, noise, params, adapt_state, sites, local_fn):
        proposal = dict(
            local_fn=local_fn,
            domains=sites.domains,
            is_table=sites.is_table,
            step_size=params.step_size,
            balance=params.balance,
            preconditioner=sites.preconditioner,
        )
        if sites.per_coordinate_mh:
            num = len(sites.domains)
            chain, info = dlp_step_per_coordinate(
                chain, noise.uniforms[:num], noise.uniforms[num:], **proposal
            )
        else:
            chain, info = dlp_step(
                chain,
                noise.uniforms,
                noise.accept_uniform,
                metropolis=params.metropolis,
                chains_in_rows=sites.chains_in_rows,
                **proposal,
            )
        return chain, DLPInfo(*info, params.step_size, params.balance)

    def log_proposal(self, chain: ChainState, ys: tuple, params: StepParameters, sites: Sites):
        """``log q(ys | chain)`` of the proposal with these parameters (for exact tests)."""
        scales = per_leaf(sites.preconditioner, len(sites.domains), 1.0)
        return sum(
            dlp_leaf_log_prob(
                d, x, y, dlp_leaf_logits(d, x, loc, t, params.step_size, params.balance, p)
            )
            for d, x, y, loc, t, p in zip(
                sites.domains, chain.x, ys, chain.local, sites.is_table, scales
            )
        )


def step_size_state(like: Array, step_size: float, sites: Sites) -> StepSizeState:
    """The step-size state at ``step_size``, in ``like``'s dtype and device, with the range of
    the sites' domains."""
    xp = array_namespace(like)
    step = xp.full_like(like, step_size)
    high = xp.full_like(like, dlp_step_size_bounds(domain_step_scale(sites.domains))[1])
    return StepSizeState(step, dual_averaging_init(step), high, xp.full_like(like, 0.5))


def step_size_phase(num_warmup: int, target_accept_prob: float) -> Phase:
    """Dual averaging of the step size over the whole warmup towards ``target_accept_prob``,
    within :func:`~discrete_kernels.warmup.dlp_step_size_bounds`."""
    low = dlp_step_size_bounds(0.0)[0]
    return dual_averaging_phase(
        0,
        num_warmup,
        StepSizeAdaptation(target_accept_prob=target_accept_prob),
        lambda state, feedback: feedback.info.accept_prob,
        lambda state: (low, state.max_step_size),
    )


@dataclass(frozen=True, eq=False)
class DMALA(DLPSampler):
    """Discrete Metropolis-adjusted Langevin algorithm (Zhang et al., 2022).

    Every coordinate is proposed in parallel from the discrete Langevin proposal
    ``q_i(v) ∝ exp(g_i (v - x_i) / 2 - (v - x_i)^2 / (2 alpha))`` and the move is MH
    corrected, so the chain targets the model's posterior exactly. One ``value_and_grad`` per
    step (the current one is cached).

    Parameters
    ----------
    step_size : float
        ``alpha`` > 0, measured on the values' own scale (one Bernoulli flip has squared
        distance 1).
    adapt_step_size : bool
        Dual averaging of ``alpha`` during warmup towards ``target_accept_prob``.
    target_accept_prob : float
        Target of the adaptation, in (0, 1).
    per_coordinate_mh : bool
        One MH decision per coordinate instead of one for the whole proposal, on a model whose
        discrete coordinates are all conditionally independent given its other sites (a plate
        of indicators or counts, each with its own likelihood terms; checked at setup, and
        refused with the reason otherwise). Exact there, and far more moves per step: a joint
        decision over many coordinates refuses almost every proposal, or adapts the step
        size down until few coordinates move. Costs two evaluations of the model's terms
        per step more. The acceptance (and its adaptation) is then the mean over the
        coordinates whose proposal moves.
    """

    step_size: float = 0.5
    adapt_step_size: bool = True
    target_accept_prob: float = 0.574
    per_coordinate_mh: bool = False
    metropolis: ClassVar[bool] = True
    name: ClassVar[str] = "DMALA"
    steps_chains_in_rows: ClassVar[bool] = True
    site_options: ClassVar[tuple[str, ...]] = ("exact_sites", "preconditioner", "window")
    rule: StepSizeAdaptation = field(init=False, repr=False)

    def __post_init__(self) -> None:
        name = self.name
        object.__setattr__(self, "step_size", check_number(name, "step_size", self.step_size))
        adapt = check_bool(name, "adapt_step_size", self.adapt_step_size)
        object.__setattr__(self, "adapt_step_size", adapt)
        target = check_number(name, "target_accept_prob", self.target_accept_prob, high=1.0)
        object.__setattr__(self, "target_accept_prob", target)
        object.__setattr__(self, "rule", StepSizeAdaptation(target_accept_prob=target))
        per_coordinate = check_bool(name, "per_coordinate_mh", self.per_coordinate_mh)
        if per_coordinate and not self.metropolis:
            raise ValueError(
                f"{name}(per_coordinate_mh=True): {name} makes no MH decision to split by "
                "coordinate; use DMALA(per_coordinate_mh=True)."
            )
        object.__setattr__(self, "per_coordinate_mh", per_coordinate)

    @property
    def per_coordinate(self) -> bool:
        return self.per_coordinate_mh

    @property
    def auto_exact(self) -> bool:
        """False with ``per_coordinate_mh``: its sites take gradients only (a table's rows
        would mix the log densities of the two states a step leaves coordinates in)."""
        return super().auto_exact and not self.per_coordinate_mh

    def adapt_init(self, like, num_warmup, sites, flat_dim, control: ControlFlow) -> StepSizeState:
        return step_size_state(like, self.step_size, sites)

    def phases(self, num_warmup: int, control: ControlFlow) -> tuple[Phase, ...]:
        if not (self.adapt_step_size and num_warmup > 0):
            return ()
        return (step_size_phase(num_warmup, self.target_accept_prob),)

    def parameters(self, adapt_state: StepSizeState) -> StepParameters:
        return StepParameters(adapt_state.step_size, adapt_state.balance, self.metropolis)

    def check_coupling(self, kernel_hint: str) -> None:
        if not self.metropolis:
            super().check_coupling(kernel_hint)

    def coupled_step(self, xi, eta, noise, params, adapt_state, sites, local_fn):
        return coupled_step(self, xi, eta, noise, params, adapt_state, sites, local_fn)


@dataclass(frozen=True, eq=False)
class DULA(DMALA):
    """Discrete unadjusted Langevin algorithm: the DMALA proposal without the MH step.

    Biased for any fixed step size (the bias vanishes as the step size shrinks); moves to a
    proposal with a non-finite log density or gradient are still refused. ``accept_prob``
    reports the MH acceptance the move would have had, a free diagnostic of the bias.
    Step-size adaptation is off by default; when switched on it targets that diagnostic.
    Options as :class:`DMALA`.

    With a subsampling plate in the model (``subsample_size``) each step evaluates the log
    density and its gradient on a new minibatch scaled by ``N/b``: the stochastic-gradient
    DLP of Sec. 6 (SG-DULA). Its bias grows with the gradient's variance and the step size
    (Theorem 6.1); ``accept_prob`` and the potential energy are then minibatch estimates.
    """

    adapt_step_size: bool = False
    metropolis: ClassVar[bool] = False
    name: ClassVar[str] = "DULA"

    def minibatch_refusal(self) -> str | None:
        """None: DULA has no MH step, so a minibatch gradient gives the stochastic-gradient DLP
        of Sec. 6 of the paper (SG-DULA); its step-size adaptation targets the MH acceptance,
        which a minibatch log density does not estimate, so that one is refused."""
        if self.adapt_step_size:
            return (
                "adapt_step_size=True tunes the step size to an MH acceptance, which a "
                "minibatch log density does not estimate; give step_size with "
                "adapt_step_size=False"
            )
        return None
