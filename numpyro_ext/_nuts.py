"""NUTS inside this library's kernels (:class:`~numpyro_ext.MarginalNUTS`,
:class:`~numpyro_ext.PairedNUTS`): its options with NumPyro's names and defaults, its start
from the functional ``init_kernel`` and its progress-bar text."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import jax
from numpyro.infer import NUTS
from numpyro.infer.hmc import HMCState

__all__ = ["nuts_progress_text", "nuts_settings", "start_nuts"]


def nuts_progress_text(hmc_state: HMCState) -> str:
    """NUTS's progress-bar text: steps, step size, acceptance."""
    return (
        f"{hmc_state.num_steps} steps of size {hmc_state.adapt_state.step_size:.2e}. "
        f"acc. prob={hmc_state.mean_accept_prob:.2f}"
    )


def start_nuts(
    nuts_init: Callable,
    settings: dict,
    params: dict,
    num_warmup: int,
    model_args: tuple,
    model_kwargs: dict,
    rng_key: jax.Array,
) -> HMCState:
    """NUTS's state at ``params`` (unconstrained) from its functional ``init_kernel`` and
    :func:`nuts_settings` (without ``init_strategy`` and ``kinetic_fn``); a boolean
    ``dense_mass`` becomes NUTS's structural form (one block of every site, or none)."""
    dense_mass = settings["dense_mass"]
    if isinstance(dense_mass, bool):
        dense_mass = [tuple(sorted(params))] if dense_mass else []
    return nuts_init(
        params,
        num_warmup=num_warmup,
        model_args=model_args,
        model_kwargs=model_kwargs,
        rng_key=rng_key,
        **{**settings, "dense_mass": dense_mass},
    )


def nuts_settings(owner: str, options: dict) -> dict:
    """NUTS's options (the names and defaults of :class:`numpyro.infer.NUTS`), with
    ``options`` over the defaults; an unknown name is an error."""
    parameters = inspect.signature(NUTS.__init__).parameters
    defaults = {
        name: p.default
        for name, p in parameters.items()
        if name not in ("self", "model", "potential_fn")
    }
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise TypeError(f"{owner}: unknown NUTS options {unknown}; NUTS takes {sorted(defaults)}.")
    settings = {**defaults, **options}
    if isinstance(settings["step_size"], int):
        settings["step_size"] = float(settings["step_size"])
    return settings
