"""The linear algebra of quadratic AB proposals (Sun et al., ICLR 2023, App. A.3 and Eq. 19).

``W`` is one symmetric (d, d) matrix fitted by least squares to burn-in pairs
``(y - x, grad f(y) - grad f(x))`` (:func:`fit_coupling`); the Gaussian integral trick needs a
diagonal ``D`` with ``W + D`` positive semi-definite (:func:`diagonal_shift`,
:func:`diagonal_min_trace`, :func:`diagonal_min_max_eigenvalue`) and the root
``(W + D)^{1/2}`` (:func:`psd_root`). Products that define ``W``, ``D`` and the root are taken
at full precision (:func:`discrete_kernels.precise_matmul`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from array_api_compat import device as _device

from .._xp import Array, array_namespace, precise_matmul, python_loop

__all__ = [
    "MAX_QUADRATIC_BYTES",
    "QUADRATIC_MATRICES",
    "QuadraticProposal",
    "QuadraticStats",
    "diagonal_min_max_eigenvalue",
    "diagonal_min_trace",
    "diagonal_shift",
    "fit_coupling",
    "fit_quadratic_proposal",
    "flatten_leaves",
    "min_trace_dual",
    "psd_root",
    "quadratic_from_coupling",
    "max_quadratic_dim",
    "quadratic_bytes",
    "quadratic_stats_init",
    "quadratic_stats_update",
    "split_flat",
]

VARIANTS = ("trace", "shift", "max")
"""The quadratic variants: how ``D`` is chosen."""

Loop = Callable[[int, Callable[[Any], Any], Any], Any]


# --------------------------------------------------------------------------------------------
# flat views of a tuple of leaves


def flatten_leaves(xs: Sequence[Array], like: Array, chains_in_rows: bool = False) -> Array:
    """Concatenate the leaves into one float vector of ``like``'s dtype, shape (d,); with
    ``chains_in_rows`` (leaves of shape (C, n_j)) one per chain, shape (C, d)."""
    xp = array_namespace(like)
    flat = (xs[0].shape[0], -1) if chains_in_rows else (-1,)
    return xp.concat([xp.reshape(xp.astype(x, like.dtype), flat) for x in xs], axis=-1)


def split_flat(v: Array, shapes: Sequence[tuple[int, ...]]) -> list[Array]:
    """Inverse of :func:`flatten_leaves` for the given leaf shapes."""
    xp = array_namespace(v)
    out, start = [], 0
    for shape in shapes:
        size = math.prod(shape)
        out.append(xp.reshape(v[start : start + size], shape))
        start += size
    return out


# --------------------------------------------------------------------------------------------
# W from burn-in pairs (App. A.3)


class QuadraticStats(NamedTuple):
    """Sufficient statistics of the least-squares fit of ``W``.

    - **gram** - (d, d) ``sum dx dx^T``; **cross** - (d, d) ``sum dx dg^T``;
    - **count** - number of pairs.
    """

    gram: Array
    cross: Array
    count: Array


def quadratic_stats_init(dim: int, like: Array) -> QuadraticStats:
    """Empty statistics for ``dim`` coordinates, dtype of ``like``."""
    xp = array_namespace(like)
    zeros = xp.zeros((dim, dim), dtype=like.dtype, device=_device(like))
    return QuadraticStats(zeros, zeros, xp.zeros_like(zeros[0, 0]))


def quadratic_stats_update(
    stats: QuadraticStats, dx: Array, dg: Array, weight: Array | float = 1.0
) -> QuadraticStats:
    """Add the pair ``(dx, dg)`` (both (d,)) with ``weight`` (0 or 1)."""
    wx = weight * dx
    return QuadraticStats(
        stats.gram + wx[:, None] * dx[None, :],
        stats.cross + wx[:, None] * dg[None, :],
        stats.count + weight,
    )


def fit_coupling(stats: QuadraticStats, ridge: float = 1e-6) -> Array:
    """Symmetric ``W`` minimising ``sum |W dx - dg|^2`` (Eq. 10), shape (d, d).

    The normal equations ``C W + W C = B + B^T`` (``C`` = gram, ``B`` = cross) are solved in
    the eigenbasis of ``C``: ``W~_ij = B~_ij / (c_i + c_j)``. ``ridge`` (relative to the mean
    of ``c``) shrinks directions the burn-in never moved along to zero.
    """
    xp = array_namespace(stats.gram)
    c, q = xp.linalg.eigh(stats.gram)
    dim = c.shape[0]
    scale = xp.maximum(xp.sum(c) / dim, xp.full_like(c[0], 1e-12))
    c = xp.maximum(c, xp.zeros_like(c)) + ridge * scale
    rhs = stats.cross + xp.matrix_transpose(stats.cross)
    # W, D and (W + D)^{1/2} at full precision: a GPU's reduced-precision products would
    # leave W + D with negative eigenvalues of the order of 1e-3 |W|
    qt = xp.matrix_transpose(q)
    rotated = precise_matmul(precise_matmul(qt, rhs), q)
    w = precise_matmul(precise_matmul(q, rotated / (c[:, None] + c[None, :])), qt)
    return (w + xp.matrix_transpose(w)) / 2


# --------------------------------------------------------------------------------------------
# the diagonal D with W + D positive semi-definite


def _min_eigenvalue(m: Array) -> Array:
    xp = array_namespace(m)
    return xp.linalg.eigvalsh(m)[0]


def _repair(w: Array, diag: Array) -> Array:
    """Shift ``diag`` up just enough that ``W + diag(d)`` is PSD (and keep it >= 0)."""
    xp = array_namespace(w)
    diag = xp.maximum(diag, xp.zeros_like(diag))
    lowest = _min_eigenvalue(w + _diag_matrix(diag))
    return diag + xp.maximum(-lowest, xp.zeros_like(lowest))


def _diag_matrix(v: Array) -> Array:
    xp = array_namespace(v)
    return xp.eye(v.shape[0], dtype=v.dtype, device=_device(v)) * v[None, :]


def diagonal_shift(w: Array, epsilon: float = 0.0) -> Array:
    """AB-shift: ``D = max(epsilon, -lambda_min(W)) I`` (Martens and Sutskever), shape (d,)."""
    xp = array_namespace(w)
    lowest = _min_eigenvalue(w)
    value = xp.maximum(-lowest, xp.full_like(lowest, epsilon))
    return xp.ones_like(w[0]) * value


def _spectral_norm(w: Array) -> Array:
    xp = array_namespace(w)
    values = xp.linalg.eigvalsh(w)
    return xp.maximum(xp.max(xp.abs(values)), xp.full_like(values[0], 1e-12))


def min_trace_dual(
    w: Array, num_iters: int = 300, rank: int | None = None, loop: Loop = python_loop
) -> Array:
    """Feasible point ``V`` (d, r) of the dual of :func:`diagonal_min_trace`:
    ``max -<W, V V^T>`` with rows ``|V_i| <= 1`` (Burer-Monteiro), by projected gradient
    ascent from the eigenvectors of the most negative eigenvalues. ``-<W, V V^T>`` is a lower
    bound on the optimal trace."""
    xp = array_namespace(w)
    dim = w.shape[0]
    rank = min(dim, int(math.ceil(math.sqrt(2 * dim))) + 1) if rank is None else rank
    _, q = xp.linalg.eigh(w)
    v = q[:, :rank] + 1e-3  # every row non-zero
    v = v / xp.linalg.vector_norm(v, axis=1, keepdims=True)
    step = 0.5 / _spectral_norm(w)

    def body(v: Array) -> Array:
        v = v - step * precise_matmul(w, v)
        norms = xp.linalg.vector_norm(v, axis=1, keepdims=True)
        return v / xp.maximum(norms, xp.ones_like(norms))

    return loop(num_iters, body, v)


def diagonal_min_trace(
    w: Array, num_iters: int = 300, rank: int | None = None, loop: Loop = python_loop
) -> Array:
    """AB-trace: ``D`` approximately minimising ``tr D`` subject to ``W + D ⪰ 0``, ``D ⪰ 0``
    (Eq. 19), shape (d,).

    Solved through the dual (:func:`min_trace_dual`, stopped early); complementary slackness
    ``(W + D) V = 0`` gives ``D_i = -(W V)_i . V_i``, and a final shift makes ``W + D`` PSD
    whatever the early stop left.
    """
    xp = array_namespace(w)
    v = min_trace_dual(w, num_iters, rank, loop)
    diag = -xp.sum(precise_matmul(w, v) * v, axis=1)
    return _repair(w, diag)


def diagonal_min_max_eigenvalue(w: Array, num_iters: int = 100, loop: Loop = python_loop) -> Array:
    """AB-max: ``D`` approximately minimising ``lambda_max(W + D)`` subject to ``W + D ⪰ 0``,
    ``D ⪰ 0``, shape (d,).

    With the constraint active this is minimising the spread ``lambda_max - lambda_min`` and
    shifting; done by subgradient descent (``v_max^2 - v_min^2``) from the shift solution,
    keeping the best iterate.
    """
    xp = array_namespace(w)
    start = xp.zeros_like(w[0])
    values = xp.linalg.eigvalsh(w)
    spread0 = values[-1] - values[0]

    def body(carry):
        diag, best, best_spread, k = carry
        values, q = xp.linalg.eigh(w + _diag_matrix(diag))
        spread = values[-1] - values[0]
        better = spread < best_spread
        best = xp.where(better, diag, best)
        best_spread = xp.where(better, spread, best_spread)
        gradient = q[:, -1] ** 2 - q[:, 0] ** 2
        rate = spread0 / (xp.sqrt(k + 1.0))
        return diag - rate * gradient, best, best_spread, k + 1.0

    carry = (start, start, spread0, xp.zeros_like(spread0))
    _, best, _, _ = loop(num_iters, body, carry)
    # shift so that lambda_min(W + D) = 0, then D >= 0
    return _repair(w, best - xp.min(best))


class QuadraticProposal(NamedTuple):
    """``root`` = ``(W + D)^{1/2}`` (d, d) and ``diag`` = ``D`` (d,)."""

    root: Array
    diag: Array


def psd_root(m: Array) -> Array:
    """Symmetric square root of a PSD matrix (negative round-off eigenvalues clipped)."""
    xp = array_namespace(m)
    values, q = xp.linalg.eigh((m + xp.matrix_transpose(m)) / 2)
    values = xp.maximum(values, xp.zeros_like(values))
    return precise_matmul(q * xp.sqrt(values)[None, :], xp.matrix_transpose(q))


def quadratic_from_coupling(w: Array, variant: str, loop: Loop = python_loop) -> QuadraticProposal:
    """``D`` for ``W`` (d, d) by ``variant`` ("trace", "shift" or "max") and the root of
    ``W + D``."""
    if variant == "shift":
        diag = diagonal_shift(w)
    elif variant == "trace":
        diag = diagonal_min_trace(w, loop=loop)
    elif variant == "max":
        diag = diagonal_min_max_eigenvalue(w, loop=loop)
    else:
        raise ValueError(f"variant must be one of {VARIANTS} here, got {variant!r}.")
    return QuadraticProposal(psd_root(w + _diag_matrix(diag)), diag)


def fit_quadratic_proposal(
    stats: QuadraticStats, variant: str, loop: Loop = python_loop
) -> tuple[QuadraticProposal, Array]:
    """``W`` from the burn-in statistics (:func:`fit_coupling`), then
    :func:`quadratic_from_coupling`. Returns ``(QuadraticProposal, W)``."""
    w = fit_coupling(stats)
    return quadratic_from_coupling(w, variant, loop), w


QUADRATIC_MATRICES = 3
"""``d x d`` matrices a quadratic AB chain keeps: the least-squares statistics ``gram`` and
``cross`` and the proposal's square root ``(W + D)^{1/2}`` (the fit adds temporaries)."""

MAX_QUADRATIC_BYTES = 8 * 2**30
"""Most memory (bytes, estimated at setup) the ``d x d`` matrices of a quadratic AB variant
may take per chain: :data:`QUADRATIC_MATRICES` of ``d^2`` values, counted at 4 bytes (float32)
even where they are float64. ``d = 10^6`` coordinates would need 10.9 TB; the limit allows
about 26,000. AB-1st keeps no matrix."""


def quadratic_bytes(dim: int) -> int:
    """Lower bound of the memory of a quadratic AB chain's matrices for ``dim`` coordinates."""
    return QUADRATIC_MATRICES * 4 * dim * dim


def max_quadratic_dim() -> int:
    """The most coordinates a quadratic AB variant takes under :data:`MAX_QUADRATIC_BYTES`."""
    return math.isqrt(MAX_QUADRATIC_BYTES // (QUADRATIC_MATRICES * 4))
