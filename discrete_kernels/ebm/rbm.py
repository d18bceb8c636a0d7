"""Ready-made energies of the EBM trainers: the Bernoulli RBM (block conditionals, free
energy, exact log partition function and log-likelihood by enumerating the smaller layer), the
lattice Ising energy, and the bars-and-stripes data.

Bernoulli RBM: ``E(v, h) = -v.b - v W h - h.c`` with ``v`` (m,) and ``h`` (n,) binary.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from array_api_compat import device as _device

from .._xp import Array, array_namespace, log_sigmoid, logsumexp, precise_matmul, sigmoid

__all__ = [
    "RBMParams",
    "RBMState",
    "bars_and_stripes",
    "bernoulli_from_uniform",
    "bernoulli_log_prob",
    "binary_states",
    "lattice_ising_energy",
    "lattice_ising_energy_and_input_grad",
    "lattice_mask",
    "rbm_free_energy",
    "rbm_free_energy_and_input_grad",
    "rbm_gibbs_step",
    "rbm_hidden_logits",
    "rbm_log_likelihood",
    "rbm_log_partition",
    "rbm_visible_logits",
    "rbm_visible_sweep",
]


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
    spins, coupled = _spins_and_coupled(couplings, mask, x)
    return _ising_energy_at(spins, coupled, field)


def lattice_ising_energy_and_input_grad(
    couplings: Array, field: Array, mask: Array, x: Array
) -> tuple[Array, Array]:
    """``(E(x), dE/dx)`` of :func:`lattice_ising_energy` in closed form: with ``J``
    symmetric, ``dE/ds = -(s J + h)`` and ``dE/dx = 2 dE/ds``, ``s J`` computed once for
    both: (..., d) -> ((...), (..., d))."""
    spins, coupled = _spins_and_coupled(couplings, mask, x)
    return _ising_energy_at(spins, coupled, field), -2.0 * (coupled + field)


def _spins_and_coupled(couplings: Array, mask: Array, x: Array) -> tuple[Array, Array]:
    """``(s, s J)``: the spins ``2x - 1`` and their product with the symmetrised couplings."""
    xp = array_namespace(x)
    s = 2.0 * x - 1.0
    j = couplings * mask
    j = (j + xp.matrix_transpose(j)) / 2
    return s, precise_matmul(s, j)


def _ising_energy_at(spins: Array, coupled: Array, field: Array) -> Array:
    xp = array_namespace(spins)
    return -(0.5 * xp.sum(coupled * spins, axis=-1) + xp.sum(spins * field, axis=-1))


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


def _softplus(x: Array) -> Array:
    xp = array_namespace(x)
    return xp.logaddexp(xp.zeros_like(x), x)


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
    return _free_energy_at(params, visible, rbm_hidden_logits(params, visible))


def _free_energy_at(params: RBMParams, visible: Array, hidden_logits: Array) -> Array:
    """:func:`rbm_free_energy` given the hidden logits ``v W + c``."""
    xp = array_namespace(visible)
    hidden_term = xp.sum(_softplus(hidden_logits), axis=-1)
    return -xp.sum(visible * params.visible_bias, axis=-1) - hidden_term


def rbm_free_energy_and_input_grad(params: RBMParams, visible: Array) -> tuple[Array, Array]:
    """``(F(v), dF/dv)`` in closed form: ``dF/dv = -b - sigmoid(v W + c) W^T``, the gradient
    of :func:`rbm_free_energy` (``d softplus(h) / dh = sigmoid(h)``), with the hidden logits
    computed once for both: (..., m) -> ((...), (..., m)). What the torch trainer's samplers
    read instead of an autograd pass (eager torch: a few operations against a backward
    graph per step)."""
    xp = array_namespace(visible)
    hidden_logits = rbm_hidden_logits(params, visible)
    free_energy = _free_energy_at(params, visible, hidden_logits)
    weights_t = xp.matrix_transpose(params.weights)
    input_grad = -params.visible_bias - precise_matmul(sigmoid(hidden_logits), weights_t)
    return free_energy, input_grad


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
