"""NumPyro ACS (core: :mod:`discrete_kernels.acs`; spec: ``samplers.ACSSpec``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from discrete_kernels.constructors import ACSConstructor

from .base import DiscreteKernel

__all__ = ["ACS", "ACSState"]


class ACSState(NamedTuple):
    """:class:`numpyro_ext.DiscreteState` plus **cycle_position**, ``k mod s`` of this draw's
    proposal (the tuner state, :class:`discrete_kernels.acs.ACSTunerState`, is
    ``adapt_state``)."""

    i: jax.Array
    z: Any
    potential_energy: jax.Array
    accept_prob: jax.Array
    accepted: jax.Array
    step_size: jax.Array
    balance: jax.Array
    hamming_distance: jax.Array
    num_moves: jax.Array
    moves_at_half_warmup: jax.Array
    local: tuple
    adapt_state: Any
    rng_key: jax.Array
    cycle_position: jax.Array


class ACS(ACSConstructor, DiscreteKernel):
    """Automatic cyclical scheduling (Pynadath et al.): DLP proposals whose step size
    ``alpha_k`` and balance ``beta_k`` follow a cycle of ``steps_per_cycle`` steps, from large
    exploratory moves (``alpha_max``, ``beta_max``) to local ones (``alpha_min``, 1/2), each
    MH corrected, so the chain escapes local modes.

    The cycle is tuned automatically during warmup (burn-in, EstimateAlpha for ``alpha_min``
    and ``alpha_max``, EstimateBalSched; see :mod:`discrete_kernels.acs`), one proposal per
    warmup step; ``discrete_kernels.acs.tuning_steps(config)`` steps in all (185 with the
    defaults). A warmup shorter than that ends the tuning early with a warning. Or pass
    ``alpha_max``, ``alpha_min`` and ``beta_schedule`` to skip the tuning.

    Parameters
    ----------
    model, potential_fn, domain, exact_sites
        As in :class:`DMALA`.
    steps_per_cycle : int
        ``s`` (8 by default; the paper uses 8 or 20).
    beta_max : float
        Balance of the largest step (0.95).
    target_accept_prob : float
        ``rho*`` of the tuning (0.5).
    alpha_floor, alpha_ceil : float
        Where the searches for ``alpha_min`` and ``alpha_max`` start (0.05 and 5; the
        ``alpha_max`` search starts at ``(S - 1)^2`` instead for an ordinal site with more
        values). The default range search leaves them as far as the target needs (within
        :func:`discrete_kernels.adaptation.dlp_step_size_bounds`); the paper's search stays
        between them.
    alpha_max, alpha_min, beta_schedule : optional
        An explicit cycle (all three), used as given.
    tuning : dict, optional
        Other :class:`discrete_kernels.acs.ACSConfig` fields: ``search`` (``"range"``, the
        default, or ``"paper"`` for Alg. 4 as written), ``expansion`` (4), burn-in lengths,
        candidates per round, rounds, learning rate (``"paper"`` only).
    """

    _state_cls = ACSState

    @property
    def default_fields(self) -> tuple[str, ...]:
        return super().default_fields + ("balance", "cycle_position")

    def schedule(self, state: ACSState) -> dict:
        """The cycle in use: ``alpha`` and ``beta`` arrays of length ``steps_per_cycle`` and
        whether the tuning finished (read it from ``mcmc.last_state`` after warmup; with
        vectorized chains, one row per chain)."""
        final = self._spec.adapt_final
        return jax.vmap(final)(state.adapt_state) if state.i.ndim else final(state.adapt_state)
