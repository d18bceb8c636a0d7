"""Any-scale balanced (AB) samplers (Sun, Dai, Sutton, Schuurmans and Dai, ICLR 2023).

The proposal weights ``(pi(y) / pi(x))^balance`` with a heat kernel of scale ``sigma`` (the
paper's ``alpha`` is called ``balance`` here, as in every sampler of this library, and its
``sigma`` is the kernels' ``step_size``):

- **AB-1st** approximates ``f(y) - f(x)`` to first order, which is the DLP proposal with this
  balance and step size ``sigma`` (:func:`discrete_kernels.dlp_step`).
- **Quadratic AB** adds ``(y - x)^T W (y - x) / 2`` with one symmetric ``W`` fitted to burn-in
  pairs ``(y - x, grad f(y) - grad f(x))`` (:func:`fit_coupling`). The resulting pairwise
  proposal is sampled with the Gaussian integral trick: for a diagonal ``D`` with
  ``M = W + D`` positive semi-definite and ``S = M^{1/2}``, an auxiliary
  ``u = sqrt(balance) S x + xi``, ``xi ~ N(0, I)``, makes ``y | x, u`` factorise:

  ``log q(y_i | x, u) = delta_i (balance g_i + sqrt(balance) (S xi)_i)
  - delta_i^2 (balance D_i + 1/sigma) / 2 + const``, with ``delta = y - x``.

  (Derivation: the joint ``Q(y, u | x) ∝ exp(balance delta^T g - balance delta^T D delta / 2
  - |delta|^2 / (2 sigma) + sqrt(balance) u^T S y - |u|^2 / 2)`` has the paper's Eq. 11 as its
  ``y``-marginal up to the ``x``-dependent factor that ``u`` absorbs.) The chain is MH on the
  extended space ``pi(x) N(u; sqrt(balance) S x, I)`` with ``u`` kept fixed and then refreshed,
  so ``log A = f(y) - f(x) + log q(x | y, u) - log q(y | x, u) + |xi|^2/2 - |xi'|^2/2`` with
  ``xi' = u - sqrt(balance) S y = xi - sqrt(balance) S (y - x)``.

``D`` comes from :func:`diagonal_shift` (``lambda I``), :func:`diagonal_min_trace` (the SDP
``min tr D`` subject to ``W + D ⪰ 0``, ``D ⪰ 0``, by its dual) or
:func:`diagonal_min_max_eigenvalue`. ``(sigma, balance)`` adapt by coordinate ascent on the mean
jump distance (App. A.2): :class:`ABTunerState`.

Quadratic variants need numeric leaves (binary, ordinal) with gradients; categorical leaves
have only AB-1st here (the one-hot algebra carries over, but it is not implemented).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from array_api_compat import device as _device

from ._xp import Array, array_namespace, precise_matmul, python_loop
from .domains import Categorical, Domain
from .proposals import dlp_leaf_log_prob, dlp_leaf_logits, dlp_leaf_sample
from .steps import ChainState, LocalFn, dlp_propose, mh_finish
from .validation import check_int, check_number

__all__ = [
    "AB_VARIANTS",
    "ABConfig",
    "ABTunerState",
    "QuadraticProposal",
    "QuadraticStats",
    "ABStepInfo",
    "ab_options",
    "ab_quadratic_logits",
    "ab_quadratic_propose",
    "ab_reverse_noise",
    "ab_step",
    "ab_tuner_init",
    "ab_tuner_parameters",
    "ab_tuner_restart",
    "ab_tuner_update",
    "balanced_exponent",
    "default_block_size",
    "default_burn_in",
    "diagonal_min_max_eigenvalue",
    "diagonal_min_trace",
    "diagonal_shift",
    "fit_coupling",
    "fit_quadratic_proposal",
    "flatten_leaves",
    "jump_distance",
    "min_trace_dual",
    "psd_root",
    "python_loop",
    "quadratic_from_coupling",
    "quadratic_stats_init",
    "quadratic_stats_update",
    "split_flat",
]

AB_VARIANTS = ("1st", "trace", "shift", "max")

Loop = Callable[[int, Callable[[Any], Any], Any], Any]


def balanced_exponent(r: Array | float) -> Array | float:
    """``balance(r) = (r - 2 + sqrt(r^2 + 4)) / (2 r)``, ``r = sigma / sigma_0``: the exponent that
    balances a heat kernel of scale ``sigma`` on a Gaussian of variance ``sigma_0`` (Eq. 6);
    1/2 as ``r -> 0`` and 1 as ``r -> inf``."""
    return (r - 2 + (r * r + 4) ** 0.5) / (2 * r)


# --------------------------------------------------------------------------------------------
# flat views of a tuple of leaves


def flatten_leaves(xs: Sequence[Array], like: Array) -> Array:
    """Concatenate the leaves into one float vector of ``like``'s dtype, shape (d,)."""
    xp = array_namespace(like)
    return xp.concat([xp.reshape(xp.astype(x, like.dtype), (-1,)) for x in xs])


def split_flat(v: Array, shapes: Sequence[tuple[int, ...]]) -> list[Array]:
    """Inverse of :func:`flatten_leaves` for the given leaf shapes."""
    xp = array_namespace(v)
    out, start = [], 0
    for shape in shapes:
        size = math.prod(shape)
        out.append(xp.reshape(v[start : start + size], shape))
        start += size
    return out


def jump_distance(domains: Sequence[Domain], xs: Sequence[Array], ys: Sequence[Array]) -> Array:
    """``sum |y - x|`` over numeric leaves plus the number of changed categorical
    coordinates (scalar): the jump distance the (sigma, balance) tuner maximises."""
    xp = array_namespace(xs[0])
    total = None
    for d, x, y in zip(domains, xs, ys):
        if isinstance(d, Categorical):
            part = xp.sum(xp.astype(x != y, xp.float32))
        else:
            part = xp.sum(xp.abs(xp.astype(y, xp.float32) - xp.astype(x, xp.float32)))
        total = part if total is None else total + part
    return total


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
        raise ValueError(f"variant must be one of {AB_VARIANTS[1:]} here, got {variant!r}.")
    return QuadraticProposal(psd_root(w + _diag_matrix(diag)), diag)


def fit_quadratic_proposal(
    stats: QuadraticStats, variant: str, loop: Loop = python_loop
) -> tuple[QuadraticProposal, Array]:
    """``W`` from the burn-in statistics (:func:`fit_coupling`), then
    :func:`quadratic_from_coupling`. Returns ``(QuadraticProposal, W)``."""
    w = fit_coupling(stats)
    return quadratic_from_coupling(w, variant, loop), w


# --------------------------------------------------------------------------------------------
# the quadratic step


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
    list of arrays, as :func:`discrete_kernels.dlp_leaf_logits` (balance 1, the linear term
    ``balance g + sqrt(balance) S xi``, per-coordinate step ``sigma / (1 + balance sigma D)``).
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
    forward = ab_quadratic_logits(
        domains, state.x, state.local, quadratic.root @ normals, quadratic, sigma, balance
    )
    ys = tuple(
        dlp_leaf_sample(d, x, lg, u)
        for d, x, lg, u in zip(domains, state.x, forward, proposal_uniforms)
    )
    log_q_forward = sum(
        dlp_leaf_log_prob(d, x, y, lg) for d, x, y, lg in zip(domains, state.x, ys, forward)
    )
    f_y, local_y = local_fn(ys)
    proposal = ChainState(ys, f_y, tuple(local_y))
    xi_reverse = ab_reverse_noise(normals, state.x, ys, quadratic, balance)
    reverse = ab_quadratic_logits(
        domains, ys, proposal.local, quadratic.root @ xi_reverse, quadratic, sigma, balance
    )
    log_q_reverse = sum(
        dlp_leaf_log_prob(d, y, x, lg) for d, x, y, lg in zip(domains, state.x, ys, reverse)
    )
    log_q_forward = log_q_forward - 0.5 * xp.sum(normals * normals)
    log_q_reverse = log_q_reverse - 0.5 * xp.sum(xi_reverse * xi_reverse)
    return proposal, log_q_forward, log_q_reverse


class ABStepInfo(NamedTuple):
    """:class:`~discrete_kernels.StepInfo` plus what the adaptation needs.

    - **jump** - ``accept_prob * jump_distance(x, y)``: expected jump of this step.
    - **dx**, **dg** - (d,) ``y - x`` and ``grad f(y) - grad f(x)`` of the proposal (zeros
      when a leaf has no gradient).
    """

    accept_prob: Array
    accepted: Array
    hamming_distance: Array
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
) -> tuple[ChainState, ABStepInfo]:
    """One AB transition, MH corrected: AB-1st when ``quadratic`` is None, otherwise the
    quadratic proposal with the Gaussian integral trick (``normals`` of shape (d,)).

    Returns
    -------
    (ChainState, ABStepInfo)
    """
    if quadratic is None:
        proposal, log_q_forward, log_q_reverse = dlp_propose(
            state,
            proposal_uniforms,
            local_fn=local_fn,
            domains=domains,
            is_table=is_table,
            step_size=sigma,
            balance=balance,
        )
    else:
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
    new, info = mh_finish(state, proposal, log_q_forward, log_q_reverse, accept_uniform, True)
    like = proposal.log_density
    xp = array_namespace(like)
    gradients = [
        (x_loc, y_loc) for x_loc, y_loc, t in zip(state.local, proposal.local, is_table) if not t
    ]
    dx = flatten_leaves(proposal.x, like) - flatten_leaves(state.x, like)
    if len(gradients) == len(domains):
        dg = flatten_leaves([b for _, b in gradients], like) - flatten_leaves(
            [a for a, _ in gradients], like
        )
        dg = xp.where(xp.isfinite(dg), dg, xp.zeros_like(dg))
    else:
        dg = xp.zeros_like(dx)
    jump = info.accept_prob * xp.astype(jump_distance(domains, state.x, proposal.x), like.dtype)
    return new, ABStepInfo(*info, jump=jump, dx=dx, dg=dg)


# --------------------------------------------------------------------------------------------
# adaptive (sigma, balance): coordinate ascent on the jump distance (App. A.2, Alg. 3-4)


class ABConfig(NamedTuple):
    """Settings of the AB kernels (defaults from App. A.2, plus ``max_doublings``).

    ``max_doublings`` > 0 extends the paper's search: while the same direction keeps winning
    for a coordinate, its probes move by ``(1 +- rate)^(2^k)`` (``k`` consecutive wins, at most
    ``max_doublings``), so a start far from the optimum (the default ``sigma = 0.1`` on a
    target that wants ``sigma = 10``) is left in a few rounds instead of dozens; a round that
    keeps ``theta`` or reverses direction returns to ``(1 +- rate)``. ``max_doublings = 0`` is
    Alg. 3-4 exactly.

    ``initial_steps``: warmup steps that first adapt ``sigma`` by dual averaging towards
    acceptance 0.574 at the initial balance (DMALA's rule), before the jump-distance search
    starts from there (:func:`default_initial_steps` when None; 0 is the paper's start at
    ``sigma``). The search then only refines a step size of the right scale instead of
    climbing to it from 0.1 a factor ``(1 + rate)^8`` per round at best.
    """

    variant: str = "1st"
    sigma: float = 0.1
    balance: float = 0.5
    rate: float = 0.2
    decay: float = 0.9
    block_size: int | None = 100
    balance_bounds: tuple[float, float] = (0.5, 1.0)  # the balanced range of Eq. 6
    burn_in: int | None = None
    max_doublings: int = 3
    restart_sigma_factor: float = 100.0
    initial_steps: int | None = None


class ABTunerState(NamedTuple):
    """State of the (sigma, balance) search; all scalar arrays.

    - **sigma**, **balance** - current values; **rate** - ``gamma``.
    - **coordinate** - 0 while tuning sigma, 1 while tuning balance.
    - **probe** - 0, 1, 2 for ``theta``, ``theta`` scaled up, ``theta`` scaled down.
    - **count** - steps taken in this probe's block.
    - **jump_base**, **jump_plus**, **jump_minus** - summed expected jumps of the three probes.
    - **round_sigma**, **round_balance** - values at the start of the round (to decay ``gamma``).
    - **sigma_streak**, **balance_streak** - signed count of consecutive wins in one direction.
    """

    sigma: Array
    balance: Array
    rate: Array
    coordinate: Array
    probe: Array
    count: Array
    jump_base: Array
    jump_plus: Array
    jump_minus: Array
    round_sigma: Array
    round_balance: Array
    sigma_streak: Array
    balance_streak: Array


def ab_options(
    variant: str,
    sigma: Any,
    balance: Any,
    rate: Any,
    decay: Any,
    block_size: Any,
    burn_in: Any,
    name: str = "AB",
    max_doublings: Any = 3,
    initial_steps: Any = None,
) -> ABConfig:
    """Validate the AB kernels' options once for both adapters."""
    if variant not in AB_VARIANTS:
        raise ValueError(f"{name}: variant must be one of {AB_VARIANTS}, got {variant!r}.")
    sigma = check_number(name, "step_size (sigma)", sigma)
    balance = check_number(name, "balance", balance, high=1.0, high_inclusive=True)
    rate = check_number(name, "rate", rate, high=1.0)
    decay = check_number(name, "decay", decay, high=1.0, high_inclusive=True)
    if block_size is not None:
        block_size = check_int(name, "block_size", block_size, minimum=1)
    if burn_in is not None:
        burn_in = check_int(name, "burn_in", burn_in, minimum=1)
    if initial_steps is not None:
        initial_steps = check_int(name, "initial_steps", initial_steps)
    max_doublings = check_int(name, "max_doublings", max_doublings)
    if max_doublings > 10:
        raise ValueError(f"{name}: max_doublings must be an int in [0, 10], got {max_doublings}.")
    return ABConfig(
        variant=variant,
        sigma=float(sigma),
        balance=float(balance),
        rate=float(rate),
        decay=float(decay),
        block_size=block_size,
        burn_in=burn_in,
        max_doublings=max_doublings,
        initial_steps=initial_steps,
    )


def ab_tuner_init(config: ABConfig, like: Array) -> ABTunerState:
    """Tuner at ``(sigma, balance)`` of ``config``; dtype of ``like``."""
    xp = array_namespace(like)
    device = _device(like)
    scalar = lambda v: xp.asarray(v, dtype=like.dtype, device=device)  # noqa: E731
    integer = lambda v: xp.asarray(v, device=device)  # noqa: E731
    zero = scalar(0.0)
    return ABTunerState(
        sigma=scalar(config.sigma),
        balance=scalar(config.balance),
        rate=scalar(config.rate),
        coordinate=integer(0),
        probe=integer(0),
        count=integer(0),
        jump_base=zero,
        jump_plus=zero,
        jump_minus=zero,
        round_sigma=scalar(config.sigma),
        round_balance=scalar(config.balance),
        sigma_streak=integer(0),
        balance_streak=integer(0),
    )


def _probe_factors(state: ABTunerState, config: ABConfig) -> tuple[Array, Array]:
    """Up and down factors of the coordinate being tuned: ``(1 + gamma)^e`` and
    ``(1 - gamma)^e`` with ``e = 2^k`` after ``k`` consecutive wins that way (else 1)."""
    xp = array_namespace(state.rate)
    streak = xp.where(state.coordinate == 0, state.sigma_streak, state.balance_streak)
    cap = config.max_doublings
    up_power = xp.where(
        streak > 0, 2.0 ** xp.astype(xp.minimum(streak, cap), state.rate.dtype), 1.0
    )
    down_power = xp.where(
        streak < 0, 2.0 ** xp.astype(xp.minimum(-streak, cap), state.rate.dtype), 1.0
    )
    one = xp.ones_like(state.rate)
    return (one + state.rate) ** up_power, (one - state.rate) ** down_power


def _probe_factor(state: ABTunerState, config: ABConfig) -> Array:
    xp = array_namespace(state.rate)
    up, down = _probe_factors(state, config)
    return xp.where(state.probe == 1, up, xp.where(state.probe == 2, down, xp.ones_like(up)))


def _clip_balance(balance: Array, config: ABConfig) -> Array:
    xp = array_namespace(balance)
    low, high = config.balance_bounds
    return xp.clip(balance, low, high)


def ab_tuner_parameters(
    state: ABTunerState, config: ABConfig, tuning: Array | bool = True
) -> tuple[Array, Array]:
    """``(sigma, balance)`` of the next step: the probe's values while ``tuning``, otherwise
    the current best."""
    xp = array_namespace(state.sigma)
    tuning = xp.asarray(tuning, device=_device(state.sigma))
    factor = xp.where(tuning, _probe_factor(state, config), xp.ones_like(state.rate))
    on_sigma = state.coordinate == 0
    sigma = xp.where(on_sigma, state.sigma * factor, state.sigma)
    balance = xp.where(on_sigma, state.balance, _clip_balance(state.balance * factor, config))
    return sigma, balance


def _next_streak(streak: Array, direction: Array) -> Array:
    xp = array_namespace(streak)
    up = xp.where(streak > 0, streak + 1, xp.ones_like(streak))
    down = xp.where(streak < 0, streak - 1, -xp.ones_like(streak))
    return xp.where(direction > 0, up, xp.where(direction < 0, down, xp.zeros_like(streak)))


def ab_tuner_update(
    state: ABTunerState, jump: Array, config: ABConfig, block_size: int
) -> ABTunerState:
    """Record one step's expected jump; at the end of the third block of a coordinate keep
    the best of ``theta`` and its two probes (ties as in Alg. 4: up, then down, then stay) and
    move to the other coordinate; after a round (sigma then balance) with no change,
    ``gamma <- decay * gamma``.

    Unlike the pseudo-code of Alg. 3, where the balance block still runs at the old sigma, the
    new sigma is used at once (plain coordinate ascent).
    """
    xp = array_namespace(state.sigma)
    zero = xp.zeros_like(jump)
    base = state.jump_base + xp.where(state.probe == 0, jump, zero)
    plus = state.jump_plus + xp.where(state.probe == 1, jump, zero)
    minus = state.jump_minus + xp.where(state.probe == 2, jump, zero)
    count = state.count + 1
    block_done = count >= block_size
    probe = xp.where(block_done, state.probe + 1, state.probe)
    count = xp.where(block_done, xp.zeros_like(count), count)
    decided = probe >= 3
    # Alg. 4's order: the up probe wins ties, then the down probe, then theta; so a chain
    # that never moves at a tiny sigma (all jumps 0) still grows it
    go_up = (plus >= base) & (plus >= minus)
    go_down = ~go_up & (minus >= base)
    up, down = _probe_factors(state, config)
    factor = xp.where(go_up, up, xp.where(go_down, down, xp.ones_like(up)))
    direction = xp.where(go_up, 1, xp.where(go_down, -1, 0))
    on_sigma = state.coordinate == 0
    sigma = xp.where(decided & on_sigma, state.sigma * factor, state.sigma)
    scaled = _clip_balance(state.balance * factor, config)
    balance = xp.where(decided & ~on_sigma, scaled, state.balance)
    # a probe clipped onto the current balance is no move
    direction = xp.where(~on_sigma & (balance == state.balance), 0, direction)
    sigma_streak = xp.where(
        decided & on_sigma, _next_streak(state.sigma_streak, direction), state.sigma_streak
    )
    balance_streak = xp.where(
        decided & ~on_sigma, _next_streak(state.balance_streak, direction), state.balance_streak
    )
    round_done = decided & ~on_sigma
    unchanged = (sigma == state.round_sigma) & (balance == state.round_balance)
    rate = xp.where(round_done & unchanged, state.rate * config.decay, state.rate)
    return ABTunerState(
        sigma=sigma,
        balance=balance,
        rate=rate,
        coordinate=xp.where(decided, 1 - state.coordinate, state.coordinate),
        probe=xp.where(decided, xp.zeros_like(probe), probe),
        count=count,
        jump_base=xp.where(decided, zero, base),
        jump_plus=xp.where(decided, zero, plus),
        jump_minus=xp.where(decided, zero, minus),
        round_sigma=xp.where(round_done, sigma, state.round_sigma),
        round_balance=xp.where(round_done, balance, state.round_balance),
        sigma_streak=sigma_streak,
        balance_streak=balance_streak,
    )


def ab_tuner_restart(state: ABTunerState, config: ABConfig) -> ABTunerState:
    """Restart the search when ``W`` has just been fitted, at ``balance = 1`` and
    ``sigma * config.restart_sigma_factor``, a fresh round and the base rate.

    At ``balance = 1`` and ``sigma -> inf`` the quadratic proposal is a Gibbs step of the
    auxiliary-variable model, exact (acceptance 1) for a quadratic target; the first-order
    burn-in's optimum is usually far below it. ``restart_sigma_factor = 0`` keeps the search
    where it was (Alg. 1, which just continues).
    """
    if config.restart_sigma_factor == 0:
        return state
    xp = array_namespace(state.sigma)
    fresh = ab_tuner_init(config, state.sigma)
    sigma = state.sigma * config.restart_sigma_factor
    balance = xp.ones_like(state.balance) * config.balance_bounds[1]
    return fresh._replace(sigma=sigma, balance=balance, round_sigma=sigma, round_balance=balance)


def default_block_size(num_warmup: int, config: ABConfig) -> int:
    """Steps per probe block: ``config.block_size``, or when None the paper's 100 shortened
    so that a warmup holds twenty rounds of six blocks, but never below 20 (shorter blocks
    make the jump estimates too noisy to rank the probes)."""
    if config.block_size is not None:
        return config.block_size
    return int(max(20, min(100, num_warmup // 120)))


def default_initial_steps(num_warmup: int, config: ABConfig) -> int:
    """Steps of dual averaging on ``sigma`` before the search: ``config.initial_steps`` or a
    quarter of the warmup, at most 500 (dual averaging settles in about a hundred steps)."""
    if config.initial_steps is not None:
        return min(config.initial_steps, num_warmup)
    return min(num_warmup // 4, 500)


def default_burn_in(num_warmup: int, config: ABConfig) -> int:
    """Steps of AB-1st before ``W`` is fitted: ``config.burn_in`` or half the warmup."""
    if config.burn_in is not None:
        return config.burn_in
    return max(1, num_warmup // 2)


class ABWarmupPlan(NamedTuple):
    """When the warmup of an AB kernel does what (decided once, for both adapters).

    - **block_size** - steps per tuner probe.
    - **burn_in** - warmup steps whose proposal pairs fit ``W`` (0: no fit in this run).
    - **restart** - restart the tuner after the fit (only when tuning goes on after it).
    - **initial_steps** - first warmup steps, dual averaging of ``sigma``.
    """

    block_size: int
    burn_in: int
    restart: bool
    initial_steps: int = 0


def ab_warmup_plan(
    config: ABConfig, num_warmup: int, *, adapt: bool, fit_w: bool, name: str = "AB"
) -> ABWarmupPlan:
    """The warmup schedule of an AB run of ``num_warmup`` steps.

    ``fit_w``: a quadratic variant without a given ``coupling``. Refuses a ``burn_in`` longer
    than the warmup (``W`` would be fitted in the middle of sampling). The tuner restarts at
    ``(sigma x restart_sigma_factor, balance = 1)`` after the fit only when warmup steps remain to
    tune from there; with ``burn_in == num_warmup`` sampling keeps the tuned values.
    """
    if fit_w and config.burn_in is not None and config.burn_in > num_warmup:
        raise ValueError(
            f"{name}: burn_in={config.burn_in} is longer than the warmup ({num_warmup} steps); "
            "W is fitted from warmup steps only. Lower burn_in or lengthen the warmup."
        )
    burn_in = default_burn_in(num_warmup, config) if fit_w and num_warmup > 0 else 0
    restart = adapt and 0 < burn_in < num_warmup
    initial = default_initial_steps(num_warmup, config) if adapt else 0
    return ABWarmupPlan(default_block_size(num_warmup - initial, config), burn_in, restart, initial)
