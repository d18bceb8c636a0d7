"""Learning the couplings of a lattice Ising model by PCD with Gibbs, GWG, DMALA and PlateGibbs
negative phases (Zhang et al., ICML 2022, Sec. 7.3.1 and Fig. 5, after Grathwohl et al., 2021).

A ``side x side`` lattice Ising model with spins ``s = 2x - 1``, coupling ``--coupling`` on
every lattice edge and no field generates the training data (``--num-data`` samples, each from
its own chain after ``--data-sweeps`` checkerboard Gibbs sweeps: the lattice is bipartite, so
the spins of one colour are independent given the other's). An :class:`IsingEnergy` with
learnable couplings on the lattice edges and fields is then trained by PCD (Adam, buffer and
batch of 256, the paper's learning rate 0.001) with these negative-phase samplers:

- ``SiteGibbs()``: random-scan single-site Gibbs, one coordinate per chain and step, with the
  same number of steps per iteration as the others (``--sampler-steps``) and with three times
  as many (about DMALA's cost per iteration);
- ``nx.GWG()``: Gibbs-with-gradients, one coordinate per chain and step, chosen by gradient;
- ``nx.DMALA(step_size=0.15)``: the paper's step size; many coordinates per step;
- ``nx.PlateGibbs()``: one checkerboard sweep per iteration (its two colours found from the
  energy's single-site tables), every coordinate drawn from its exact conditional.

Reported: log RMSE between the learned and the true couplings over the lattice edges, against
iterations and against seconds (each run is timed in chunks, compilation excluded). The
script prints a table and writes ``examples/figures/ebm_ising.png``.

Run ``python examples/ebm_ising.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import optax

import numpyro_ext as nx
from discrete_kernels.ebm import lattice_mask
from numpyro_ext import ebm

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def ising_data(side: int, coupling: float, num_data: int, sweeps: int, seed: int) -> np.ndarray:
    """``num_data`` samples (num_data, side^2) of 0/1 from the lattice Ising model, each the
    end of its own checkerboard Gibbs chain: ``P(s_i = 1 | rest) = sigmoid(2 sum_j J_ij s_j)``."""
    mask = jnp.asarray(lattice_mask(side), jnp.float32)
    couplings = coupling * mask
    rows, cols = np.divmod(np.arange(side * side), side)
    colour = jnp.asarray((rows + cols) % 2)

    def sweep(s, key):
        for c, k in zip((0, 1), jax.random.split(key)):
            p_up = jax.nn.sigmoid(2.0 * s @ couplings)
            up = jax.random.uniform(k, s.shape) < p_up
            s = jnp.where(colour == c, jnp.where(up, 1.0, -1.0), s)
        return s, None

    key, start = jax.random.split(jax.random.key(seed))
    s = jnp.where(jax.random.uniform(start, (num_data, side * side)) < 0.5, 1.0, -1.0)
    s, _ = jax.jit(lambda s, keys: jax.lax.scan(sweep, s, keys))(s, jax.random.split(key, sweeps))
    return np.asarray((s + 1) / 2, np.float32)


def log_rmse(energy: ebm.IsingEnergy, params: dict, true_couplings: np.ndarray) -> float:
    """log RMSE of the symmetrised learned couplings on the lattice edges."""
    mask = np.asarray(energy.mask())
    learned = np.asarray(params["couplings"]) * mask
    learned = (learned + learned.T) / 2
    edges = np.triu(mask, 1) > 0
    return float(np.log(np.sqrt(np.mean((learned[edges] - true_couplings[edges]) ** 2))))


def run(sampler, steps, data, side, true_couplings, args, seed):
    """Train by PCD in chunks of ``args.eval_every`` iterations; returns (iterations,
    seconds, log RMSE, acceptance) at the end of each chunk."""
    energy = ebm.IsingEnergy(side)
    optimizer = optax.adam(args.lr)
    method = ebm.PCD(sampler=sampler, steps=steps)

    def train(num_steps, params, resume=None):
        return ebm.train(
            energy,
            params,
            data,
            optimizer=optimizer,
            method=method,
            num_steps=num_steps,
            batch_size=args.batch,
            rng_key=jax.random.key(seed),
            resume=resume,
            progress_bar=False,
        )

    params = energy.init(jax.random.key(100 + seed))
    jax.block_until_ready(train(1, params).params)  # compile outside the timed chunks
    iterations, seconds, errors = [0], [0.0], [log_rmse(energy, params, true_couplings)]
    result, elapsed = None, 0.0
    for _ in range(args.steps // args.eval_every):
        start = time.perf_counter()
        result = train(args.eval_every, params, resume=result)
        jax.block_until_ready(result.params)
        elapsed += time.perf_counter() - start
        iterations.append(result.step)
        seconds.append(elapsed)
        errors.append(log_rmse(energy, result.params, true_couplings))
    accept_prob = result.history["accept_prob"] if result else np.full(1, np.nan)
    accept = float(np.mean(accept_prob))  # NaN for Gibbs (no MH step)
    return np.array(iterations), np.array(seconds), np.array(errors), accept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", type=int, default=10)
    parser.add_argument("--coupling", type=float, default=0.25)
    parser.add_argument("--num-data", type=int, default=2000)
    parser.add_argument("--data-sweeps", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=3000, help="training iterations")
    parser.add_argument("--sampler-steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a short run for the tests")
    args = parser.parse_args()
    if args.quick:
        args.side, args.num_data, args.data_sweeps = 4, 200, 100
        args.steps, args.eval_every, args.repeats, args.batch = 40, 20, 1, 32
        args.lr = 0.01

    side = args.side
    true_couplings = args.coupling * lattice_mask(side)
    start = time.perf_counter()
    data = ising_data(side, args.coupling, args.num_data, args.data_sweeps, seed=0)
    print(
        f"data: {args.num_data} samples of a {side}x{side} lattice Ising model (coupling "
        f"{args.coupling}), {args.data_sweeps} checkerboard sweeps each "
        f"({time.perf_counter() - start:.1f} s)",
        flush=True,
    )
    k = args.sampler_steps
    samplers = {
        f"Gibbs x{k}": (ebm.SiteGibbs(), k),
        f"Gibbs x{3 * k}": (ebm.SiteGibbs(), 3 * k),
        f"GWG x{k}": (nx.GWG(), k),
        f"DMALA x{k}": (nx.DMALA(step_size=0.15), k),
        "PlateGibbs x1": (nx.PlateGibbs(), 1),
    }
    results = {}
    for name, (sampler, steps) in samplers.items():
        runs = [
            run(sampler, steps, data, side, true_couplings, args, seed)
            for seed in range(args.repeats)
        ]
        results[name] = runs
        final = [r[2][-1] for r in runs]
        per_iter = np.mean([r[1][-1] / r[0][-1] for r in runs]) * 1e3
        print(
            f"{name}: final log RMSE {np.median(final):.3f} (runs {np.round(final, 3)}), "
            f"{per_iter:.2f} ms per iteration, acceptance {np.mean([r[3] for r in runs]):.3f}",
            flush=True,
        )

    # equal wall time: each sampler's log RMSE at the time the fastest-finishing one ended
    budget = min(np.median([r[1][-1] for r in runs]) for runs in results.values())
    print(
        f"\n{side}x{side} lattice, sampler x steps per iteration, {args.steps} iterations, "
        f"{args.repeats} runs per sampler (median shown).\n"
    )
    print(f"| sampler | ms / iteration | final log RMSE | log RMSE at {budget:.1f} s |")
    print("| --- | --- | --- | --- |")
    for name, runs in results.items():
        per_iter = np.median([r[1][-1] / r[0][-1] for r in runs]) * 1e3
        final = np.median([r[2][-1] for r in runs])
        at_budget = np.median([np.interp(budget, r[1], r[2]) for r in runs])
        print(f"| {name} | {per_iter:.2f} | {final:.3f} | {at_budget:.3f} |")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colours = dict(zip(results, ["tab:blue", "tab:purple", "tab:orange", "tab:green", "tab:red"]))
    for name, runs in results.items():
        for k, (iters, secs, errs, _) in enumerate(runs):
            label = name if k == 0 else None
            axes[0].plot(iters, errs, color=colours[name], label=label, alpha=0.8)
            axes[1].plot(secs, errs, color=colours[name], label=label, alpha=0.8)
    axes[0].set(xlabel="iteration", ylabel="log RMSE of the couplings", title="per iteration")
    axes[1].set(xlabel="seconds (compilation excluded)", title="per second")
    for ax in axes:
        ax.legend()
    fig.suptitle(f"PCD on a {side}x{side} Ising lattice (sampler x steps per iteration)")
    fig.tight_layout()
    out = Path(__file__).parent / "figures" / "ebm_ising.png"
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
