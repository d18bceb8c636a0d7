"""Pyro ESH kernel for continuous latent sites (all math in :mod:`discrete_kernels.esh`)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel
from pyro.infer.mcmc.util import initialize_model
from pyro.ops.integrator import potential_grad

from discrete_kernels.constructors import ESHConstructor
from discrete_kernels.esh import ESHAdaptState
from discrete_kernels.samplers import ESHChain, ESHSpec, ESHStepInfo, NoiseShapes, StepNoise

from ._target import discrete_sites, trace_model
from .base import draw_noise

__all__ = ["ESH"]

STAT_NAMES = (*ESHStepInfo._fields, "lp")


class ESH(ESHConstructor, MCMCKernel):
    """Energy-sampling Hamiltonian dynamics for Pyro's continuous sites (in their
    unconstrained space, through ``kernel.transforms`` like ``HMC``).

    Options and behaviour as :class:`numpyro_ext.ESH`: ``step_size`` and ``num_steps``
    leapfrog steps per draw (None: adapted during warmup, from 0.1 and 20), ``exact=True`` for
    the exactly invariant orbit weighting (``False``: the paper's reservoir). Per-draw
    statistics ``hamiltonian_drift``, ``trajectory_length``, ``num_grad_evals`` and ``lp`` are
    in ``diagnostics()["sample_stats"]`` (and :func:`pyro_ext.to_arviz`). Works as a block of
    :class:`pyro_ext.Gibbs`.
    """

    def _init_driver(
        self, model: Callable | None, *, potential_fn: Callable | None, spec: ESHSpec
    ) -> None:
        self.model = model
        self.potential_fn = potential_fn
        self.transforms: dict | None = None
        self._spec = spec
        self._initial_params: dict | None = None
        self._stats: dict = {name: [] for name in STAT_NAMES}
        self._warmup_steps = 0
        self._adapt_state: ESHAdaptState | None = None
        self.clear_cache()

    @property
    def initial_params(self) -> dict | None:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: dict | None) -> None:
        self._initial_params = params

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        self._warmup_steps = int(warmup_steps)
        self._stats = {name: [] for name in STAT_NAMES}
        self._adapt_state = None  # built at the first draw, on its flat vector
        if self.model is not None:
            discrete = discrete_sites(trace_model(self.model, args, kwargs))
            if discrete:
                raise ValueError(
                    f"ESH samples continuous sites only; the model has discrete latent sites "
                    f"{discrete}. Use pyro_ext.Gibbs with a discrete kernel of this library "
                    "for them."
                )
            init, potential_fn, transforms, _ = initialize_model(
                self.model, args, kwargs, initial_params=self._initial_params
            )
            self.potential_fn, self.transforms = potential_fn, transforms
            self._initial_params = init
        else:
            self.transforms = {}
            if not self._initial_params:
                raise ValueError("ESH: with `potential_fn`, pass `initial_params` to MCMC.")
        self._names = sorted(self._initial_params)
        self.clear_cache()

    def clear_cache(self) -> None:
        """Forget the cached potential and gradient (new conditioning inside Gibbs)."""
        self._cached: ESHChain | None = None

    def cleanup(self) -> None:
        self.clear_cache()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cached"] = None
        return state

    def _flatten(self, params: dict) -> tuple[torch.Tensor, list]:
        shapes = [params[n].shape for n in self._names]
        flat = torch.cat([params[n].detach().reshape(-1) for n in self._names])
        return flat, shapes

    def _unflatten(self, flat: torch.Tensor, shapes: list) -> dict:
        out, start = {}, 0
        for name, shape in zip(self._names, shapes):
            size = math.prod(shape)
            out[name] = flat[start : start + size].reshape(shape)
            start += size
        return out

    def _value_and_grad(self, shapes: list) -> Callable:
        def value_and_grad(x: torch.Tensor):
            grads, potential = potential_grad(self.potential_fn, self._unflatten(x, shapes))
            if not torch.isfinite(potential):
                nan = torch.full_like(x, float("nan"))
                return -potential.detach(), nan
            flat_grad = torch.cat([grads[n].reshape(-1) for n in self._names])
            return -potential.detach(), -flat_grad.detach()

        return value_and_grad

    def _draw_noise(self, shapes: NoiseShapes, index: int, like: torch.Tensor) -> StepNoise:
        """The noise of draw ``index`` in ``like``'s dtype and device (:func:`draw_noise`)."""
        return draw_noise(shapes, like)

    def sample(self, params: dict) -> dict:
        flat, shapes = self._flatten(params)
        value_and_grad = self._value_and_grad(shapes)
        if self._cached is not None and torch.equal(self._cached.x, flat):
            chain = self._cached
        else:
            chain = self._spec.init(flat, value_and_grad)
        index = len(self._stats["lp"])
        noise = self._draw_noise(self._spec.noise_shapes(flat.shape[0]), index, flat)
        if self._adapt_state is None:
            self._adapt_state = self._spec.adapt_init(flat)
        adapt = self._adapt_state
        if self._spec.num_steps is None:  # a Python count for the Python loop
            adapt = adapt._replace(num_steps=int(adapt.num_steps))
        chain, info = self._spec.step(chain, noise, value_and_grad, adapt)
        self._adapt_state = self._spec.adapt_update(
            self._adapt_state,
            info,
            chain.x,
            torch.tensor(index, device=flat.device),
            self._warmup_steps,
        )
        self._cached = chain
        for name, value in (*zip(info._fields, info), ("lp", chain.log_density)):
            self._stats[name].append(float(value))
        return {**params, **self._unflatten(chain.x, shapes)}

    def logging(self) -> OrderedDict:
        recent = self._stats["hamiltonian_drift"][-50:]
        drift = max(recent) if recent else 0.0
        return OrderedDict([("H drift", f"{drift:.2g}")])

    def diagnostics(self) -> dict:
        start = self._warmup_steps
        return {
            "sample_stats": {
                name: torch.tensor(values[start:], dtype=torch.get_default_dtype())
                for name, values in self._stats.items()
            }
        }
