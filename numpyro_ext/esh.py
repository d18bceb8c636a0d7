"""NumPyro ESH kernel for continuous latent sites and Jarzynski sampling with log Z."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from jax.flatten_util import ravel_pytree
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import _transforms_from_trace, initialize_model, transform_fn
from numpyro.util import identity, is_prng_key

from discrete_kernels import NoiseShapes, StepNoise, diagnosis
from discrete_kernels import validation as checks
from discrete_kernels.registration import kernel_signature, split_options
from discrete_kernels.samplers import esh_dynamics as esh
from discrete_kernels.samplers.esh import ESH as ESHSampler
from discrete_kernels.samplers.esh import ESHChain, ESHInfo
from discrete_kernels.warmup import Feedback, run_phases

from . import _sharding
from ._host_warnings import frozen_chain_check
from ._noise import draw_noise
from ._prior_trace import prior_trace
from .driver import JAX_CONTROL, _fori

__all__ = ["ESH", "ESHState", "JarzynskiResult", "esh_jarzynski"]


class ESHState(NamedTuple):
    """State of :class:`ESH`; ``z`` is in the unconstrained space.

    - **i** - index of the draw; **z** - dict of unconstrained site values;
    - **potential_energy** - ``-log density`` at ``z`` (ArviZ: ``lp`` is its negative);
    - **z_grad** - its gradient (cached: a trajectory of N steps costs N gradients);
    - **hamiltonian_drift** - largest ``|H(t) - H(0)|`` along this draw's trajectory, an
      integration-error diagnostic (large values: lower ``step_size``);
    - **trajectory_length** - distance travelled, ``step_size * num_steps``;
    - **num_grad_evals** - gradient evaluations of this draw;
    - **moved** - the draw is not the start of its orbit;
    - **max_weight_fraction** - the heaviest orbit point's share of the orbit's weight (near
      1: the chain barely moves; the step is too long or the orbit leaves the support);
    - **num_moves**, **moves_at_half_warmup** - for the frozen-chain check at the end of
      warmup;
    - **rng_key**;
    - **adapt_state** - the step size and orbit length of the next draw, and what their
      warmup adaptation needs (:class:`discrete_kernels.samplers.esh.ESHAdaptState`).
    """

    i: jax.Array
    z: Any
    potential_energy: jax.Array
    z_grad: Any
    hamiltonian_drift: jax.Array
    trajectory_length: jax.Array
    num_grad_evals: jax.Array
    moved: jax.Array
    max_weight_fraction: jax.Array
    num_moves: jax.Array
    moves_at_half_warmup: jax.Array
    rng_key: jax.Array
    adapt_state: Any


def _flat_value_and_grad(potential_fn: Callable, unravel: Callable) -> Callable:
    """``x -> (f, grad f)`` on the flat unconstrained vector, ``f = -potential``."""

    def log_density(x):
        return -potential_fn(unravel(x))

    return jax.value_and_grad(log_density)


class ESH(MCMCKernel):
    """NumPyro kernel of ESH (:class:`discrete_kernels.samplers.esh.ESH`) for continuous sites,
    in NumPyro's unconstrained space. With ``chain_method="vectorized"`` the chains are split
    over all local devices (set ``shard_chains = False`` on the instance to keep them on one).
    Works standalone and as the continuous block of ``numpyro.infer.Gibbs`` next to a discrete
    kernel of this library. ``model``: a NumPyro model with continuous latent sites; or
    ``potential_fn(z) = -log density`` on a pytree of real arrays (``init_params`` in
    ``MCMC.run`` required)."""

    sample_field = "z"
    shard_chains: bool = True  # vectorised chains over all local devices

    def __init__(
        self, model: Callable | None = None, *, potential_fn: Callable | None = None, **options
    ) -> None:
        if (model is None) == (potential_fn is None):
            raise ValueError("ESH: give exactly one of `model` or `potential_fn`.")
        own, _ = split_options(ESHSampler, options)
        self._spec = ESHSampler(**own)
        self._model = model
        self._potential_fn = potential_fn
        self._potential_fn_gen = None
        self._postprocess_fn = None
        self._inv_transforms = None
        self._dynamic_support = False
        self._sample_fn = None
        self._num_warmup = 0

    @property
    def spec(self) -> ESHSampler:
        """The sampler's spec (its validated options)."""
        return self._spec

    @property
    def adaptation(self):
        """The warmup adaptation's settings
        (:class:`discrete_kernels.samplers.esh.ESHAdaptation`)."""
        return self._spec.adaptation

    # ---------------------------------------------------------------- PPL protocol

    @property
    def model(self) -> Callable | None:
        return self._model

    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z", "potential_energy", *ESHInfo._fields)

    def get_diagnostics_str(self, state: ESHState) -> str:
        return f"H drift {float(state.hamiltonian_drift):.2g}"

    def get_potential_fn(self, model_args=(), model_kwargs=None) -> Callable:
        if self._potential_fn_gen is None:
            if self._potential_fn is not None:
                return self._potential_fn
            raise RuntimeError("ESH: run `init` first.")
        model_kwargs = {} if model_kwargs is None else model_kwargs
        return self._potential_fn_gen(*model_args, **model_kwargs)

    def get_constrain_fn(self, model_args=(), model_kwargs=None, *, return_deterministic=False):
        if self._inv_transforms is None:
            if self._model is None:
                return identity
            raise RuntimeError("ESH: run `init` first.")
        if return_deterministic or self._dynamic_support:
            model_kwargs = {} if model_kwargs is None else model_kwargs
            return self._postprocess_fn(*model_args, **model_kwargs)
        return partial(transform_fn, self._inv_transforms)

    def postprocess_fn(self, model_args, model_kwargs):
        if self._postprocess_fn is None:
            return identity
        return self._postprocess_fn(*model_args, **(model_kwargs or {}))

    def wrap_model(self, wrapper: Callable) -> ESH:
        if self._model is None:
            raise ValueError("ESH built from a potential_fn has no model to wrap.")
        kernel = copy.copy(self)
        kernel._model = wrapper(self._model)
        kernel._potential_fn_gen = None
        kernel._postprocess_fn = None
        kernel._inv_transforms = None
        kernel._sample_fn = None
        return kernel

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_sample_fn"] = None
        return state

    # ---------------------------------------------------------------- MCMC protocol

    def _init_params(self, rng_key, model_args, model_kwargs, init_params):
        if self._model is None:
            if init_params is None:
                raise ValueError("ESH: with `potential_fn`, pass `init_params` to MCMC.run.")
            return init_params
        discrete = [
            name
            for name, site in prior_trace(self._model, rng_key, model_args, model_kwargs).items()
            if site["type"] == "sample"
            and not site["is_observed"]
            and site["fn"].support.is_discrete
        ]
        if discrete:
            raise ValueError(
                f"ESH samples continuous sites only; the model has discrete latent sites "
                f"{discrete}. Use numpyro.infer.Gibbs with a discrete kernel of this library "
                "for them."
            )
        params, potential_fn_gen, postprocess_fn, model_trace = initialize_model(
            rng_key,
            self._model,
            dynamic_args=True,
            model_args=model_args,
            model_kwargs=model_kwargs,
        )
        self._potential_fn_gen = potential_fn_gen
        self._postprocess_fn = postprocess_fn
        transforms = _transforms_from_trace(model_trace, raise_warnings=False)
        self._inv_transforms = transforms.inv_transforms
        self._dynamic_support = transforms.dynamic_support
        return params.z if init_params is None else init_params

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        vectorized = not is_prng_key(rng_key)
        if vectorized:
            keys = jax.vmap(random.split)(rng_key)
            key_state, key_init = keys[:, 0], keys[:, 1]
            # one unbatched call sets up the potential and transforms (and checks the sites)
            first = None if init_params is None else jax.tree.map(lambda a: a[0], init_params)
            self._init_params(key_init[0], model_args, model_kwargs, first)
            if init_params is None:
                z = jax.vmap(lambda k: self._init_params(k, model_args, model_kwargs, None))(
                    key_init
                )
            else:
                z = init_params
        else:
            key_state, key_init = random.split(rng_key)
            z = self._init_params(key_init, model_args, model_kwargs, init_params)

        self._num_warmup = int(num_warmup)

        def init_one(key, z):
            pe, grad = jax.value_and_grad(self.get_potential_fn(model_args, model_kwargs))(z)
            zero = jnp.zeros((), dtype=pe.dtype)
            count = jnp.zeros((), jnp.int32)
            adapt = self._spec.adapt_init(ravel_pytree(z)[0])
            return ESHState(
                count,
                z,
                pe,
                grad,
                zero,
                zero,
                count,
                jnp.zeros((), bool),
                jnp.ones((), dtype=pe.dtype),
                count,
                count,
                key,
                adapt,
            )

        replicated = None
        if vectorized:
            state = jax.vmap(init_one)(key_state, z)
            state, replicated = _sharding.shard_chains(state, "ESH", self.shard_chains)
        else:
            state = init_one(key_state, z)
        self._check_start(state)
        self._sample_fn = self._make_sample_fn(vectorized, replicated)
        return state

    def _site_names(self, z: Any) -> list:
        return sorted(z) if isinstance(z, dict) else ["the potential_fn's argument"]

    def _check_start(self, state: ESHState) -> None:
        """Refuse a start of zero density or a non-finite gradient: no orbit can leave it."""
        if isinstance(state.potential_energy, jax.core.Tracer):
            return  # under pmap: checked as the discrete kernels are, not at all
        energies = np.ravel(np.asarray(state.potential_energy))
        grads = np.asarray(ravel_pytree(state.z_grad)[0])
        names = self._site_names(state.z)
        bad = np.flatnonzero(~np.isfinite(energies))
        if bad.size:
            chain = int(bad[0])
            z = state.z if energies.size == 1 else jax.tree.map(lambda a: a[chain], state.z)
            if self._inv_transforms is not None:  # shown in the model's (constrained) space
                z = transform_fn(self._inv_transforms, z)
            values = [z[n] for n in names] if isinstance(z, dict) else [z]
            checks.check_initial_log_density("ESH", -energies[chain], names, values)
        if not np.all(np.isfinite(grads)):
            raise ValueError(
                f"ESH: the gradient of the log density at the start values of "
                f"{self._site_names(state.z)} is not finite; start where the density is smooth "
                "(check init_params)."
            )

    def _make_sample_fn(self, vectorized: bool, replicated: Any) -> Callable:
        """One draw of every chain, then the frozen-chain check at the end of warmup."""
        step = (
            jax.vmap(self._sample_one, in_axes=(0, None, None)) if vectorized else self._sample_one
        )
        num_warmup = self._num_warmup

        def sample_fn(state, model_args, model_kwargs):
            index = state.i[0] if vectorized else state.i
            new = step(state, model_args, model_kwargs)
            return frozen_chain_check(
                new,
                index,
                num_warmup,
                "ESH",
                self._site_names(state.z),
                vectorized,
                replicated,
                diagnosis.ESH_NO_MOVE_CAUSES,
            )

        return sample_fn

    def sample(self, state: ESHState, model_args, model_kwargs) -> ESHState:
        if self._sample_fn is None:
            raise RuntimeError("ESH: call `init` before `sample`.")
        return self._sample_fn(state, model_args, model_kwargs)

    def refresh(self, state: ESHState, model_args, model_kwargs) -> ESHState:
        """Recompute the cached potential and gradient for new conditioning values."""

        def one(s):
            pe, grad = jax.value_and_grad(self.get_potential_fn(model_args, model_kwargs))(s.z)
            return s._replace(potential_energy=pe, z_grad=grad)

        return jax.vmap(one)(state) if state.i.ndim else one(state)

    def _draw_noise(
        self, rng_key: jax.Array, shapes: NoiseShapes, index: jax.Array
    ) -> tuple[jax.Array, StepNoise]:
        """The next key and the noise of draw ``index`` (:func:`numpyro_ext._noise.draw_noise`)."""
        return draw_noise(rng_key, shapes)

    def _sample_one(self, state: ESHState, model_args, model_kwargs) -> ESHState:
        model_kwargs = {} if model_kwargs is None else model_kwargs
        flat, unravel = ravel_pytree(state.z)
        flat_grad, _ = ravel_pytree(state.z_grad)
        value_and_grad = _flat_value_and_grad(
            self.get_potential_fn(model_args, model_kwargs), unravel
        )
        shapes = self._spec.noise_shapes(flat.shape[0])
        rng_key, noise = self._draw_noise(state.rng_key, shapes, state.i)
        chain = ESHChain(flat, -state.potential_energy, -flat_grad)
        adapt = state.adapt_state
        params = (adapt.step_size, adapt.num_steps)
        chain, info = self._spec.step(chain, noise, value_and_grad, adapt, JAX_CONTROL)
        feedback = Feedback(info, params, chain, state.i)
        adapt = run_phases(self._spec.phases(self._num_warmup), adapt, feedback, JAX_CONTROL)
        return ESHState(
            i=state.i + 1,
            z=unravel(chain.x),
            potential_energy=-chain.log_density,
            z_grad=unravel(-chain.grad),
            hamiltonian_drift=info.hamiltonian_drift,
            trajectory_length=info.trajectory_length,
            num_grad_evals=info.num_grad_evals,
            moved=info.moved,
            max_weight_fraction=info.max_weight_fraction,
            num_moves=state.num_moves + jnp.asarray(info.moved, jnp.int32),
            moves_at_half_warmup=state.moves_at_half_warmup,
            rng_key=rng_key,
            adapt_state=adapt,
        )


class JarzynskiResult(NamedTuple):
    """Output of :func:`esh_jarzynski`.

    - **samples** - dict of constrained site values (or the pytree), leading axis particles.
    - **log_weights** - (n,) self-normalised log importance weights (logsumexp = 0).
    - **log_z**, **log_z_se** - estimate of ``log Z`` (normaliser of ``exp(-potential)`` in
      the sampled space) and its delta-method standard error.
    - **ess** - effective sample size of the weights, ``1 / sum(w^2)``.
    """

    samples: Any
    log_weights: jax.Array
    log_z: jax.Array
    log_z_se: jax.Array
    ess: jax.Array


def esh_jarzynski(
    rng_key: jax.Array,
    *,
    model: Callable | None = None,
    potential_fn: Callable | None = None,
    init_params: Any = None,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    num_particles: int = 1000,
    step_size: float = 0.1,
    num_steps: int = 50,
    base_scale: float = 1.0,
) -> JarzynskiResult:
    """Jarzynski sampling with ESH dynamics (Alg. 4): particles from a base Gaussian
    ``N(0, base_scale^2 I)`` on the unconstrained space are moved by ``num_steps`` ESH leapfrog
    steps and weighted by ``w = f(x_0) - f_0(x_0) + r(T)``; self-normalised, the weighted
    particles estimate expectations under the target and ``log Z = log Z_0 + log mean
    exp(w)``.

    For a model, ``Z`` is the normaliser of the joint density in the unconstrained space (the
    model's evidence when all latent sites are sampled); for ``potential_fn``, that of
    ``exp(-potential_fn)`` (``init_params`` gives the shapes). A base wider than the target
    keeps the weights light-tailed; check ``ess``.
    """
    model_kwargs = {} if model_kwargs is None else model_kwargs
    kernel = ESH(model, potential_fn=potential_fn, step_size=step_size, num_steps=num_steps)
    key_init, key_x, key_u = random.split(rng_key, 3)
    z = kernel._init_params(key_init, model_args, model_kwargs, init_params)
    flat, unravel = ravel_pytree(z)
    d = flat.shape[0]
    x0 = base_scale * random.normal(key_x, (num_particles, d), flat.dtype)
    value_and_grad = _flat_value_and_grad(
        kernel.get_potential_fn(model_args, model_kwargs), unravel
    )
    batched = jax.vmap(value_and_grad)
    f0, g0 = batched(x0)
    direction = esh.unit_vector(random.normal(key_u, (num_particles, d), flat.dtype))
    start = esh.ESHState(x0, direction, jnp.zeros((num_particles,), flat.dtype), f0, g0)

    @jax.jit
    def run(start):
        return _fori(num_steps, lambda s: esh.esh_leapfrog(s, step_size, batched), start)

    end = run(start)
    base = -0.5 * jnp.sum(x0**2, axis=-1) / base_scale**2
    log_w = esh.jarzynski_log_weights(f0, base, end.r)
    log_w = jnp.where(jnp.isfinite(log_w) & jnp.isfinite(end.log_density), log_w, -jnp.inf)
    estimate, se = esh.log_mean_exp_with_error(log_w)
    log_z0 = 0.5 * d * math.log(2 * math.pi * base_scale**2)
    normalised = log_w - jax.nn.logsumexp(log_w)
    xs = jax.vmap(unravel)(end.x)
    if model is not None:
        xs = jax.vmap(kernel.get_constrain_fn(model_args, model_kwargs))(xs)
    return JarzynskiResult(
        samples=xs,
        log_weights=normalised,
        log_z=estimate + log_z0,
        log_z_se=se,
        ess=1.0 / jnp.sum(jnp.exp(2 * normalised)),
    )


ESH.__signature__ = kernel_signature(ESHSampler, domain=False)  # type: ignore[attr-defined]
