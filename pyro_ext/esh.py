"""Pyro ESH kernel for continuous latent sites (all math in :mod:`discrete_kernels.esh`)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel
from pyro.infer.mcmc.util import initialize_model
from pyro.ops.integrator import potential_grad

from discrete_kernels import esh

from ._target import discrete_sites, trace_model

__all__ = ["ESH"]

STAT_NAMES = ("hamiltonian_drift", "trajectory_length", "num_grad_evals", "lp")


class ESH(MCMCKernel):
    """Energy-sampling Hamiltonian dynamics for Pyro's continuous sites (in their
    unconstrained space, through ``kernel.transforms`` like ``HMC``).

    Options and behaviour as :class:`numpyro_ext.ESH`: ``step_size`` (0.1), ``num_steps``
    (20) leapfrog steps per draw, ``exact=True`` for the exactly invariant orbit weighting
    (``False``: the paper's reservoir). Per-draw statistics ``hamiltonian_drift``,
    ``trajectory_length``, ``num_grad_evals`` and ``lp`` are in
    ``diagnostics()["sample_stats"]`` (and :func:`pyro_ext.to_arviz`). Works as a block of
    :class:`pyro_ext.Gibbs`.
    """

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        step_size: float = 0.1,
        num_steps: int = 20,
        exact: bool = True,
    ) -> None:
        esh.esh_options(model, potential_fn, step_size, num_steps)
        self.model = model
        self.potential_fn = potential_fn
        self.transforms: dict | None = None
        self._step_size = float(step_size)
        self._num_steps = num_steps
        self._exact = bool(exact)
        self._initial_params: dict | None = None
        self._stats: dict = {name: [] for name in STAT_NAMES}
        self._warmup_steps = 0
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
        self._cached: tuple | None = None

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

    def sample(self, params: dict) -> dict:
        flat, shapes = self._flatten(params)
        value_and_grad = self._value_and_grad(shapes)
        if self._cached is not None and torch.equal(self._cached[0], flat):
            f, g = self._cached[1], self._cached[2]
        else:
            f, g = value_and_grad(flat)
        direction = esh.unit_vector(torch.randn_like(flat))
        start = esh.ESHState(flat, direction, torch.zeros((), dtype=flat.dtype), f, g)
        uniforms = torch.rand(self._num_steps, dtype=flat.dtype)
        backward = int(torch.randint(0, self._num_steps + 1, ()))
        sample, info = esh.esh_trajectory(
            start,
            self._step_size,
            self._num_steps,
            value_and_grad,
            uniforms,
            backward_steps=backward,
            exact=self._exact,
        )
        self._cached = (sample.x, sample.log_density, sample.grad)
        for name, value in (
            ("hamiltonian_drift", info.hamiltonian_drift),
            ("trajectory_length", self._step_size * self._num_steps),
            ("num_grad_evals", self._num_steps),
            ("lp", sample.log_density),
        ):
            self._stats[name].append(float(value))
        return {**params, **self._unflatten(sample.x, shapes)}

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
