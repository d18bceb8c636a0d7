"""The ESH kernel (Ver Steeg and Galstyan, NeurIPS 2021) for continuous sites: one draw is a
trajectory of the energy-sampling dynamics (:mod:`discrete_kernels.samplers.esh_dynamics`)
from the current point with a fresh direction; step size and orbit length adapt during warmup
as phases (:mod:`discrete_kernels.warmup`), like the discrete samplers' warmup.

ESH acts on the flat unconstrained vector of the continuous sites; its ``value_and_grad``
maps (d,) to ``(f, grad f)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from array_api_compat import device as _device

from .._xp import Array, array_namespace
from ..kernel import PYTHON_CONTROL, ControlFlow, NoiseShapes, StepNoise
from ..validation import check_bool, check_int, check_number, format_bytes
from ..warmup import Feedback, Phase, StepSizeAdaptation, dual_averaging_init, dual_averaging_phase
from .esh_dynamics import ESHState, esh_trajectory, unit_vector

__all__ = [
    "ESH",
    "ESHAdaptState",
    "ESHAdaptation",
    "ESHChain",
    "ESHInfo",
    "energy_error_statistic",
    "esh_adapt_init",
    "orbit_num_steps",
    "selection_pseudo_accept",
]

ValueAndGrad = Callable[[Array], tuple[Array, Array]]


class ESHAdaptation(NamedTuple):
    """Settings of ESH's warmup adaptation.

    - **target_energy_error** - target of ``xi = drift^2 / (d N)``, the squared largest
      Hamiltonian error of a draw per dimension and per leapfrog step (the microcanonical
      samplers that grew out of ESH tune the step size to a fixed energy-error variance per
      dimension in the same way).
    - **initial_step_size**, **initial_num_steps** - where the adaptation starts (and the
      values used without warmup).
    - **max_num_steps** - most leapfrog steps per draw (the noise of a draw is drawn for this
      many).
    - **orbit_fraction** - the orbit length is this times ``sqrt(sum_i Var(x_i))``, the
      scale of the whole posterior, estimated over the warmup (MCLMC's initial choice).
    - **target_max_weight_fraction** - the step size is also kept short enough that the
      heaviest point of an orbit carries about this share of the orbit's weight
      (:class:`~discrete_kernels.samplers.esh_dynamics.ESHTrajectoryInfo`). The energy error
      alone cannot bound the step: in one dimension the direction never turns and the
      leapfrog conserves ``H`` exactly on a Gaussian, so that rule alone would grow the step
      until every orbit point but the start has weight 0 and the chain never moves.
    - **step_size_bounds** - the adapted step size stays in this range (finite whatever
      the trajectories report).
    """

    target_energy_error: float = 1e-2
    initial_step_size: float = 0.1
    initial_num_steps: int = 20
    max_num_steps: int = 100
    orbit_fraction: float = 1.0
    target_max_weight_fraction: float = 0.3
    step_size_bounds: tuple[float, float] = (1e-8, 1e8)


MAX_TRAJECTORY_STEPS = 2**20
"""Most leapfrog steps per draw: a draw's noise holds one uniform per step, so ``num_steps`` is
an allocation per chain and per draw."""


class ESHAdaptState(NamedTuple):
    """State of ESH's warmup adaptation (per chain).

    - **dual_averaging** - of ``log step_size`` (:mod:`discrete_kernels.warmup`).
    - **step_size**, **num_steps** - of the next draw.
    - **count**, **mean** (d,), **m2** (d,) - Welford moments of the draws since the
      first quarter of the warmup.
    """

    dual_averaging: Any
    step_size: Array
    num_steps: Array
    count: Array
    mean: Array
    m2: Array


def esh_adapt_init(step_size: Array, num_steps: int, x: Array) -> ESHAdaptState:
    """Adaptation state at ``(step_size, num_steps)`` (scalar array, int) for a chain at
    ``x`` (d,)."""
    xp = array_namespace(x)
    zeros = xp.zeros_like(x)
    return ESHAdaptState(
        dual_averaging_init(step_size),
        step_size,
        xp.asarray(num_steps, dtype=xp.int32, device=_device(x)),
        xp.zeros_like(step_size),
        zeros,
        zeros,
    )


def energy_error_statistic(drift: Array, dim: int, num_steps: Array) -> Array:
    """``xi = drift^2 / (d N)``: the squared largest Hamiltonian error of a draw per dimension
    and per leapfrog step (``drift``: :class:`ESHTrajectoryInfo.hamiltonian_drift`)."""
    xp = array_namespace(drift)
    return drift**2 / (dim * xp.astype(num_steps, drift.dtype))


def orbit_num_steps(state: ESHAdaptState, step_size: Array, config: ESHAdaptation) -> Array:
    """``N = round(orbit_fraction * sqrt(sum_i Var(x_i)) / step_size)``, at least
    ``initial_num_steps`` (a chain's own warmup draws underestimate the spread of a target
    whose modes it has not visited yet) and at most ``max_num_steps``; the current
    ``num_steps`` while fewer than two draws were recorded."""
    xp = array_namespace(step_size)
    variance = state.m2 / xp.maximum(state.count - 1, xp.ones_like(state.count))
    length = config.orbit_fraction * xp.sqrt(xp.sum(variance))
    steps = xp.round(length / step_size)
    steps = xp.clip(steps, config.initial_num_steps, config.max_num_steps)
    usable = (state.count >= 2) & xp.isfinite(steps)
    return xp.where(usable, xp.astype(steps, xp.int32), state.num_steps)


class ESHChain(NamedTuple):
    """State of an ESH chain on the flat unconstrained vector: **x** (d,), **log_density**
    ``f(x)`` (scalar) and **grad** ``grad f(x)`` (d,), cached so a draw of ``N`` leapfrog steps
    costs ``N`` gradients."""

    x: Array
    log_density: Array
    grad: Array


class ESHInfo(NamedTuple):
    """Statistics of one ESH draw: **hamiltonian_drift** (largest ``|H(t) - H(0)|``),
    **trajectory_length** (``step_size * num_steps``), **num_grad_evals**, **moved** (the draw
    is not the start: the frozen-chain check counts these) and **max_weight_fraction** (the
    heaviest orbit point's share of the orbit's weight: near 1, the chain barely moves)."""

    hamiltonian_drift: Array
    trajectory_length: Array
    num_grad_evals: Array
    moved: Array
    max_weight_fraction: Array


def selection_pseudo_accept(max_weight_fraction: Array, target: float) -> Array:
    """Pseudo-acceptance in ``[0, 1]`` from an orbit's heaviest share, 1/2 at ``target``:
    ``(1 - m) / (2 (1 - target))``, clipped; 0 when ``m`` is not finite."""
    xp = array_namespace(max_weight_fraction)
    m = max_weight_fraction
    m = xp.where(xp.isfinite(m), m, xp.ones_like(m))
    return xp.clip((1.0 - m) / (2.0 * (1.0 - target)), 0.0, 1.0)


@dataclass(frozen=True, eq=False)
class ESH:
    """Energy-sampling Hamiltonian dynamics for continuous sites, on the flat unconstrained
    vector.

    Each draw starts the time-scaled ESH dynamics from the current point with a fresh uniform
    direction, integrates ``num_steps`` leapfrog steps of size ``step_size`` (one gradient each)
    and returns a point of the trajectory drawn with weight ``|v| = exp(r)`` (no accept/reject
    step). With ``exact=True`` the trajectory is an orbit through the current point placed at a
    uniformly random offset (part integrated backward) and each point's weight is the exact
    form of ``|v|`` for the discretised dynamics (:func:`~discrete_kernels.samplers.
    esh_dynamics.orbit_log_weight`): the kernel then leaves the target exactly invariant at any
    step size. ``exact=False`` is the paper's forward-only reservoir, which, restarted at every
    draw, is biased; it is kept for comparison.

    A draw takes ``max_steps`` uniforms (one per leapfrog step, for the reservoir), one more
    that places the start on the orbit and ``d`` normals for the fresh direction; in one
    dimension one more, which jitters the step size uniformly in ``[0.5, 1.5]`` times its
    value: there the direction never turns, so every orbit is a lattice ``x0 + k eps`` and a
    fixed step would keep ``x mod eps`` for ever.

    Orbit points where the log density, its gradient or the weight is not finite are never
    drawn and end the trajectory on their side (:func:`~discrete_kernels.samplers.
    esh_dynamics.esh_trajectory`); the adaptation sees them as a failed draw.

    Parameters
    ----------
    step_size : float, optional
        Leapfrog step in the time-scaled coordinates: each step moves ``x`` by exactly this
        distance. None: adapted during warmup from 0.1 (the paper's value) so that the squared
        Hamiltonian error per dimension and step is about 1e-2 (:class:`ESHAdaptation`).
    num_steps : int, optional
        Leapfrog steps (gradient evaluations) per draw. None: 20 at first, then
        ``sqrt(sum_i Var(x_i)) / step_size`` (from 20 to 100), the posterior's scale estimated
        from the chain's warmup draws, set at half of the warmup and at its end.
    exact : bool
        The exact orbit weighting or the paper's reservoir.
    """

    step_size: float | None = None
    num_steps: int | None = None
    exact: bool = True
    name: ClassVar[str] = "ESH"
    statistics: ClassVar[tuple[str, ...]] = ESHInfo._fields
    adaptation: ESHAdaptation = field(default=ESHAdaptation(), init=False, repr=False)

    def __post_init__(self) -> None:
        if self.step_size is not None:
            step = check_number(self.name, "step_size", self.step_size)
            object.__setattr__(self, "step_size", step)
        if self.num_steps is not None:
            num = check_int(self.name, "num_steps", self.num_steps, minimum=1)
            if num > MAX_TRAJECTORY_STEPS:
                raise ValueError(
                    f"{self.name}: num_steps={num} needs {num} uniforms per chain and draw "
                    f"(about {format_bytes(4 * num)} in float32, more for the trajectory); at most "
                    f"{MAX_TRAJECTORY_STEPS} steps per draw are allowed. Use fewer steps per "
                    "draw and more draws (num_samples), or leave num_steps=None to adapt it."
                )
            object.__setattr__(self, "num_steps", num)
        object.__setattr__(self, "exact", check_bool(self.name, "exact", self.exact))

    @property
    def max_steps(self) -> int:
        """Most leapfrog steps of a draw (the length of its reservoir uniforms)."""
        return self.num_steps if self.num_steps is not None else self.adaptation.max_num_steps

    def noise_shapes(self, flat_dim: int) -> NoiseShapes:
        jitter = ((),) if flat_dim == 1 else ()
        return NoiseShapes(uniforms=((self.max_steps,), (), *jitter), num_normals=flat_dim)

    def init(self, x: Array, value_and_grad: ValueAndGrad) -> ESHChain:
        log_density, grad = value_and_grad(x)
        return ESHChain(x, log_density, grad)

    def adapt_init(self, x: Array) -> ESHAdaptState:
        """Adaptation state of a chain at ``x`` (d,), at the given or initial values."""
        xp = array_namespace(x)
        step = self.adaptation.initial_step_size if self.step_size is None else self.step_size
        steps = self.adaptation.initial_num_steps if self.num_steps is None else self.num_steps
        return esh_adapt_init(xp.asarray(step, dtype=x.dtype, device=_device(x)), steps, x)

    def phases(self, num_warmup: int) -> tuple[Phase, ...]:
        """Dual averaging of the step size on the pseudo-acceptance ``xi* / (xi* + xi)``
        (:func:`energy_error_statistic`, target 1/2, i.e. towards ``xi = xi*``), frozen at its
        average when the warmup ends; Welford moments of the draws from a quarter of the warmup
        on, and ``num_steps`` set to :func:`orbit_num_steps` at half of the warmup and at its
        end (each only for an option left to adapt)."""
        if num_warmup == 0:
            return ()
        config = self.adaptation
        out: list[Phase] = []
        if self.step_size is None:

            def pseudo_accept(state: ESHAdaptState, feedback: Feedback) -> Array:
                # the lower of two: the energy error per dimension and step (accuracy), and
                # the orbit's heaviest share (a step too long for the target's scale, or one
                # that leaves its support, puts all the weight on the start)
                xp = array_namespace(state.step_size)
                dim = feedback.chain.x.shape[-1]
                xi = energy_error_statistic(feedback.info.hamiltonian_drift, dim, state.num_steps)
                xi = xp.where(xp.isfinite(xi), xi, xp.full_like(xi, float("inf")))
                target = config.target_energy_error
                spread = selection_pseudo_accept(
                    feedback.info.max_weight_fraction, config.target_max_weight_fraction
                )
                return xp.minimum(target / (target + xi), xp.astype(spread, xi.dtype))

            def bounds(state: ESHAdaptState) -> tuple[float, float]:
                return config.step_size_bounds

            rule = StepSizeAdaptation(target_accept_prob=0.5)
            out.append(dual_averaging_phase(0, num_warmup, rule, pseudo_accept, bounds))
        if self.num_steps is None:

            def record(state: ESHAdaptState, feedback: Feedback) -> ESHAdaptState:
                x = feedback.chain.x
                count = state.count + 1
                delta = x - state.mean
                mean = state.mean + delta / count
                return state._replace(count=count, mean=mean, m2=state.m2 + delta * (x - mean))

            def set_length(state: ESHAdaptState, feedback: Feedback) -> ESHAdaptState:
                return state._replace(num_steps=orbit_num_steps(state, state.step_size, config))

            out.append(Phase(num_warmup // 4, num_warmup, record))
            for last in sorted({num_warmup // 2, num_warmup}):
                if last >= 1:
                    out.append(Phase(last - 1, last, set_length))
        return tuple(out)

    def step(
        self,
        chain: ESHChain,
        noise: StepNoise,
        value_and_grad: ValueAndGrad,
        adapt_state: ESHAdaptState,
        control: ControlFlow = PYTHON_CONTROL,
    ) -> tuple[ESHChain, ESHInfo]:
        """One draw: a trajectory from ``chain`` with the direction and offsets of ``noise``,
        at the step size and number of steps of ``adapt_state`` (:meth:`adapt_init`);
        ``control.loop`` runs the leapfrog steps."""
        xp = array_namespace(chain.x)
        assert noise.normals is not None
        reservoir, offset = noise.uniforms[:2]
        step_size, num_steps = adapt_state.step_size, adapt_state.num_steps
        if self.num_steps is not None:
            num_steps = self.num_steps  # a Python int: plain loops
        direction = unit_vector(xp.astype(noise.normals, chain.x.dtype))
        if chain.x.shape[-1] == 1:  # the lattice of a 1-D orbit moves with the step
            jitter = xp.astype(noise.uniforms[2], chain.x.dtype)
            step_size = step_size * (0.5 + jitter)
        # uniform on 0..num_steps (the clip only guards u rounding up to 1 in float32)
        backward = xp.astype(xp.floor(offset * (num_steps + 1)), xp.int32)
        backward = xp.clip(backward, 0, num_steps)
        zero = xp.zeros_like(chain.log_density)
        start = ESHState(chain.x, direction, zero, chain.log_density, chain.grad)
        sample, info = esh_trajectory(
            start,
            step_size,
            num_steps,
            value_and_grad,
            reservoir,
            backward_steps=backward,
            exact=self.exact,
            loop=control.loop,
        )
        device = _device(chain.x)
        stats = ESHInfo(
            info.hamiltonian_drift,
            xp.asarray(step_size * num_steps, dtype=chain.x.dtype, device=device),
            xp.asarray(num_steps, dtype=xp.int32, device=device),
            info.selected_step != 0,
            xp.astype(info.max_weight_fraction, chain.x.dtype),
        )
        return ESHChain(sample.x, sample.log_density, sample.grad), stats
