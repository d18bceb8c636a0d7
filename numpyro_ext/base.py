"""The one NumPyro driver of discrete-kernels: any core sampler spec as an ``MCMCKernel``.

:class:`DiscreteKernel` traces the model (or takes a potential), checks the start values and
options with the core's checks, draws each step's noise with JAX's RNG in the shapes the
sampler's spec asks for, and calls the spec's step and warmup adaptation
(:mod:`discrete_kernels.samplers`). A sampler is a subclass of a few lines that builds its spec
(see :mod:`numpyro_ext.steps`, :mod:`numpyro_ext.acs`, :mod:`numpyro_ext.ab`).
"""

from __future__ import annotations

import copy
import math
import warnings
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
from discrete_kernels import leaves as site_rules
from discrete_kernels import validation as checks
from discrete_kernels.constructors import KernelConstructor
from discrete_kernels.options import check_bound
from discrete_kernels.samplers import (
    ControlFlow,
    NoiseShapes,
    Sites,
    StepNoise,
    check_preconditioners,
)

from . import _sharding
from ._target import (
    EXACT,
    GRADIENT,
    ONE_HOT_GRADIENT,
    LeafSpec,
    integer_bounds,
    leaf_specs_for_model,
    leaf_specs_for_potential,
    make_local_fn,
)

__all__ = ["DLPState", "DiscreteKernel", "DiscreteState", "JAX_CONTROL"]


def _fori(num: int, body: Callable, carry: Any) -> Any:
    return jax.lax.fori_loop(0, num, lambda _, c: body(c), carry)


#: the core's branches and loops as JAX control flow (real branches under jit)
JAX_CONTROL = ControlFlow(cond=jax.lax.cond, loop=_fori)


class DiscreteState(NamedTuple):
    """State of every discrete kernel; every field but ``z``, ``local``, ``adapt_state`` and
    ``rng_key`` is a statistic of the draw.

    - **i** - index of the draw (0 for the initial state).
    - **z** - current values: a dict of site values (model mode) or the pytree given as
      ``init_params`` (potential mode).
    - **potential_energy** - ``-log density`` at ``z`` (ArviZ shows its negative as ``lp``).
    - **accept_prob** - MH acceptance probability of this draw's proposal (DULA: the
      probability an MH step would have had; DULA moves regardless).
    - **accepted** - whether the chain moved to the proposal.
    - **step_size** - the step size that produced this draw (AB: ``sigma``).
    - **balance** - the balance of that proposal (1/2 for DULA, DMALA and GWG; AB: ``alpha``).
    - **hamming_distance** - number of coordinates the proposal changed.
    - **num_moves** - draws so far (warmup included) at which the chain moved.
    - **moves_at_half_warmup** - ``num_moves`` at the middle of warmup (the frozen-chain check
      warns about chains that made no move after it).
    - **local** - cached gradient or table of each leaf at ``z``.
    - **adapt_state** - the sampler's adaptation state (see its spec in
      :mod:`discrete_kernels.samplers`).
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
    moves_at_half_warmup: jax.Array
    local: tuple
    adapt_state: Any
    rng_key: jax.Array


DLPState = DiscreteState  # the name of earlier releases


#: width of the rows the uniforms of a step are drawn in: XLA's CPU code for JAX's threefry is
#: about 3.7x faster per uniform on a (rows, 128) array than on a flat one of 10^4 - 10^5
#: entries (measured), and no slower below. The numbers are the same: JAX's partitionable
#: threefry (its default) makes each one a function of its flat index only.
UNIFORM_ROW = 128


def _uniforms(key: jax.Array, shapes: Sequence[tuple]) -> tuple[tuple, jax.Array]:
    """All uniforms of one step from one draw: the proposal noise per leaf (in order) and,
    last, the MH uniform."""
    sizes = [math.prod(shape) for shape in shapes]
    total = sum(sizes) + 1
    rows = -(-total // UNIFORM_ROW)
    flat = jnp.reshape(random.uniform(key, (rows, UNIFORM_ROW)), (-1,))[:total]
    pieces, start = [], 0
    for shape, size in zip(shapes, sizes):
        pieces.append(jnp.reshape(flat[start : start + size], shape))
        start += size
    return tuple(pieces), flat[-1]


def draw_noise(rng_key: jax.Array, shapes: NoiseShapes) -> tuple[jax.Array, StepNoise]:
    """The next key and one step's noise in a spec's shapes (all uniforms from one draw: one
    PRNG call is markedly cheaper on CPU than one per leaf)."""
    normals = None
    if shapes.num_normals:
        rng_key, key_draw, key_normal = random.split(rng_key, 3)
        dtype = jnp.result_type(float)
        normals = random.normal(key_normal, (shapes.num_normals,), dtype)
    else:
        rng_key, key_draw = random.split(rng_key)
    uniforms, accept_uniform = _uniforms(key_draw, shapes.uniforms)
    return rng_key, StepNoise(uniforms, accept_uniform, normals)


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


class DiscreteKernel(KernelConstructor, MCMCKernel):
    """The driver: model/potential setup, checks, noise, the spec's step and adaptation,
    chain methods and the Gibbs-block protocol. Subclasses build ``self._spec``."""

    sample_field = "z"
    _name = "DiscreteKernel"
    _state_cls: type = DiscreteState
    _supports_auto_exact = True  # exact_sites="auto" may switch sites to exact differences

    _domain_hint = "a pytree of them matching init_params"

    #: ``chain_method="vectorized"`` splits the chains over all local devices (JAX's
    #: sharding API) when their number is a multiple of the device count; set False on an
    #: instance to keep them on the default device.
    shard_chains: bool = True

    def _init_ppl(self) -> None:
        # static metadata resolved at `init`
        self._specs: tuple[LeafSpec, ...] = ()
        self._sites: Sites | None = None
        self._flat_dim = 0
        self._treedef: Any = None
        self._enum = False
        self._prepared_model: Callable | None = None
        self._has_deterministic = False
        self._num_warmup = 0
        self._sample_fn: Callable | None = None
        self._replicated: Any = None  # set when vectorised chains are split over devices
        self._auto_exact_decisions: dict = {}  # exact_sites="auto": site shapes -> leaf specs

    def _as_array(self, value: Any) -> Any:
        return jnp.asarray(value, dtype=jnp.result_type(float))

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

    def get_diagnostics_str(self, state: DiscreteState) -> str:
        return f"acc. prob {float(state.accept_prob):.2f}, step {float(state.step_size):.3g}"

    def wrap_model(self, wrapper: Callable) -> DiscreteKernel:
        if self._model is None:
            raise ValueError(f"{self._name} built from a potential_fn has no model to wrap.")
        kernel = copy.copy(self)
        kernel._model = wrapper(self._model)
        kernel._specs = ()
        kernel._auto_exact_decisions = {}
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
            assert potential_fn is not None  # checked at construction

            def potential_log_density(leaves: tuple) -> jax.Array:
                return -potential_fn(jax.tree.unflatten(treedef, list(leaves)))

            return potential_log_density
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
            self._setup_sites(
                [
                    jnp.shape(x)[:-1] if s.mode == ONE_HOT_GRADIENT else jnp.shape(x)
                    for s, x in zip(self._specs, leaves)
                ]
            )
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
            site_rules.check_leaf_size(name, shape)
        self._check_fixed_supports(model_trace, model_args, model_kwargs)
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
            # decided once per kernel and site shapes: sequential chains start from different
            # values, and a decision that differed between them would give their states
            # different structures (NumPyro stacks them)
            shapes = tuple((s.name, self._site_shapes[s.name]) for s in self._specs)
            decided = self._auto_exact_decisions.get(shapes)
            if decided is None:
                self._switch_badly_estimated_sites(model_trace, model_args, model_kwargs)
                self._auto_exact_decisions[shapes] = self._specs
            else:
                self._specs = decided
        self._setup_sites([self._site_shapes[s.name] for s in self._specs])

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

        # the start and a fresh prior draw of the block's sites, evaluated by one compiled
        # program (eagerly, each operation of the model would be compiled on its own)
        rows = [leaves]
        for key in random.split(random.key(1000), site_rules.PRIOR_DRAWS):
            draw = prototype_trace(model, key, model_args, model_kwargs)
            rows.append(
                tuple(jnp.asarray(draw[n]["value"], x.dtype) for n, x in zip(names, leaves))
            )
        try:
            compiled_local_fn = jax.jit(local_fn)
            evaluated = [compiled_local_fn(row) for row in rows]
        except TypeError:  # some site is used as an index: find it, then check the rest
            if self._switch_index_sites(leaves, log_density):
                self._switch_badly_estimated_sites(model_trace, model_args, model_kwargs)
            return
        points = tuple(jnp.stack(parts) for parts in zip(*rows))
        f = jnp.stack([e[0] for e in evaluated])
        local = tuple(jnp.stack(parts) for parts in zip(*[e[1] for e in evaluated]))
        tables = jax.jit(tables_at)(points)
        errors_by_point = []
        for p in range(f.shape[0]):
            errors: list[Any] = [None] * len(self._specs)
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
        self._specs = site_rules.switch_badly_estimated_sites(
            self._name, self._specs, errors_by_point, sizes
        )

    def _switch_index_sites(self, leaves: tuple, log_density: Callable) -> bool:
        """Gradient sites the log density cannot be differentiated in (values used as
        indices), found one at a time with the others held exact (shapes only, nothing
        computed), switched to exact differences. Whether any was switched."""
        failing = []
        for j, spec in enumerate(self._specs):
            if spec.mode != GRADIENT:
                continue
            alone = [
                s if k == j or s.mode != GRADIENT else LeafSpec(s.name, s.domain, EXACT)
                for k, s in enumerate(self._specs)
            ]
            try:
                jax.eval_shape(make_local_fn(log_density, alone), leaves)
            except TypeError:
                failing.append(j)
        sizes = [int(np.prod(self._site_shapes[s.name])) for s in self._specs]
        before = self._specs
        self._specs = site_rules.switch_index_sites(self._name, self._specs, failing, sizes)
        return self._specs != before

    def _setup_sites(self, leaf_shapes: Sequence[tuple[int, ...]]) -> None:
        """The spec's view of the sites, with the preconditioner and the spec's own checks
        (setup, outside jit). ``leaf_shapes``: the internal leaves' shapes of one chain."""
        names = tuple(s.name for s in self._specs)
        self._flat_dim = sum(math.prod(shape) for shape in leaf_shapes)
        self._sites = Sites.from_leaves(self._specs, self._checked_preconditioners(names))
        self._spec.check_sites(self._sites, self._flat_dim)

    def _checked_preconditioners(self, names: tuple[str, ...]) -> tuple | None:
        given = self._preconditioner
        if given is None:
            return None
        by_name = self._model is not None  # potential mode: a pytree like init_params
        return check_preconditioners(
            self._name,
            names,
            given if by_name else self._treedef.flatten_up_to(given),
            lambda v: jnp.asarray(v, dtype=jnp.result_type(float)),
            by_name=by_name,
        )

    def _check_fixed_supports(self, model_trace: dict, model_args, model_kwargs) -> None:
        """Refuse sites whose integer support moves with another site's value (traced once
        per other site and alternative value; setup only)."""
        base = checks.movable_supports(
            [(s.name, s.domain) for s in self._specs],
            lambda name: integer_bounds(model_trace[name]),
        )
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
        checks.check_fixed_supports(base, perturbed)

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
                checks.check_start_value(
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
            checks.check_start_value(
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
        check_bound(self._name, self._model, self._potential_fn)
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        vectorized = not is_prng_key(rng_key)
        setup_key = rng_key[0] if vectorized else rng_key
        setup_params = (
            jax.tree.map(lambda x: x[0], init_params)
            if vectorized and init_params is not None
            else init_params
        )
        self._num_warmup = int(num_warmup)
        self._spec.check_warmup(self._num_warmup, "num_warmup")
        self._setup(random.fold_in(setup_key, 1), setup_params, model_args, model_kwargs)
        batch_shape = tuple(jnp.shape(rng_key)[:1]) if vectorized else ()
        init_params = self._checked_init_params(init_params, batch_shape)

        def init_one(key, params):
            key, key_values = random.split(key)
            z = self._initial_values(key_values, params, model_args, model_kwargs)
            return self._initial_state(key, z, model_args, model_kwargs)

        # compiled as one program: run eagerly, every operation of the model and its gradient
        # would be compiled on its own the first time a model's shapes are seen (seconds)
        if vectorized:
            if init_params is None:
                state = jax.jit(jax.vmap(lambda k: init_one(k, None)))(rng_key)
            else:
                state = jax.jit(jax.vmap(init_one))(rng_key, init_params)
            state, self._replicated = _sharding.shard_chains(state, self._name, self.shard_chains)
        else:
            state = jax.jit(init_one)(rng_key, init_params)
        if not isinstance(state.potential_energy, jax.core.Tracer):
            for energy in jnp.ravel(state.potential_energy):
                checks.check_initial_log_density(self._name, -energy, [s.name for s in self._specs])
        self._sample_fn = self._make_sample_fn(vectorized)
        return state

    def _make_sample_fn(self, vectorized: bool) -> Callable:
        """One draw of every chain: the spec's step per chain, then its adaptation with the
        draw index shared by all chains (unbatched, so the spec's ``cond`` on it is a real
        branch under ``vmap``), then the frozen-chain check at the end of warmup."""
        spec, num_warmup = self._spec, self._num_warmup
        owner, sites = self._name, [s.name for s in self._specs]
        batch = jax.vmap if vectorized else (lambda f, **_: f)
        step = batch(self._step_one, in_axes=(0, None, None))
        replicated = self._replicated if vectorized else None

        def warn(num_moves):
            frozen = [int(c) for c in np.flatnonzero(np.ravel(np.asarray(num_moves)) == 0)]
            if frozen:
                chains = frozen if vectorized else None
                warnings.warn(
                    checks.no_move_message(owner, sites, num_warmup, chains), stacklevel=1
                )

        def sample_fn(state, model_args, model_kwargs):
            index = state.i[0] if vectorized else state.i  # this draw's index, from 0
            new, info, params = step(state, model_args, model_kwargs)
            adapt = batch(
                lambda a, i, p: spec.adapt_update(a, i, p, index, num_warmup, JAX_CONTROL)
            )(state.adapt_state, info, params)
            new = new._replace(adapt_state=adapt)
            if num_warmup >= checks.MIN_WARMUP_FOR_FROZEN_CHECK:
                at_half = jnp.where(
                    index + 1 == checks.frozen_check_start(num_warmup),
                    new.num_moves,
                    new.moves_at_half_warmup,
                )
                new = new._replace(moves_at_half_warmup=at_half)
                moves = new.num_moves - at_half  # moves in the second half of warmup
                if replicated is not None:  # the host callback reads it from one device
                    moves = jax.lax.with_sharding_constraint(moves, replicated)
                jax.lax.cond(
                    index + 1 == num_warmup,
                    lambda moves: jax.debug.callback(warn, moves),
                    lambda moves: None,
                    moves,
                )
            return new

        return sample_fn

    def _initial_state(self, rng_key, z, model_args, model_kwargs) -> DiscreteState:
        if self._model is None:
            assert self._potential_fn is not None  # checked at construction
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
        like = jnp.ones((), dtype=jnp.result_type(float))
        adapt_state = self._spec.adapt_init(
            like, self._num_warmup, self._flat_dim, JAX_CONTROL, self._sites
        )
        params = self._spec.parameters(adapt_state)
        zero = jnp.zeros((), dtype=like.dtype)
        return self._state_cls(
            i=jnp.zeros((), dtype=jnp.int32),
            z=z,
            potential_energy=-f,
            accept_prob=zero,
            accepted=jnp.zeros((), dtype=bool),
            step_size=jnp.asarray(params.step_size, dtype=like.dtype),
            balance=jnp.asarray(params.balance, dtype=like.dtype),
            hamming_distance=zero,
            num_moves=jnp.zeros((), dtype=jnp.int32),
            moves_at_half_warmup=jnp.zeros((), dtype=jnp.int32),
            local=local,
            adapt_state=adapt_state,
            rng_key=rng_key,
            **self._spec.extra_stats(adapt_state),
        )

    def sample(self, state: DiscreteState, model_args, model_kwargs) -> DiscreteState:
        if self._sample_fn is None:
            raise RuntimeError(f"{self._name}: call `init` before `sample`.")
        return self._sample_fn(state, model_args, model_kwargs)

    def refresh(self, state: DiscreteState, model_args, model_kwargs) -> DiscreteState:
        """Recompute the cached log density and locals for new conditioning values."""
        if self._sample_fn is not None and state.i.ndim:
            return jax.vmap(self._refresh_one, in_axes=(0, None, None))(
                state, model_args, model_kwargs
            )
        return self._refresh_one(state, model_args, model_kwargs)

    def _refresh_one(self, state: DiscreteState, model_args, model_kwargs) -> DiscreteState:
        f, local = self._local_fn(model_args, model_kwargs)(self._leaves(state.z))
        return state._replace(potential_energy=-f, local=local)

    def _draw_noise(
        self, rng_key: jax.Array, shapes: NoiseShapes, index: jax.Array
    ) -> tuple[jax.Array, StepNoise]:
        """The next key and the noise of draw ``index`` (:func:`draw_noise`)."""
        return draw_noise(rng_key, shapes)

    def _step_one(self, state: DiscreteState, model_args, model_kwargs) -> tuple:
        """One chain's draw before adaptation: ``(state, info, params)``; the state keeps
        the adaptation state this draw used."""
        model_kwargs = {} if model_kwargs is None else model_kwargs
        leaves = self._leaves(state.z)
        sites = self._sites
        assert sites is not None  # set by init
        shapes = self._spec.noise_shapes(sites, [x.shape for x in leaves])
        rng_key, noise = self._draw_noise(state.rng_key, shapes, state.i)
        params = self._spec.parameters(state.adapt_state)
        chain = dk.ChainState(leaves, -state.potential_energy, state.local)
        local_fn = self._local_fn(model_args, model_kwargs)
        chain, info = self._spec.step(chain, noise, params, state.adapt_state, sites, local_fn)
        new = self._state_cls(
            i=state.i + 1,
            z=self._user_values(chain.x, state.z),
            potential_energy=-chain.log_density,
            accept_prob=info.accept_prob,
            accepted=info.accepted,
            step_size=jnp.asarray(params.step_size, dtype=state.step_size.dtype),
            balance=jnp.asarray(params.balance, dtype=state.balance.dtype),
            hamming_distance=info.hamming_distance,
            num_moves=state.num_moves + info.accepted.astype(jnp.int32),
            moves_at_half_warmup=state.moves_at_half_warmup,
            local=chain.local,
            adapt_state=state.adapt_state,
            rng_key=rng_key,
            **self._spec.extra_stats(state.adapt_state),  # as used for this draw
        )
        return new, info, params
