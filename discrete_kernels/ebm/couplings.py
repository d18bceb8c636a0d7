"""Couplings for unbiased contrastive divergence (Qiu, Zhang and Wang, ICLR 2020) and the
single-site Gibbs update of the trainers.

- **Maximal coupling** of two discrete distributions (their App. A.1, Alg. 4, after Jacob et
  al., 2017): ``X ~ p``, ``Y ~ q`` with ``P(X = Y) = 1 - TV(p, q)``, the rejection loop capped
  at a number of tries.
- **Coupled block Gibbs for RBMs** (their Alg. 3): a maximal coupling of the two chains'
  visible updates with common random numbers for the residual proposals and the hidden
  update.

Caps (rejection tries) make an estimate biased where they bind; every function that caps
reports how often it did.
"""

from __future__ import annotations

from typing import NamedTuple

from array_api_compat import device as _device

from .._xp import Array, array_namespace, log_sigmoid
from ..samplers.gibbs import gibbs_site_proposal
from .rbm import RBMParams, RBMState, bernoulli_from_uniform, rbm_hidden_logits, rbm_visible_logits

__all__ = [
    "CouplingInfo",
    "maximal_coupling",
    "rbm_coupled_gibbs_step",
    "same_state",
    "site_gibbs_update",
    "with_coordinate",
]


class CouplingInfo(NamedTuple):
    """Per chain (...): **met** (the two new states are equal), **rejections** (rejected
    residual proposals) and **capped** (the rejection loop ran out of tries: that chain's
    draw is the first proposal, not a residual draw, and the coupling is biased there)."""

    met: Array
    rejections: Array
    capped: Array


def with_coordinate(x: Array, index: Array, value: Array | float) -> Array:
    """``x`` (C, d) with coordinate ``index[c]`` of each row ``c`` set to ``value`` (a scalar or
    (C,)); a new array."""
    xp = array_namespace(x)
    positions = xp.arange(x.shape[-1], device=_device(x))
    value = xp.asarray(value, dtype=x.dtype, device=_device(x))
    if value.ndim > 0:
        value = value[:, None]
    return xp.where(positions == index[:, None], value, x)


def site_gibbs_update(
    x: Array, index: Array, log_density_zero: Array, log_density_one: Array, uniform: Array
) -> Array:
    """Resample coordinate ``index`` (C,) of each chain of ``x`` (C, d) from its exact
    conditional, given the log densities ``f`` (C,) of each chain with that coordinate set to 0
    and to 1 and uniforms (C,): ``P(x_i = 1 | rest) = sigmoid(f_1 - f_0)``
    (:func:`discrete_kernels.gibbs_site_proposal`)."""
    xp = array_namespace(x)
    positions = xp.arange(x.shape[-1], device=_device(x))
    current = xp.sum(xp.where(positions == index[:, None], x, xp.zeros_like(x)), axis=-1)
    table = xp.stack([log_density_zero, log_density_one], axis=-1)
    proposal, _ = gibbs_site_proposal(table, xp.astype(current, xp.int32), uniform)
    return with_coordinate(x, index, xp.astype(proposal, x.dtype))


def same_state(a: Array, b: Array) -> Array:
    """Whether two batches of vectors (..., k) are equal, per row, (...)."""
    xp = array_namespace(a)
    return xp.all(a == b, axis=-1)


def maximal_coupling(
    log_p: Array,
    log_q: Array,
    uniform: Array,
    draw_uniforms: Array,
    retry_uniforms: Array,
) -> tuple[Array, Array, CouplingInfo]:
    """Maximal coupling of two categorical distributions (Alg. 4), capped at ``T`` tries.

    ``X ~ p``; with probability ``min(1, q(X) / p(X))`` also ``Y = X``; otherwise ``Y`` is
    drawn from ``q`` until a draw ``y`` passes ``u' > p(y) / q(y)`` (a draw from the residual
    ``(q - min(p, q)) / TV``). Then ``X ~ p``, ``Y ~ q`` and ``P(X = Y) = 1 - TV(p, q)``,
    the largest possible.

    Parameters
    ----------
    log_p, log_q : arrays (..., K)
        Normalised log-probabilities.
    uniform : array (...)
        The acceptance uniform of the first draw.
    draw_uniforms : array (T + 1, ...)
        Inverse-CDF uniforms: entry 0 draws ``X``, entry ``t`` the ``t``-th try of ``Y``.
    retry_uniforms : array (T, ...)
        The tries' acceptance uniforms.

    Returns
    -------
    (x, y, info) : int arrays (...) and :class:`CouplingInfo` (a capped chain keeps its last
    try for ``Y``).
    """
    xp = array_namespace(log_p)
    x = _categorical(log_p, draw_uniforms[0])
    log_px, log_qx = _take(log_p, x), _take(log_q, x)
    met = xp.log(uniform) <= log_qx - log_px
    y, done = x, met
    rejections = xp.zeros(met.shape, dtype=xp.int32, device=_device(met))
    for t in range(retry_uniforms.shape[0]):
        candidate = _categorical(log_q, draw_uniforms[t + 1])
        log_pc, log_qc = _take(log_p, candidate), _take(log_q, candidate)
        accept = xp.log(retry_uniforms[t]) > log_pc - log_qc
        y = xp.where(done, y, candidate)
        rejections = rejections + xp.astype(~done & ~accept, xp.int32)
        done = done | accept
    return x, y, CouplingInfo(met, rejections, ~done)


def _categorical(log_probs: Array, uniform: Array) -> Array:
    """Inverse-CDF draw from normalised ``log_probs`` (..., K) with ``uniform`` (...)."""
    xp = array_namespace(log_probs)
    cdf = xp.cumulative_sum(xp.exp(log_probs), axis=-1)
    below = xp.astype(cdf < uniform[..., None] * cdf[..., -1:], xp.int32)
    return xp.minimum(xp.sum(below, axis=-1), log_probs.shape[-1] - 1)


def _take(values: Array, index: Array) -> Array:
    """``values[..., index]`` per row: (..., K), (...) -> (...)."""
    xp = array_namespace(values)
    categories = xp.arange(values.shape[-1], device=_device(values))
    hit = categories == index[..., None]
    return xp.sum(xp.where(hit, values, xp.zeros_like(values)), axis=-1)


def rbm_coupled_gibbs_step(
    params: RBMParams,
    xi: RBMState,
    eta: RBMState,
    accept_uniform: Array,
    visible_uniforms: Array,
    retry_accept_uniforms: Array,
    retry_visible_uniforms: Array,
    hidden_uniforms: Array,
) -> tuple[RBMState, RBMState, CouplingInfo]:
    """One step of the coupled block Gibbs chains of an RBM (Alg. 3): ``(xi_t, eta_{t-1})``
    to ``(xi_{t+1}, eta_t)``, each marginally a block Gibbs sweep.

    The visible updates ``p = p(v | h_xi)`` and ``q = p(v | h_eta)`` are maximally coupled:
    ``v ~ p`` is kept for both with probability ``min(1, q(v) / p(v))``; otherwise each chain
    draws from its residual by rejection (``v ~ p`` accepted when ``u > q(v) / p(v)``, and
    the mirror for ``eta``) with common uniforms for the two proposals. The hidden updates use
    common uniforms. Chains that have met stay together.

    Parameters
    ----------
    params : RBMParams
    xi, eta : RBMState, (..., m) and (..., n)
    accept_uniform : (...)
    visible_uniforms : (..., m)
    retry_accept_uniforms : (T, ..., 2)
        Per try, the two chains' acceptance uniforms.
    retry_visible_uniforms : (T, ..., m)
        Per try, the common proposal uniforms.
    hidden_uniforms : (..., n)

    Returns
    -------
    (xi_next, eta_next, info)
        ``info.capped``: chains whose residual loop ran out of tries (their last proposal is
        used; biased there).
    """
    xp = array_namespace(accept_uniform)
    logits_xi = rbm_visible_logits(params, xi.hidden)
    logits_eta = rbm_visible_logits(params, eta.hidden)
    # log q(v) - log p(v) is affine in the binary v: base + v . slope (computed once, so a
    # try costs two comparisons and two dot products)
    on_xi, on_eta = log_sigmoid(logits_xi), log_sigmoid(logits_eta)
    off_diff = log_sigmoid(-logits_eta) - log_sigmoid(-logits_xi)
    slope = (on_eta - on_xi) - off_diff
    base = xp.sum(off_diff, axis=-1)

    def log_q_over_p(v: Array) -> Array:
        return base + xp.sum(v * slope, axis=-1)

    def draws(u: Array) -> tuple[Array, Array]:
        log_u = xp.log(u)
        return xp.astype(log_u <= on_xi, on_xi.dtype), xp.astype(log_u <= on_eta, on_xi.dtype)

    first, _ = draws(visible_uniforms)
    met = xp.log(accept_uniform) <= log_q_over_p(first)
    v_xi, v_eta = first, first
    done_xi, done_eta = met, met
    rejections = xp.zeros(met.shape, dtype=xp.int32, device=_device(met))
    for t in range(retry_visible_uniforms.shape[0]):
        cand_xi, cand_eta = draws(retry_visible_uniforms[t])
        accept_xi = xp.log(retry_accept_uniforms[t][..., 0]) > log_q_over_p(cand_xi)
        accept_eta = xp.log(retry_accept_uniforms[t][..., 1]) > -log_q_over_p(cand_eta)
        take_xi, take_eta = ~done_xi & accept_xi, ~done_eta & accept_eta
        v_xi = xp.where(take_xi[..., None], cand_xi, v_xi)
        v_eta = xp.where(take_eta[..., None], cand_eta, v_eta)
        rejections = rejections + xp.astype(~done_xi & ~accept_xi, xp.int32)
        rejections = rejections + xp.astype(~done_eta & ~accept_eta, xp.int32)
        done_xi, done_eta = done_xi | accept_xi, done_eta | accept_eta
    h_xi = bernoulli_from_uniform(rbm_hidden_logits(params, v_xi), hidden_uniforms)
    h_eta = bernoulli_from_uniform(rbm_hidden_logits(params, v_eta), hidden_uniforms)
    info = CouplingInfo(met, rejections, ~(done_xi & done_eta))
    return RBMState(v_xi, h_xi), RBMState(v_eta, h_eta), info
