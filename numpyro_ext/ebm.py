"""Training energy-based models on binary data with JAX: CD-k, PCD with any kernel of this
library, and unbiased contrastive divergence (UCD).

The model is ``p(x) ∝ exp(-E(x; params))`` on ``x`` in ``{0, 1}^d``; ``energy(params, x)``
maps a batch (N, d) to (N,) energies (for an RBM, :class:`RBM`, the free energy of the
visible units). Each iteration estimates the gradient of the average negative log-likelihood,
``E_data[grad E] - E_model[grad E]``, and applies an optax optimiser; the method decides how
the model term is estimated:

- :class:`CD` (``k`` steps from the data batch), :class:`PCD` (a persistent buffer, ``steps``
  per iteration, optional re-initialisation at data): the sampler is any discrete kernel of
  :mod:`numpyro_ext` built without a model (``nx.DMALA(step_size=0.2)``, ``nx.GWG()``, ...) or
  :class:`BlockGibbs` for an RBM (the default there), or :class:`SiteGibbs` (random-scan
  single-site Gibbs, any energy);
- :class:`UCD` (Qiu, Zhang and Wang, ICLR 2020): two coupled chains per data point, run until
  they meet, which makes the model term unbiased: block Gibbs chains of an RBM
  (:func:`discrete_kernels.ebm.rbm_coupled_gibbs_step`) or, for any energy, DMALA chains
  coupled per coordinate (``UCD(coupling=nx.DMALA(step_size=...))``,
  :func:`discrete_kernels.samplers.dlp.coupled_step`); meeting times and cap hits are in the
  history.

All the mathematics is in :mod:`discrete_kernels.ebm` and the samplers' specs; this module
draws the noise, runs the loops and holds the state. One iteration is one jit-compiled call.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

import discrete_kernels as dk
from discrete_kernels import ebm as core
from discrete_kernels.ebm import (
    CD,
    PCD,
    UCD,
    BlockGibbs,
    SiteGibbs,
    check_first_update,
    check_method,
    check_training_inputs,
    check_ucd_coupling,
)
from discrete_kernels.kernel import Sampler, Sites, take_step
from discrete_kernels.samplers.acs import ACSPCDState
from discrete_kernels.samplers.esh_dynamics import log_mean_exp_with_error
from discrete_kernels.validation import check_int
from discrete_kernels.warmup import Feedback, run_phases, start_phases

from . import _sharding
from ._noise import draw_noise
from .driver import JAX_CONTROL, DiscreteKernel

__all__ = [
    "CD",
    "PCD",
    "RBM",
    "UCD",
    "ACSPCDState",
    "BlockGibbs",
    "SiteGibbs",
    "EBMResult",
    "IsingEnergy",
    "MLPEnergy",
    "ais_log_partition",
    "train",
]


# ------------------------------------------------------------------------------------------
# ready-made energies


@dataclass(frozen=True)
class RBM:
    """Bernoulli RBM with ``num_visible`` and ``num_hidden`` units; as an energy, the free
    energy of the visible units (:func:`discrete_kernels.ebm.rbm_free_energy`)."""

    num_visible: int
    num_hidden: int

    def init(self, rng_key: jax.Array, scale: float = 0.01) -> core.RBMParams:
        """Weights ``N(0, scale^2)``, zero biases."""
        weights = scale * random.normal(rng_key, (self.num_visible, self.num_hidden))
        return core.RBMParams(weights, jnp.zeros(self.num_visible), jnp.zeros(self.num_hidden))

    def __call__(self, params: core.RBMParams, x: jax.Array) -> jax.Array:
        return core.rbm_free_energy(params, x)

    def log_likelihood(self, params: core.RBMParams, data: jax.Array) -> jax.Array:
        """Exact average log-likelihood (enumerates the smaller layer)."""
        return core.rbm_log_likelihood(params, data)


@dataclass(frozen=True)
class IsingEnergy:
    """Lattice Ising model on ``side x side`` spins ``s = 2x - 1`` with learnable couplings on
    the lattice's edges (open boundaries) and fields: ``E(x) = -(s.J s / 2 + h.s)``."""

    side: int

    def mask(self) -> jax.Array:
        return jnp.asarray(core.lattice_mask(self.side))

    def init(self, rng_key: jax.Array, scale: float = 0.01) -> dict:
        d = self.side * self.side
        raw = scale * random.normal(rng_key, (d, d))
        return {"couplings": (raw + raw.T) / 2 * self.mask(), "field": jnp.zeros(d)}

    def __call__(self, params: dict, x: jax.Array) -> jax.Array:
        return core.lattice_ising_energy(params["couplings"], params["field"], self.mask(), x)


@dataclass(frozen=True)
class MLPEnergy:
    """A small MLP energy on binary inputs: ``E(x) = w_out . tanh(...tanh(W_1 x + b_1)...)``."""

    num_inputs: int
    hidden: tuple[int, ...] = (64,)

    def init(self, rng_key: jax.Array) -> list:
        sizes = (self.num_inputs, *self.hidden)
        keys = random.split(rng_key, len(sizes))
        layers = [
            (random.normal(k, (a, b)) / math.sqrt(a), jnp.zeros(b))
            for k, a, b in zip(keys, sizes[:-1], sizes[1:])
        ]
        return layers + [random.normal(keys[-1], (sizes[-1],)) / math.sqrt(sizes[-1])]

    def __call__(self, params: list, x: jax.Array) -> jax.Array:
        h = x
        for w, b in params[:-1]:
            h = jnp.tanh(jnp.matmul(h, w, precision="highest") + b)
        return jnp.matmul(h, params[-1], precision="highest")  # energies enter MH ratios


# ------------------------------------------------------------------------------------------
# negative-phase samplers and methods


class EBMResult(NamedTuple):
    """What :func:`train` returns; pass it back as ``resume=`` to continue (bit-identically
    on the CPU).

    - **params**, **opt_state** - the final parameters and optimiser state;
    - **history** - dict of numpy arrays, one entry per iteration: ``energy_gap`` (mean energy
      of the data batch minus the model samples'), ``objective`` (``evaluate(params)`` where
      computed, NaN elsewhere), ``accept_prob`` (samplers with an MH step), and for UCD
      ``meeting_time`` (mean over chains), ``time_capped`` (chains stopped at ``max_time``),
      ``rejections`` (mean rejected residual draws per chain) and ``tries_capped`` (coupling
      steps that ran out of tries);
    - **method_state** - the PCD buffer (an :class:`ACSPCDState` for PCD with ``nx.ACS``;
      None for CD and UCD); **rng_key**; **step** - iterations
      done.
    """

    params: Any
    opt_state: Any
    history: dict
    method_state: Any
    rng_key: jax.Array
    step: int


def _sampler_of(method: Any, energy: Any) -> Any:
    sampler = getattr(method, "sampler", None)
    if sampler is None:
        if not isinstance(energy, RBM):
            raise ValueError(
                f"{type(method).__name__}: give sampler= (a numpyro_ext kernel such as "
                "nx.DMALA(step_size=0.2)); the default block Gibbs sampler needs an RBM energy."
            )
        return BlockGibbs()
    if isinstance(sampler, BlockGibbs):
        if not isinstance(energy, RBM):
            raise ValueError("BlockGibbs needs the RBM energy (numpyro_ext.ebm.RBM).")
        return sampler
    if isinstance(sampler, SiteGibbs):
        return sampler
    if not isinstance(sampler, DiscreteKernel):
        raise ValueError(
            f"{type(method).__name__}: sampler must be a numpyro_ext kernel, SiteGibbs() or "
            "BlockGibbs(), "
            f"got {sampler!r}."
        )
    return sampler


def _kernel_sampler(kernel: DiscreteKernel, dim: int) -> tuple[Sampler, Sites, Any]:
    """The spec, the sites of one binary leaf of ``dim`` coordinates, and the adaptation
    state at which the spec's parameters are its initial ones (no warmup in training)."""
    spec = kernel.spec
    sites = Sites(("x",), (dk.Binary(),), (False,))
    spec.check_sites(sites, dim)
    adapt = spec.adapt_init(jnp.ones(()), 0, sites, dim, JAX_CONTROL)
    return spec, sites, start_phases(spec.phases(0, JAX_CONTROL), adapt)


def _advance(sampler, energy, params, x, key, num_steps: int, dim: int):
    """``num_steps`` sampler steps on each chain of ``x`` (C, d): ``(x, mean accept_prob)``."""
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

    _, _, adapt = _kernel_sampler(sampler, dim)
    init, step, _ = _kernel_chain_fns(sampler, dim, lambda z: -energy(params, z[None])[0])

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


def _kernel_chain_fns(kernel: DiscreteKernel, dim: int, log_density: Callable):
    """``(init, step, local_fn)`` of one chain of ``kernel`` on ``{0, 1}^dim`` for
    ``log_density(x)`` (a float vector in, a scalar out): ``init(x) -> chain``,
    ``step(chain, adapt, key, i, params=None, num_warmup=0) -> (chain, adapt, accept_prob)``
    (with ``params``, a :class:`StepParameters` that replaces the spec's and skips its
    adaptation) and the spec's ``local_fn(leaves) -> (f, (grad,))``."""
    spec, sites, _ = _kernel_sampler(kernel, dim)

    def local_fn(leaves: tuple) -> tuple:
        xf = jnp.asarray(leaves[0], jnp.result_type(float))
        f, g = jax.value_and_grad(log_density)(xf)
        return f, (g,)

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


def _acs_pcd_advance(kernel, energy, params, state: ACSPCDState, key, num_steps: int, dim: int):
    """PCD's negative phase with ACS (App. B, Alg. 6): the iteration's ``num_steps`` steps at
    the schedule's ``(alpha, beta)`` (:class:`discrete_kernels.samplers.acs.ACSPCDSchedule`),
    or on a re-tuning iteration the full tuning run of the kernel on each chain, whose
    estimates (medians over the chains) set the cycle. Returns ``(samples, mean accept_prob,
    new state)``."""
    spec = kernel.spec
    schedule = spec.pcd_schedule()
    init, step, _ = _kernel_chain_fns(kernel, dim, lambda z: -energy(params, z[None])[0])
    _, sites, adapt0 = _kernel_sampler(kernel, dim)
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


def ais_log_partition(
    energy: Callable,
    params: Any,
    rng_key: jax.Array,
    *,
    sampler: DiscreteKernel,
    base_logits: Any,
    num_chains: int = 100,
    num_temperatures: int = 1000,
) -> tuple[float, float]:
    """Annealed importance sampling estimate of ``log Z`` of ``exp(-energy(params, x))`` on
    ``{0, 1}^d``, and its standard error.

    The path is geometric from independent Bernoullis with ``base_logits`` (d,) (their data
    marginals' logits are a good choice) to the model, ``f_beta = (1 - beta) f_0 + beta f``,
    over ``num_temperatures`` equally spaced ``beta``; the transition at each ``beta`` is one
    step of ``sampler`` (any discrete kernel of this library, built without a model).
    """
    base_logits = jnp.asarray(base_logits, jnp.result_type(float))
    dim = base_logits.shape[-1]
    _, _, adapt = _kernel_sampler(sampler, dim)

    def base_log_density(x):
        return jnp.sum(x * base_logits, axis=-1) - jnp.sum(jax.nn.softplus(base_logits))

    def target_log_density(x):
        return -energy(params, x[None])[0]

    betas = jnp.linspace(0.0, 1.0, num_temperatures + 1)

    def one_chain(key):
        key, key_x = random.split(key)
        x = (random.uniform(key_x, (dim,)) < jax.nn.sigmoid(base_logits)).astype(jnp.int32)

        def body(j, carry):
            x, log_w, key = carry
            beta_prev, beta = betas[j - 1], betas[j]
            xf = x.astype(base_logits.dtype)
            log_w = log_w + core.ais_log_weight_increment(
                target_log_density(xf), base_log_density(xf), beta_prev, beta
            )

            def log_density(z, beta=beta):
                return (1 - beta) * base_log_density(z) + beta * target_log_density(z)

            init, step, _ = _kernel_chain_fns(sampler, dim, log_density)
            key, key_step = random.split(key)
            chain, _, _ = step(init(x), adapt, key_step, j)
            return chain.x[0], log_w, key

        _, log_w, _ = jax.lax.fori_loop(1, num_temperatures + 1, body, (x, jnp.zeros(()), key))
        return log_w

    log_w = jax.jit(jax.vmap(one_chain))(random.split(rng_key, num_chains))
    estimate, se = log_mean_exp_with_error(log_w)
    return float(estimate), float(se)


def _mean_energy_grad(energy, params, x):
    """``(mean E(x), grad_params mean E(x))`` with ``x`` held fixed."""
    x = jax.lax.stop_gradient(x)
    return jax.value_and_grad(lambda p: jnp.mean(energy(p, x)))(params)


class _Coupling(NamedTuple):
    """How UCD runs its two chains: ``start(key) -> (key, xi_1, eta_0)`` from the batch,
    ``step(key, t, xi, eta) -> (key, xi, eta, rejections, capped)`` (one coupled step, per
    chain), ``same(xi, eta)`` (C,) and ``visible(state)`` (C, d)."""

    start: Callable
    step: Callable
    same: Callable
    visible: Callable


def _rbm_coupling(method: UCD, params, batch) -> _Coupling:
    """The coupled block Gibbs chains of Alg. 3, on the RBM's visible and hidden units."""
    chains, m = batch.shape
    n = params.weights.shape[1]

    def start(key):
        key, (u_h0, u_v1, u_h1) = _ucd_start_noise(key, chains, m, n)
        h0 = core.bernoulli_from_uniform(core.rbm_hidden_logits(params, batch), u_h0)
        eta = core.RBMState(batch, h0)
        return key, core.rbm_gibbs_step(params, eta, u_v1, u_h1), eta

    def step(key, t, xi, eta):
        rows = xi.visible.shape[0]  # the working set (compaction)
        key, noise = _ucd_step_noise(key, t, rows, m, n, method.max_tries)
        xi, eta, info = core.rbm_coupled_gibbs_step(params, xi, eta, *noise)
        return key, xi, eta, info.rejections, info.capped

    def same(xi, eta):
        return core.same_state(xi.visible, eta.visible) & core.same_state(xi.hidden, eta.hidden)

    return _Coupling(start, step, same, lambda state: state.visible)


def _kernel_coupling(kernel: DiscreteKernel, energy, params, batch) -> _Coupling:
    """Two DMALA chains on ``{0, 1}^d`` coupled per coordinate with a common MH uniform
    (:func:`discrete_kernels.samplers.dlp.coupled_step`); each chain keeps its cached log density
    and gradient, so a coupled step costs two gradient evaluations per pair."""
    chains, dim = batch.shape
    spec, sites, adapt = _kernel_sampler(kernel, dim)  # a DMALA spec (check_ucd_coupling)
    init, one_step, local_fn = _kernel_chain_fns(kernel, dim, lambda z: -energy(params, z[None])[0])
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

    return _Coupling(start, step, same, lambda state: jnp.asarray(state.x[0], batch.dtype))


def _ucd_negative(method: UCD, energy: Any, params, batch, key):
    """UCD's estimate of ``E_model[grad E]`` (and ``E_model[E]``) from coupled chains started
    at ``batch``; statistics of the meeting times and caps.

    After step ``k`` only the pairs still apart are stepped: the loop runs on working sets of
    the sizes :func:`discrete_kernels.ebm.ucd_compaction_capacities` gives, gathering the
    pairs still apart into the next size as soon as they fit (met pairs add nothing more)."""
    chains = batch.shape[0]
    if method.coupling is None or isinstance(method.coupling, BlockGibbs):
        coupling = _rbm_coupling(method, params, batch)
    else:
        coupling = _kernel_coupling(method.coupling, energy, params, batch)

    def weighted_grad(xi_v, eta_v, w_xi, w_eta):
        def total(p):
            return jnp.sum(w_xi * energy(p, xi_v) - w_eta * energy(p, eta_v)) / chains

        return jax.value_and_grad(total)(params)

    key, first, start = coupling.start(key)
    k = method.k
    # t = 0 (only k = 0 uses it) and t = 1
    met0 = jnp.zeros((chains,), bool)
    w_xi, _ = core.ucd_weights(0, k, met0)
    value, grad = weighted_grad(batch, batch, w_xi, jnp.zeros_like(w_xi))
    met = coupling.same(first, start)
    w_xi, w_eta = core.ucd_weights(1, k, met)
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
        w_xi, w_eta = core.ucd_weights(t, k, met_now)
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
            xi, eta = _take_rows(xi, order), _take_rows(eta, order)
            carry = (t, xi, eta, met[order], *rest)

        def keep_going(carry, following=following):
            t, _, _, met, *_ = carry
            apart = jnp.sum(~met)
            return (t < method.max_time) & ((t < k) | (apart > following))

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


def _take_rows(state: Any, rows: jax.Array) -> Any:
    """Rows ``rows`` of every leaf of a batch of chain states (leading chain axis)."""
    return jax.tree.map(lambda leaf: leaf[rows], state)


def _ucd_start_noise(key: jax.Array, chains: int, m: int, n: int) -> tuple:
    """The next key and the uniforms of UCD's start: ``h_0`` (C, n), then the first sweep's
    visible (C, m) and hidden (C, n) uniforms."""
    key, k1, k2, k3 = random.split(key, 4)
    shapes = ((k1, (chains, n)), (k2, (chains, m)), (k3, (chains, n)))
    return key, tuple(random.uniform(k, s) for k, s in shapes)


def _ucd_step_noise(key: jax.Array, t: jax.Array, chains: int, m: int, n: int, tries: int):
    """The next key and the uniforms of coupled step ``t``, in the order of
    :func:`discrete_kernels.ebm.rbm_coupled_gibbs_step`."""
    key, *keys = random.split(key, 6)
    shapes = ((chains,), (chains, m), (tries, chains, 2), (tries, chains, m), (chains, n))
    return key, tuple(random.uniform(k, s) for k, s in zip(keys, shapes))


def _uses_acs_schedule(method: Any, sampler: Any) -> bool:
    """PCD with a kernel whose sampler has a schedule of its own in PCD (ACS: App. B) runs
    it (CD restarts at data every iteration, so it keeps the kernel's own parameters)."""
    return (
        isinstance(method, PCD)
        and isinstance(sampler, DiscreteKernel)
        and sampler.spec.pcd_schedule() is not None
    )


@functools.lru_cache(maxsize=16)
def _make_update(
    energy,
    optimizer,
    method,
    data_shape: tuple,
    batch_size: int,
    num_chains: int,
    chain_sharding: Any = None,
):
    """The jitted run of ``length`` iterations (static), ``(params, opt_state, buffer, key,
    data, length) -> (params, opt_state, buffer, key, info)`` with ``info`` stacked over the
    iterations; cached so that resuming or training again does not recompile. One iteration
    is one body of a ``lax.scan``, so a chunk of iterations costs one dispatch.
    ``chain_sharding``: a sharding of the leading (chain) axis across devices, or None."""
    import optax

    def on_devices(x: jax.Array) -> jax.Array:
        """The batch and the chains split over the devices along their leading axis."""
        if chain_sharding is None:
            return x
        return jax.lax.with_sharding_constraint(x, chain_sharding)

    num_data, dim = data_shape
    sampler = None if isinstance(method, UCD) else _sampler_of(method, energy)
    acs_schedule = _uses_acs_schedule(method, sampler)
    if isinstance(method, UCD):
        coupling = method.coupling
        spec = coupling.spec if isinstance(coupling, DiscreteKernel) else None
        check_ucd_coupling(method, isinstance(energy, RBM), spec, "nx.DMALA")

    def update(params: Any, opt_state: Any, buffer: Any, key: jax.Array, data: Any) -> tuple:
        key, key_step = random.split(key)
        key_batch, key_neg, key_reinit, key_pick = random.split(key_step, 4)
        batch = on_devices(data[random.randint(key_batch, (batch_size,), 0, num_data)])
        pos_value, pos_grad = _mean_energy_grad(energy, params, batch)
        info: dict = {}
        if isinstance(method, UCD):
            neg_value, neg_grad, info = _ucd_negative(method, energy, params, batch, key_neg)
            accept = jnp.asarray(jnp.nan)
        else:
            if isinstance(method, CD):
                start, steps = batch, method.k
            else:
                restart = random.uniform(key_reinit, (num_chains,)) < method.reinit_prob
                fresh = data[random.randint(key_pick, (num_chains,), 0, num_data)]
                chains = buffer.buffer if acs_schedule else buffer
                start, steps = jnp.where(restart[:, None], fresh, chains), method.steps
                start = on_devices(start)
            if acs_schedule:
                state = buffer._replace(buffer=start)
                samples, accept, buffer = _acs_pcd_advance(
                    sampler, energy, params, state, key_neg, steps, dim
                )
            else:
                samples, accept = _advance(sampler, energy, params, start, key_neg, steps, dim)
                if isinstance(method, PCD):
                    buffer = samples
            samples = on_devices(samples)
            neg_value, neg_grad = _mean_energy_grad(energy, params, samples)
        grad = jax.tree.map(jnp.subtract, pos_grad, neg_grad)
        updates, opt_state = optimizer.update(grad, opt_state, params)
        params = optax.apply_updates(params, updates)
        info = {**info, "energy_gap": pos_value - neg_value, "accept_prob": accept}
        return params, opt_state, buffer, key, info

    def run(params: Any, opt_state: Any, buffer: Any, key: jax.Array, data: Any, length: int):
        def body(carry, _):
            *state, info = update(*carry, data)
            return tuple(state), info

        carry, info = jax.lax.scan(body, (params, opt_state, buffer, key), None, length=length)
        return (*carry, info)

    return jax.jit(run, static_argnums=5)


# iterations per jitted call of the trainer (fewer where an evaluation falls inside a chunk)
CHUNK = 50


def _chunk_length(step: int, remaining: int, eval_every: int | None) -> int:
    """Iterations of the next call from absolute iteration ``step``: a full ``chunk`` when one
    fits before the end and the next evaluation, else 1 (two compiled lengths at most, and the
    same chunking of the absolute iterations whether or not the run was resumed)."""
    chunk = CHUNK if eval_every is None else math.gcd(CHUNK, eval_every)
    if step % chunk == 0 and remaining >= chunk:
        return chunk
    return 1


def _check_inputs(energy: Any, params: Any, data: jax.Array, method: Any) -> None:
    """The trainer's start checks (:func:`discrete_kernels.ebm.check_training_inputs`); the
    energy's output shapes come from ``jax.eval_shape`` (nothing computed)."""
    shapes = {}
    if (
        data.shape[0] >= 1
        and data.ndim == 2
        and data.shape[1] >= 1
        and not (isinstance(energy, RBM) and energy.num_visible != data.shape[1])
    ):
        for n in (2, 3):
            rows = jnp.zeros((n, data.shape[1]), data.dtype)
            try:
                shapes[n] = jax.eval_shape(energy, params, rows).shape
            except Exception as error:
                raise ValueError(
                    f"train: evaluating the energy on a batch of {n} data rows of shape "
                    f"{rows.shape} failed ({type(error).__name__}: "
                    f"{str(error).splitlines()[0]}); check that params match the data's "
                    f"{data.shape[1]} columns."
                ) from error
    sampler = getattr(method, "sampler", None)
    bound = getattr(sampler, "_model", None) is not None or (
        getattr(sampler, "_potential_fn", None) is not None
    )
    check_training_inputs(
        tuple(data.shape),
        shapes,
        num_visible=energy.num_visible if isinstance(energy, RBM) else None,
        sampler_is_bound=bound,
    )


def train(
    energy: Callable,
    params: Any,
    data: Any,
    *,
    optimizer: Any,
    method: Any,
    num_steps: int,
    batch_size: int = 100,
    rng_key: jax.Array | None = None,
    evaluate: Callable | None = None,
    eval_every: int = 100,
    progress_bar: bool = True,
    resume: EBMResult | None = None,
) -> EBMResult:
    """Train ``energy`` on binary ``data`` (N, d) by ``method`` for ``num_steps`` iterations.

    Parameters
    ----------
    energy : callable ``(params, x (N, d)) -> (N,)``
        Or a ready-made :class:`RBM`, :class:`IsingEnergy`, :class:`MLPEnergy`.
    params : pytree
        Initial parameters (ignored with ``resume``).
    data : array (N, d) of 0/1
    optimizer : optax.GradientTransformation
    method : CD, PCD or UCD
    num_steps : int
        Iterations to run (more iterations after ``resume``).
    batch_size : int
        Data points per iteration (drawn with replacement); CD's and UCD's chains.
    rng_key : jax key
    evaluate : callable ``params -> float``, optional
        Objective for the history and the progress bar every ``eval_every`` iterations (for
        an RBM, ``lambda p: RBM.log_likelihood(p, data)``).
    resume : EBMResult, optional
        Continue a previous run: the result of ``train(n1) -> train(n2, resume=...)`` equals
        that of one run of ``n1 + n2`` iterations bit for bit on the CPU (on a GPU, XLA
        rounds a scanned chunk and single iterations differently).
    """
    from tqdm.auto import tqdm

    check_method(method)
    num_steps = check_int("train", "num_steps", num_steps, minimum=0)
    batch_size = check_int("train", "batch_size", batch_size, minimum=1)
    data = jnp.asarray(data, jnp.result_type(float))
    if data.ndim != 2 or not bool(jnp.all((data == 0) | (data == 1))):
        raise ValueError("train: data must be a (N, d) array of 0/1 values.")
    if resume is None:
        _check_inputs(energy, params, data, method)
    num_chains = batch_size
    if isinstance(method, PCD) and method.num_chains is not None:
        num_chains = method.num_chains
    if resume is not None:
        params, opt_state, buffer = resume.params, resume.opt_state, resume.method_state
        key, done, history = resume.rng_key, resume.step, dict(resume.history)
    else:
        if rng_key is None:
            raise ValueError("train: give rng_key (or resume=).")
        key, key_buffer = random.split(rng_key)
        opt_state = optimizer.init(params)
        buffer = None
        if isinstance(method, PCD):
            buffer = data[random.randint(key_buffer, (num_chains,), 0, data.shape[0])]
            if _uses_acs_schedule(method, _sampler_of(method, energy)):
                buffer = method.sampler.spec.pcd_schedule().init(buffer)
        done, history = 0, {}
    chain_sharding = _sharding.chain_sharding(
        {"batch_size": batch_size, "chains": num_chains}, "train"
    )
    if chain_sharding is not None:
        buffer = _sharding.shard_leading_axis(buffer, chain_sharding)
    options = (energy, optimizer, method, data.shape, batch_size, num_chains, chain_sharding)
    try:
        update = _make_update(*options)
    except TypeError:  # an unhashable energy or optimiser: build it afresh
        update = _make_update.__wrapped__(*options)
    records: dict[str, list] = {}
    bar = tqdm(total=num_steps, disable=not progress_bar, desc="EBM")
    objective = math.nan
    i = 0
    while i < num_steps:
        length = _chunk_length(done + i, num_steps - i, eval_every if evaluate else None)
        params, opt_state, buffer, key, info = update(params, opt_state, buffer, key, data, length)
        if resume is None and i == 0:  # read once: NaN parameters are refused, not returned
            finite = all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(params))
            check_first_update(finite, length)
        i += length
        step = done + i
        value = np.full(length, np.nan)
        if evaluate is not None and (step % eval_every == 0 or i == num_steps):
            value[-1] = objective = float(evaluate(params))
        # device values stay on the device until the end (no host sync per chunk)
        for name, x in {**info, "objective": value}.items():
            records.setdefault(name, []).append(x)
        if progress_bar:
            bar.update(length)
            gap = float(info["energy_gap"][-1])
            bar.set_postfix(objective=f"{objective:.4g}", gap=f"{gap:.3g}")
    bar.close()
    for name, values in records.items():
        previous = history.get(name, np.zeros(0))
        fetched = [np.asarray(v, dtype=np.float64) for v in jax.device_get(values)]
        history[name] = np.concatenate([previous, *fetched])
    return EBMResult(params, opt_state, history, buffer, key, done + num_steps)
