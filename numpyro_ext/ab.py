"""NumPyro AB (core: :mod:`discrete_kernels.ab`; spec: ``samplers.ABSpec``)."""

from __future__ import annotations

from discrete_kernels.constructors import ABConstructor
from discrete_kernels.samplers import ABAdaptState

from .base import DiscreteKernel, DiscreteState

__all__ = ["AB", "ABAdaptState"]


class AB(ABConstructor, DiscreteKernel):
    """Any-scale balanced sampler (Sun et al., ICLR 2023): proposals weighted by
    ``(pi(y) / pi(x))^balance`` under a heat kernel of scale ``step_size`` (the paper's
    ``alpha`` and ``sigma``), MH corrected.

    ``variant="1st"`` uses the first-order (gradient) approximation: the DLP proposal with
    this balance and step size, one ``value_and_grad`` per step like DMALA.
    ``"trace"``, ``"shift"`` and ``"max"`` add a quadratic term ``W`` fitted by least squares to
    the pairs ``(y - x, grad f(y) - grad f(x))`` of a burn-in inside warmup (AB-1st until then)
    and sample it with the Gaussian integral trick, with the diagonal ``D`` chosen by trace
    minimisation, a ``lambda`` shift or by minimising the largest eigenvalue of ``W + D``
    (see :mod:`discrete_kernels.ab`). A quadratic step adds ``O(d^2)`` work (two
    matrix-vector products) and ``d`` Gaussian draws to the ``value_and_grad``.

    During warmup ``(step_size, balance)`` adapt by coordinate ascent on the expected jump distance
    (App. A.2: probes ``theta (1 +- gamma)`` in blocks of steps, ``gamma`` shrinking by
    ``decay`` when a round changes nothing); they are frozen for sampling. The paper's search
    moves by at most a factor ``1 + rate`` per round of six blocks; here a direction that keeps
    winning doubles its exponent (``max_doublings``, see :class:`discrete_kernels.ABConfig`)
    so a start far from the optimum is left in a few rounds. Before the search, the first
    quarter of the warmup (``initial_steps``) adapts ``step_size`` by DMALA's dual averaging,
    so the search starts at the right scale and a warmup of a few hundred steps suffices.

    Statistics: ``step_size`` and ``balance`` of each draw's proposal; also ``accept_prob``,
    ``accepted``, ``hamming_distance``, ``potential_energy``.

    Parameters
    ----------
    model, potential_fn, domain, exact_sites
        As in :class:`DMALA` (quadratic variants need binary or ordinal sites with gradients).
    variant : {"1st", "trace", "shift", "max"}
    step_size : float
        Initial step size, the paper's ``sigma`` (0.1, the paper's start).
    balance : float
        Initial balance exponent in (0, 1], the paper's ``alpha`` (0.5). ``alpha=`` is
        accepted with a ``FutureWarning``.
    adapt : bool
        Tune ``(step_size, balance)`` during warmup (default True).
    rate, decay : float
        ``gamma`` (0.2) and its decay (0.9).
    block_size : int, optional
        Steps per probe (the paper's 100, or when None shortened so that the warmup holds
        twenty rounds, at least 20).
    max_doublings : int
        Expansion of the search while a direction keeps winning (3; 0 is the paper's rule).
    initial_steps : int, optional
        Warmup steps of dual averaging of ``step_size`` (acceptance 0.574 at the initial
        balance) before the search; None: a quarter of the warmup, at most 500; 0: the
        paper's search from ``step_size``.
    burn_in : int, optional
        Warmup steps whose proposals fit ``W`` (default half the warmup).
    coupling : array, optional
        A known symmetric ``W`` (d, d) over the flattened sites (in the order of the model's
        sites or of ``init_params``' leaves): no burn-in fit.
    """

    @property
    def default_fields(self) -> tuple[str, ...]:
        return super().default_fields + ("balance",)

    def get_diagnostics_str(self, state: DiscreteState) -> str:
        return (
            f"acc. prob {float(state.accept_prob):.2f}, step size {float(state.step_size):.3g}, "
            f"balance {float(state.balance):.3g}"
        )
