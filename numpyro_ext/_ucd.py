"""Unbiased contrastive divergence (Qiu, Zhang and Wang, ICLR 2020) for the JAX EBM trainer:
two coupled chains per data point, run until they meet, on working sets that shrink as pairs
meet. The couplings are block Gibbs of an RBM (Alg. 3) or DMALA chains coupled per coordinate;
their mathematics is in :mod:`discrete_kernels.ebm` and
:func:`discrete_kernels.samplers.dlp.coupled_step`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import random

from discrete_kernels import ebm as core
from discrete_kernels.ebm import UCD, BlockGibbs

from ._ebm_chains import kernel_chain_fns, kernel_sampler
from ._noise import draw_noise
from .driver import DiscreteKernel


class Coupling(NamedTuple):
    """How UCD runs its two chains: ``start(key) -> (key, xi_1, eta_0)`` from the batch,
    ``step(key, t, xi, eta) -> (key, xi, eta, rejections, capped)`` (one coupled step, per
    chain), ``same(xi, eta)`` (C,) and ``visible(state)`` (C, d)."""

    start: Callable
    step: Callable
    same: Callable
    visible: Callable


def rbm_coupling(method: UCD, params, batch) -> Coupling:
    """The coupled block Gibbs chains of Alg. 3, on the RBM's visible and hidden units."""
    chains, m = batch.shape
    n = params.weights.shape[1]

    def start(key):
        key, (u_h0, u_v1, u_h1) = ucd_start_noise(key, chains, m, n)
        h0 = core.bernoulli_from_uniform(core.rbm_hidden_logits(params, batch), u_h0)
        eta = core.RBMState(batch, h0)
        return key, core.rbm_gibbs_step(params, eta, u_v1, u_h1), eta

    def step(key, t, xi, eta):
        rows = xi.visible.shape[0]  # the working set (compaction)
        key, noise = ucd_step_noise(key, t, rows, m, n, method.max_tries)
        xi, eta, info = core.rbm_coupled_gibbs_step(params, xi, eta, *noise)
        return key, xi, eta, info.rejections, info.capped

    def same(xi, eta):
        return core.same_state(xi.visible, eta.visible) & core.same_state(xi.hidden, eta.hidden)

    return Coupling(start, step, same, lambda state: state.visible)


def kernel_coupling(kernel: DiscreteKernel, energy, params, batch) -> Coupling:
    """Two DMALA chains on ``{0, 1}^d`` coupled per coordinate with a common MH uniform
    (:func:`discrete_kernels.samplers.dlp.coupled_step`); each chain keeps its cached log density
    and gradient, so a coupled step costs two gradient evaluations per pair."""
    chains, dim = batch.shape
    spec, sites, adapt = kernel_sampler(kernel, dim)  # a DMALA spec (check_ucd_coupling)
    init, one_step, local_fn = kernel_chain_fns(kernel, dim, lambda z: -energy(params, z[None])[0])
    shapes = spec.noise_shapes(sites, [(dim,)])
    step_params = spec.parameters(adapt)

    def start(key):
        key, key_first = random.split(key)
        eta = jax.vmap(init)(jnp.asarray(batch, jnp.int32))

        def first(chain, k):
            return one_step(chain, adapt, k, 0)[0]

        return key, jax.vmap(first)(eta, random.split(key_first, chains)), eta

    def coupled(xi, eta, k):
        _, noise = draw_noise(k, shapes)
        xi, eta, _, _ = spec.coupled_step(xi, eta, noise, step_params, adapt, sites, local_fn)
        return xi, eta

    def step(key, t, xi, eta):
        rows = xi.x[0].shape[0]  # the working set (compaction)
        key, key_step = random.split(key)
        xi, eta = jax.vmap(coupled)(xi, eta, random.split(key_step, rows))
        zeros = jnp.zeros((rows,), jnp.int32)
        return key, xi, eta, zeros, zeros.astype(bool)

    def same(xi, eta):
        return core.same_state(xi.x[0], eta.x[0])

    return Coupling(start, step, same, lambda state: jnp.asarray(state.x[0], batch.dtype))


def ucd_negative(method: UCD, energy: Any, params, batch, key):
    """UCD's estimate of ``E_model[grad E]`` (and ``E_model[E]``) from coupled chains started
    at ``batch``; statistics of the meeting times and caps.

    After step ``m`` (default ``k``) only the pairs still apart are stepped: the loop runs on
    working sets of the sizes :func:`discrete_kernels.ebm.ucd_compaction_capacities` gives,
    gathering the pairs still apart into the next size as soon as they fit (met pairs add
    nothing more)."""
    chains = batch.shape[0]
    if method.coupling is None or isinstance(method.coupling, BlockGibbs):
        coupling = rbm_coupling(method, params, batch)
    else:
        coupling = kernel_coupling(method.coupling, energy, params, batch)

    def weighted_grad(xi_v, eta_v, w_xi, w_eta):
        def total(p):
            return jnp.sum(w_xi * energy(p, xi_v) - w_eta * energy(p, eta_v)) / chains

        return jax.value_and_grad(total)(params)

    key, first, start = coupling.start(key)
    k, m = method.k, method.m
    last = core.ucd_horizon(k, m)
    # t = 0 (only k = 0 uses it) and t = 1
    met0 = jnp.zeros((chains,), bool)
    w_xi, _ = core.ucd_weights(0, k, met0, m)
    value, grad = weighted_grad(batch, batch, w_xi, jnp.zeros_like(w_xi))
    met = coupling.same(first, start)
    w_xi, w_eta = core.ucd_weights(1, k, met, m)
    v1, g1 = weighted_grad(coupling.visible(first), coupling.visible(start), w_xi, w_eta)
    value, grad = value + v1, jax.tree.map(jnp.add, grad, g1)
    zero = jnp.zeros((), jnp.int32)
    # totals over the pairs: meeting times of the met ones, rejections, capped tries
    carry: tuple = (jnp.asarray(1), first, start, met, value, grad)
    carry = (*carry, jnp.sum(met).astype(jnp.int32), zero, zero, key)
    capacities = core.ucd_compaction_capacities(chains)

    def body(carry):
        t, xi, eta, met, value, grad, tau_sum, rejections, tries_capped, key = carry
        t = t + 1
        key, xi, eta, step_rejections, capped = coupling.step(key, t, xi, eta)
        newly = ~met & coupling.same(xi, eta)
        met_now = met | newly
        w_xi, w_eta = core.ucd_weights(t, k, met_now, m)
        v, g = weighted_grad(coupling.visible(xi), coupling.visible(eta), w_xi, w_eta)
        return (
            t,
            xi,
            eta,
            met_now,
            value + v,
            jax.tree.map(jnp.add, grad, g),
            tau_sum + t * jnp.sum(newly),
            rejections + jnp.sum(jnp.where(met, 0, step_rejections)),
            tries_capped + jnp.sum(~met & capped),
            key,
        )

    for stage, capacity in enumerate(capacities):
        following = capacities[stage + 1] if stage + 1 < len(capacities) else 0
        if stage > 0:  # gather the pairs still apart into a working set of this size
            t, xi, eta, met, *rest = carry
            order = core.ucd_compaction_order(met, capacity)
            xi, eta = take_rows(xi, order), take_rows(eta, order)
            carry = (t, xi, eta, met[order], *rest)

        def keep_going(carry, following=following):
            t, _, _, met, *_ = carry
            apart = jnp.sum(~met)
            return (t < method.max_time) & ((t < last) | (apart > following))

        carry = jax.lax.while_loop(keep_going, body, carry)

    t, _, _, met, value, grad, tau_sum, rejections, tries_capped, _ = carry
    tau_sum = tau_sum + t * jnp.sum(~met)  # pairs stopped at max_time count t
    info = {
        "meeting_time": tau_sum.astype(jnp.float32) / chains,
        "time_capped": jnp.sum(~met),
        "rejections": rejections.astype(jnp.float32) / chains,
        "tries_capped": tries_capped,
    }
    return value, grad, info


def take_rows(state: Any, rows: jax.Array) -> Any:
    """Rows ``rows`` of every leaf of a batch of chain states (leading chain axis)."""
    return jax.tree.map(lambda leaf: leaf[rows], state)


def ucd_start_noise(key: jax.Array, chains: int, m: int, n: int) -> tuple:
    """The next key and the uniforms of UCD's start: ``h_0`` (C, n), then the first sweep's
    visible (C, m) and hidden (C, n) uniforms."""
    key, k1, k2, k3 = random.split(key, 4)
    shapes = ((k1, (chains, n)), (k2, (chains, m)), (k3, (chains, n)))
    return key, tuple(random.uniform(k, s) for k, s in shapes)


def ucd_step_noise(key: jax.Array, t: jax.Array, chains: int, m: int, n: int, tries: int):
    """The next key and the uniforms of coupled step ``t``, in the order of
    :func:`discrete_kernels.ebm.rbm_coupled_gibbs_step`."""
    key, *keys = random.split(key, 6)
    shapes = ((chains,), (chains, m), (tries, chains, 2), (tries, chains, m), (chains, n))
    return key, tuple(random.uniform(k, s) for k, s in zip(keys, shapes))
