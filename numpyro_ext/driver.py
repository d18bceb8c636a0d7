"""The one NumPyro driver of discrete-kernels: any core sampler spec as an ``MCMCKernel``.

:class:`DiscreteKernel` keeps the ``MCMCKernel`` protocol only: it builds its sites once
(:mod:`numpyro_ext._setup`), draws each step's noise with JAX's RNG in the shapes the spec asks
for (:mod:`numpyro_ext._noise`), and calls the spec's step and warmup phases. A kernel class is
the driver and a spec, registered in one line::

    class DMALA(DiscreteKernel, sampler=dlp.DMALA):
        '''...'''

Its options are the spec's dataclass fields (defaults written there) and the site options of
:class:`discrete_kernels.sites.SiteOptions`.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.handlers import seed, substitute, trace
from numpyro.infer.gibbs import conditioned, prototype_trace, with_conditioning
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import identity, is_prng_key

from discrete_kernels import ChainState, ControlFlow, NoiseShapes, Sampler, StepNoise, diagnosis
from discrete_kernels import validation as checks
from discrete_kernels.kernel import take_step
from discrete_kernels.registration import bind_sampler
from discrete_kernels.sites import kernel_options
from discrete_kernels.warmup import Feedback, run_phases, start_phases

from . import _sharding
from . import _warmup_check as wc
from ._host_warnings import frozen_chain_check
from ._noise import draw_noise
from ._once import run_once
from ._setup import (
    SiteSetup,
    check_init_params,
    concrete_setup_inputs,
    initial_values,
    setup_model,
    setup_potential,
)

__all__ = ["DiscreteKernel", "DiscreteState", "JAX_CONTROL", "minibatch_key", "state_class"]


def _fori(num: int, body: Callable, carry: Any) -> Any:
    return jax.lax.fori_loop(0, num, lambda _, c: body(c), carry)


#: the core's branches and loops as JAX control flow (real branches under jit)
JAX_CONTROL = ControlFlow(cond=jax.lax.cond, loop=_fori)

_HEAD = ("i", "z", "potential_energy")
_TAIL = ("num_moves", "moves_at_half_warmup", "local", "adapt_state", "warmup_check", "rng_key")
_DOC = """State of a discrete kernel: the draw's index **i**, the current values **z** (a dict of
site values, or the pytree given as ``init_params``), **potential_energy** (``-log density``;
ArviZ shows its negative as ``lp``), the sampler's statistics of this draw ({stats}),
**num_moves** (draws so far at which the chain moved), **moves_at_half_warmup** (for the
frozen-chain check), the cached gradient or table of each leaf (**local**), the sampler's
adaptation state (**adapt_state**), the warmup's check of the gradient sites
(**warmup_check**: a :class:`numpyro_ext._warmup_check.CheckState`, or ``()``) and the key of
the next draw (**rng_key**)."""

_STATES: dict[tuple[str, ...], type] = {}

#: folded into a chain's key for the key that draws a step's minibatch (subsampling plates),
#: so that the noise of every step stays what it is without subsampling
_MINIBATCH = 0x5B


def minibatch_key(rng_key: jax.Array, purpose: int = 0) -> jax.Array:
    """The key that draws the minibatch of the step taken with the chain's key ``rng_key``
    (``purpose`` 1: the start state's, 2: a refresh's; 0: a step's)."""
    return random.fold_in(random.fold_in(rng_key, _MINIBATCH), purpose)


def _state_name(statistics: tuple[str, ...]) -> str:
    return "DiscreteState__" + "__".join(statistics)


def state_class(statistics: tuple[str, ...]) -> Any:
    """The state NamedTuple of a sampler with these statistics (one class per tuple, a
    module attribute so that states pickle)."""
    if statistics not in _STATES:
        name = _state_name(statistics)
        fields = [(f, Any) for f in (*_HEAD, *statistics, *_TAIL)]
        created: Any = NamedTuple(name, fields)  # type: ignore[misc]
        created.__module__ = __name__
        created.__doc__ = _DOC.format(stats=", ".join(f"**{s}**" for s in statistics))
        _STATES[statistics] = created
        setattr(sys.modules[__name__], name, created)
    return _STATES[statistics]


def __getattr__(name: str) -> Any:
    """State classes by name, created on first use (unpickling in a fresh process)."""
    prefix = "DiscreteState__"
    if name.startswith(prefix):
        return state_class(tuple(name[len(prefix) :].split("__")))
    raise AttributeError(name)


#: the state of DMALA, DULA and GWG
DiscreteState = state_class(("accept_prob", "accepted", "hamming_distance", "step_size", "balance"))


class DiscreteKernel(MCMCKernel):
    """The driver: sites, checks, noise, the spec's step and warmup phases, chain methods and
    the Gibbs-block protocol. A subclass names its sampler (``sampler=`` in the class
    statement); its constructor then takes ``model`` or ``potential_fn`` and ``domain``, the
    sampler's options and the site options (``exact_sites``, and ``preconditioner`` where the
    sampler takes one)."""

    sample_field = "z"
    sampler: ClassVar[type[Sampler]]

    #: ``chain_method="vectorized"`` splits the chains over all local devices (JAX's
    #: sharding API) when their number is a multiple of the device count; set False on an
    #: instance to keep them on the default device.
    shard_chains: bool = True

    def __init_subclass__(cls, sampler: type[Sampler] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if sampler is not None:
            bind_sampler(cls, sampler)

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        **options: Any,
    ) -> None:
        if not hasattr(type(self), "sampler"):
            raise TypeError("DiscreteKernel is the driver; use a kernel such as nx.DMALA.")
        self._spec, self._site_options = kernel_options(
            self.sampler,
            model,
            potential_fn,
            domain,
            options,
            "a pytree of them matching init_params",
        )
        self._model = model
        self._potential_fn = potential_fn
        self._domain = domain
        self._setup: SiteSetup | None = None
        self._num_warmup = 0
        self._sample_fn: Callable | None = None
        self._check: wc.WarmupCheck | None = None  # the warmup's check of gradient sites
        self._replicated: Any = None  # set when vectorised chains are split over devices
        self._auto_exact_decisions: dict = {}  # exact_sites="auto": site shapes -> leaves

    @property
    def spec(self) -> Sampler:
        """The sampler's spec (its validated options; what the EBM trainers run)."""
        return self._spec

    @property
    def _name(self) -> str:
        return self._spec.name

    # ---------------------------------------------------------------- PPL protocol

    @property
    def model(self) -> Callable | None:
        return self._model

    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z", "potential_energy", *self._spec.reported)

    def get_diagnostics_str(self, state: Any) -> str:
        return self._spec.progress_text({f: getattr(state, f) for f in self._spec.statistics})

    def wrap_model(self, wrapper: Callable) -> DiscreteKernel:
        if self._model is None:
            raise ValueError(f"{self._name} built from a potential_fn has no model to wrap.")
        kernel = copy.copy(self)
        kernel._model = wrapper(self._model)
        kernel._setup = None
        kernel._auto_exact_decisions = {}
        kernel._sample_fn = None
        return kernel

    def get_constrain_fn(self, model_args: tuple, model_kwargs: dict | None) -> Callable:
        """Identity: discrete values are already constrained."""
        return identity

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict | None) -> Callable:
        """Identity, or a replay of the model adding its ``deterministic`` sites."""
        if self._model is None or self._setup is None or not self._setup.has_deterministic:
            return identity
        model_kwargs = {} if model_kwargs is None else model_kwargs
        model = conditioned(self._model)

        def fn(z: dict) -> dict:
            replay = substitute(seed(model, random.key(0)), data=z)
            model_trace = trace(replay).get_trace(*model_args, **with_conditioning(model_kwargs, z))
            deterministic = {
                name: site["value"]
                for name, site in model_trace.items()
                if site["type"] == "deterministic"
            }
            return {**z, **deterministic}

        return fn

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_setup"] = None
        state["_sample_fn"] = None
        state["_check"] = None  # rebuilt with the setup at init
        return state

    # ---------------------------------------------------------------- MCMC protocol

    def _site_setup(self, rng_key, init_params, model_args, model_kwargs) -> SiteSetup:
        if self._model is None:
            assert self._potential_fn is not None  # checked at construction
            return setup_potential(
                self._spec, self._site_options, self._potential_fn, self._domain, init_params
            )
        return setup_model(
            self._spec,
            self._site_options,
            self._model,
            rng_key,
            model_args,
            model_kwargs,
            self._auto_exact_decisions,
        )

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        checks.check_bound(self._name, self._model, self._potential_fn)
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        vectorized = not is_prng_key(rng_key)
        setup_params = (
            jax.tree.map(lambda x: x[0], init_params)
            if vectorized and init_params is not None
            else init_params
        )
        self._num_warmup = int(num_warmup)
        self._spec.check_warmup(self._num_warmup, "num_warmup")
        # one small program run once: eagerly, the index and fold_in compiled one each (about
        # 70 ms on the CPU, a few percent of a small model's whole run)
        setup_key = run_once(lambda k: random.fold_in(k[0] if vectorized else k, 1), rng_key)
        setup_kwargs = model_kwargs
        if self._model is not None:
            setup_key, setup_kwargs = concrete_setup_inputs(
                self._name, self._model, setup_key, model_args, model_kwargs
            )
        setup = self._site_setup(setup_key, setup_params, model_args, setup_kwargs)
        self._setup = setup
        enough = self._num_warmup >= diagnosis.MIN_WARMUP_FOR_FROZEN_CHECK
        self._check = setup.warmup_check if enough else None
        batch_shape = tuple(jnp.shape(rng_key)[:1]) if vectorized else ()
        init_params = check_init_params(setup, init_params, batch_shape)

        def init_one(key, params):
            key, key_values = random.split(key)
            z = initial_values(setup, self._model, key_values, params, model_args, model_kwargs)
            return self._initial_state(key, z, model_args, model_kwargs)

        # compiled as one program: run eagerly, every operation of the model and its gradient
        # would be compiled on its own the first time a model's shapes are seen (seconds);
        # run once, so compiled without the loop's optimisations (numpyro_ext._once)
        if vectorized:
            if init_params is None:
                state = run_once(jax.vmap(lambda k: init_one(k, None)), rng_key)
            else:
                state = run_once(jax.vmap(init_one), rng_key, init_params)
        else:
            state = run_once(init_one, rng_key, init_params)
        if not isinstance(state.potential_energy, jax.core.Tracer):
            energies = np.ravel(np.asarray(state.potential_energy))
            for chain, energy in enumerate(energies):
                if not np.isfinite(energy):
                    leaves = setup.to_leaves(state.z)
                    values = [x if energies.size == 1 else x[chain] for x in leaves]
                    checks.check_initial_log_density(self._name, -energy, setup.names, values)
        if vectorized:  # after the check: with several processes no one holds every chain
            state, self._replicated = _sharding.shard_chains(state, self._name, self.shard_chains)
        self._sample_fn = self._make_sample_fn(vectorized)
        return state

    def _initial_state(self, rng_key, z, model_args, model_kwargs) -> Any:
        setup = self._setup
        assert setup is not None
        if self._model is None:
            assert self._potential_fn is not None  # checked at construction
            shape = jax.eval_shape(self._potential_fn, z).shape
            if shape != ():
                raise ValueError(
                    f"{self._name}: potential_fn must return a scalar (-log density), got an "
                    f"array of shape {shape}."
                )
        local_fn = self._local_fn(model_args, model_kwargs, rng_key=minibatch_key(rng_key, 1))
        try:
            chain = self._spec.init(setup.to_leaves(z), local_fn)
        except TypeError as error:
            gradient_sites = [s.name for s in setup.leaves if not s.is_table]
            raise TypeError(
                f"{self._name}: differentiating the log density in the values of "
                f"{gradient_sites} failed ({str(error).splitlines()[0]}). A value used as an "
                "index (e.g. probs[k]) has no gradient: list such sites in exact_sites=[...] "
                "(their local differences are then evaluated exactly), or write the model "
                "with arithmetic on the value."
            ) from error
        like = jnp.ones((), dtype=jnp.result_type(float))
        spec = self._spec
        adapt = spec.adapt_init(like, self._num_warmup, setup.sites, setup.flat_dim, JAX_CONTROL)
        adapt = start_phases(spec.phases(self._num_warmup, JAX_CONTROL), adapt)
        stats = spec.initial_info(spec.parameters(adapt), adapt, like)
        zero = jnp.zeros((), dtype=jnp.int32)
        return state_class(spec.statistics)(
            i=zero,
            z=z,
            potential_energy=-chain.log_density,
            num_moves=zero,
            moves_at_half_warmup=zero,
            local=chain.local,
            adapt_state=adapt,
            warmup_check=wc.initial_check_state(self._check, setup.to_leaves(z)),
            rng_key=rng_key,
            **stats,
        )

    def _make_sample_fn(self, vectorized: bool) -> Callable:
        """One draw of every chain: the spec's step per chain, then its warmup phases with the
        draw index shared by all chains (unbatched, so a phase's ``cond`` on it is a real
        branch under ``vmap``), then the frozen-chain check at the end of warmup."""
        spec, num_warmup = self._spec, self._num_warmup
        phases = spec.phases(num_warmup, JAX_CONTROL)
        setup = self._setup
        assert setup is not None
        owner, sites = self._name, setup.names
        batch = jax.vmap if vectorized else (lambda f, **_: f)
        step = batch(self._step_one, in_axes=(0, None, None, None))
        replicated = self._replicated if vectorized else None

        def adapt_one(adapt, info, params, chain, index):
            return run_phases(phases, adapt, Feedback(info, params, chain, index), JAX_CONTROL)

        def sample_fn(state, model_args, model_kwargs):
            index = state.i[0] if vectorized else state.i  # this draw's index, from 0
            if self._check is not None:
                state = self._warmup_check(state, index, model_args, model_kwargs, vectorized)
            exact = self._shared_exact(state, vectorized)
            new, info, params, chain = step(state, model_args, model_kwargs, exact)
            if phases:
                adapt = batch(adapt_one, in_axes=(0, 0, 0, 0, None))(
                    state.adapt_state, info, params, chain, index
                )
                new = new._replace(adapt_state=adapt)
            return frozen_chain_check(new, index, num_warmup, owner, sites, vectorized, replicated)

        return sample_fn

    # ------------------------------------------------------- the warmup's gradient check

    def _shared_exact(self, state: Any, vectorized: bool) -> Any:
        """The switched flags of the watched leaves, unbatched (the same on every chain), or
        None when nothing is watched."""
        if self._check is None:
            return None
        exact = state.warmup_check.exact
        return exact[0] if vectorized else exact

    def _replicate(self, tree: Any, vectorized: bool) -> Any:
        """``tree`` readable by a host callback from one device (chains split over devices)."""
        if vectorized and self._replicated is not None:
            return jax.tree.map(
                lambda x: jax.lax.with_sharding_constraint(x, self._replicated), tree
            )
        return tree

    def _warmup_check(self, state: Any, index, model_args, model_kwargs, vectorized: bool) -> Any:
        """Before draw ``index``: the warmup's check of the watched leaves
        (:func:`numpyro_ext._warmup_check.check_step`)."""
        assert self._check is not None and self._setup is not None
        return wc.check_step(
            self._check,
            self._setup,
            self._num_warmup,
            self._name,
            lambda tree: self._replicate(tree, vectorized),
            state,
            index,
            model_args,
            model_kwargs,
            vectorized,
        )

    def sample(self, state: Any, model_args, model_kwargs) -> Any:
        if self._sample_fn is None:
            raise RuntimeError(f"{self._name}: call `init` before `sample`.")
        self._check_resumed_shapes(state, model_args, model_kwargs)
        return self._sample_fn(state, model_args, model_kwargs)

    def _check_resumed_shapes(self, state: Any, model_args, model_kwargs) -> None:
        """Refuse a state whose sites' shapes are not the model's with these arguments (a
        ``post_warmup_state`` resumed with data of another size): shapes only, read while
        ``sample`` is traced (the model is traced abstractly, nothing is computed)."""
        setup = self._setup
        if self._model is None or setup is None or not isinstance(state.z, dict):
            return
        model_kwargs = {} if model_kwargs is None else model_kwargs
        model = conditioned(self._model)
        names = [name for name in setup.names if name in state.z]

        def site_values() -> dict:
            model_trace = prototype_trace(model, random.key(0), model_args, model_kwargs)
            return {name: model_trace[name]["value"] for name in names if name in model_trace}

        try:
            traced = jax.eval_shape(site_values)
        except Exception:  # a model that cannot be traced here fails in the step, as before
            return
        skip = 1 if state.i.ndim else 0  # vectorized chains: one leading axis
        checks.check_resumed_shapes(
            self._name,
            {name: jnp.shape(state.z[name])[skip:] for name in names},
            {name: value.shape for name, value in traced.items()},
        )

    def refresh(self, state: Any, model_args, model_kwargs) -> Any:
        """Recompute the cached log density and locals for new conditioning values.

        Outside a trace (``numpyro.infer.Gibbs.init`` calls it eagerly) the work runs as one
        compiled function: run op by op, a plate table's evaluations compile one small
        program each (4.8 s of a 500-site occupancy model's setup)."""
        if not isinstance(state.potential_energy, jax.core.Tracer):
            return jax.jit(lambda s: self._refresh(s, model_args, model_kwargs))(state)
        return self._refresh(state, model_args, model_kwargs)

    def _refresh(self, state: Any, model_args, model_kwargs) -> Any:
        if self._sample_fn is not None and state.i.ndim:
            exact = self._shared_exact(state, True)
            return jax.vmap(self._refresh_one, in_axes=(0, None, None, None))(
                state, model_args, model_kwargs, exact
            )
        return self._refresh_one(state, model_args, model_kwargs, self._shared_exact(state, False))

    def _refresh_one(self, state: Any, model_args, model_kwargs, exact: Any = None) -> Any:
        setup = self._setup
        assert setup is not None
        key = minibatch_key(state.rng_key, 2)
        f, local = self._local_fn(model_args, model_kwargs, exact, key)(setup.to_leaves(state.z))
        return state._replace(potential_energy=-f, local=tuple(local))

    def _local_fn(
        self,
        model_args: tuple,
        model_kwargs: dict | None,
        exact: Any = None,
        rng_key: jax.Array | None = None,
    ) -> Callable:
        """``leaves -> (f, locals)`` of the current setup, for this sampler; ``exact``: the
        warmup check's switched flags of the watched leaves (None: every gradient kept);
        ``rng_key``: the key of the minibatch (read only with subsampling plates)."""
        assert self._setup is not None
        key = rng_key if self._setup.minibatch else None
        unread = self._spec.unread_tables(self._setup.sites)
        base = self._setup.local_fn(model_args, model_kwargs, self._spec.uses_locals, key, unread)
        if self._check is None:
            return base
        return wc.switching_local_fn(self._setup, base, exact, model_args, model_kwargs)

    def _draw_noise(
        self, rng_key: jax.Array, shapes: NoiseShapes, index: jax.Array
    ) -> tuple[jax.Array, StepNoise]:
        """The next key and the noise of draw ``index`` (:func:`numpyro_ext._noise.draw_noise`)."""
        return draw_noise(rng_key, shapes)

    def _step_one(self, state: Any, model_args, model_kwargs, exact: Any = None) -> tuple:
        """One chain's draw before adaptation: ``(state, info, params, chain)``; the state keeps
        the adaptation state this draw used (``exact``: the warmup check's switched flags)."""
        setup, spec = self._setup, self._spec
        assert setup is not None  # set by init
        leaves = setup.to_leaves(state.z)
        shapes = spec.noise_shapes(setup.sites, [x.shape for x in leaves])
        rng_key, noise = self._draw_noise(state.rng_key, shapes, state.i)
        params = spec.parameters(state.adapt_state)
        chain = ChainState(leaves, -state.potential_energy, state.local)
        # a new minibatch at every step (drawn from the chain's key before it advances); the
        # proposal's value and gradient share it, and the next step reads that gradient
        local_fn = self._local_fn(model_args, model_kwargs, exact, minibatch_key(state.rng_key))
        chain, info = take_step(
            spec, chain, noise, params, state.adapt_state, setup.sites, local_fn, JAX_CONTROL
        )
        stats = {
            name: jnp.asarray(getattr(info, name), dtype=jnp.result_type(getattr(state, name)))
            for name in spec.statistics
        }
        new = state._replace(
            i=state.i + 1,
            z=setup.to_user(chain.x, state.z),
            potential_energy=-chain.log_density,
            num_moves=state.num_moves + jnp.asarray(info.accepted, jnp.int32),
            local=chain.local,
            rng_key=rng_key,
            **stats,
        )
        return new, info, params, chain

    def tuned_parameters(self, state: Any) -> dict:
        """What the warmup settled on (the spec's ``adapt_final``) in ``state`` (read it from
        ``mcmc.last_state`` after warmup; with vectorized chains, one row per chain)."""
        final = self._spec.adapt_final
        return jax.vmap(final)(state.adapt_state) if state.i.ndim else final(state.adapt_state)
