"""Pyro ESH kernel for continuous latent sites (all math in
:mod:`discrete_kernels.samplers.esh`)."""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import Callable

import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel
from pyro.infer.mcmc.util import initialize_model
from pyro.ops.integrator import potential_grad

from discrete_kernels import PYTHON_CONTROL, NoiseShapes, StepNoise, diagnosis
from discrete_kernels import validation as checks
from discrete_kernels.registration import kernel_signature, split_options
from discrete_kernels.samplers.esh import ESH as ESHSampler
from discrete_kernels.samplers.esh import ESHAdaptState, ESHChain, ESHInfo
from discrete_kernels.warmup import Feedback, run_phases

from ._record import LOG_EVERY, StepRecord
from ._target import discrete_sites, trace_model
from .driver import draw_noise

__all__ = ["ESH"]

STAT_NAMES = (*ESHInfo._fields, "lp")


class ESH(MCMCKernel):
    """Energy-sampling Hamiltonian dynamics for Pyro's continuous sites (in their
    unconstrained space, through ``kernel.transforms`` like ``HMC``).

    Options and behaviour as :class:`numpyro_ext.ESH`: ``step_size`` and ``num_steps``
    leapfrog steps per draw (None: adapted during warmup, from 0.1 and 20), ``exact=True`` for
    the exactly invariant orbit weighting (``False``: the paper's reservoir). Per-draw
    statistics ``hamiltonian_drift``, ``trajectory_length``, ``num_grad_evals`` and ``lp`` are
    in ``diagnostics()["sample_stats"]`` (and :func:`pyro_ext.to_arviz`). Works as a block of
    :class:`pyro_ext.Gibbs`.
    """

    def __init__(
        self, model: Callable | None = None, *, potential_fn: Callable | None = None, **options
    ) -> None:
        if (model is None) == (potential_fn is None):
            raise ValueError("ESH: give exactly one of `model` or `potential_fn`.")
        own, _ = split_options(ESHSampler, options)
        self.model = model
        self.potential_fn = potential_fn
        self.transforms: dict | None = None
        self._spec = ESHSampler(**own)
        self._initial_params: dict | None = None
        self._step_record = StepRecord()
        self._log: OrderedDict = OrderedDict()
        self._num_steps: int | None = None  # the adapted trajectory length, read after warmup
        self._warmup_steps = 0
        self._adapt_state: ESHAdaptState | None = None
        self._phases: tuple = ()
        self.clear_cache()

    @property
    def spec(self) -> ESHSampler:
        """The sampler's spec (its validated options)."""
        return self._spec

    @property
    def adaptation(self):
        """The warmup adaptation's settings
        (:class:`discrete_kernels.samplers.esh.ESHAdaptation`)."""
        return self._spec.adaptation

    @property
    def initial_params(self) -> dict | None:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: dict | None) -> None:
        self._initial_params = params

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        self._warmup_steps = int(warmup_steps)
        self._step_record = StepRecord()
        self._log = OrderedDict()
        self._num_steps = None
        self._adapt_state = None  # built at the first draw, on its flat vector
        self._phases = self._spec.phases(self._warmup_steps)
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
        self._returned: dict | None = None  # the tensors the cached chain was returned as

    def cleanup(self) -> None:
        self.clear_cache()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cached"] = None
        state["_returned"] = None
        state["_phases"] = ()  # closures, rebuilt by setup
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
            potential = potential.detach()
            flat_grad = torch.cat([grads[n].reshape(-1) for n in self._names]).detach()
            # an unusable energy has no gradient (a where, not an if: no wait for the GPU)
            flat_grad = torch.where(torch.isfinite(potential), flat_grad, float("nan"))
            return -potential, -flat_grad

        return value_and_grad

    def _draw_noise(self, shapes: NoiseShapes, index: int, like: torch.Tensor) -> StepNoise:
        """The noise of draw ``index`` in ``like``'s dtype and device (:func:`draw_noise`)."""
        return draw_noise(shapes, like)

    def sample(self, params: dict) -> dict:
        flat, shapes = self._flatten(params)
        value_and_grad = self._value_and_grad(shapes)
        returned = self._returned
        if (
            self._cached is not None
            and returned is not None
            and all(params[n] is returned[n] for n in self._names)
        ):
            chain = self._cached  # the values this kernel returned last: state still valid
        else:
            chain = self._spec.init(flat, value_and_grad)
            self._check_start(chain, params)
        index = len(self._step_record)
        noise = self._draw_noise(self._spec.noise_shapes(flat.shape[0]), index, flat)
        if self._adapt_state is None:
            self._adapt_state = self._spec.adapt_init(flat)
        adapt = self._adapt_state
        if self._spec.num_steps is None:  # a Python count for the Python loop
            if self._num_steps is None or index < self._warmup_steps:
                self._num_steps = int(adapt.num_steps)  # fixed once warmup has ended
            adapt = adapt._replace(num_steps=self._num_steps)
        chain, info = self._spec.step(chain, noise, value_and_grad, adapt, PYTHON_CONTROL)
        feedback = Feedback(info, (adapt.step_size, adapt.num_steps), chain, index)
        self._adapt_state = run_phases(
            self._phases,
            self._adapt_state,
            feedback,
            PYTHON_CONTROL._replace(step=index),
        )
        self._cached = chain
        self._step_record.append({**info._asdict(), "lp": chain.log_density}, flat)
        if index + 1 == self._warmup_steps >= diagnosis.MIN_WARMUP_FOR_FROZEN_CHECK:
            start = diagnosis.frozen_check_start(self._warmup_steps)
            moved = self._step_record.columns(start, self._warmup_steps)["moved"]
            if not bool(moved.any()):  # read once, at the end of warmup
                message = diagnosis.no_move_message(
                    "ESH", self._names, self._warmup_steps, causes=diagnosis.ESH_NO_MOVE_CAUSES
                )
                warnings.warn(message, stacklevel=2)
        returned = self._unflatten(chain.x, shapes)
        self._returned = returned
        return {**params, **returned}

    def _check_start(self, chain: ESHChain, params: dict) -> None:
        """Refuse a start of zero density or a non-finite gradient: no orbit can leave it
        (read on the host once per (re)start, like the discrete kernels' setup check)."""
        if not bool(torch.isfinite(chain.log_density)):
            transforms = self.transforms or {}
            values = [  # in the model's (constrained) space
                transforms[n].inv(params[n]) if n in transforms else params[n] for n in self._names
            ]
            checks.check_initial_log_density("ESH", chain.log_density, self._names, values)
        if not bool(torch.isfinite(chain.grad).all()):
            raise ValueError(
                f"ESH: the gradient of the log density at the start values of {self._names} "
                "is not finite; start where the density is smooth (check initial_params)."
            )

    def logging(self) -> OrderedDict:
        """The progress bar's text, read from the device every ``LOG_EVERY`` steps."""
        count = len(self._step_record)
        if count <= 1 or count % LOG_EVERY == 0 or not self._log:
            recent = self._step_record.recent("hamiltonian_drift", LOG_EVERY)
            drift = float(recent.max()) if recent.numel() else 0.0
            self._log = OrderedDict([("H drift", f"{drift:.2g}")])
        return self._log

    def diagnostics(self) -> dict:
        """Every statistic per sampling draw (float64 tensors on the host)."""
        return {"sample_stats": self._step_record.columns(self._warmup_steps)}


ESH.__signature__ = kernel_signature(ESHSampler, domain=False)  # type: ignore[attr-defined]
