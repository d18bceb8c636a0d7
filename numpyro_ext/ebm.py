"""Training energy-based models on binary data with JAX: CD-k, PCD with any kernel of this
library, and unbiased contrastive divergence (UCD).

The model is ``p(x) ∝ exp(-E(x; params))`` on ``x`` in ``{0, 1}^d``; ``energy(params, x)``
maps a batch (N, d) to (N,) energies (for an RBM, :class:`RBM`, the free energy of the
visible units). Each iteration estimates the gradient of the average negative log-likelihood,
``E_data[grad E] - E_model[grad E]``, and applies an optax optimiser; the method decides how
the model term is estimated:

- :class:`CD` (``k`` steps from the data batch), :class:`PCD` (a persistent buffer, ``steps``
  per iteration, optional re-initialisation at data): the sampler is any discrete kernel of
  :mod:`numpyro_ext` built without a model (``nx.DMALA(step_size=0.2)``, ``nx.GWG()``, ...;
  ``nx.PlateGibbs()`` sweeps the coordinates colour by colour, a checkerboard for a lattice,
  :mod:`discrete_kernels.ebm.plate`) or :class:`BlockGibbs` for an RBM (the default there), or
  :class:`SiteGibbs` (random-scan single-site Gibbs, any energy);
- :class:`UCD` (Qiu, Zhang and Wang, ICLR 2020): two coupled chains per data point, run until
  they meet, which makes the model term unbiased: block Gibbs chains of an RBM
  (:func:`discrete_kernels.ebm.rbm_coupled_gibbs_step`) or, for any energy, DMALA chains
  coupled per coordinate (``UCD(coupling=nx.DMALA(step_size=...))``,
  :func:`discrete_kernels.samplers.dlp.coupled_step`); ``m > k`` averages the chain ahead's
  steps ``k`` to ``m`` (Jacob, O'Leary and Atchade's time-averaged estimator); meeting times
  and cap hits are in the history.

All the mathematics is in :mod:`discrete_kernels.ebm` and the samplers' specs. This module
has the ready-made energies, AIS and the training loop (iterations in chunks of one
jit-compiled ``lax.scan``); the negative phase's chains are in ``numpyro_ext._ebm_chains`` and
UCD's coupled chains in ``numpyro_ext._ucd``.
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
from discrete_kernels.samplers.acs import ACSPCDState
from discrete_kernels.samplers.esh_dynamics import log_mean_exp_with_error
from discrete_kernels.validation import check_int

from . import _sharding
from ._ebm_chains import (
    acs_pcd_advance,
    advance,
    kernel_chain_fns,
    kernel_sampler,
    mean_energy_grad,
    plate_colouring,
)
from ._ucd import ucd_negative
from .driver import DiscreteKernel

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
    _, _, adapt = kernel_sampler(sampler, dim)

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

            init, step, _ = kernel_chain_fns(sampler, dim, log_density)
            key, key_step = random.split(key)
            chain, _, _ = step(init(x), adapt, key_step, j)
            return chain.x[0], log_w, key

        _, log_w, _ = jax.lax.fori_loop(1, num_temperatures + 1, body, (x, jnp.zeros(()), key))
        return log_w

    log_w = jax.jit(jax.vmap(one_chain))(random.split(rng_key, num_chains))
    estimate, se = log_mean_exp_with_error(log_w)
    return float(estimate), float(se)


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
    colours: tuple | None = None,
):
    """The jitted run of ``length`` iterations (static), ``(params, opt_state, buffer, key,
    data, length) -> (params, opt_state, buffer, key, info)`` with ``info`` stacked over the
    iterations; cached so that resuming or training again does not recompile. One iteration
    is one body of a ``lax.scan``, so a chunk of iterations costs one dispatch.
    ``chain_sharding``: a sharding of the leading (chain) axis across devices, or None;
    ``colours``: ``PlateGibbs``'s colouring of the coordinates (``plate_colouring``)."""
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
        pos_value, pos_grad = mean_energy_grad(energy, params, batch)
        info: dict = {}
        if isinstance(method, UCD):
            neg_value, neg_grad, info = ucd_negative(method, energy, params, batch, key_neg)
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
                samples, accept, buffer = acs_pcd_advance(
                    sampler, energy, params, state, key_neg, steps, dim
                )
            else:
                samples, accept = advance(
                    sampler, energy, params, start, key_neg, steps, dim, colours
                )
                if isinstance(method, PCD):
                    buffer = samples
            samples = on_devices(samples)
            neg_value, neg_grad = mean_energy_grad(energy, params, samples)
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
    sampler = None if isinstance(method, UCD) else _sampler_of(method, energy)
    # found from the parameters each call (a resumed run's): every key fixed, the same colours
    colours = plate_colouring(sampler, energy, params, data.shape[1])
    options = (
        energy,
        optimizer,
        method,
        data.shape,
        batch_size,
        num_chains,
        chain_sharding,
        colours,
    )
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
