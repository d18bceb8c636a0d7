"""Energy-based model learning: RBM quantities, couplings and contrastive estimators.

Notation as in :mod:`discrete_kernels`: a model ``p(x) ∝ exp(-E(x; theta))``. The gradient of
the average log-likelihood is ``-E_data[grad E] + E_model[grad E]``; CD-k, PCD and UCD differ in
how they estimate the model term. Everything here is a pure function of arrays (numpy,
jax.numpy or torch); the random numbers come in as arrays and the loops over chain steps
belong to the trainers (:mod:`numpyro_ext.ebm`, :mod:`pyro_ext.ebm`).

- **Bernoulli RBM** ``E(v, h) = -v.b - v W h - h.c`` with ``v`` (m,) and ``h`` (n,) binary:
  block conditionals, free energy ``F(v) = -log sum_h exp(-E(v, h))``, the exact log partition
  function by enumerating the smaller layer (:func:`rbm_log_partition`, up to about 20
  units) and the exact average log-likelihood.
- **Maximal coupling** of two discrete distributions (App. A.1 of Qiu, Zhang and Wang,
  ICLR 2020, "Unbiased contrastive divergence algorithm for training energy-based latent
  variable models": Alg. 4, after Jacob et al., 2017): ``X ~ p``, ``Y ~ q`` with
  ``P(X = Y) = 1 - TV(p, q)``, the rejection loop capped at a number of tries.
- **Coupled block Gibbs for RBMs** (their Alg. 3): a maximal coupling of the two chains'
  visible updates with common random numbers for the residual proposals and the hidden
  update.
- **UCD weights**: the estimator ``H = f(xi_k) + sum_{t=k+1}^{tau-1} [f(xi_t) - f(eta_{t-1})]``
  (their Sec. 3.3) as per-step weights on ``f(xi_t)`` and ``f(eta_{t-1})``, so a trainer can
  accumulate any statistic (gradients included) in one pass.
- **Annealed importance sampling** increments for ``log Z`` (Neal, 2001) along
  ``f_beta = (1 - beta) f_0 + beta f``.

Caps (rejection tries, the meeting time) make an estimate biased where they bind; every
function that caps reports how often it did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from array_api_compat import device as _device

from ._xp import Array, array_namespace, log_sigmoid, precise_matmul
from .gibbs import gibbs_site_proposal
from .samplers import DLPSpec
from .validation import check_int, check_number

__all__ = [
    "ACSPCDState",
    "CD",
    "PCD",
    "UCD",
    "BlockGibbs",
    "SiteGibbs",
    "check_method",
    "check_ucd_coupling",
    "CouplingInfo",
    "RBMParams",
    "RBMState",
    "ais_log_weight_increment",
    "bernoulli_from_uniform",
    "bernoulli_log_prob",
    "bars_and_stripes",
    "binary_states",
    "lattice_mask",
    "logsumexp",
    "maximal_coupling",
    "rbm_coupled_gibbs_step",
    "lattice_ising_energy",
    "rbm_free_energy",
    "rbm_gibbs_step",
    "rbm_hidden_logits",
    "rbm_log_likelihood",
    "rbm_log_partition",
    "rbm_visible_logits",
    "rbm_visible_sweep",
    "same_state",
    "site_gibbs_update",
    "ucd_weights",
    "with_coordinate",
]


# ------------------------------------------------------------------------------------------
# training methods (options only; the trainers of numpyro_ext.ebm and pyro_ext.ebm run them)


@dataclass(frozen=True)
class BlockGibbs:
    """Block Gibbs sampling of an RBM (``v -> h -> v``), the classic CD/PCD sampler; needs the
    :class:`RBM` energy."""


@dataclass(frozen=True)
class SiteGibbs:
    """Random-scan single-site Gibbs for any energy on binary inputs: each step resamples one
    coordinate per chain, picked uniformly at random, from its exact conditional (two energy
    evaluations per chain and step; ``PCD(SiteGibbs(), steps=d)`` is about one sweep of ``d``
    coordinates). The Gibbs baseline of the DLP paper's Ising learning experiment (Zhang et
    al., 2022, Sec. 7.3.1, after Grathwohl et al., 2021). Update: :func:`site_gibbs_update`."""


@dataclass(frozen=True)
class CD:
    """Contrastive divergence: ``k`` sampler steps from the data batch (CD-k)."""

    k: int = 1
    sampler: Any = None


@dataclass(frozen=True)
class PCD:
    """Persistent contrastive divergence: a buffer of ``num_chains`` chains (default the batch
    size) advanced ``steps`` steps per iteration; each chain restarts at a random data point
    with probability ``reinit_prob`` per iteration."""

    sampler: Any = None
    steps: int = 1
    num_chains: int | None = None
    reinit_prob: float = 0.0


class ACSPCDState(NamedTuple):
    """Method state of PCD with an ACS sampler (ACS paper, App. B, Alg. 6): the persistent
    ``buffer`` (C, d), the training ``iteration`` that places it in the cycle, and the cycle's
    ends ``alpha_max``, ``alpha_min`` (medians over the chains of the last tuning run, or the
    kernel's explicit values). Schedule: :func:`discrete_kernels.acs.acs_pcd_step_parameters`."""

    buffer: Any
    iteration: Any
    alpha_max: Any
    alpha_min: Any


@dataclass(frozen=True)
class UCD:
    """Unbiased contrastive divergence: per data point of the batch, two coupled chains run
    until they meet (at most ``max_time`` steps). Estimator with burn-in ``k``.

    ``coupling``: None or :class:`BlockGibbs` for the coupled block Gibbs chains of an RBM
    (Alg. 3; the residual draws of its visible coupling get at most ``max_tries`` tries), or
    a DMALA kernel of the trainer's PPL with a fixed step size, for any energy on binary
    inputs (coordinate-wise maximal coupling of the proposals, a common MH uniform:
    :func:`discrete_kernels.samplers.coupled_step`)."""

    k: int = 1
    max_time: int = 100
    max_tries: int = 10
    coupling: Any = None


def check_ucd_coupling(method: UCD, is_rbm: bool, spec: Any, kernel_hint: str) -> None:
    """Refuse a UCD coupling the estimator cannot use (``ValueError``).

    Coupled block Gibbs (``coupling`` None or :class:`BlockGibbs`) needs an RBM. Otherwise the
    coupling must be a DMALA kernel: UCD's telescoping sum needs one time-homogeneous kernel
    that leaves the model invariant (the chain behind must run the same kernel as the chain
    ahead, or met chains part again), which rules out DULA and ACS's cyclical step size.
    ``spec`` is the coupling kernel's sampler spec, or None when it is not a kernel of the
    trainer's PPL; ``kernel_hint`` spells a DMALA kernel of that PPL (``nx.DMALA``).
    """
    if method.coupling is None or isinstance(method.coupling, BlockGibbs):
        if not is_rbm:
            raise ValueError(
                "UCD with coupled block Gibbs chains (the default coupling) needs the RBM "
                f"energy (ebm.RBM); for other energies pass coupling={kernel_hint}(step_size=...)."
            )
        return
    if not (isinstance(spec, DLPSpec) and spec.metropolis):
        name = spec.name if spec is not None else repr(method.coupling)
        raise ValueError(
            f"UCD: coupling must be BlockGibbs() (RBM) or a DMALA kernel ({kernel_hint}("
            f"step_size=...)), got {name}: the estimator needs one fixed kernel that leaves "
            "the model invariant (no DULA, no cyclical or tuned step sizes)."
        )


def check_method(method: Any) -> None:
    """Refuse bad method options (``ValueError`` naming the option)."""
    if isinstance(method, CD):
        check_int("CD", "k", method.k, minimum=1)
    elif isinstance(method, PCD):
        check_int("PCD", "steps", method.steps, minimum=1)
        check_number(
            "PCD",
            "reinit_prob",
            method.reinit_prob,
            low_inclusive=True,
            high=1.0,
            high_inclusive=True,
        )
        if method.num_chains is not None:
            check_int("PCD", "num_chains", method.num_chains, minimum=1)
    elif isinstance(method, UCD):
        check_int("UCD", "k", method.k, minimum=0)
        check_int("UCD", "max_time", method.max_time, minimum=2)
        check_int("UCD", "max_tries", method.max_tries, minimum=1)
    else:
        raise ValueError(f"method must be CD(...), PCD(...) or UCD(...), got {method!r}.")


# ------------------------------------------------------------------------------------------
# data and structure of the ready-made models (numpy)


def bars_and_stripes(side: int = 4) -> Any:
    """The distinct ``side x side`` binary images made of full bars or full stripes,
    ``(2^(side + 1) - 2, side^2)`` float32 (30 images for ``side=4``), a classic RBM benchmark
    whose log-likelihood can be computed exactly."""
    import numpy as np

    rows = set()
    for code in range(2**side):
        bits = np.array([(code >> j) & 1 for j in range(side)])
        image = np.repeat(bits[:, None], side, axis=1)
        rows.add(tuple(image.ravel()))
        rows.add(tuple(image.T.ravel()))
    return np.array(sorted(rows), np.float32)


def lattice_mask(side: int) -> Any:
    """Adjacency of a ``side x side`` lattice with open boundaries, ``(side^2, side^2)``
    float32 numpy array (the couplings an Ising energy learns)."""
    import numpy as np

    d = side * side
    index = np.arange(d).reshape(side, side)
    mask = np.zeros((d, d), np.float32)
    for a, b in ((index[:, :-1], index[:, 1:]), (index[:-1, :], index[1:, :])):
        mask[a.ravel(), b.ravel()] = mask[b.ravel(), a.ravel()] = 1.0
    return mask


def lattice_ising_energy(couplings: Array, field: Array, mask: Array, x: Array) -> Array:
    """``E(x) = -(s.J s / 2 + h.s)`` with ``s = 2x - 1`` and ``J`` the symmetrised
    ``couplings`` on the ``mask``'s edges: (..., d) -> (...). The quadratic form is a
    full-precision product (:func:`discrete_kernels.precise_matmul`): it enters MH ratios."""
    xp = array_namespace(x)
    s = 2.0 * x - 1.0
    j = couplings * mask
    j = (j + xp.matrix_transpose(j)) / 2
    return -(0.5 * xp.sum(precise_matmul(s, j) * s, axis=-1) + xp.sum(s * field, axis=-1))


# ------------------------------------------------------------------------------------------
# RBM


class RBMParams(NamedTuple):
    """Parameters of a Bernoulli RBM: **weights** (m, n), **visible_bias** (m,),
    **hidden_bias** (n,)."""

    weights: Array
    visible_bias: Array
    hidden_bias: Array


class RBMState(NamedTuple):
    """A state of the RBM's block Gibbs chain: **visible** (..., m) and **hidden** (..., n),
    0/1 floats."""

    visible: Array
    hidden: Array


class CouplingInfo(NamedTuple):
    """Per chain (...): **met** (the two new states are equal), **rejections** (rejected
    residual proposals) and **capped** (the rejection loop ran out of tries: that chain's
    draw is the first proposal, not a residual draw, and the coupling is biased there)."""

    met: Array
    rejections: Array
    capped: Array


def _softplus(x: Array) -> Array:
    xp = array_namespace(x)
    return xp.logaddexp(xp.zeros_like(x), x)


def logsumexp(x: Array, axis: int = -1) -> Array:
    """``log sum exp`` over ``axis``, stable (rows of ``-inf`` give ``-inf``)."""
    xp = array_namespace(x)
    top = xp.max(x, axis=axis, keepdims=True)
    top = xp.where(xp.isfinite(top), top, xp.zeros_like(top))
    out = xp.log(xp.sum(xp.exp(x - top), axis=axis, keepdims=True)) + top
    return xp.squeeze(out, axis=axis)


def binary_states(num: int, like: Array) -> Array:
    """All ``2**num`` binary vectors as rows, (2**num, num), in ``like``'s dtype and device
    (row ``i`` holds the bits of ``i``, least significant first)."""
    xp = array_namespace(like)
    index = xp.arange(2**num, device=_device(like))
    powers = xp.asarray([2**j for j in range(num)], device=_device(like))
    bits = (index[:, None] // powers[None, :]) % 2
    return xp.astype(bits, like.dtype)


def bernoulli_from_uniform(logits: Array, uniforms: Array) -> Array:
    """``1{u <= sigmoid(logits)}`` as 0/1 floats of ``logits``' dtype, (...)."""
    xp = array_namespace(logits)
    return xp.astype(xp.log(uniforms) <= log_sigmoid(logits), logits.dtype)


def bernoulli_log_prob(logits: Array, x: Array) -> Array:
    """Log-probability of the binary vector ``x`` (..., k) under independent Bernoullis with
    ``logits`` (..., k), summed over the last axis, (...)."""
    xp = array_namespace(logits)
    terms = x * log_sigmoid(logits) + (1 - x) * log_sigmoid(-logits)
    return xp.sum(terms, axis=-1)


def rbm_hidden_logits(params: RBMParams, visible: Array) -> Array:
    """Logits of ``p(h | v)``, ``v W + c``: (..., m) -> (..., n)."""
    return precise_matmul(visible, params.weights) + params.hidden_bias


def rbm_visible_logits(params: RBMParams, hidden: Array) -> Array:
    """Logits of ``p(v | h)``, ``W h + b``: (..., n) -> (..., m)."""
    xp = array_namespace(hidden)
    return precise_matmul(hidden, xp.matrix_transpose(params.weights)) + params.visible_bias


def rbm_free_energy(params: RBMParams, visible: Array) -> Array:
    """``F(v) = -v.b - sum_j softplus((v W + c)_j)``, so ``p(v) ∝ exp(-F(v))``:
    (..., m) -> (...)."""
    xp = array_namespace(visible)
    hidden_term = xp.sum(_softplus(rbm_hidden_logits(params, visible)), axis=-1)
    return -xp.sum(visible * params.visible_bias, axis=-1) - hidden_term


def rbm_log_partition(params: RBMParams) -> Array:
    """Exact ``log Z`` by enumerating the smaller layer (``2**min(m, n)`` states; keep it
    under about 20 units), scalar."""
    xp = array_namespace(params.weights)
    m, n = params.weights.shape
    if n <= m:
        hidden = binary_states(n, params.weights)
        logits = rbm_visible_logits(params, hidden)
        terms = xp.sum(hidden * params.hidden_bias, axis=-1) + xp.sum(_softplus(logits), axis=-1)
    else:
        terms = -rbm_free_energy(params, binary_states(m, params.weights))
    return logsumexp(terms, axis=0)


def rbm_log_likelihood(params: RBMParams, data: Array) -> Array:
    """Exact average log-likelihood of ``data`` (N, m): ``mean(-F(v)) - log Z``, scalar."""
    xp = array_namespace(data)
    return xp.mean(-rbm_free_energy(params, data)) - rbm_log_partition(params)


def rbm_gibbs_step(
    params: RBMParams, state: RBMState, visible_uniforms: Array, hidden_uniforms: Array
) -> RBMState:
    """One block Gibbs sweep ``v' ~ p(v | h)``, ``h' ~ p(h | v')``; uniforms (..., m) and
    (..., n)."""
    visible = bernoulli_from_uniform(rbm_visible_logits(params, state.hidden), visible_uniforms)
    hidden = bernoulli_from_uniform(rbm_hidden_logits(params, visible), hidden_uniforms)
    return RBMState(visible, hidden)


def rbm_visible_sweep(
    params: RBMParams, visible: Array, hidden_uniforms: Array, visible_uniforms: Array
) -> Array:
    """One step of the block Gibbs chain on the visible units alone: ``h ~ p(h | v)``, then
    ``v' ~ p(v | h)``; (..., m), uniforms (..., n) and (..., m) -> (..., m)."""
    hidden = bernoulli_from_uniform(rbm_hidden_logits(params, visible), hidden_uniforms)
    return bernoulli_from_uniform(rbm_visible_logits(params, hidden), visible_uniforms)


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


def ucd_weights(t: int | Array, k: int, met: Array) -> tuple[Array, Array]:
    """Weights of ``f(xi_t)`` and ``f(eta_{t-1})`` in the UCD estimator at step ``t``, (...).

    ``H = f(xi_k) + sum_{t=k+1}^{tau-1} [f(xi_t) - f(eta_{t-1})]`` with ``tau`` the first
    ``t >= 1`` with ``xi_t = eta_{t-1}``; ``met`` (...) says whether ``tau <= t``. ``H`` is an
    unbiased estimate of ``E_model[f]`` for any ``k >= 0`` (Jacob et al., 2017; Qiu et al.,
    2020, Sec. 3.3) when the chains meet in finite time. ``t`` may be an integer array (a
    traced loop counter).
    """
    xp = array_namespace(met)
    step = xp.asarray(t, device=_device(met))
    correcting = xp.astype(~met & (step > k), xp.float32)
    return correcting + xp.astype(step == k, xp.float32), correcting


def ais_log_weight_increment(
    log_density: Array, base_log_density: Array, beta_prev: float, beta: float
) -> Array:
    """AIS increment ``(beta - beta_prev) (f(x) - f_0(x))`` for the intermediate densities
    ``f_beta = (1 - beta) f_0 + beta f`` at the current state, (...). Summed over the
    schedule (with a transition leaving ``f_beta`` invariant after each increment), ``exp`` of
    the total has mean ``Z / Z_0``."""
    return (beta - beta_prev) * (log_density - base_log_density)
