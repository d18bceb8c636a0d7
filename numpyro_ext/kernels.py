"""NumPyro kernels DULA, DMALA and GWG: thin wrappers around :mod:`discrete_kernels`."""

from __future__ import annotations

import copy
import math
import warnings
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.handlers import seed, substitute, trace
from numpyro.infer.gibbs import (
    GIBBS_SITES_KWARG,
    conditioned,
    prototype_trace,
    with_conditioning,
)
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import _prepare_model_for_potential, potential_energy
from numpyro.util import identity, is_prng_key

import discrete_kernels as dk
from discrete_kernels.leaves import (
    PRIOR_DRAWS,
    check_leaf_size,
    exact_sites_option,
    switch_badly_estimated_sites,
)
from discrete_kernels.options import check_kernel_options
from discrete_kernels.validation import (
    MIN_WARMUP_FOR_FROZEN_CHECK,
    check_fixed_supports,
    check_initial_log_density,
    check_positive_array,
    check_start_value,
    check_symmetric_matrix,
    no_move_message,
)

from ._target import (
    GRADIENT,
    ONE_HOT_GRADIENT,
    LeafSpec,
    integer_bounds,
    leaf_specs_for_model,
    leaf_specs_for_potential,
    make_local_fn,
)

__all__ = ["AB", "ABAdaptState", "ACS", "ACSState", "DLPState", "DMALA", "DULA", "GWG"]


class AdaptState(NamedTuple):
    """Warmup adaptation: dual-averaging state and the step size of the next draw."""

    dual_averaging: dk.DualAveragingState
    next_step_size: jax.Array


class DLPState(NamedTuple):
    """State of DULA, DMALA and GWG; every field but ``z`` and ``local`` is a statistic.

    - **i** - index of the draw (0 for the initial state).
    - **z** - current values: a dict of site values (model mode) or the pytree given as
      ``init_params`` (potential mode).
    - **potential_energy** - ``-log density`` at ``z`` (ArviZ shows its negative as ``lp``).
    - **accept_prob** - MH acceptance probability of this draw's proposal (DULA: the
      probability an MH step would have had; DULA moves regardless).
    - **accepted** - whether the chain moved to the proposal.
    - **step_size** - the step size ``alpha`` that produced this draw.
    - **balance** - the balance ``beta`` of that proposal (1/2 for DULA, DMALA and GWG).
    - **hamming_distance** - number of coordinates the proposal changed.
    - **num_moves** - draws so far (warmup included) at which the chain moved.
    - **local** - cached gradient or table of each leaf at ``z``.
    - **adapt_state** - :class:`AdaptState`.
    - **rng_key** - key for the next draw.
    """

    i: jax.Array
    z: Any
    potential_energy: jax.Array
    accept_prob: jax.Array
    accepted: jax.Array
    step_size: jax.Array
    balance: jax.Array
    hamming_distance: jax.Array
    num_moves: jax.Array
    local: tuple
    adapt_state: Any
    rng_key: jax.Array


def _uniforms(key: jax.Array, shapes: Sequence[tuple]) -> tuple[tuple, jax.Array]:
    """All uniforms of one step from a single draw (one PRNG call is markedly cheaper on CPU
    than one per leaf): the proposal noise per leaf and the MH uniform."""
    sizes = [math.prod(shape) for shape in shapes]
    flat = random.uniform(key, (sum(sizes) + 1,))
    pieces, start = [], 0
    for shape, size in zip(shapes, sizes):
        pieces.append(jnp.reshape(flat[start : start + size], shape))
        start += size
    return tuple(pieces), flat[-1]


def _alternative_values(site: dict) -> list:
    """A few other values of a site, to see whether other sites' supports move with it:
    two fresh draws and, for an integer interval, its two ends."""
    fn, value = site["fn"], jnp.asarray(site["value"])
    out = []
    for k in (1, 2):
        try:
            out.append(fn.sample(random.key(k)).reshape(value.shape))
        except Exception:  # no sample method, or another shape
            continue
    bounds = integer_bounds(site)
    if bounds is not None:
        out += [jnp.broadcast_to(b, value.shape).astype(value.dtype) for b in bounds]
    return out


class _DiscreteKernel(MCMCKernel):
    """Shared machinery: model/potential setup, chain methods, Gibbs-block protocol."""

    sample_field = "z"
    _name = "DiscreteKernel"
    _state_cls = DLPState
    _adapt_default = True
    _gaussian_noise = False  # whether a step also takes N(0, I) noise (quadratic AB)
    _supports_auto_exact = True  # exact_sites="auto" may switch sites to exact differences

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        step_size: float | None = 0.5,
        adapt_step_size: bool | None = None,
        target_accept_prob: float = 0.574,
        exact_sites: Sequence[str] | str = "auto",
    ) -> None:
        check_kernel_options(
            self._name,
            model,
            potential_fn,
            domain,
            step_size,
            target_accept_prob,
            "a pytree of them matching init_params",
        )
        self._model = model
        self._potential_fn = potential_fn
        self._domain = domain
        self._step_size = step_size
        self._adapt_enabled = self._adapt_default if adapt_step_size is None else adapt_step_size
        self._rule = dk.StepSizeAdaptation(target_accept_prob=target_accept_prob)
        self._auto_exact, self._exact_sites = exact_sites_option(self._name, exact_sites)
        # static metadata resolved at `init`
        self._specs: tuple[LeafSpec, ...] | None = None
        self._treedef = None
        self._enum = False
        self._prepared_model = None
        self._has_deterministic = False
        self._num_warmup = 0
        self._sample_fn = None

    # ---------------------------------------------------------------- PPL protocol

    @property
    def model(self) -> Callable | None:
        return self._model

    @property
    def default_fields(self) -> tuple[str, ...]:
        return (
            "z",
            "potential_energy",
            "accept_prob",
            "accepted",
            "step_size",
            "hamming_distance",
        )

    def get_diagnostics_str(self, state: DLPState) -> str:
        return f"acc. prob {float(state.accept_prob):.2f}, step {float(state.step_size):.3g}"

    def wrap_model(self, wrapper: Callable) -> _DiscreteKernel:
        if self._model is None:
            raise ValueError(f"{self._name} built from a potential_fn has no model to wrap.")
        kernel = copy.copy(self)
        kernel._model = wrapper(self._model)
        kernel._specs = None
        kernel._prepared_model = None
        kernel._sample_fn = None
        return kernel

    def get_constrain_fn(self, model_args: tuple, model_kwargs: dict | None) -> Callable:
        """Identity: discrete values are already constrained."""
        return identity

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict | None) -> Callable:
        """Identity, or a replay of the model adding its ``deterministic`` sites."""
        if self._model is None or not self._has_deterministic:
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
        state["_prepared_model"] = None
        state["_sample_fn"] = None
        return state

    # ---------------------------------------------------------------- target

    def _log_density_fn(self, model_args: tuple, model_kwargs: dict | None) -> Callable:
        """``leaves -> f`` for the current arguments and conditioning."""
        specs = self._specs
        if self._model is None:
            treedef, potential_fn = self._treedef, self._potential_fn

            def log_density(leaves: tuple) -> jax.Array:
                return -potential_fn(jax.tree.unflatten(treedef, list(leaves)))

            return log_density
        prepared, enum = self._prepared_model, self._enum
        names = [s.name for s in specs]

        def log_density(leaves: tuple) -> jax.Array:
            z = dict(zip(names, leaves))
            return -potential_energy(
                prepared, model_args, with_conditioning(model_kwargs, z), {}, enum=enum
            )

        return log_density

    def _local_fn(self, model_args: tuple, model_kwargs: dict | None) -> Callable:
        return make_local_fn(self._log_density_fn(model_args, model_kwargs), self._specs)

    def _leaves(self, z: Any) -> tuple:
        """Internal leaves (categorical as indices) from user-facing values."""
        if self._model is not None:
            return tuple(jnp.asarray(z[s.name]) for s in self._specs)
        leaves = jax.tree.leaves(z)
        return tuple(
            jnp.argmax(x, axis=-1) if s.mode == ONE_HOT_GRADIENT else jnp.asarray(x)
            for s, x in zip(self._specs, leaves)
        )

    def _user_values(self, leaves: tuple, like: Any) -> Any:
        if self._model is not None:
            return {s.name: x for s, x in zip(self._specs, leaves)}
        out = [
            jax.nn.one_hot(x, s.domain.num_values, dtype=jnp.asarray(ref).dtype)
            if s.mode == ONE_HOT_GRADIENT
            else x
            for s, x, ref in zip(self._specs, leaves, jax.tree.leaves(like))
        ]
        return jax.tree.unflatten(self._treedef, out)

    def _setup(self, rng_key: jax.Array, init_params: Any, model_args, model_kwargs) -> None:
        if self._model is None:
            if init_params is None:
                raise ValueError(
                    f"{self._name}: with `potential_fn`, pass `init_params` to MCMC.run "
                    "(they fix the shape of every leaf)."
                )
            leaves, self._treedef = jax.tree.flatten(init_params)
            self._specs = leaf_specs_for_potential(self._domain, self._treedef, len(leaves))
            self._setup_options()
            return
        try:
            model_trace = prototype_trace(
                conditioned(self._model), rng_key, model_args, model_kwargs
            )
        except (OverflowError, TypeError, ValueError) as error:
            raise ValueError(
                f"{self._name}: tracing the model with start values drawn from its prior failed "
                f"({type(error).__name__}: {str(error).splitlines()[0]}). Check the sites' "
                "distributions and parameters."
            ) from error
        self._specs = leaf_specs_for_model(self._name, model_trace, self._exact_sites)
        self._site_shapes = {s.name: jnp.shape(model_trace[s.name]["value"]) for s in self._specs}
        self._site_dtypes = {
            s.name: jnp.result_type(model_trace[s.name]["value"]) for s in self._specs
        }
        for name, shape in self._site_shapes.items():
            check_leaf_size(name, shape)
        self._check_fixed_supports(model_trace, model_args, model_kwargs)
        self._setup_options()
        self._enum = any(
            site["type"] == "sample"
            and not site["is_observed"]
            and site["infer"].get("enumerate", "") == "parallel"
            for site in model_trace.values()
        )
        self._has_deterministic = any(
            site["type"] == "deterministic" for site in model_trace.values()
        )
        self._prepared_model = _prepare_model_for_potential(
            conditioned(self._model), model_trace, enum=self._enum
        )
        if self._auto_exact and self._supports_auto_exact:
            self._switch_badly_estimated_sites(model_trace, model_args, model_kwargs)

    def _switch_badly_estimated_sites(self, model_trace: dict, model_args, model_kwargs) -> None:
        """``exact_sites="auto"``: at the start and a prior draw, compare each gradient
        site's first-order local differences with exact ones on a few coordinates; a site whose
        gradient proposal is badly wrong is switched to exact differences when that costs at
        most ``AUTO_EXACT_BUDGET`` evaluations per step, and is warned about otherwise."""
        leaves = tuple(jnp.asarray(model_trace[s.name]["value"]) for s in self._specs)
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            return  # traced start (parallel chains): no concrete values to judge by
        log_density = self._log_density_fn(model_args, model_kwargs)
        local_fn = make_local_fn(log_density, self._specs)
        names = [s.name for s in self._specs]
        model = conditioned(self._model)
        gradient_sites = [j for j, s in enumerate(self._specs) if s.mode == GRADIENT]
        chosen = {j: list(range(min(leaves[j].size, 16))) for j in gradient_sites}
        if not gradient_sites:
            return

        def tables_at(points):
            """Exact log densities at the substitutions of the chosen coordinates of every
            gradient site, all points and sites in one batch: ``{j: (points, k_j * S_j)}``."""
            batches = []
            for j in gradient_sites:
                domain = self._specs[j].domain
                batch = jax.vmap(
                    lambda x, d=domain, j=j: dk.proposals.substitutions_at(d, x, chosen[j])
                )(points[j])
                size = batch.shape[1]
                full = tuple(  # (points, size, ...) for every leaf, site j substituted
                    batch
                    if k == j
                    else jnp.broadcast_to(y[:, None], (y.shape[0], size) + y.shape[1:])
                    for k, y in enumerate(points)
                )
                batches.append(tuple(jnp.reshape(y, (-1,) + y.shape[2:]) for y in full))
            merged = tuple(jnp.concatenate(parts) for parts in zip(*batches))
            values = jax.vmap(log_density)(merged)
            out, start = {}, 0
            for j in gradient_sites:
                size = len(chosen[j]) * self._specs[j].domain.num_values
                count = points[0].shape[0] * size
                out[j] = jnp.reshape(values[start : start + count], (points[0].shape[0], size))
                start += count
            return out

        # the start and a fresh prior draw of the block's sites; evaluated eagerly, so
        # JAX's per-operation cache makes the check cheap after a model's first kernel
        rows = [leaves]
        for key in random.split(random.key(1000), PRIOR_DRAWS):
            draw = prototype_trace(model, key, model_args, model_kwargs)
            rows.append(
                tuple(jnp.asarray(draw[n]["value"], x.dtype) for n, x in zip(names, leaves))
            )
        try:
            evaluated = [local_fn(row) for row in rows]
        except TypeError:
            return  # no gradient at all: _initial_state explains it
        points = tuple(jnp.stack(parts) for parts in zip(*rows))
        f = jnp.stack([e[0] for e in evaluated])
        local = tuple(jnp.stack(parts) for parts in zip(*[e[1] for e in evaluated]))
        tables = jax.jit(tables_at)(points)
        errors_by_point = []
        for p in range(f.shape[0]):
            errors = [None] * len(self._specs)
            for j in gradient_sites:
                errors[j] = dk.proposals.first_order_error_at(
                    self._specs[j].domain,
                    np.asarray(points[j][p]),
                    np.asarray(local[j][p], np.float64),
                    chosen[j],
                    np.asarray(tables[j][p], np.float64).reshape(len(chosen[j]), -1) - float(f[p]),
                )
            errors_by_point.append(errors)
        sizes = [int(np.prod(self._site_shapes[s.name])) for s in self._specs]
        self._specs = switch_badly_estimated_sites(self._name, self._specs, errors_by_point, sizes)

    def _setup_options(self) -> None:
        """Option checks that need the sites (a subclass hook; runs once, outside jit)."""

    def _check_fixed_supports(self, model_trace: dict, model_args, model_kwargs) -> None:
        """Refuse sites whose integer support moves with another site's value (traced once
        per other site and alternative value; setup only)."""
        base = {  # a boolean support cannot move
            s.name: integer_bounds(model_trace[s.name])
            for s in self._specs
            if not isinstance(s.domain, dk.Binary)
        }
        base = {name: bounds for name, bounds in base.items() if bounds is not None}
        if not base or any(isinstance(b, jax.core.Tracer) for pair in base.values() for b in pair):
            return  # nothing to check, or traced (parallel chains: _static refuses it)
        conditioning = dict(model_kwargs.get(GIBBS_SITES_KWARG, {}))
        values = {
            name: site["value"]
            for name, site in model_trace.items()
            if site["type"] == "sample" and (not site["is_observed"] or name in conditioning)
        }
        model = seed(conditioned(self._model), random.key(0))
        perturbed = []
        for changed in values:
            for alternative in _alternative_values(model_trace[changed]):
                kwargs = with_conditioning(model_kwargs, {**values, changed: alternative})
                try:
                    other = trace(model).get_trace(*model_args, **kwargs)
                    bounds = {name: integer_bounds(other[name]) for name in base}
                except Exception:  # an alternative the model cannot take: nothing learned
                    continue
                perturbed.append((changed, bounds))
        check_fixed_supports(base, perturbed)

    def _checked_init_params(self, init_params: Any, batch_shape: tuple) -> Any:
        """Start values checked against the sites (shape, dtype, support, NaN) and cast to the
        sites' dtypes; untouched when traced (``chain_method="parallel"``)."""
        if init_params is None:
            return None
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(init_params)):
            return init_params
        if self._model is None:
            leaves = [jnp.asarray(x) for x in jax.tree.leaves(init_params)]
            out = []
            for spec, x in zip(self._specs, leaves):
                one_hot = spec.mode == ONE_HOT_GRADIENT
                event = x.shape[len(batch_shape) : x.ndim - (1 if one_hot else 0)]
                check_start_value(
                    spec.name,
                    spec.domain,
                    x,
                    event,
                    one_hot=one_hot,
                    batch_shape=x.shape[: len(batch_shape)],
                )
                if x.dtype == jnp.bool_:
                    x = x.astype(jnp.result_type(float) if one_hot else jnp.int32)
                out.append(x)
            return jax.tree.unflatten(self._treedef, out)
        if not isinstance(init_params, dict):
            raise ValueError(
                f"init_params: give a dict {{site name: value}}, got {type(init_params).__name__}."
            )
        unknown = sorted(set(init_params) - {s.name for s in self._specs})
        if unknown:
            raise ValueError(
                f"init_params: {unknown} are not discrete latent sites of the model; they are "
                f"{[s.name for s in self._specs]}."
            )
        checked = {}
        for spec in self._specs:
            if spec.name not in init_params:
                continue
            x = jnp.asarray(init_params[spec.name])
            check_start_value(
                spec.name, spec.domain, x, self._site_shapes[spec.name], batch_shape=batch_shape
            )
            checked[spec.name] = x.astype(self._site_dtypes[spec.name])
        return checked

    def _initial_values(self, rng_key: jax.Array, init_params: Any, model_args, model_kwargs):
        if self._model is None:
            return init_params
        model_trace = prototype_trace(conditioned(self._model), rng_key, model_args, model_kwargs)
        init_params = {} if init_params is None else init_params
        return {
            s.name: jnp.asarray(init_params.get(s.name, model_trace[s.name]["value"]))
            for s in self._specs
        }

    # ---------------------------------------------------------------- MCMC protocol

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        vectorized = not is_prng_key(rng_key)
        setup_key = rng_key[0] if vectorized else rng_key
        setup_params = (
            jax.tree.map(lambda x: x[0], init_params)
            if vectorized and init_params is not None
            else init_params
        )
        self._setup(random.fold_in(setup_key, 1), setup_params, model_args, model_kwargs)
        self._num_warmup = int(num_warmup)
        batch_shape = tuple(jnp.shape(rng_key)[:1]) if vectorized else ()
        init_params = self._checked_init_params(init_params, batch_shape)

        def init_one(key, params):
            key, key_values = random.split(key)
            z = self._initial_values(key_values, params, model_args, model_kwargs)
            return self._initial_state(key, z, model_args, model_kwargs)

        sample_one = self._sample_one
        if vectorized:
            if init_params is None:
                state = jax.vmap(lambda k: init_one(k, None))(rng_key)
            else:
                state = jax.vmap(init_one)(rng_key, init_params)
            self._sample_fn = jax.vmap(sample_one, in_axes=(0, None, None))
        else:
            state = init_one(rng_key, init_params)
            self._sample_fn = sample_one
        if not isinstance(state.potential_energy, jax.core.Tracer):
            for energy in jnp.ravel(state.potential_energy):
                check_initial_log_density(self._name, -energy, [s.name for s in self._specs])
        if self._num_warmup >= MIN_WARMUP_FOR_FROZEN_CHECK:
            self._sample_fn = self._with_frozen_check(self._sample_fn, vectorized)
        return state

    def _with_frozen_check(self, sample_fn: Callable, vectorized: bool) -> Callable:
        """Warn once, at the end of warmup, about chains that never moved during it.

        The predicate is the step index shared by all chains, so ``lax.cond`` stays a real
        branch under ``vmap``: the host callback runs once per run, not once per step.
        """
        owner, sites, num_warmup = self._name, [s.name for s in self._specs], self._num_warmup

        def warn(num_moves):
            frozen = [int(c) for c in np.flatnonzero(np.ravel(np.asarray(num_moves)) == 0)]
            if frozen:
                chains = frozen if vectorized else None
                warnings.warn(no_move_message(owner, sites, num_warmup, chains), stacklevel=1)

        def checked(state, model_args, model_kwargs):
            state = sample_fn(state, model_args, model_kwargs)
            index = state.i[0] if vectorized else state.i
            jax.lax.cond(
                index == num_warmup,
                lambda moves: jax.debug.callback(warn, moves),
                lambda moves: None,
                state.num_moves,
            )
            return state

        return checked

    def _initial_state(self, rng_key, z, model_args, model_kwargs) -> DLPState:
        if self._model is None:
            shape = jax.eval_shape(self._potential_fn, z).shape
            if shape != ():
                raise ValueError(
                    f"{self._name}: potential_fn must return a scalar (-log density), got an "
                    f"array of shape {shape}."
                )
        leaves = self._leaves(z)
        try:
            f, local = self._local_fn(model_args, model_kwargs)(leaves)
        except TypeError as error:
            gradient_sites = [s.name for s in self._specs if not s.is_table]
            raise TypeError(
                f"{self._name}: differentiating the log density in the values of "
                f"{gradient_sites} failed ({str(error).splitlines()[0]}). A value used as an "
                "index (e.g. probs[k]) has no gradient: list such sites in exact_sites=[...] "
                "(their local differences are then evaluated exactly), or write the model "
                "with arithmetic on the value."
            ) from error
        step = jnp.asarray(self._initial_step_size(), dtype=jnp.result_type(float))
        zero = jnp.zeros((), dtype=step.dtype)
        adapt_state = self._initial_adapt_state(step)
        return self._state_cls(
            i=jnp.zeros((), dtype=jnp.int32),
            z=z,
            potential_energy=-f,
            accept_prob=zero,
            accepted=jnp.zeros((), dtype=bool),
            step_size=step,
            balance=jnp.full((), 0.5, dtype=step.dtype),
            hamming_distance=zero,
            num_moves=jnp.zeros((), dtype=jnp.int32),
            local=local,
            adapt_state=adapt_state,
            rng_key=rng_key,
            **self._extra_fields(adapt_state),
        )

    def _initial_adapt_state(self, step: jax.Array) -> Any:
        return AdaptState(dk.dual_averaging_init(step), step)

    def _extra_fields(self, adapt_state: Any) -> dict:
        """Fields a subclass's state adds to :class:`DLPState`."""
        return {}

    def _step_parameters(self, state: DLPState) -> tuple:
        """``(step_size, balance, metropolis)`` of the next proposal."""
        return state.adapt_state.next_step_size, 0.5, True

    def _adapt(self, state: DLPState, info: dk.StepInfo, step_size: jax.Array) -> Any:
        """The adaptation state after a step (dual averaging of the step size in warmup)."""
        if not (self._adapt_enabled and self._num_warmup > 0):
            return state.adapt_state
        dual, next_step = dk.step_size_adaptation_update(
            state.adapt_state.dual_averaging,
            step_size,
            info.accept_prob,
            state.i,
            self._num_warmup,
            self._rule,
        )
        return AdaptState(dual, next_step)

    def _initial_step_size(self) -> float:
        return self._step_size

    def _step_extras(self, state: DLPState) -> dict:
        """Keyword arguments a subclass's ``_core_step`` takes from the state."""
        return {}

    def sample(self, state: DLPState, model_args, model_kwargs) -> DLPState:
        if self._sample_fn is None:
            raise RuntimeError(f"{self._name}: call `init` before `sample`.")
        return self._sample_fn(state, model_args, model_kwargs)

    def refresh(self, state: DLPState, model_args, model_kwargs) -> DLPState:
        """Recompute the cached log density and locals for new conditioning values."""
        if self._sample_fn is not None and state.i.ndim:
            return jax.vmap(self._refresh_one, in_axes=(0, None, None))(
                state, model_args, model_kwargs
            )
        return self._refresh_one(state, model_args, model_kwargs)

    def _refresh_one(self, state: DLPState, model_args, model_kwargs) -> DLPState:
        f, local = self._local_fn(model_args, model_kwargs)(self._leaves(state.z))
        return state._replace(potential_energy=-f, local=local)

    @abstractmethod
    def _core_step(self, chain, uniforms, accept_uniform, local_fn, step_size, balance, metropolis):
        """One transition of the core: ``(ChainState, StepInfo)``."""

    @abstractmethod
    def _noise_shapes(self, leaves: tuple) -> tuple:
        """Shapes of the proposal uniforms of one step."""

    def _sample_one(self, state: DLPState, model_args, model_kwargs) -> DLPState:
        model_kwargs = {} if model_kwargs is None else model_kwargs
        leaves = self._leaves(state.z)
        extra = self._step_extras(state)
        if self._gaussian_noise:
            rng_key, key_draw, key_normal = random.split(state.rng_key, 3)
            size = sum(math.prod(x.shape) for x in leaves)
            extra["normals"] = random.normal(key_normal, (size,), jnp.result_type(float))
        else:
            rng_key, key_draw = random.split(state.rng_key)
        uniforms, accept_uniform = _uniforms(key_draw, self._noise_shapes(leaves))
        step_size, balance, metropolis = self._step_parameters(state)
        chain = dk.ChainState(leaves, -state.potential_energy, state.local)
        chain, info = self._core_step(
            chain,
            uniforms,
            accept_uniform,
            self._local_fn(model_args, model_kwargs),
            step_size,
            balance,
            metropolis,
            **extra,
        )
        adapt_state = self._adapt(state, info, step_size)
        return self._state_cls(
            i=state.i + 1,
            z=self._user_values(chain.x, state.z),
            potential_energy=-chain.log_density,
            accept_prob=info.accept_prob,
            accepted=info.accepted,
            step_size=jnp.asarray(step_size, dtype=state.step_size.dtype),
            balance=jnp.asarray(balance, dtype=state.balance.dtype),
            hamming_distance=info.hamming_distance,
            num_moves=state.num_moves + info.accepted.astype(jnp.int32),
            local=chain.local,
            adapt_state=adapt_state,
            rng_key=rng_key,
            **self._extra_fields(state.adapt_state),  # as used for this draw
        )


class _DLPKernel(_DiscreteKernel):
    _metropolis = True

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        step_size: float = 0.5,
        adapt_step_size: bool | None = None,
        target_accept_prob: float = 0.574,
        preconditioner: dict | Sequence | None = None,
        exact_sites: Sequence[str] | str = "auto",
    ) -> None:
        if step_size is None:
            raise ValueError(f"{self._name}: step_size must be a positive finite number.")
        super().__init__(
            model,
            potential_fn=potential_fn,
            domain=domain,
            step_size=step_size,
            adapt_step_size=adapt_step_size,
            target_accept_prob=target_accept_prob,
            exact_sites=exact_sites,
        )
        self._preconditioner = preconditioner

    def _setup_options(self) -> None:
        self._preconditioners = self._checked_preconditioners()

    def _checked_preconditioners(self) -> tuple | None:
        """Per-leaf preconditioners, checked once at setup (outside jit)."""
        if self._preconditioner is None:
            return None
        if self._model is not None:
            if not isinstance(self._preconditioner, dict):
                raise ValueError(
                    f"{self._name}: preconditioner must be a dict {{site name: array}} in "
                    "model mode."
                )
            names = {s.name for s in self._specs}
            unknown = sorted(set(self._preconditioner) - names)
            if unknown:
                raise ValueError(
                    f"{self._name}: preconditioner names unknown sites {unknown}; the "
                    f"discrete sites are {sorted(names)}."
                )
            values = [self._preconditioner.get(s.name) for s in self._specs]
        else:
            values = self._treedef.flatten_up_to(self._preconditioner)
        out = []
        for spec, value in zip(self._specs, values):
            if value is not None:
                value = jnp.asarray(value, dtype=jnp.result_type(float))
                check_positive_array(self._name, f"preconditioner of {spec.name!r}", value)
            out.append(value)
        return tuple(out)

    def _noise_shapes(self, leaves: tuple) -> tuple:
        return dk.dlp_noise_shapes([s.domain for s in self._specs], [x.shape for x in leaves])

    def _step_parameters(self, state: DLPState) -> tuple:
        return state.adapt_state.next_step_size, 0.5, self._metropolis

    def _core_step(self, chain, uniforms, accept_uniform, local_fn, step_size, balance, metropolis):
        return dk.dlp_step(
            chain,
            uniforms,
            accept_uniform,
            local_fn=local_fn,
            domains=[s.domain for s in self._specs],
            is_table=[s.is_table for s in self._specs],
            step_size=step_size,
            balance=balance,
            preconditioner=self._preconditioners,
            metropolis=metropolis,
        )


class DMALA(_DLPKernel):
    """Discrete Metropolis-adjusted Langevin algorithm (Zhang et al., 2022).

    Every coordinate is proposed in parallel from the discrete Langevin proposal
    ``q_i(v) ∝ exp(g_i (v - x_i) / 2 - (v - x_i)^2 / (2 alpha))`` and the move is MH
    corrected, so the chain targets the model's posterior exactly. One ``value_and_grad`` per
    step (the current one is cached).

    Parameters
    ----------
    model : callable, optional
        NumPyro model whose latent sites are all discrete (Bernoulli, Binomial, Categorical,
        DiscreteUniform, ...). Mixed models: use as a block of ``numpyro.infer.Gibbs``.
    potential_fn : callable, optional
        Instead of a model: ``potential_fn(z) = -log density`` of a pytree of discrete arrays;
        then ``domain`` and ``init_params`` (in ``MCMC.run``) are required. Categorical
        leaves are passed to it as one-hot floats (shape ``(..., K)``) and kept one-hot.
    domain : Binary, Ordinal, Categorical or a pytree of them
        Potential mode only.
    step_size : float
        ``alpha`` > 0, measured on the values' own scale (one Bernoulli flip has squared
        distance 1). Default 0.5.
    adapt_step_size : bool
        Dual averaging of ``alpha`` during warmup (default True).
    target_accept_prob : float
        Target of the adaptation (default 0.574).
    preconditioner : dict or pytree, optional
        Per-coordinate multipliers of ``alpha`` (App. H of the paper): a dict of site name to
        array (model mode) or a pytree like ``init_params`` (potential mode).
    exact_sites : sequence of str
        Sites whose local differences are evaluated exactly (``N * S`` log-density evaluations
        batched with ``vmap``) instead of from the gradient, for sites used as indices.
        Categorical sites are always exact.
    """

    _name = "DMALA"


class DULA(_DLPKernel):
    """Discrete unadjusted Langevin algorithm: the DMALA proposal without the MH step.

    Biased for any fixed step size (the bias vanishes as the step size shrinks); moves to a
    proposal with a non-finite log density or gradient are still refused. ``accept_prob``
    reports the MH acceptance the move would have had, a free diagnostic of the bias.
    Step-size adaptation is off by default; when switched on it targets that diagnostic.
    Parameters as :class:`DMALA`.
    """

    _name = "DULA"
    _metropolis = False
    _adapt_default = False


class GWG(_DiscreteKernel):
    """Gibbs with gradients (Grathwohl et al., 2021): one coordinate per step.

    The coordinate and its new value are drawn from ``softmax(delta / 2)`` over all
    single-coordinate moves, with ``delta`` the gradient estimate of the change in log density,
    then MH corrected. The baseline the DLP papers compare to.

    Parameters
    ----------
    model, potential_fn, domain, exact_sites
        As in :class:`DMALA`.
    step_size : float, optional
        Optional distance penalty ``dist^2 / (2 alpha)`` on ordinal jumps (no effect on binary
        sites). None (default) is Grathwohl et al.'s GWG; ``step_size`` then reports ``inf``.
    """

    _name = "GWG"
    _adapt_default = False

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        step_size: float | None = None,
        exact_sites: Sequence[str] | str = "auto",
    ) -> None:
        super().__init__(
            model,
            potential_fn=potential_fn,
            domain=domain,
            step_size=step_size,
            adapt_step_size=False,
            exact_sites=exact_sites,
        )

    def _initial_step_size(self) -> float:
        return float("inf") if self._step_size is None else self._step_size

    def _noise_shapes(self, leaves: tuple) -> tuple:
        return ((),)  # one uniform picks the move

    def _core_step(self, chain, uniforms, accept_uniform, local_fn, step_size, balance, metropolis):
        return dk.gwg_step(
            chain,
            uniforms[0],
            accept_uniform,
            local_fn=local_fn,
            domains=[s.domain for s in self._specs],
            is_table=[s.is_table for s in self._specs],
            balance=balance,
            step_size=None if self._step_size is None else step_size,
        )


# the fields of DLPState, then the position in the cycle
ACSState = NamedTuple(
    "ACSState", [*DLPState.__annotations__.items(), ("cycle_position", jax.Array)]
)
ACSState.__doc__ = """:class:`DLPState` plus **cycle_position**, ``k mod s`` of this draw's
proposal (the tuner state, :class:`discrete_kernels.acs.ACSTunerState`, is ``adapt_state``)."""


class ACS(_DLPKernel):
    """Automatic cyclical scheduling (Pynadath et al.): DLP proposals whose step size
    ``alpha_k`` and balance ``beta_k`` follow a cycle of ``steps_per_cycle`` steps, from large
    exploratory moves (``alpha_max``, ``beta_max``) to local ones (``alpha_min``, 1/2), each
    MH corrected, so the chain escapes local modes.

    The cycle is tuned automatically during warmup (burn-in, EstimateAlpha for ``alpha_min``
    and ``alpha_max``, EstimateBalSched; see :mod:`discrete_kernels.acs`), one proposal per
    warmup step; ``discrete_kernels.acs.tuning_steps(config)`` steps in all (200 with the
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
        Search range of the step sizes (0.05 and 5).
    alpha_max, alpha_min, beta_schedule : optional
        An explicit cycle (all three), used as given.
    tuning : dict, optional
        Other :class:`discrete_kernels.acs.ACSConfig` fields (burn-in lengths, candidates per
        round, rounds, learning rate).
    """

    _name = "ACS"
    _state_cls = ACSState

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        steps_per_cycle: int = 8,
        beta_max: float = 0.95,
        target_accept_prob: float = 0.5,
        alpha_floor: float = 0.05,
        alpha_ceil: float = 5.0,
        alpha_max: float | None = None,
        alpha_min: float | None = None,
        beta_schedule: Sequence[float] | None = None,
        tuning: dict | None = None,
        exact_sites: Sequence[str] | str = "auto",
    ) -> None:
        super().__init__(
            model,
            potential_fn=potential_fn,
            domain=domain,
            step_size=alpha_ceil,
            adapt_step_size=False,
            target_accept_prob=target_accept_prob,
            exact_sites=exact_sites,
        )
        self._config, explicit = dk.acs_options(
            steps_per_cycle,
            beta_max,
            target_accept_prob,
            alpha_floor,
            alpha_ceil,
            alpha_max,
            alpha_min,
            beta_schedule,
            tuning,
        )
        self._explicit = explicit is not None
        self._cycle = explicit if self._explicit else (None, None, None)

    @property
    def default_fields(self) -> tuple[str, ...]:
        return super().default_fields + ("balance", "cycle_position")

    @property
    def config(self) -> dk.ACSConfig:
        return self._config

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        needed = dk.tuning_steps(self._config)
        if not self._explicit and num_warmup < needed:
            warnings.warn(
                f"ACS: num_warmup={num_warmup} is shorter than the {needed} steps the "
                "automatic tuning takes; it will end early with rougher estimates of the "
                "cycle (or pass alpha_max, alpha_min and beta_schedule).",
                stacklevel=2,
            )
        return super().init(rng_key, num_warmup, init_params, model_args, model_kwargs)

    def _initial_adapt_state(self, step: jax.Array) -> dk.ACSTunerState:
        alpha_max, alpha_min, beta_schedule = self._cycle
        state = dk.acs_tuner_init(
            self._config,
            step,
            tuned=self._explicit,
            alpha_max=alpha_max,
            alpha_min=alpha_min,
            beta_schedule=beta_schedule,
        )
        if not self._explicit and self._num_warmup == 0:
            # no warmup to tune in: the naive cycle from (alpha_ceil, beta_max) down
            state = dk.acs_finish_tuning(state, self._config)
        return state

    def _extra_fields(self, adapt_state: dk.ACSTunerState) -> dict:
        return {"cycle_position": adapt_state.cycle_position % self._config.steps_per_cycle}

    def _step_parameters(self, state: ACSState) -> tuple:
        return dk.acs_step_parameters(state.adapt_state, self._config)

    def _adapt(self, state: ACSState, info: dk.StepInfo, step_size: jax.Array) -> Any:
        return dk.acs_warmup_update(
            state.adapt_state, info.accept_prob, self._config, state.i, self._num_warmup
        )

    def schedule(self, state: ACSState) -> dict:
        """The cycle in use: ``alpha`` and ``beta`` arrays of length ``steps_per_cycle``
        (read it from ``mcmc.last_state`` after warmup)."""
        tuner = state.adapt_state
        k = jnp.arange(self._config.steps_per_cycle)
        alpha = jax.vmap(
            lambda position: dk.cyclical_step_size(
                position, self._config.steps_per_cycle, tuner.alpha_max, tuner.alpha_min
            )
        )(k)
        return {"alpha": alpha, "beta": tuner.beta_schedule, "tuned": tuner.phase == 5}


class ABAdaptState(NamedTuple):
    """Adaptation state of :class:`AB` (``adapt_state`` of its :class:`DLPState`).

    - **tuner** - :class:`discrete_kernels.ABTunerState`, the (sigma, alpha) search.
    - **stats** - :class:`discrete_kernels.QuadraticStats` of the burn-in pairs (None for
      AB-1st).
    - **quadratic** - :class:`discrete_kernels.QuadraticProposal` (zeros until fitted, which
      is exactly AB-1st; None for AB-1st).
    - **dx**, **dg** - the last proposal's pair (None for AB-1st).
    - **jump** - the last proposal's expected jump distance.
    - **next_sigma**, **next_alpha** - parameters of the next proposal (a probe during
      warmup, the tuned values after).
    """

    tuner: dk.ABTunerState
    stats: Any
    quadratic: Any
    dx: Any
    dg: Any
    jump: Any
    next_sigma: Any
    next_alpha: Any


def _fori(num: int, body: Callable, carry: Any) -> Any:
    return jax.lax.fori_loop(0, num, lambda _, c: body(c), carry)


class AB(_DiscreteKernel):
    """Any-scale balanced sampler (Sun et al., ICLR 2023): proposals weighted by
    ``(pi(y) / pi(x))^alpha`` under a heat kernel of scale ``sigma``, MH corrected.

    ``variant="1st"`` uses the first-order (gradient) approximation: the DLP proposal with
    balance ``alpha`` and step size ``sigma``, one ``value_and_grad`` per step like DMALA.
    ``"trace"``, ``"shift"`` and ``"max"`` add a quadratic term ``W`` fitted by least squares to
    the pairs ``(y - x, grad f(y) - grad f(x))`` of a burn-in inside warmup (AB-1st until then)
    and sample it with the Gaussian integral trick, with the diagonal ``D`` chosen by trace
    minimisation, a ``lambda`` shift or by minimising the largest eigenvalue of ``W + D``
    (see :mod:`discrete_kernels.ab`). A quadratic step adds ``O(d^2)`` work (two
    matrix-vector products) and ``d`` Gaussian draws to the ``value_and_grad``.

    During warmup ``(sigma, alpha)`` adapt by coordinate ascent on the expected jump distance
    (App. A.2: probes ``theta (1 +- gamma)`` in blocks of steps, ``gamma`` shrinking by
    ``decay`` when a round changes nothing); they are frozen for sampling. The paper's search
    moves by at most a factor ``1 + rate`` per round of six blocks; here a direction that keeps
    winning doubles its exponent (``max_doublings``, see :class:`discrete_kernels.ABConfig`)
    so the start ``(0.1, 0.5)`` is left in a few rounds. Still, give AB a longer warmup than
    DMALA (a few thousand steps): each round costs six blocks.

    Statistics: ``step_size`` is ``sigma`` and ``balance`` is ``alpha`` of each draw's
    proposal; also ``accept_prob``, ``accepted``, ``hamming_distance``, ``potential_energy``.

    Parameters
    ----------
    model, potential_fn, domain, exact_sites
        As in :class:`DMALA` (quadratic variants need binary or ordinal sites with gradients).
    variant : {"1st", "trace", "shift", "max"}
    step_size : float
        Initial ``sigma`` (0.1, the paper's start).
    alpha : float
        Initial ``alpha`` in (0, 1] (0.5).
    adapt : bool
        Tune ``(sigma, alpha)`` during warmup (default True).
    rate, decay : float
        ``gamma`` (0.2) and its decay (0.9).
    block_size : int, optional
        Steps per probe (the paper's 100, or when None shortened so that the warmup holds
        twenty rounds, at least 20).
    max_doublings : int
        Expansion of the search while a direction keeps winning (3; 0 is the paper's rule).
    burn_in : int, optional
        Warmup steps whose proposals fit ``W`` (default half the warmup).
    coupling : array, optional
        A known symmetric ``W`` (d, d) over the flattened sites (in the order of the model's
        sites or of ``init_params``' leaves): no burn-in fit.
    """

    _name = "AB"
    _adapt_default = True
    _supports_auto_exact = False  # quadratic proposals need every site's gradient

    def __init__(
        self,
        model: Callable | None = None,
        *,
        potential_fn: Callable | None = None,
        domain: Any = None,
        variant: str = "1st",
        step_size: float = 0.1,
        alpha: float = 0.5,
        adapt: bool = True,
        rate: float = 0.2,
        decay: float = 0.9,
        block_size: int | None = None,
        burn_in: int | None = None,
        max_doublings: int = 3,
        coupling: Any = None,
        exact_sites: Sequence[str] = (),
    ) -> None:
        super().__init__(
            model,
            potential_fn=potential_fn,
            domain=domain,
            step_size=step_size,
            adapt_step_size=adapt,
            exact_sites=exact_sites,
        )
        self._config = dk.ab.ab_options(
            variant, step_size, alpha, rate, decay, block_size, burn_in, self._name, max_doublings
        )
        self._quadratic = variant != "1st"
        self._gaussian_noise = self._quadratic
        self._coupling = None if coupling is None else jnp.asarray(coupling)

    @property
    def config(self) -> dk.ABConfig:
        return self._config

    @property
    def default_fields(self) -> tuple[str, ...]:
        return super().default_fields + ("balance",)

    def get_diagnostics_str(self, state: DLPState) -> str:
        return (
            f"acc. prob {float(state.accept_prob):.2f}, sigma {float(state.step_size):.3g}, "
            f"alpha {float(state.balance):.3g}"
        )

    # ---------------------------------------------------------------- setup

    def _setup(self, rng_key, init_params, model_args, model_kwargs) -> None:
        super()._setup(rng_key, init_params, model_args, model_kwargs)
        if self._quadratic:
            tables = [s.name for s in self._specs if s.is_table]
            if tables:
                raise ValueError(
                    f"AB: variant={self._config.variant!r} needs binary or ordinal sites with "
                    f"gradients; {tables} are categorical or exact. Use variant='1st'."
                )

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        if self._quadratic and num_warmup == 0 and self._coupling is None:
            warnings.warn(
                f"AB: variant={self._config.variant!r} fits W during warmup; with "
                "num_warmup=0 it runs as AB-1st (or pass coupling=W).",
                stacklevel=2,
            )
        self._plan = dk.ab.ab_warmup_plan(
            self._config,
            num_warmup,
            adapt=self._adapt_enabled,
            fit_w=self._quadratic and self._coupling is None,
        )
        state = super().init(rng_key, num_warmup, init_params, model_args, model_kwargs)
        fitting = self._plan.burn_in > 0
        tuning = self._adapt_enabled and num_warmup > 0
        if not (fitting or tuning):
            return state
        step = self._sample_fn
        vectorized = state.i.ndim > 0
        batch = jax.vmap if vectorized else (lambda f: f)
        fit, collect, tune = batch(self._fit), batch(self._collect), batch(self._tune)
        burn_in = self._plan.burn_in

        def sample_fn(state, model_args, model_kwargs):
            state = step(state, model_args, model_kwargs)
            # chains share the step index: an unbatched predicate keeps lax.cond a real
            # branch under vmap, so warmup-only work (the tuner, the O(d^2) pair statistics,
            # the O(d^3) fit) costs nothing per sampling step
            index = state.i[0] if vectorized else state.i
            if tuning:
                state = jax.lax.cond(index <= num_warmup, tune, lambda s: s, state)
            if fitting:
                state = jax.lax.cond(index <= burn_in, collect, lambda s: s, state)
                state = jax.lax.cond(index == burn_in, fit, lambda s: s, state)
            return state

        self._sample_fn = sample_fn
        return state

    def _tune(self, state: DLPState) -> DLPState:
        """Tuner update with the expected jump of the warmup step just taken."""
        adapt = state.adapt_state
        tuner = dk.ab.ab_tuner_update(adapt.tuner, adapt.jump, self._config, self._plan.block_size)
        sigma, alpha = dk.ab.ab_tuner_parameters(tuner, self._config, state.i < self._num_warmup)
        return state._replace(
            adapt_state=adapt._replace(tuner=tuner, next_sigma=sigma, next_alpha=alpha)
        )

    def _collect(self, state: DLPState) -> DLPState:
        adapt = state.adapt_state
        stats = dk.ab.quadratic_stats_update(adapt.stats, adapt.dx, adapt.dg)
        return state._replace(adapt_state=adapt._replace(stats=stats))

    def _fit(self, state: DLPState) -> DLPState:
        adapt = state.adapt_state
        quadratic, _ = dk.ab.fit_quadratic_proposal(adapt.stats, self._config.variant, _fori)
        if not self._plan.restart:
            return state._replace(adapt_state=adapt._replace(quadratic=quadratic))
        tuner = dk.ab.ab_tuner_restart(adapt.tuner, self._config)
        sigma, alpha = dk.ab.ab_tuner_parameters(tuner, self._config, True)
        return state._replace(
            adapt_state=adapt._replace(
                quadratic=quadratic, tuner=tuner, next_sigma=sigma, next_alpha=alpha
            )
        )

    def _initial_state(self, rng_key, z, model_args, model_kwargs) -> DLPState:
        self._flat_dim = sum(math.prod(jnp.shape(x)) for x in self._leaves(z))
        return super()._initial_state(rng_key, z, model_args, model_kwargs)

    def _initial_adapt_state(self, step: jax.Array) -> ABAdaptState:
        tuner = dk.ab.ab_tuner_init(self._config, step)
        sigma, alpha = dk.ab.ab_tuner_parameters(
            tuner, self._config, self._adapt_enabled and self._num_warmup > 0
        )
        zero = jnp.zeros((), dtype=step.dtype)
        if not self._quadratic:
            return ABAdaptState(tuner, None, None, None, None, zero, sigma, alpha)
        d = self._flat_dim
        zeros = jnp.zeros((d,), dtype=step.dtype)
        stats = dk.ab.quadratic_stats_init(d, step)
        if self._coupling is not None:
            check_symmetric_matrix("AB", "coupling", self._coupling, d)  # a constant, not traced
            quadratic = dk.ab.quadratic_from_coupling(
                self._coupling.astype(step.dtype), self._config.variant, _fori
            )
        else:
            quadratic = dk.QuadraticProposal(jnp.zeros((d, d), step.dtype), zeros)
        return ABAdaptState(tuner, stats, quadratic, zeros, zeros, zero, sigma, alpha)

    # ---------------------------------------------------------------- step

    def _step_parameters(self, state: DLPState) -> tuple:
        return state.adapt_state.next_sigma, state.adapt_state.next_alpha, True

    _noise_shapes = _DLPKernel._noise_shapes  # one uniform per coordinate, as the DLP

    def _core_step(
        self, chain, uniforms, accept_uniform, local_fn, step_size, balance, metropolis, **extra
    ):
        return dk.ab_step(
            chain,
            uniforms,
            extra.get("normals"),
            accept_uniform,
            local_fn=local_fn,
            domains=[s.domain for s in self._specs],
            is_table=[s.is_table for s in self._specs],
            sigma=step_size,
            alpha=balance,
            quadratic=extra.get("quadratic"),
        )

    def _step_extras(self, state: DLPState) -> dict:
        return {"quadratic": state.adapt_state.quadratic}

    def _adapt(self, state: DLPState, info: dk.ABStepInfo, step_size: jax.Array) -> Any:
        """Record what the warmup updates need (applied outside the per-chain step)."""
        adapt = state.adapt_state._replace(jump=info.jump)
        if not self._quadratic:
            return adapt
        return adapt._replace(dx=info.dx, dg=info.dg)
