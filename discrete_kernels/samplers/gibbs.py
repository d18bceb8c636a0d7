"""Single-site updates for one-coordinate-at-a-time samplers (the Gibbs baseline).

For one coordinate with candidate values ``v = 0..S-1`` the caller evaluates the exact log
density at every candidate, ``w[v] = f(x with x_i = v)``, and these functions propose a new
value and return the log MH ratio of the move (0 for the exact conditional, which is always
accepted). Forms, after Liu (1996):

- exact conditional: ``v ~ softmax(w)``;
- modified (Metropolised) Gibbs: ``v ~ softmax(w)`` restricted to ``v != current``, accepted
  with ``min(1, (1 - p_current) / (1 - p_v))``;
- random walk: ``v`` uniform over the valid candidates, accepted with ``min(1, exp(w_v - w_c))``;
- modified random walk: the same, restricted to ``v != current``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from array_api_compat import device as _device

from .._xp import (
    Array,
    array_namespace,
    categorical_from_uniform,
    logsumexp,
    masked_sum,
    nan_to,
)
from ..domains import Domain, Ordinal, as_finite
from ..kernel import (
    ChainState,
    ControlFlow,
    NoiseShapes,
    Sampler,
    Sites,
    StepInfo,
    StepParameters,
)
from ..metropolis import (
    accept_probability,
    metropolis_accept,
)
from ..validation import check_bool, check_noise

__all__ = ["DiscreteGibbs", "gibbs_site_proposal", "gibbs_sweep"]


def gibbs_site_proposal(
    log_weights: Array,
    current: Array,
    uniform: Array,
    *,
    valid: Array | None = None,
    random_walk: bool = False,
    modified: bool = False,
) -> tuple[Array, Array]:
    """Propose a value for one coordinate and return the log MH ratio of the move.

    Parameters
    ----------
    log_weights : array, shape (..., S)
        Exact log density at every candidate value; NaN counts as ``-inf``. Leading axes
        (chains) are a batch of independent coordinates.
    current : integer array, shape (...)
        Index of the current value.
    uniform : array, shape (...), uniforms in [0, 1)
    valid : bool array, shape (..., S), optional
        Candidates inside the coordinate's support (default: all).
    random_walk, modified : bool
        Which form (see the module docstring).

    Returns
    -------
    proposal : integer array, shape (...)
    log_ratio : array, shape (...)
        ``log A`` of the move; 0 for the exact conditional; 0 as well when ``proposal``
        equals ``current``.

    Raises
    ------
    ValueError, TypeError
        ``uniform`` not of the shape of ``current`` or not of its array library (trace time).
    """
    check_noise("gibbs_site_proposal", "the uniform", uniform, tuple(current.shape), current)
    xp = array_namespace(log_weights)
    num_values = log_weights.shape[-1]
    index = xp.arange(num_values, device=_device(log_weights))
    is_current = index == current[..., None]
    neg_inf = xp.full_like(log_weights, -xp.inf)
    w = xp.where(xp.isnan(log_weights), neg_inf, log_weights)
    if valid is not None:
        w = xp.where(valid, w, neg_inf)
    if valid is None:
        allowed = xp.ones(num_values, dtype=xp.bool, device=_device(log_weights))
    else:
        allowed = valid
    if modified:
        allowed = allowed & ~is_current
    if random_walk:
        logits = xp.where(allowed, xp.zeros_like(w), neg_inf)
    else:
        logits = xp.where(allowed, w, neg_inf)
    proposal = categorical_from_uniform(logits, uniform)
    is_proposal = index == proposal[..., None]
    w_current = masked_sum(is_current, w, axis=-1)
    w_proposal = masked_sum(is_proposal, w, axis=-1)
    if random_walk:
        log_ratio = w_proposal - w_current
    elif modified:
        # (1 - p_c) / (1 - p_v) = sum_{u != c} e^w_u / sum_{u != v} e^w_u
        log_ratio = logsumexp(xp.where(is_current, neg_inf, w)) - logsumexp(
            xp.where(is_proposal, neg_inf, w)
        )
    else:
        log_ratio = xp.zeros_like(w_current)
    same = proposal == current
    log_ratio = xp.where(same, xp.zeros_like(log_ratio), log_ratio)
    log_ratio = nan_to(log_ratio, -xp.inf)
    return proposal, log_ratio


def _with_entry(flat: Array, k: int, value: int) -> Array:
    """``flat`` with entry ``k`` set to ``value`` (a copy, on ``flat``'s device)."""
    xp = array_namespace(flat)
    positions = xp.arange(flat.shape[0], device=_device(flat))
    return xp.where(positions == k, xp.asarray(value, dtype=flat.dtype, device=_device(flat)), flat)


def _valid_at(domain: Domain, x: Array, flat_index: int) -> Array | None:
    """Candidates inside the bounds of one coordinate (ordinal sites with array bounds)."""
    if not isinstance(domain, Ordinal):
        return None
    xp = array_namespace(x)
    table = domain.valid_candidates(x)
    if table is None:
        return None
    table = xp.broadcast_to(table, tuple(x.shape) + (domain.num_values,))
    return xp.reshape(table, (-1, domain.num_values))[flat_index]


def gibbs_sweep(
    chain: ChainState,
    order: Sequence[int],
    propose_uniforms: Array,
    accept_uniforms: Array,
    log_density_fn: Callable[[tuple], Array],
    domains: Sequence[Domain],
    *,
    random_walk: bool = False,
    modified: bool = False,
) -> tuple[ChainState, StepInfo]:
    """One sweep of single-site updates over every coordinate, in the given order.

    Each coordinate is updated by :func:`gibbs_site_proposal` from the exact log density at
    its ``S`` candidate values (``S - 1`` calls of ``log_density_fn``; the current value's is
    known). Runs eagerly (a Python loop over coordinates): for NumPy and torch.

    Parameters
    ----------
    chain : ChainState
        Leaves and their log density (``local`` unused).
    order : sequence of int
        A permutation of the flattened coordinates of all leaves (leaf by leaf, row-major).
    propose_uniforms, accept_uniforms : arrays, shape (n,)
        One proposal and one MH uniform per position of ``order``.
    log_density_fn : callable
        ``leaves -> f``, the log density of a tuple of leaves.
    domains : sequence of Domain
        One per leaf.

    Returns
    -------
    (ChainState, StepInfo)
        ``accept_prob`` is the mean over the sweep, ``accepted`` whether any coordinate
        moved and ``hamming_distance`` how many did.

    Raises
    ------
    ValueError, TypeError
        ``order`` not of one position per coordinate, or uniforms not of shape (n,) or not of
        the state's array library.
    """
    n = sum(math.prod(x.shape) for x in chain.x)
    if len(order) != n:
        raise ValueError(
            f"gibbs_sweep: order has {len(order)} positions for {n} coordinates; give a "
            "permutation of all of them (noise_shapes' permutation)."
        )
    for what, u in (
        ("the proposal uniforms", propose_uniforms),
        ("the MH uniforms", accept_uniforms),
    ):
        check_noise("gibbs_sweep", what, u, (n,), chain.x[0])
    xp = array_namespace(chain.log_density)
    leaves = list(chain.x)
    f = chain.log_density
    coordinates = [(j, k) for j, x in enumerate(leaves) for k in range(math.prod(x.shape))]
    accept_probs, changed = [], 0
    for position, c in enumerate(order):
        j, k = coordinates[int(c)]
        domain, x = as_finite(domains[j]), leaves[j]
        flat = xp.reshape(x, (-1,))
        current = int(flat[k]) - domain.low
        weights = []
        for v in range(domain.num_values):
            if v == current:
                weights.append(f)
                continue
            candidate = xp.reshape(_with_entry(flat, k, v + domain.low), x.shape)
            weights.append(
                log_density_fn(tuple(leaves[:j]) + (candidate,) + tuple(leaves[j + 1 :]))
            )
        table = xp.stack([xp.asarray(w, dtype=f.dtype, device=_device(f)) for w in weights])
        proposal, log_ratio = gibbs_site_proposal(
            table,
            xp.asarray(current, device=_device(table)),
            propose_uniforms[position],
            valid=_valid_at(domain, x, k),
            random_walk=random_walk,
            modified=modified,
        )
        accept_probs.append(accept_probability(log_ratio))
        moved = int(proposal) != current
        if moved and bool(metropolis_accept(log_ratio, accept_uniforms[position])):
            leaves[j] = xp.reshape(_with_entry(flat, k, int(proposal) + domain.low), x.shape)
            f = table[int(proposal)]
            changed += 1
    mean_accept = xp.mean(xp.stack(accept_probs))
    info = StepInfo(
        mean_accept,
        xp.asarray(changed > 0, device=_device(mean_accept)),
        xp.asarray(float(changed), dtype=mean_accept.dtype, device=_device(mean_accept)),
    )
    return ChainState(tuple(leaves), f, ()), info


@dataclass(frozen=True, eq=False)
class DiscreteGibbs(Sampler):
    """One coordinate at a time from its exact conditional (or Liu's modified / random-walk
    forms), in a random order each sweep: one draw is one sweep (:func:`gibbs_sweep`, ``S``
    model evaluations per coordinate). It reads no local information (its ``local_fn`` returns
    the log density only); it has no step size or adaptation.

    Parameters
    ----------
    random_walk : bool
        Uniform proposals over the coordinate's values, MH corrected.
    modified : bool
        Never propose the current value (Liu, 1996).
    """

    random_walk: bool = False
    modified: bool = False
    name: ClassVar[str] = "DiscreteGibbs"
    site_options: ClassVar[tuple[str, ...]] = ()
    uses_locals: ClassVar[bool] = False

    def __post_init__(self) -> None:
        for option in ("random_walk", "modified"):
            value = check_bool(self.name, option, getattr(self, option))
            object.__setattr__(self, option, value)

    def noise_shapes(self, sites: Sites, leaf_shapes: Sequence[tuple[int, ...]]) -> NoiseShapes:
        total = sum(math.prod(shape) for shape in leaf_shapes)
        return NoiseShapes(((total,), (total,)), permutation=total)

    def adapt_init(self, like, num_warmup, sites, flat_dim, control: ControlFlow) -> Array:
        xp = array_namespace(like)
        return xp.full_like(like, math.nan)

    def parameters(self, adapt_state: Array) -> StepParameters:
        return StepParameters(adapt_state, adapt_state, True)

    def step(self, chain, noise, params, adapt_state, sites, local_fn):
        propose_uniforms, accept_uniforms = noise.uniforms
        assert noise.permutation is not None  # noise_shapes asks for one
        return gibbs_sweep(
            chain,
            [int(c) for c in noise.permutation],
            propose_uniforms,
            accept_uniforms,
            lambda leaves: local_fn(leaves)[0],
            sites.domains,
            random_walk=self.random_walk,
            modified=self.modified,
        )

    def adapt_final(self, adapt_state: Array) -> dict:
        return {}
