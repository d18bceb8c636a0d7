"""Energy-sampling Hamiltonian (ESH) dynamics (Ver Steeg and Galstyan, NeurIPS 2021) for
continuous targets, backend-neutral and batched over chains: the integrator, trajectories and
Jarzynski weights (the kernel and its warmup: :mod:`discrete_kernels.samplers.esh`).

Time-scaled dynamics (Eq. 6) for ``pi(x) ∝ exp(f(x))`` in ``d`` dimensions, with ``x``,
the unit direction ``u = v / |v|`` and the log speed ``r = log |v|``:
``dx/dt = u``, ``du/dt = (I - u u^T) grad f / d``, ``dr/dt = u . grad f / d``. The Hamiltonian
``H = -f(x) + d r`` (up to a constant) is conserved. The leapfrog (Eq. 7, App. B.1) is a half
step of ``u`` and ``r``, a full step ``x += eps u``, and another half step, one gradient per
step. Samples come from the trajectory: the paper weights each point by ``|v| = exp(r)``
(reservoir sampling, Alg. 3); :func:`esh_trajectory` by default uses the exact version of
that weight on a randomly placed orbit (:func:`orbit_log_weight`), which makes the restarted
kernel exactly invariant. Jarzynski importance weights ``w = f(x_0) - f_0(x_0) + r(t)``
(Alg. 4) also estimate ``log Z``.

Shapes: positions and directions are (..., d) with any leading batch axes (chains); scalars
per chain are (...). BlackJAX's MCLMC uses ``d - 1`` where the paper uses ``d``; this module
follows the paper.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from array_api_compat import device as _device

from .._xp import Array, array_namespace, python_loop

__all__ = [
    "ESHState",
    "ESHTrajectoryInfo",
    "esh_half_step",
    "esh_hamiltonian",
    "esh_leapfrog",
    "esh_trajectory",
    "jarzynski_log_weights",
    "orbit_log_weight",
    "log_mean_exp_with_error",
    "unit_vector",
]

ValueAndGrad = Callable[[Array], tuple[Array, Array]]


class ESHState(NamedTuple):
    """A point of the ESH dynamics.

    - **x** - (..., d) position; **u** - (..., d) unit direction; **r** - (...) log speed.
    - **log_density** - (...) ``f(x)``; **grad** - (..., d) ``grad f(x)`` (cached, so a
      leapfrog step costs one gradient).
    """

    x: Array
    u: Array
    r: Array
    log_density: Array
    grad: Array


def unit_vector(normals: Array) -> Array:
    """Uniform direction on the sphere from standard normals (..., d)."""
    xp = array_namespace(normals)
    return normals / xp.linalg.vector_norm(normals, axis=-1, keepdims=True)


def _norm(v: Array) -> Array:
    """Euclidean norm over the last axis, (..., 1), scaled so that huge entries do not
    overflow when squared."""
    xp = array_namespace(v)
    top = xp.max(xp.abs(v), axis=-1, keepdims=True)
    safe = xp.where(top > 0, top, xp.ones_like(top))
    return top * xp.linalg.vector_norm(v / safe, axis=-1, keepdims=True)


def _dot(a: Array, b: Array) -> Array:
    xp = array_namespace(a)
    return xp.sum(a * b, axis=-1)


def esh_half_step(u: Array, grad: Array, step: Array | float) -> tuple[Array, Array]:
    """Exact solution of the ``u`` and ``r`` equations for time ``step`` at fixed gradient.

    With ``e = grad / |grad|`` (the ascent direction of ``f``), ``delta = step |grad| / d``,
    ``ue = u . e`` and ``A2 = (ue - 1) exp(-2 delta)``:
    ``u' ∝ (1 + ue + A2) e + 2 exp(-delta) (u - ue e)`` (renormalised) and
    ``dr = delta + log((1 + ue - A2) / 2)``: the paper's update multiplied through by
    ``2 exp(-delta)`` so that large gradients underflow instead of overflowing. When
    ``ue = -1`` exactly, ``u`` stays ``-e`` and ``dr = -delta``; a zero gradient changes
    nothing.

    Parameters
    ----------
    u : array (..., d), unit
    grad : array (..., d), ``grad f``
    step : scalar

    Returns
    -------
    (u', dr) : arrays (..., d) and (...)
    """
    xp = array_namespace(u)
    dim = u.shape[-1]
    norm = _norm(grad)
    zero_grad = norm[..., 0] == 0
    safe_norm = xp.where(norm > 0, norm, xp.ones_like(norm))
    e = grad / safe_norm
    delta = step * norm[..., 0] / dim
    ue = _dot(u, e)
    decay = xp.exp(-delta)
    a2 = (ue - 1.0) * decay * decay
    new_u = (1.0 + ue + a2)[..., None] * e + 2.0 * decay[..., None] * (u - ue[..., None] * e)
    new_norm = xp.linalg.vector_norm(new_u, axis=-1, keepdims=True)
    stuck = (ue <= -1.0) | (new_norm[..., 0] == 0) | zero_grad
    new_u = xp.where(stuck[..., None], u, new_u / xp.where(new_norm > 0, new_norm, 1.0))
    inside = 1.0 + ue - a2
    dr = delta + xp.log(xp.where(inside > 0, inside, xp.ones_like(inside)) / 2.0)
    dr = xp.where(ue <= -1.0, -delta, dr)
    dr = xp.where(zero_grad, xp.zeros_like(dr), dr)
    return new_u, dr


def esh_leapfrog(
    state: ESHState, step_size: Array | float, value_and_grad: ValueAndGrad
) -> ESHState:
    """One time-scaled leapfrog step of size ``step_size`` (one ``value_and_grad``).

    ``value_and_grad(x) -> (f, grad f)`` acts on (..., d).
    """
    u_half, dr_first = esh_half_step(state.u, state.grad, step_size / 2)
    x = state.x + step_size * u_half
    f, grad = value_and_grad(x)
    u, dr_second = esh_half_step(u_half, grad, step_size / 2)
    return ESHState(x, u, state.r + dr_first + dr_second, f, grad)


def esh_hamiltonian(state: ESHState) -> Array:
    """``H = -f(x) + d r`` (the paper's ``E(x) + d/2 log(v^2 / d)`` up to a constant), (...)."""
    return -state.log_density + state.x.shape[-1] * state.r


class ESHTrajectoryInfo(NamedTuple):
    """Per-trajectory statistics, each (...).

    - **hamiltonian_drift** - largest ``|H(t) - H(0)|`` along the trajectory (its usable
      points).
    - **selected_step** - signed position of the draw on the orbit (0 = the start).
    - **max_weight_fraction** - the largest selection weight of a usable point over their sum,
      in ``[0, 1]``: near 1 when one point (often the start) carries the whole orbit, because
      the step is too long for the target's scale or every step leaves the target's support.
      1 when no point is usable.
    """

    hamiltonian_drift: Array
    selected_step: Array
    max_weight_fraction: Array


def orbit_log_weight(state: ESHState, start: ESHState) -> Array:
    """Log weight of an orbit point for the exact kernel, (...):
    ``f(x_k) - f(x_0) - (d - 1) r_k``.

    The shell measure ``pi(x) du`` is carried by the leapfrog with Jacobian
    ``exp(-(d - 1) r_k)`` in ``(x, u)`` (each half step solves the ``u`` equation exactly at
    fixed gradient, with divergence ``-(d - 1) u . g / d = -(d - 1) dr/dt``; the ``x`` step
    is a shear), so this is ``pi(x_k) J_k / pi(x_0)``. With exact energy conservation
    (``f(x_k) - f(x_0) = d r_k``) it is the paper's ``|v| = exp(r_k)``.
    """
    dim = state.x.shape[-1]
    return state.log_density - start.log_density - (dim - 1) * state.r


def esh_trajectory(
    start: ESHState,
    step_size: Array | float,
    num_steps: int | Array,
    value_and_grad: ValueAndGrad,
    uniforms: Array,
    backward_steps: Array | int = 0,
    exact: bool = True,
    loop: Callable[[int, Callable[[Any], Any], Any], Any] | None = None,
) -> tuple[ESHState, ESHTrajectoryInfo]:
    """Draw one point of an ESH trajectory, one leapfrog (gradient) per step.

    ``exact=True`` (the default): the orbit through the start is integrated
    ``backward_steps`` steps backward (``u -> -u``) and the rest forward, ``num_steps + 1``
    points in all, and a point is drawn with probability proportional to
    ``exp(orbit_log_weight)``. With ``backward_steps`` uniform on ``0..num_steps`` this leaves
    ``pi`` exactly invariant, for any step size, without an accept/reject step (multinomial
    selection on a reversible orbit with its Jacobian weights).

    ``exact=False``: the paper's reservoir sampling (Alg. 3): ``num_steps`` forward steps and a
    point among ``1..N`` with weight ``exp(r_i)``. As a kernel restarted at every draw it is
    biased (it relies on ergodicity over long trajectories).

    A point whose log density, weight or gradient is not finite (outside the support, a NaN of
    the model) is never drawn, and it ends its leg of the trajectory: the points after it are
    never drawn either (their dynamics used a gradient that does not exist). The points kept,
    the orbit segment between the first unusable point on each side, are the same from every
    point of that segment, so the exact kernel stays exactly invariant.

    Parameters
    ----------
    start : ESHState
        ``r = 0`` and a fresh uniform direction.
    step_size : scalar
    num_steps : int or int array
        A traced count (adapted in warmup) needs a ``loop`` that accepts one.
    value_and_grad : callable ``x -> (f, grad f)``
    uniforms : array (at least num_steps, ...)
        One uniform per step (and chain) for the reservoir.
    backward_steps : int or int array (...)
        Steps integrated backward before the forward ones (``exact=True`` only).
    exact : bool
    loop : callable, optional
        ``loop(n, body, carry)`` running ``carry = body(carry)`` n times (``lax.fori_loop``
        under jit); a Python loop by default.

    Returns
    -------
    (sample, info) : the drawn point and the trajectory's statistics.
    """
    xp = array_namespace(start.x)
    h0 = esh_hamiltonian(start)
    zero = xp.zeros_like(start.r)
    device = _device(start.x)
    backward_steps = xp.asarray(backward_steps if exact else 0, device=device)
    flipped = start._replace(u=-start.u)

    def consider(new, alive, uniform, sample, log_total, log_top, drift):
        """Offer ``new`` to the multinomial selection on a leg still ``alive``:
        ``(alive, taken, sample, log_total, log_top, drift)``. A point with a non-finite log
        density, weight or gradient is never taken, leaves the drift alone and ends its leg."""
        log_weight = orbit_log_weight(new, start) if exact else new.r
        finite = (
            xp.isfinite(log_weight)
            & xp.isfinite(new.log_density)
            & xp.all(xp.isfinite(new.grad), axis=-1)
            & xp.all(xp.isfinite(new.x), axis=-1)
        )
        usable = alive & finite
        log_weight = xp.where(usable, log_weight, xp.full_like(log_weight, -math.inf))
        log_total_new = xp.logaddexp(log_total, log_weight)
        log_top = xp.maximum(log_top, log_weight)
        # keep the new point with probability w_i / sum_{j <= i} w_j
        take = usable & (xp.log(uniform) < log_weight - log_total_new)
        sample = ESHState(*(_where(take, n, o) for n, o in zip(new, sample)))
        energy_error = xp.abs(esh_hamiltonian(new) - h0)
        drift = xp.where(usable, xp.maximum(drift, energy_error), drift)
        return usable, take, sample, log_total_new, log_top, drift

    def body(carry):
        back, forward, alive_back, alive_fwd, sample, log_total, log_top, drift, selected, index = (
            carry
        )
        going_back = index < backward_steps
        current = ESHState(*(_where(going_back, b, f) for b, f in zip(back, forward)))
        new = esh_leapfrog(current, step_size, value_and_grad)
        back = ESHState(*(_where(going_back, n, b) for n, b in zip(new, back)))
        forward = ESHState(*(_where(going_back, f, n) for n, f in zip(new, forward)))
        alive = xp.where(going_back, alive_back, alive_fwd)
        alive, take, sample, log_total_new, log_top, drift = consider(
            new, alive, uniforms[index], sample, log_total, log_top, drift
        )
        alive_back = xp.where(going_back, alive, alive_back)
        alive_fwd = xp.where(going_back, alive_fwd, alive)
        position = xp.where(going_back, -(index + 1), index + 1 - backward_steps)
        selected = xp.where(take, position + xp.zeros_like(selected), selected)
        return (
            back,
            forward,
            alive_back,
            alive_fwd,
            sample,
            log_total_new,
            log_top,
            drift,
            selected,
            index + 1,
        )

    def fraction(log_top, log_total):
        # 1 where nothing was usable (the paper's reservoir without a finite point)
        finite = xp.isfinite(log_total) & xp.isfinite(log_top)
        zero = xp.zeros_like(log_total)
        top = xp.exp(xp.where(finite, log_top, zero) - xp.where(finite, log_total, zero))
        return xp.where(finite, top, xp.ones_like(top))

    # the start is a candidate of the exact kernel (weight 1), not of the paper's reservoir
    log_total = zero if exact else xp.full_like(zero, -math.inf)
    log_top = log_total
    selected = xp.astype(zero, xp.int32)
    alive = xp.ones_like(zero, dtype=xp.bool)
    run = loop if loop is not None else python_loop
    if backward_steps.ndim == 0:
        # one offset for all chains: the backward and forward legs are two plain loops
        # (``loop`` may take a traced count), with no per-step selection between them
        def leg(sign):
            def leg_body(carry):
                state, alive, sample, log_total, log_top, drift, selected, index, k = carry
                state = esh_leapfrog(state, step_size, value_and_grad)
                alive, take, sample, log_total_new, log_top, drift = consider(
                    state, alive, uniforms[k], sample, log_total, log_top, drift
                )
                position = sign * (index + 1) + xp.zeros_like(selected)
                selected = xp.where(take, position, selected)
                return (
                    state,
                    alive,
                    sample,
                    log_total_new,
                    log_top,
                    drift,
                    selected,
                    index + 1,
                    k + 1,
                )

            return leg_body

        k0 = xp.asarray(0, device=_device(start.x))
        carry = (flipped, alive, start, log_total, log_top, zero, selected, k0, k0)
        carry = run(backward_steps, leg(-1), carry)
        carry = (start, alive) + carry[2:7] + (k0, carry[8])
        _, _, sample, log_total, log_top, drift, selected, _, _ = run(
            num_steps - backward_steps, leg(1), carry
        )
        return sample, ESHTrajectoryInfo(drift, selected, fraction(log_top, log_total))
    both: Any = (
        flipped,
        start,
        alive,
        alive,
        start,
        log_total,
        log_top,
        zero,
        selected,
        xp.asarray(0, device=_device(start.x)),
    )
    _, _, _, _, sample, log_total, log_top, drift, selected, _ = run(num_steps, body, both)
    return sample, ESHTrajectoryInfo(drift, selected, fraction(log_top, log_total))


def _where(cond: Array, new: Array, old: Array) -> Array:
    xp = array_namespace(new)
    extra = len(new.shape) - len(cond.shape)
    return xp.where(xp.reshape(cond, cond.shape + (1,) * extra), new, old)


def jarzynski_log_weights(
    log_density_start: Array, base_log_density_start: Array, log_speed: Array
) -> Array:
    """Jarzynski log weights ``w = f(x_0) - f_0(x_0) + r(t)`` (Eq. 8, in log densities:
    ``E_0(x_0) - E(x_0) + log |v(t)| - log |v(0)|`` with ``|v(0)| = 1``), (...).

    ``E_{q_t}[exp(w)] = Z / Z_0``, with ``Z`` and ``Z_0`` the normalisers of ``exp(f)`` and
    of the base density ``exp(f_0)``.
    """
    return log_density_start - base_log_density_start + log_speed


def log_mean_exp_with_error(log_w: Array) -> tuple[Array, Array]:
    """``log mean exp(w)`` over the last axis and its delta-method standard error
    ``sd(exp(w)) / (sqrt(n) mean(exp(w)))``."""
    xp = array_namespace(log_w)
    n = log_w.shape[-1]
    top = xp.max(log_w, axis=-1, keepdims=True)
    scaled = xp.exp(log_w - top)
    mean = xp.mean(scaled, axis=-1)
    estimate = xp.log(mean) + top[..., 0]
    spread = xp.sqrt(xp.sum((scaled - mean[..., None]) ** 2, axis=-1) / (n - 1))
    return estimate, spread / (math.sqrt(n) * mean)
