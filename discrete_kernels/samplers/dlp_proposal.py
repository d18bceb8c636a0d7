"""The discrete Langevin proposal itself (Zhang, Liu and Liu, ICML 2022, Eq. 3 and App. A-C):
per-leaf logits, the draw and its log-probability, and :func:`dlp_propose`, which draws a
proposal and evaluates both directions. DMALA and DULA (:mod:`~discrete_kernels.samplers.dlp`,
which ACS's steps extend) and AB's first-order and quadratic proposals take it from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from array_api_compat import device as _device

from .._xp import (
    Array,
    array_namespace,
    categorical_from_uniform,
    host_number,
    is_torch_array,
    log_sigmoid,
    log_softmax,
    masked_sum,
    sigmoid,
    sum_of,
)
from ..domains import Binary, Domain, is_windowed
from ..kernel import ChainState, LocalFn, propose
from ..local import (
    as_float,
    candidate_mask,
    candidate_value,
    current_mask,
    finite_local,
    local_delta,
    mask_invalid,
    squared_distance,
)
from ..metropolis import (
    coordinate_sum,
)

__all__ = [
    "binary_flip_logits",
    "binary_flip_penalty",
    "dlp_coordinate_log_prob",
    "dlp_leaf_log_prob",
    "dlp_leaf_logits",
    "dlp_leaf_sample",
    "dlp_noise_shapes",
    "dlp_propose",
    "per_leaf",
]


def dlp_leaf_logits(
    domain: Domain,
    x: Array,
    local: Array,
    is_table: bool,
    step_size: Array | float,
    balance: Array | float = 0.5,
    preconditioner: Array | float = 1.0,
    penalty: Array | None = None,
) -> Array:
    """Logits of the DLP for one leaf.

    ``logit[i, v] = balance * delta[i, v] - dist2(x_i, v) / (2 * step_size * preconditioner_i)``.
    For a ``Binary`` leaf the closed form is returned instead: the flip logit of each
    coordinate, ``balance * delta_flip - 1 / (2 * step_size * preconditioner)``, so that the
    flip probability is ``sigmoid(logit)``. For a windowed leaf (``Integer``) ``v`` runs over
    the window ``x_i - w .. x_i + w`` (``S = 2 w + 1``), ``-inf`` outside the support.

    Parameters
    ----------
    domain : Domain
    x : array, shape (n...)
    local : array, shape (n...) or (n..., S)
    is_table : bool
    step_size : float or scalar array
        ``alpha`` > 0, on the leaf's own value scale.
    balance : float or scalar array
        ``beta``; 1/2 gives the locally balanced DLP of DULA/DMALA.
    preconditioner : float or array broadcastable to (n...)
        Per-coordinate multiplier of the step size (App. H of the DLP paper).
    penalty : array, optional
        A ``Binary`` leaf's ``1 / (2 * step_size * preconditioner)`` where the caller has it
        (:func:`binary_flip_penalty`; a step takes the logits on both sides, one array instead
        of one per side); ignored for other domains.

    Returns
    -------
    array, shape (n...) for ``Binary``, (n..., S) otherwise.
    """
    xp = array_namespace(local)
    local = finite_local(local, is_table)
    if isinstance(domain, Binary):
        if penalty is None:
            penalty = binary_flip_penalty(step_size, preconditioner)
        if not is_table:
            return binary_flip_logits(local, as_float(x, local), balance, penalty)
        at_current = current_mask(domain, x, local)
        delta_flip = masked_sum(~at_current, local) - masked_sum(at_current, local)
        return balance * delta_flip - penalty
    scale = _scaled_step(step_size, preconditioner)
    delta = local_delta(domain, x, local, is_table)
    dist2 = squared_distance(domain, x, local)
    scale = xp.asarray(scale, dtype=local.dtype, device=_device(local))
    logits = balance * delta - dist2 / (2.0 * scale[..., None] if scale.ndim else 2.0 * scale)
    return mask_invalid(domain, logits, x)


def binary_flip_logits(
    local: Array, xf: Array, balance: Array | float, penalty: Array | float
) -> Array:
    """``balance * local * (1 - 2 x) - penalty``: a ``Binary`` leaf's DLP flip logits from its
    gradient ``local`` at ``x`` (as floats), shape (n...).

    ``local * (1 - 2 x)`` is the first-order change of ``f`` for flipping each coordinate.
    On eager torch with Python numbers for ``balance`` and ``penalty`` (one chain on the
    CPU, :func:`~discrete_kernels._xp.host_number`) the same arithmetic runs as two fused
    operations instead of five (``1 - 2 x`` by ``rsub``, the rest by ``addcmul``)."""
    if isinstance(balance, float) and isinstance(penalty, float) and is_torch_array(local):
        import torch

        sign = torch.rsub(xf, 1.0, alpha=2.0)
        return torch.addcmul(local.new_full((), -penalty), local, sign, value=balance)
    return balance * (local * (xf * -2.0 + 1.0)) - penalty  # 1 - 2x: eager 1.0 - t is slower


def _scaled_step(step_size: Array | float, preconditioner: Array | float) -> Array | float:
    # the default preconditioner (the number 1.0) costs no operation (eager torch: one each)
    if isinstance(preconditioner, float) and preconditioner == 1.0:
        return step_size
    return step_size * preconditioner


def binary_flip_penalty(step_size: Array | float, preconditioner: Array | float = 1.0) -> Array:
    """``1 / (2 * step_size * preconditioner)``, the cost in nats a ``Binary`` leaf's DLP
    logit charges for a flip (its squared distance is 1). Written ``0.5 / scale``: the same
    to the last bit (halving is exact), in one operation fewer."""
    return 0.5 / _scaled_step(step_size, preconditioner)


def dlp_noise_shapes(
    domains: Sequence[Domain], shapes: Sequence[tuple[int, ...]]
) -> tuple[tuple[int, ...], ...]:
    """Shapes of the proposal uniforms a DLP step takes: one per coordinate of each leaf,
    whatever the domain."""
    return tuple(tuple(shape) for shape in shapes)


def dlp_leaf_sample(domain: Domain, x: Array, logits: Array, uniform: Array) -> Array:
    """Draw the proposed leaf from its DLP logits.

    Parameters
    ----------
    domain : Domain
    x : array, shape (n...)
    logits : array, from :func:`dlp_leaf_logits`
    uniform : array, shape (n...)
        Uniforms in [0, 1), one per coordinate.

    Returns
    -------
    array, shape (n...), dtype of ``x``
    """
    xp = array_namespace(logits)
    if isinstance(domain, Binary):
        # P(u < sigmoid(l)) = sigmoid(l); no log of u, and exp(-|l|) is shared with the
        # log_sigmoid of dlp_leaf_log_prob under jit
        flip = uniform < sigmoid(logits)
        return xp.where(flip, 1 - x, x)
    return candidate_value(domain, x, categorical_from_uniform(logits, uniform))


def dlp_coordinate_log_prob(domain: Domain, x: Array, y: Array, logits: Array) -> Array:
    """``log q_i(y_i | x)`` of a DLP for one leaf, coordinate by coordinate.

    Parameters
    ----------
    domain : Domain
    x, y : array, shape (n...)
        Current and proposed values.
    logits : array
        :func:`dlp_leaf_logits` evaluated at ``x``.

    Returns
    -------
    array, shape (n...)
        ``-inf`` where ``y_i`` is outside the window of a windowed leaf.
    """
    xp = array_namespace(logits)
    if isinstance(domain, Binary):
        # log sigmoid(-l) = log sigmoid(l) - l: one transcendental pass, shared with sampling
        log_flip = log_sigmoid(logits)
        return xp.where(y != x, log_flip, log_flip - logits)
    chosen = candidate_mask(domain, x, y, logits)
    per_coordinate = masked_sum(chosen, log_softmax(logits))
    if is_windowed(domain):
        inside = xp.any(chosen, axis=-1)
        per_coordinate = xp.where(inside, per_coordinate, xp.full_like(per_coordinate, -xp.inf))
    return per_coordinate


def dlp_leaf_log_prob(
    domain: Domain, x: Array, y: Array, logits: Array, chains_in_rows: bool = False
) -> Array:
    """``log q(y | x)`` of a DLP for one leaf: :func:`dlp_coordinate_log_prob` summed over
    its coordinates (a scalar array, or per chain of shape (C, 1) with ``chains_in_rows``;
    ``-inf`` when some ``y_i`` is outside the window of a windowed leaf)."""
    return coordinate_sum(dlp_coordinate_log_prob(domain, x, y, logits), chains_in_rows)


def per_leaf(value: Any, n: int, default: float) -> tuple:
    """A per-leaf option as a tuple of ``n``: ``default`` for None (whole or per leaf), a
    single value repeated."""
    if value is None:
        return (default,) * n
    if isinstance(value, (tuple, list)):
        return tuple(default if v is None else v for v in value)
    return (value,) * n


def dlp_propose(
    state: ChainState,
    proposal_uniforms: Sequence[Array],
    *,
    local_fn: LocalFn,
    domains: Sequence[Domain],
    is_table: Sequence[bool],
    step_size: Array | float,
    balance: Array | float = 0.5,
    preconditioner: Sequence[Array | float | None] | None = None,
    chains_in_rows: bool = False,
) -> tuple[ChainState, Array, Array]:
    """Draw a DLP proposal and evaluate it: ``(proposal, log q(y|x), log q(x|y))``.

    Arguments as in :func:`dlp_step`; the proposal carries ``f`` and locals at ``y``.
    """
    scales = per_leaf(preconditioner, len(domains), 1.0)
    # both sides' logits charge the same flip penalty: computed once per step (per leaf with
    # a preconditioner of its own); from a CPU tensor's step size as a Python float (eager
    # torch: two operations on a 0-dim tensor fewer)
    penalties: list = []
    shared = None
    for d, p in zip(domains, scales):
        if not isinstance(d, Binary):
            penalties.append(None)
        elif isinstance(p, float) and p == 1.0:
            if shared is None:
                shared = binary_flip_penalty(host_number(step_size))
            penalties.append(shared)
        else:
            penalties.append(binary_flip_penalty(step_size, p))

    balance = host_number(balance)  # a Python number where the step size is one

    def logits_at(chain: ChainState, origin: ChainState | None) -> list:
        return [
            dlp_leaf_logits(d, x, loc, t, step_size, balance, p, penalty)
            for d, x, loc, t, p, penalty in zip(
                domains, chain.x, chain.local, is_table, scales, penalties
            )
        ]

    def sample(chain: ChainState, logits: list) -> tuple[tuple, Array]:
        ys = tuple(
            dlp_leaf_sample(d, x, lg, u)
            for d, x, lg, u in zip(domains, chain.x, logits, proposal_uniforms)
        )
        return ys, log_prob(chain.x, ys, logits)

    def log_prob(xs: Sequence[Array], ys: Sequence[Array], logits: list) -> Array:
        return sum_of(
            [
                dlp_leaf_log_prob(d, x, y, lg, chains_in_rows)
                for d, x, y, lg in zip(domains, xs, ys, logits)
            ]
        )

    return propose(state, local_fn, logits_at, sample, log_prob)
