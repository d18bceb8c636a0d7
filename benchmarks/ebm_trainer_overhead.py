"""Overhead of numpyro_ext.ebm.train over the same update written as a plain jitted loop.

The plain version is one ``jax.jit`` function doing exactly what one trainer iteration does
(batch draw, positive phase, CD-1 block Gibbs negative phase, optax SGD update), called in a
Python loop with one ``block_until_ready`` at the end. The trainer runs its iterations in
scanned chunks (one dispatch per 50 iterations) and adds its history and progress
bookkeeping. Both run the same number of
iterations after a compile-only warm-up; the ratio of their median wall times over repeats
is printed.

Run ``python benchmarks/ebm_trainer_overhead.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from discrete_kernels import ebm as core
from discrete_kernels.ebm import bars_and_stripes
from numpyro_ext import ebm


def plain_update(rbm, optimizer, data, batch_size):
    """CD-1 with block Gibbs, written directly."""

    @jax.jit
    def update(params, opt_state, key):
        key_batch, key_h, key_v = jax.random.split(key, 3)
        batch = data[jax.random.randint(key_batch, (batch_size,), 0, data.shape[0])]
        u_h = jax.random.uniform(key_h, (batch_size, params.weights.shape[1]))
        u_v = jax.random.uniform(key_v, batch.shape)
        samples = jax.lax.stop_gradient(core.rbm_visible_sweep(params, batch, u_h, u_v))

        def loss(p):
            return jnp.mean(rbm(p, batch)) - jnp.mean(rbm(p, samples))

        grad = jax.grad(loss)(params)
        updates, opt_state = optimizer.update(grad, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return update


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chains", type=int, default=1000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = 100, 2
    data = jnp.asarray(bars_and_stripes())
    rbm = ebm.RBM(16, 16)
    params = rbm.init(jax.random.key(0))
    optimizer = optax.sgd(0.01)
    update = plain_update(rbm, optimizer, data, args.chains)
    keys = jax.random.split(jax.random.key(1), args.steps)
    jax.block_until_ready(update(params, optimizer.init(params), keys[0]))  # compile

    def plain():
        p, s = params, optimizer.init(params)
        for key in keys:
            p, s = update(p, s, key)
        jax.block_until_ready(p)

    def trainer():
        result = ebm.train(
            rbm,
            params,
            data,
            optimizer=optimizer,
            method=ebm.CD(1),
            num_steps=args.steps,
            batch_size=args.chains,
            rng_key=jax.random.key(1),
            progress_bar=False,
        )
        jax.block_until_ready(result.params)

    ebm.train(  # compile the trainer's update once
        rbm,
        params,
        data,
        optimizer=optimizer,
        method=ebm.CD(1),
        num_steps=1,
        batch_size=args.chains,
        rng_key=jax.random.key(1),
        progress_bar=False,
    )
    times: dict[str, list[float]] = {"plain": [], "trainer": []}
    for _ in range(args.repeats):
        for name, fn in (("plain", plain), ("trainer", trainer)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    plain_s, trainer_s = np.median(times["plain"]), np.median(times["trainer"])
    print(
        f"CD-1, RBM 16x16, {args.chains} chains, {args.steps} iterations, median of "
        f"{args.repeats}: plain jitted loop {1e3 * plain_s / args.steps:.3f} ms/iter, "
        f"trainer {1e3 * trainer_s / args.steps:.3f} ms/iter, ratio {trainer_s / plain_s:.2f}"
    )


if __name__ == "__main__":
    main()
