"""The one Pyro driver of discrete-kernels: any core sampler spec as a Pyro ``MCMCKernel``.

:class:`DiscreteKernel` keeps the ``MCMCKernel`` protocol only: it builds its sites once
(:mod:`pyro_ext._setup`), draws each step's noise with torch's RNG on the model's device in the
shapes the spec asks for, calls the spec's step and warmup phases, and records the spec's
statistics per draw. A kernel class is the driver and a spec, registered in one line::

    class DMALA(DiscreteKernel, sampler=dlp.DMALA):
        '''...'''
"""

from __future__ import annotations

import inspect
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from discrete_kernels import PYTHON_CONTROL, ChainState, NoiseShapes, Sampler, StepNoise, diagnosis
from discrete_kernels import validation as checks
from discrete_kernels.registration import bind_sampler
from discrete_kernels.sites import kernel_options
from discrete_kernels.warmup import Feedback, run_phases, start_phases

from ._record import LOG_EVERY, StepRecord
from ._setup import SiteSetup, setup_model, setup_potential
from ._target import as_tensor, to_user
from ._torch_compile import compiled
from ._warmup_check import WarmupCheck, switched_setup

__all__ = ["DiscreteKernel", "draw_noise"]


def draw_noise(shapes: NoiseShapes, like: torch.Tensor) -> StepNoise:
    """One step's noise in a spec's shapes, in ``like``'s dtype and on its device: the
    proposal uniforms leaf by leaf, the MH uniform, then the normals and the permutation if
    the spec takes them. One draw per array: eager torch dispatches each view of a shared
    flat draw as an operation of its own (one leaf: 2 operations instead of 5)."""
    dtype, device = like.dtype, like.device
    uniforms = tuple(torch.rand(shape, dtype=dtype, device=device) for shape in shapes.uniforms)
    accept_uniform = torch.rand((), dtype=dtype, device=device)
    normals = None
    if shapes.num_normals:
        normals = torch.randn(shapes.num_normals, dtype=dtype, device=device)
    permutation = None
    if shapes.permutation:  # a Python loop reads it: on the CPU
        permutation = torch.randperm(shapes.permutation, device="cpu")
    return StepNoise(uniforms, accept_uniform, normals, permutation)


def _conditioned_names(model: Any) -> frozenset:
    """Sites a :class:`pyro_ext.Gibbs` block's model conditions on (the other blocks')."""
    from .gibbs import _ConditionedModel

    if isinstance(model, _ConditionedModel):
        return frozenset(model.store.values) - model.own
    return frozenset()


class DiscreteKernel(MCMCKernel):
    """The driver: sites, checks, noise, the spec's step and warmup phases, statistics and
    the Pyro protocol. A subclass names its sampler (``sampler=`` in the class statement); its
    constructor then takes ``model`` or ``potential_fn`` and ``domain``, the sampler's options
    and the site options (``exact_sites``, and ``preconditioner`` where the sampler takes
    one). In potential mode ``potential_fn`` takes a dict of site values, ``domain`` is one
    domain or a dict by site name, and ``initial_params`` (given to ``pyro.infer.MCMC``) fix
    the sites' shapes. ``jit_compile=True`` (as Pyro's ``HMC``/``NUTS``) evaluates the log
    density through ``torch.jit.trace`` (:mod:`pyro_ext._jit`): for models that run the same
    torch operations at every value of their sites, checked at the start and a prior draw.
    ``torch_compile=True`` runs each step (the proposal, the log density and its gradient at
    the proposal, the MH decision) as one ``torch.compile`` program: a small model's step
    without eager torch's cost per operation, after a compilation of a few seconds at the
    first step; the noise is drawn eagerly, so the draws are those of ``torch_compile=False``
    up to the compiled program's rounding."""

    sampler: ClassVar[type[Sampler]]

    def __init_subclass__(cls, sampler: type[Sampler] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if sampler is not None:
            bind_sampler(cls, sampler)
            # Pyro's own option (as HMC/NUTS), after the sampler's and the site options
            signature = cls.__signature__  # type: ignore[attr-defined]
            flags = [
                inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=False)
                for name in ("jit_compile", "torch_compile")
            ]
            parameters = [*signature.parameters.values(), *flags]
            cls.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        jit_compile: bool = False,
        torch_compile: bool = False,
        **options: Any,
    ) -> None:
        if not hasattr(type(self), "sampler"):
            raise TypeError("DiscreteKernel is the driver; use a kernel such as px.DMALA.")
        for flag, value in (("jit_compile", jit_compile), ("torch_compile", torch_compile)):
            if not isinstance(value, bool):
                raise ValueError(
                    f"{self.sampler.name}: {flag} must be True or False, got {value!r}."
                )
        self._jit_compile = jit_compile
        self._torch_compile = torch_compile
        self._spec, self._site_options = kernel_options(
            self.sampler, model, potential_fn, domain, options, "a dict of them by site name"
        )
        self._model = model
        self._potential_fn = potential_fn
        self._domain = domain
        self.transforms: dict = {}  # discrete values need no transform
        self._initial_params: dict | None = None
        self._reset()

    def _reset(self) -> None:
        self._setup: SiteSetup | None = None
        self._phases: tuple = ()
        self._warmup_steps = 0
        self._t = 0
        self._state: ChainState | None = None
        self._returned: dict | None = None
        self._noise_shapes_cache: tuple | None = None
        self._adapt_state: Any = None
        self._step_record = StepRecord()
        self._log: OrderedDict = OrderedDict()
        self._check: WarmupCheck | None = None  # the warmup's check of gradient sites
        self._built_local_fn: tuple | None = None  # (setup, its local_fn)
        self._built_step: tuple | None = None  # (setup, its compiled step)

    @property
    def spec(self) -> Sampler:
        """The sampler's spec (its validated options; what the EBM trainers run)."""
        return self._spec

    @property
    def _name(self) -> str:
        return self._spec.name

    @property
    def model(self) -> Callable | None:
        return self._model

    @model.setter
    def model(self, model: Callable | None) -> None:  # pyro_ext.Gibbs conditions it
        self._model = model

    @property
    def potential_fn(self) -> Callable | None:
        return self._potential_fn

    @property
    def adapt_state(self) -> Any:
        """The sampler's adaptation state of the next draw (e.g. AB's quadratic proposal)."""
        return self._adapt_state

    # ------------------------------------------------------------------ Pyro protocol

    @property
    def initial_params(self) -> dict | None:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: dict | None) -> None:
        self._initial_params = params

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        """Find the sites, check the start values (drawn from the prior for the sites not
        given), and cache the log density and locals at them."""
        checks.check_bound(self._name, self._model, self._potential_fn)
        self._reset()
        self._warmup_steps = int(warmup_steps)
        self._spec.check_warmup(self._warmup_steps, "warmup_steps")
        given = dict(self._initial_params or {})
        if self._model is None:
            assert self._potential_fn is not None  # checked at construction
            setup = setup_potential(
                self._spec,
                self._site_options,
                self._potential_fn,
                self._domain,
                given,
                self._jit_compile,
            )
        else:
            setup = setup_model(
                self._spec,
                self._site_options,
                self._model,
                given,
                args,
                kwargs,
                _conditioned_names(self._model),
                self._jit_compile,
                self._torch_compile,
            )
        self._setup = setup
        self._initial_params = setup.start
        self._state = setup.chain
        watch = (
            self._model is not None
            and self._site_options.auto_exact
            and self._spec.auto_exact
            and self._spec.uses_locals
            and self._warmup_steps >= diagnosis.MIN_WARMUP_FOR_FROZEN_CHECK
            and not setup.minibatch  # the check compares log densities
        )
        check = WarmupCheck(self._name, setup.leaves, setup.chain, self._warmup_steps)
        self._check = check if watch and check else None
        like = torch.ones((), dtype=setup.like.dtype, device=setup.like.device)
        adapt = self._spec.adapt_init(
            like, self._warmup_steps, setup.sites, setup.flat_dim, PYTHON_CONTROL
        )
        self._phases = self._spec.phases(self._warmup_steps, PYTHON_CONTROL)
        self._adapt_state = start_phases(self._phases, adapt)
        # MCMC starts from these very tensors: the cached state is valid for them
        self._returned = {name: setup.start[name] for name in setup.names}

    def cleanup(self) -> None:
        self._state = None

    def logging(self) -> OrderedDict:
        """The progress bar's text; Pyro asks for it at every step, it is read from the
        device every ``LOG_EVERY`` steps (a host read waits for the GPU)."""
        if self._t == 1 or self._t % LOG_EVERY == 0 or not self._log:
            self._log = self._log_entries()
        return self._log

    def _log_entries(self) -> OrderedDict:
        out = OrderedDict()
        for label, name, fmt in self._spec.progress:
            recent = self._step_record.recent(name, LOG_EVERY)
            value = float(recent.mean()) if recent.numel() else float("nan")
            out[label] = format(value, fmt)
        return out

    def diagnostics(self) -> dict:
        """Mean acceptance and, under ``sample_stats``, every statistic per sampling draw
        (float64 tensors on the host)."""
        sample_stats = self._step_record.columns(self._warmup_steps)
        accept = sample_stats["accept_prob"] if "accept_prob" in sample_stats else None
        return {
            "acceptance rate": float(accept.mean())
            if accept is not None and accept.numel()
            else float("nan"),
            "sample_stats": sample_stats,
        }

    def tuned_parameters(self) -> dict:
        """What the warmup settled on (the spec's ``adapt_final``), read after warmup."""
        return dict(self._spec.adapt_final(self._adapt_state))

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_state"] = None  # rebuilt by setup in the worker
        state["_setup"] = None
        state["_phases"] = ()  # closures, rebuilt by setup
        state["_built_local_fn"] = None
        state["_built_step"] = None  # a compiled program: compiled again in the worker
        state["_noise_shapes_cache"] = None  # holds the setup
        return state

    # ------------------------------------------------------------------ sampling

    def _local_fn(self) -> Callable:
        """The setup's ``local_fn``, built once per setup (a site switched to exact
        differences makes a new setup)."""
        setup = self._setup
        assert setup is not None
        cached = self._built_local_fn
        if cached is None or cached[0] is not setup:
            cached = self._built_local_fn = (setup, setup.local_fn(self._spec.uses_locals))
        return cached[1]

    def _compiled_step(self) -> Callable:
        """``(state, noise, parameters, adapt) -> (state, info)``: the spec's step on this
        setup's sites as one ``torch.compile`` program, its gradients by ``torch.func``
        (``torch.autograd.grad`` would split the program in two); built once per setup."""
        setup = self._setup
        assert setup is not None
        cached = self._built_step
        if cached is None or cached[0] is not setup:
            spec, sites = self._spec, setup.sites
            local_fn = setup.local_fn(spec.uses_locals, functional=True)

            def step(state: ChainState, noise: StepNoise, params: Any, adapt: Any) -> tuple:
                return spec.step(state, noise, params, adapt, sites, local_fn)

            cached = self._built_step = (setup, compiled(step, self._name))
        return cached[1]

    def clear_cache(self) -> None:
        """Forget the cached log density and locals (the model's conditioning changed, e.g.
        inside :class:`pyro_ext.Gibbs`); they are recomputed at the next step."""
        self._returned = None

    def _noise_shapes(self, setup: SiteSetup, state: ChainState) -> NoiseShapes:
        """The spec's noise shapes for these leaves, remembered while the setup and the leaves'
        shapes stay (a small model's step is mostly Python work)."""
        leaf_shapes = tuple(x.shape for x in state.x)
        cached = self._noise_shapes_cache
        if cached is None or cached[0] is not setup or cached[1] != leaf_shapes:
            shapes = self._spec.noise_shapes(setup.sites, [tuple(s) for s in leaf_shapes])
            cached = self._noise_shapes_cache = (setup, leaf_shapes, shapes)
        return cached[2]

    def _draw_noise(self, shapes: NoiseShapes, index: int) -> StepNoise:
        """The noise of draw ``index`` on the model's device (:func:`draw_noise`)."""
        assert self._setup is not None
        return draw_noise(shapes, self._setup.like)

    def sample(self, params: dict) -> dict:
        setup, spec = self._setup, self._spec
        state = self._state
        if setup is None or state is None:
            raise RuntimeError(f"{self._name}: call `setup` before `sample`.")
        if self._returned is None or any(
            params[name] is not self._returned[name] for name in setup.names
        ):
            # new conditioning or values set from outside: rebuild the cache
            state = spec.init_for_step(setup.to_leaves(params), self._local_fn())
        checking = self._check is not None and self._t < self._warmup_steps
        if checking and any(local is None for local in state.local):
            # the check reads every local: a sweep, or a lazy init, left them unread
            f, local = self._local_fn()(state.x)
            state = ChainState(state.x, f, tuple(local))
        if self._check is not None and self._t < self._warmup_steps:
            if self._check.due(self._t):
                leaves = self._check.check(self._t, setup, state)
                if leaves is not None:  # a site switched to exact differences
                    setup = self._setup = switched_setup(setup, leaves, spec)
                    state = spec.init(state.x, self._local_fn())
            if self._t + 1 == self._warmup_steps:
                self._check.end_of_warmup(state)
        noise = self._draw_noise(self._noise_shapes(setup, state), self._t)
        adapt = self._adapt_state
        step_params = spec.parameters(adapt)
        if self._torch_compile:
            state, info = self._compiled_step()(state, noise, step_params, adapt)
        else:
            state, info = spec.step(state, noise, step_params, adapt, setup.sites, self._local_fn())
        if self._phases:
            control = PYTHON_CONTROL._replace(step=self._t)
            feedback = Feedback(info, step_params, state, self._t)
            self._adapt_state = run_phases(self._phases, adapt, feedback, control)
        self._t += 1
        values = {name: getattr(info, name) for name in spec.statistics}
        values["lp"] = state.log_density
        self._step_record.append(values, setup.like)
        if self._t == self._warmup_steps >= diagnosis.MIN_WARMUP_FOR_FROZEN_CHECK:
            start = diagnosis.frozen_check_start(self._warmup_steps)
            accepted = self._step_record.columns(start, self._warmup_steps)["accepted"]
            if not bool(accepted.any()):  # read once, at the end of warmup
                warnings.warn(
                    diagnosis.no_move_message(self._name, setup.names, self._t), stacklevel=2
                )
        self._state = state
        returned = {
            s.name: to_user(s, x, as_tensor(params[s.name])) for s, x in zip(setup.leaves, state.x)
        }
        self._returned = returned
        return {**params, **returned}
