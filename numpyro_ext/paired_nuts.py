"""``PairedNUTS`` (NumPyro): the paired sweep of :mod:`numpyro_ext.paired` and a NUTS
trajectory on the model's other continuous sites, in one kernel whose chains vectorise."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.infer.gibbs import (
    conditioned,
    discrete_latent_sites,
    prototype_trace,
    with_conditioning,
)
from numpyro.infer.hmc import hmc
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import constrain_fn, initialize_model, log_density, potential_energy
from numpyro.util import is_prng_key

from discrete_kernels.samplers.paired import (
    check_pair_options,
)
from discrete_kernels.validation import check_int

from ._nuts import nuts_progress_text, nuts_settings, start_nuts
from ._once import run_once
from .paired import (
    Pair,
    frozen_check,
    other_latent_sites,
    paired_names,
    paired_sweep,
    read_pairs,
    setup_trace,
)

__all__ = ["PairedNUTS", "PairedNUTSState"]


class PairedNUTSState(NamedTuple):
    """State of :class:`PairedNUTS`.

    Attributes
    ----------
    z : dict
        The paired sites' values and NUTS's (unconstrained) values of the other sites.
    accept_prob : scalar array
        The mean acceptance probability of the last step's paired moves (all its sweeps).
    num_moves : integer scalar array
        Paired moves accepted in the last step (all its sweeps).
    num_warmup_moves : integer scalar array
        Paired moves accepted in the second half of warmup (the frozen-chain check).
    diverging : bool scalar array
        Whether NUTS's last trajectory diverged.
    hmc_state : numpyro.infer.hmc.HMCState
        NUTS's state on the other sites.
    rng_key : key
    """

    z: dict
    accept_prob: jax.Array
    num_moves: jax.Array
    num_warmup_moves: jax.Array
    diverging: jax.Array
    hmc_state: Any
    rng_key: jax.Array


class PairedNUTS(MCMCKernel):
    """NUTS on a model's continuous sites and, after each NUTS step, a sweep of paired moves
    (:class:`PairedGibbs`): each inclusion indicator drawn together with its coefficient.

    The whole-model kernel for spike-and-slab and variable-selection models whose other
    latent sites (a noise scale, an intercept) are continuous: one compiled program for every
    vectorised chain (``chain_method="vectorized"``), where ``numpyro.infer.Gibbs`` runs its
    chains one after another. NUTS (NumPyro's, adapted in warmup as usual) sees the model
    conditioned on the paired sites' current values; its cached potential and gradient are
    recomputed after each sweep (one gradient evaluation).

    Parameters
    ----------
    model : the NumPyro model
    pairs : mapping
        Discrete site name to continuous site name, as in :class:`PairedGibbs`.
    anchor : float
        Where each paired move's Newton step starts (:class:`PairedGibbs`).
    sweeps : int
        Paired sweeps after each NUTS step (at least 1). With a few indicators a sweep costs
        a fraction of a NUTS trajectory, and a second one raises the indicators' ESS for
        little time (8 indicators, 4 chains of 1,000 draws: the smallest ESS 725-787 ->
        1,080-1,107 in 4.2-5.2 s -> 4.7-5.5 s); with hundreds, a sweep costs more than the
        trajectory (500 indicators: two sweeps 1.4-1.6x the time of one), and 1 is the
        better choice (``docs/kernels/paired.md``).
    **nuts_options
        :class:`numpyro.infer.NUTS`'s options, with its defaults; another name is an error.
    """

    sample_field = "z"

    def __init__(
        self,
        model: Callable,
        pairs: Mapping[str, str],
        *,
        anchor: float = 0.0,
        sweeps: int = 1,
        **nuts_options: Any,
    ) -> None:
        self._model = model
        self._pair_names, self._anchor = check_pair_options("PairedNUTS", pairs, anchor)
        self._sweeps = check_int("PairedNUTS", "sweeps", sweeps, minimum=1)
        self._nuts_settings = nuts_settings("PairedNUTS", nuts_options)
        self._pairs: tuple[Pair, ...] | None = None
        self._nuts_sample: Callable | None = None
        self._num_warmup = 0

    @property
    def model(self) -> Callable:
        return self._model

    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z", "diverging")

    @property
    def _sample_fn(self) -> Any:
        # MCMC initialises the kernel while this is None
        return self._nuts_sample

    def get_diagnostics_str(self, state: PairedNUTSState) -> str:
        paired = f"paired acc. prob={float(np.mean(state.accept_prob)):.2f}"
        return f"{nuts_progress_text(state.hmc_state)}, {paired}"

    def _potential_gen(self, *args: Any, **kwargs: Any) -> Callable:
        """The potential energy of the other sites at the data and the paired sites' values
        (both in ``kwargs``, the latter as conditioning values)."""
        return partial(potential_energy, conditioned(self._model), args, kwargs)

    def _paired_values(self, z: dict) -> dict:
        return {name: z[name] for name in paired_names(self._pairs or ())}

    def init(
        self,
        rng_key: jax.Array,
        num_warmup: int,
        init_params: dict | None,
        model_args: tuple,
        model_kwargs: dict | None,
    ) -> PairedNUTSState:
        kwargs = {} if model_kwargs is None else model_kwargs
        chains, model_trace = setup_trace(self._model, rng_key, model_args, kwargs)
        pairs = self._pairs = read_pairs("PairedNUTS", self._pair_names, model_trace)
        paired = paired_names(pairs)
        discrete = [n for n in discrete_latent_sites(model_trace) if n not in paired]
        if discrete:
            raise ValueError(
                f"PairedNUTS: the model has discrete latent sites {discrete} outside the pairs; "
                "NUTS cannot move them. Use a numpyro.infer.Gibbs block of PairedGibbs, a "
                "discrete kernel for them and NUTS."
            )
        others = other_latent_sites(model_trace, paired)
        if not others:
            raise ValueError(
                "PairedNUTS: the model has no latent site outside the pairs; use "
                "nx.PairedGibbs(model, pairs=...)."
            )
        given = {} if init_params is None else dict(init_params)
        paired_start = {k: v for k, v in given.items() if k in paired}
        nuts_start = {k: v for k, v in given.items() if k not in paired} or None
        settings = dict(self._nuts_settings)
        init_strategy = settings.pop("init_strategy")
        nuts_init, nuts_sample = hmc(
            potential_fn_gen=self._potential_gen, kinetic_fn=settings.pop("kinetic_fn"), algo="NUTS"
        )
        model = conditioned(self._model)

        def start(key: Any, paired_given: dict, params: Any) -> PairedNUTSState:
            key_pairs, key_start, key_nuts, key_next = jax.random.split(key, 4)
            prior = prototype_trace(model, key_pairs, model_args, kwargs)
            values = {n: jnp.asarray(paired_given.get(n, prior[n]["value"])) for n in paired}
            with_pairs = with_conditioning(kwargs, values)
            if params is None:
                params = initialize_model(
                    key_start,
                    model,
                    init_strategy=init_strategy,
                    model_args=model_args,
                    model_kwargs=with_pairs,
                ).param_info.z
            hmc_state = start_nuts(
                nuts_init, settings, params, num_warmup, model_args, with_pairs, key_nuts
            )
            zero = jnp.zeros((), jnp.int32)
            return PairedNUTSState(
                {**hmc_state.z, **values},
                jnp.zeros(()),
                zero,
                zero,
                hmc_state.diverging,
                hmc_state,
                key_next,
            )

        # one compiled program for the start of every chain (NUTS's setup run op by op
        # compiles one small program per operation)
        run = jax.vmap(start) if chains else start  # init_params: one per chain
        state = run_once(run, rng_key, paired_start, nuts_start)
        energy = np.asarray(state.hmc_state.potential_energy)
        if not np.all(np.isfinite(energy)):
            raise RuntimeError(
                f"PairedNUTS: the model has no finite log density at the start (potential "
                f"energy {energy.tolist()}): give init_params or another init_strategy."
            )
        self._nuts_sample = nuts_sample  # batched in sample, with each chain's pairs
        self._num_warmup = int(num_warmup)
        return state

    def sample(
        self, state: PairedNUTSState, model_args: tuple, model_kwargs: dict | None
    ) -> PairedNUTSState:
        kwargs = {} if model_kwargs is None else model_kwargs
        pairs = self._pairs
        assert pairs is not None and self._nuts_sample is not None, "init first"
        anchor = self._anchor
        model = conditioned(self._model)
        chains = not is_prng_key(state.rng_key)

        def sweep(z: dict, key: jax.Array) -> tuple:
            paired = self._paired_values(z)
            others = {k: v for k, v in z.items() if k not in paired}
            with_pairs = with_conditioning(kwargs, paired)
            constrained = constrain_fn(model, model_args, with_pairs, others)
            given_others = with_conditioning(kwargs, constrained)

            def log_joint(values: dict) -> jax.Array:
                return log_density(model, model_args, given_others, values)[0]

            key, key_next = jax.random.split(key)
            accept_prob, moves = jnp.zeros(()), jnp.zeros((), jnp.int32)
            for key_sweep in jax.random.split(key, self._sweeps) if self._sweeps > 1 else [key]:
                paired, accept, accepted = paired_sweep(log_joint, paired, pairs, anchor, key_sweep)
                accept_prob, moves = accept_prob + accept / self._sweeps, moves + accepted
            return paired, accept_prob, moves, key_next

        def refreshed(hmc_state: Any, paired: dict) -> Any:
            # NUTS caches the potential and its gradient at its current point: recompute
            # them for the new conditioning
            potential = self._potential_gen(*model_args, **with_conditioning(kwargs, paired))
            energy, grad = jax.value_and_grad(potential)(hmc_state.z)
            return hmc_state._replace(potential_energy=energy, z_grad=grad)

        paired, accept_prob, moves, key = (jax.vmap(sweep) if chains else sweep)(
            state.z, state.rng_key
        )

        def nuts_step(hmc_state: Any, paired: dict) -> Any:
            hmc_state = refreshed(hmc_state, paired)
            return nuts_sample(hmc_state, model_args, with_conditioning(kwargs, paired))

        nuts_sample = self._nuts_sample
        hmc_state = (jax.vmap(nuts_step) if chains else nuts_step)(state.hmc_state, paired)
        end = self._num_warmup
        step = state.hmc_state.i  # this step's index (NUTS counts its own steps)
        in_half = (step >= end - end // 2) & (step < end)
        warmup_moves = state.num_warmup_moves + jnp.where(in_half, moves, 0)
        frozen_check("PairedNUTS", paired_names(pairs), step + 1, warmup_moves, end)
        return PairedNUTSState(
            {**hmc_state.z, **paired},
            accept_prob,
            moves,
            warmup_moves,
            hmc_state.diverging,
            hmc_state,
            key,
        )

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict | None) -> Callable:
        kwargs = {} if model_kwargs is None else model_kwargs

        def fn(z: dict) -> dict:
            paired = self._paired_values(z)
            others = {k: v for k, v in z.items() if k not in paired}
            at_pairs = handlers.condition(self._model, paired)
            out = constrain_fn(at_pairs, model_args, kwargs, others, return_deterministic=True)
            return {**out, **paired}

        # MCMC calls this once outside its compiled loop (to size the collection): compiled,
        # that is one program instead of one per operation of the model
        return jax.jit(fn)
