"""The negative phase's chains of the JAX EBM trainer (:mod:`numpyro_ext.ebm`): a library
kernel's step on one binary leaf, the PCD/CD advance with any sampler (block Gibbs of an RBM,
random-scan site Gibbs, a kernel), ACS's PCD schedule (App. B, Alg. 6), and the energy's
parameter gradient. The mathematics is in :mod:`discrete_kernels.ebm` and the specs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import random

import discrete_kernels as dk
from discrete_kernels import ebm as core
from discrete_kernels.ebm import BlockGibbs, SiteGibbs
from discrete_kernels.ebm import plate as core_plate
from discrete_kernels.kernel import Sampler, Sites, take_step
from discrete_kernels.samplers.acs import ACSPCDState
from discrete_kernels.warmup import Feedback, run_phases, start_phases

from ._noise import draw_noise
from .driver import JAX_CONTROL, DiscreteKernel


def kernel_sampler(
    kernel: DiscreteKernel, dim: int, colours: tuple | None = None
) -> tuple[Sampler, Sites, Any]:
    """The spec, the sites of one binary leaf of ``dim`` coordinates (with its single-site
    table and ``colours`` for ``PlateGibbs``, :func:`discrete_kernels.ebm.plate.
    plate_gibbs_sites`), and the adaptation state at which the spec's parameters are its
    initial ones (no warmup in training)."""
    spec = kernel.spec
    sites = kernel_sites(kernel, dim, colours)
    adapt = spec.adapt_init(jnp.ones(()), 0, sites, dim, JAX_CONTROL)
    return spec, sites, start_phases(spec.phases(0, JAX_CONTROL), adapt)


def kernel_sites(kernel: DiscreteKernel, dim: int, colours: tuple | None) -> Sites:
    """The sites of the trainers' one binary leaf for ``kernel``'s spec, checked."""
    spec = kernel.spec
    sites = core_plate.training_sites(spec.needs_plate_tables, colours, spec.name)
    spec.check_sites(sites, dim)
    return sites


def plate_colouring(kernel: Any, energy: Callable, params: Any, dim: int) -> tuple[int, ...] | None:
    """``PlateGibbs``'s colouring of the energy's ``dim`` coordinates
    (:func:`discrete_kernels.ebm.plate.energy_colouring`): the interactions probed at a
    uniform random state, at ``params`` and at random perturbations of them; None for
    another kernel. Every key here is fixed, so a resumed run finds the same colouring."""
    if not isinstance(kernel, DiscreteKernel) or not kernel.spec.needs_plate_tables:
        return None
    owner = kernel.spec.name
    given = core_plate.given_blocks(owner, getattr(kernel.spec, "blocks", None))
    perturbations = core_plate.PROBE_PERTURBATIONS
    core_plate.check_probe_size(dim, 1 + perturbations, owner)
    key_state, *keys_params = random.split(random.key(0), 1 + perturbations)
    state = random.bernoulli(key_state, 0.5, (dim,)).astype(jnp.int32)
    batch = jnp.asarray(core_plate.interaction_probe_batch(state), jnp.result_type(float))
    leaves, treedef = jax.tree.flatten(params)
    points = [params]
    for key_params in keys_params:
        keys = random.split(key_params, len(leaves))
        noisy = [
            core_plate.perturbed(x, random.normal(k, jnp.shape(x), jnp.result_type(x)))
            for x, k in zip(leaves, keys)
        ]
        points.append(jax.tree.unflatten(treedef, noisy))
    values = [jax.device_get(-energy(p, batch)) for p in points]
    eps = float(jnp.finfo(batch.dtype).eps)
    colours = core_plate.energy_colouring(values, eps, given, owner)
    return tuple(int(c) for c in colours)


def advance(sampler, energy, params, x, key, num_steps: int, dim: int, colours=None):
    """``num_steps`` sampler steps on each chain of ``x`` (C, d): ``(x, mean accept_prob)``;
    ``colours``: ``PlateGibbs``'s colouring (:func:`plate_colouring`)."""
    if isinstance(sampler, BlockGibbs):
        hidden_shape = x.shape[:-1] + (params.weights.shape[1],)

        def gibbs(i, carry):
            v, key = carry
            key, key_h, key_v = random.split(key, 3)
            u_h, u_v = random.uniform(key_h, hidden_shape), random.uniform(key_v, v.shape)
            return core.rbm_visible_sweep(params, v, u_h, u_v), key

        v, _ = jax.lax.fori_loop(0, num_steps, gibbs, (x, key))
        return v, jnp.asarray(jnp.nan)
    if isinstance(sampler, SiteGibbs):

        def site(i, carry):
            v, key = carry
            key, key_index, key_u = random.split(key, 3)
            index = random.randint(key_index, x.shape[:1], 0, dim)
            log_density_zero = -energy(params, core.with_coordinate(v, index, 0.0))
            log_density_one = -energy(params, core.with_coordinate(v, index, 1.0))
            uniform = random.uniform(key_u, x.shape[:1])
            v = core.site_gibbs_update(v, index, log_density_zero, log_density_one, uniform)
            return v, key

        v, _ = jax.lax.fori_loop(0, num_steps, site, (x, key))
        return v, jnp.asarray(jnp.nan)

    _, _, adapt = kernel_sampler(sampler, dim, colours)
    init, step, _ = kernel_chain_fns(
        sampler, dim, lambda z: -energy(params, z[None])[0], colours, lambda zs: -energy(params, zs)
    )

    def one_chain(x1, key1):
        def body(i, carry):
            chain, adapt_state, key, accept = carry
            key, key_step = random.split(key)
            chain, adapt_state, accept_prob = step(chain, adapt_state, key_step, i)
            return chain, adapt_state, key, accept + accept_prob

        carry = (init(x1), adapt, key1, jnp.zeros(()))
        chain, _, _, accept = jax.lax.fori_loop(0, num_steps, body, carry)
        return chain.x[0], accept / num_steps

    keys = random.split(key, x.shape[0])
    xs, accept = jax.vmap(one_chain)(jnp.asarray(x, jnp.int32), keys)
    return jnp.asarray(xs, x.dtype), jnp.mean(accept)


def kernel_chain_fns(
    kernel: DiscreteKernel,
    dim: int,
    log_density: Callable,
    colours: tuple | None = None,
    log_density_batch: Callable | None = None,
):
    """``(init, step, local_fn)`` of one chain of ``kernel`` on ``{0, 1}^dim`` for
    ``log_density(x)`` (a float vector in, a scalar out): ``init(x) -> chain``,
    ``step(chain, adapt, key, i, params=None, num_warmup=0) -> (chain, adapt, accept_prob)``
    (with ``params``, a :class:`StepParameters` that replaces the spec's and skips its
    adaptation) and the spec's ``local_fn(leaves) -> (f, (grad,))``; for ``PlateGibbs``
    (``colours`` given) ``local_fn(leaves) -> (f, (table,))``, the leaf's single-site table
    from ``log_density_batch`` (states (B, d) -> (B,))."""
    spec, sites, _ = kernel_sampler(kernel, dim, colours)

    def gradient_local_fn(leaves: tuple) -> tuple:
        xf = jnp.asarray(leaves[0], jnp.result_type(float))
        f, g = jax.value_and_grad(log_density)(xf)
        return f, (g,)

    local_fn: Callable = gradient_local_fn
    if spec.needs_plate_tables:
        assert log_density_batch is not None, "PlateGibbs evaluates batches of states"
        batch_fn = log_density_batch

        def as_floats(zs: jax.Array) -> jax.Array:
            return batch_fn(jnp.asarray(zs, jnp.result_type(float)))

        local_fn = core_plate.table_local_fn(as_floats, colours, complete_at_end=True)

    shapes = spec.noise_shapes(sites, [(dim,)])

    def init(x: jax.Array):
        f, local = local_fn((x,))
        return dk.ChainState((x,), f, local)

    phases = {0: spec.phases(0, JAX_CONTROL)}

    def step(chain, adapt_state, key, i, params=None, num_warmup=0):
        _, noise = draw_noise(key, shapes)
        fixed = params is not None
        params = params if fixed else spec.parameters(adapt_state)
        chain, info = take_step(
            spec, chain, noise, params, adapt_state, sites, local_fn, JAX_CONTROL
        )
        if not fixed:
            if num_warmup not in phases:
                phases[num_warmup] = spec.phases(num_warmup, JAX_CONTROL)
            feedback = Feedback(info, params, chain, i)
            adapt_state = run_phases(phases[num_warmup], adapt_state, feedback, JAX_CONTROL)
        return chain, adapt_state, info.accept_prob

    return init, step, local_fn


def acs_pcd_advance(kernel, energy, params, state: ACSPCDState, key, num_steps: int, dim: int):
    """PCD's negative phase with ACS (App. B, Alg. 6): the iteration's ``num_steps`` steps at
    the schedule's ``(alpha, beta)`` (:class:`discrete_kernels.samplers.acs.ACSPCDSchedule`),
    or on a re-tuning iteration the full tuning run of the kernel on each chain, whose
    estimates (medians over the chains) set the cycle. Returns ``(samples, mean accept_prob,
    new state)``."""
    spec = kernel.spec
    schedule = spec.pcd_schedule()
    init, step, _ = kernel_chain_fns(kernel, dim, lambda z: -energy(params, z[None])[0])
    _, sites, adapt0 = kernel_sampler(kernel, dim)
    keys = random.split(key, state.buffer.shape[0])
    x = jnp.asarray(state.buffer, jnp.int32)
    tuning = schedule.tuning_steps

    def tune(_):
        def one_chain(x1, key1):
            def body(i, carry):
                chain, adapt, key, accept = carry
                key, key_step = random.split(key)
                chain, adapt, accept_prob = step(chain, adapt, key_step, i, num_warmup=tuning)
                return chain, adapt, key, accept + accept_prob

            adapt = spec.adapt_init(jnp.ones(()), tuning, sites, dim, JAX_CONTROL)
            adapt = start_phases(spec.phases(tuning, JAX_CONTROL), adapt)
            carry = (init(x1), adapt, key1, jnp.zeros(()))
            chain, adapt, _, accept = jax.lax.fori_loop(0, tuning, body, carry)
            return chain.x[0], accept / tuning, adapt.alpha_max, adapt.alpha_min

        xs, accept, alpha_max, alpha_min = jax.vmap(one_chain)(x, keys)
        high, low = schedule.tuned_bounds(alpha_max, alpha_min)
        return xs, jnp.mean(accept), high, low

    def scheduled(_):
        def one_chain(x1, key1):
            def body(i, carry):
                chain, key, accept = carry
                key, key_step = random.split(key)
                step_params = schedule.parameters(state, i)
                chain, _, accept_prob = step(chain, adapt0, key_step, i, params=step_params)
                return chain, key, accept + accept_prob

            carry = (init(x1), key1, jnp.zeros(()))
            chain, _, accept = jax.lax.fori_loop(0, num_steps, body, carry)
            return chain.x[0], accept / num_steps

        xs, accept = jax.vmap(one_chain)(x, keys)
        return xs, jnp.mean(accept), state.alpha_max, state.alpha_min

    if schedule.tunes:
        retune = schedule.retunes(state.iteration)
        xs, accept, alpha_max, alpha_min = jax.lax.cond(retune, tune, scheduled, None)
    else:
        xs, accept, alpha_max, alpha_min = scheduled(None)
    samples = jnp.asarray(xs, state.buffer.dtype)
    new_state = ACSPCDState(samples, state.iteration + 1, alpha_max, alpha_min)
    return samples, accept, new_state


def mean_energy_grad(energy, params, x):
    """``(mean E(x), grad_params mean E(x))`` with ``x`` held fixed."""
    x = jax.lax.stop_gradient(x)
    return jax.value_and_grad(lambda p: jnp.mean(energy(p, x)))(params)
