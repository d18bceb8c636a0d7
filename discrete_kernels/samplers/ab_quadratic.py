"""The quadratic AB proposal, sampled with the Gaussian integral trick (Sun et al., ICLR 2023,
Eq. 11-14; the derivation is in :mod:`discrete_kernels.samplers.ab`'s docstring): per-leaf
logits of ``y | x, u``, the auxiliary noise seen from the proposal, and the proposal with its
two log densities."""

from __future__ import annotations

from collections.abc import Sequence

from .._xp import Array, array_namespace, sum_of
from ..domains import Domain
from ..kernel import ChainState, LocalFn, propose
from .ab_linalg import QuadraticProposal, flatten_leaves, split_flat
from .dlp_proposal import dlp_leaf_log_prob, dlp_leaf_logits, dlp_leaf_sample

__all__ = ["ab_quadratic_logits", "ab_quadratic_propose", "ab_reverse_noise"]


def ab_quadratic_logits(
    domains: Sequence[Domain],
    xs: Sequence[Array],
    grads: Sequence[Array],
    root_noise: Array,
    quadratic: QuadraticProposal,
    sigma: Array | float,
    balance: Array | float,
) -> list[Array]:
    """Per-leaf logits of ``y | x, u`` (see the module docstring).

    Parameters
    ----------
    domains, xs, grads : per leaf (numeric domains, gradients of the shape of the leaf)
    root_noise : array, shape (d,)
        ``S xi`` for the auxiliary noise ``xi`` of this side of the move.
    quadratic : QuadraticProposal
    sigma, balance : scalars

    Returns
    -------
    list of arrays, as :func:`~discrete_kernels.samplers.dlp.dlp_leaf_logits` (balance 1, the
    linear term ``balance g + sqrt(balance) S xi``, per-coordinate step
    ``sigma / (1 + balance sigma D)``).
    """
    xp = array_namespace(root_noise)
    shapes = [x.shape for x in xs]
    sqrt_balance = balance**0.5
    noise = split_flat(sqrt_balance * root_noise, shapes)
    shrink = split_flat(1.0 / (1.0 + balance * sigma * quadratic.diag), shapes)
    out = []
    for d, x, g, n, p in zip(domains, xs, grads, noise, shrink):
        linear = balance * g + xp.astype(n, g.dtype)
        out.append(dlp_leaf_logits(d, x, linear, False, sigma, 1.0, xp.astype(p, g.dtype)))
    return out


def ab_reverse_noise(
    xi: Array, xs: Sequence[Array], ys: Sequence[Array], quadratic: QuadraticProposal, balance
) -> Array:
    """``xi' = xi - sqrt(balance) S (y - x)``: the auxiliary noise seen from ``y``, shape (d,)."""
    dx = flatten_leaves(ys, xi) - flatten_leaves(xs, xi)
    return xi - balance**0.5 * (quadratic.root @ dx)


def ab_quadratic_propose(
    state: ChainState,
    proposal_uniforms: Sequence[Array],
    normals: Array,
    *,
    local_fn: LocalFn,
    domains: Sequence[Domain],
    quadratic: QuadraticProposal,
    sigma: Array | float,
    balance: Array | float,
) -> tuple[ChainState, Array, Array]:
    """Draw a quadratic AB proposal: ``(proposal, log Q(u, y | x), log Q(u, x | y))``.

    ``normals`` (d,) is ``xi``; the returned log densities include the auxiliary terms
    ``-|xi|^2 / 2`` and ``-|xi'|^2 / 2`` (the shared ``(2 pi)^{-d/2}`` cancels).
    """
    xp = array_namespace(normals)

    def side_noise(chain: ChainState, origin: ChainState | None) -> Array:
        """``xi`` seen from ``chain``: the drawn one forward, ``xi'`` from the proposal."""
        if origin is None:
            return normals
        return ab_reverse_noise(normals, origin.x, chain.x, quadratic, balance)

    def logits_at(chain: ChainState, origin: ChainState | None) -> list:
        root_noise = quadratic.root @ side_noise(chain, origin)
        return ab_quadratic_logits(
            domains, chain.x, chain.local, root_noise, quadratic, sigma, balance
        )

    def log_prob(xs: Sequence[Array], ys: Sequence[Array], logits: list) -> Array:
        return sum_of(
            [dlp_leaf_log_prob(d, x, y, lg) for d, x, y, lg in zip(domains, xs, ys, logits)]
        )

    def sample(chain: ChainState, logits: list) -> tuple[tuple, Array]:
        ys = tuple(
            dlp_leaf_sample(d, x, lg, u)
            for d, x, lg, u in zip(domains, chain.x, logits, proposal_uniforms)
        )
        return ys, log_prob(chain.x, ys, logits)

    proposal, log_q_forward, log_q_reverse = propose(state, local_fn, logits_at, sample, log_prob)
    xi_reverse = side_noise(proposal, state)
    log_q_forward = log_q_forward - 0.5 * xp.sum(normals * normals)
    log_q_reverse = log_q_reverse - 0.5 * xp.sum(xi_reverse * xi_reverse)
    return proposal, log_q_forward, log_q_reverse
