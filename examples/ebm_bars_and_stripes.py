"""Training an RBM on 4x4 bars-and-stripes with CD-1, PCD and UCD (Qiu, Zhang and Wang,
ICLR 2020, Sec. 6.1 and Fig. 2).

An RBM with 16 visible and 16 hidden units, plain SGD (``--lr``, default 0.01, the paper's
stated rate; the authors' published script uses 0.1), 1000 chains per
iteration (UCD: 1000 coupled pairs started at data points). The exact average
log-likelihood of the 30 patterns is computed every ``--eval-every`` iterations by
enumerating the hidden layer. The script prints a table and writes
``examples/figures/ebm_bars_and_stripes.png``: log-likelihood over iterations (median and the
band between the lowest and highest of the repeated runs) against iterations and against
training seconds, UCD's mean meeting time and its rejected residual draws per chain. Every
method starts from the same initialisation for a given seed.

Run ``python examples/ebm_bars_and_stripes.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import matplotlib
import numpy as np
import optax

from discrete_kernels.ebm import bars_and_stripes
from numpyro_ext import ebm

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def run(method, data, steps, chains, eval_every, seed, learning_rate):
    """One training run from the seed's initialisation (the same for every method), in
    segments of ``eval_every`` iterations (``resume=``: bit-identical to one call). Returns
    the history with ``objective`` filled at the segment ends and ``seconds``, the training
    time up to each iteration (compilation and the exact log-likelihood evaluations
    excluded)."""
    rbm = ebm.RBM(data.shape[1], 16)
    params = rbm.init(jax.random.key(1000 + seed), scale=0.01)
    optimizer = optax.sgd(learning_rate)  # one object: the compiled update is cached on it
    common = dict(optimizer=optimizer, method=method, batch_size=chains, progress_bar=False)
    # compile outside the clock (a throwaway segment of the same length)
    ebm.train(rbm, params, data, num_steps=eval_every, rng_key=jax.random.key(seed), **common)
    result, elapsed = None, 0.0
    seconds, objective = np.zeros(steps), np.full(steps, np.nan)
    for end in range(eval_every, steps + 1, eval_every):
        start = time.perf_counter()
        result = ebm.train(
            rbm,
            params,
            data,
            num_steps=eval_every,
            rng_key=jax.random.key(seed),
            resume=result,
            **common,
        )
        jax.block_until_ready(result.params)
        elapsed += time.perf_counter() - start
        seconds[end - eval_every : end] = elapsed
        objective[end - 1] = float(rbm.log_likelihood(result.params, data))
    history = dict(result.history)
    history["objective"], history["seconds"] = objective, seconds
    return history, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chains", type=int, default=1000)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--lr", type=float, default=0.01, help="SGD learning rate")
    parser.add_argument("--out", default=str(Path(__file__).parent / "figures"))
    parser.add_argument("--quick", action="store_true", help="a short run for the tests")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats, args.chains, args.eval_every = 40, 1, 100, 20
    data = bars_and_stripes()
    methods = {"CD-1": ebm.CD(1), "PCD": ebm.PCD(), "UCD": ebm.UCD(k=1, max_time=10_000)}
    curves, extras, seconds = {}, {}, {}
    for name, method in methods.items():
        runs, times = [], []
        for seed in range(args.repeats):
            history, elapsed = run(
                method, data, args.steps, args.chains, args.eval_every, seed, args.lr
            )
            print(
                f"{name} run {seed}: {elapsed:.0f} s, final log-lik. "
                f"{history['objective'][-1]:.3f}",
                flush=True,
            )
            runs.append(history)
            times.append(elapsed)
        curves[name] = np.array([h["objective"] for h in runs])
        extras[name] = runs
        seconds[name] = float(np.median(times))
    steps = np.arange(1, args.steps + 1)
    shown = ~np.isnan(curves["CD-1"][0])
    best = float(np.max(-np.log(len(data)) * np.ones(1)))
    print(f"bars-and-stripes 4x4: {len(data)} patterns; the best possible average log-likelihood")
    print(
        f"is log(1/{len(data)}) = {best:.3f}. {args.repeats} runs of {args.steps} iterations, "
        f"SGD {args.lr}.\n"
    )
    print("| method | final log-lik. (median) | min | max | s/run | s/iter vs CD-1 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in methods:
        final = curves[name][:, -1]
        ratio = seconds[name] / seconds["CD-1"]
        print(
            f"| {name} | {np.median(final):.3f} | {final.min():.3f} | {final.max():.3f} | "
            f"{seconds[name]:.1f} | {ratio:.2f} |"
        )
    ucd = extras["UCD"]
    meeting = np.mean([h["meeting_time"] for h in ucd])
    rejections = np.mean([h["rejections"] for h in ucd])
    time_capped = int(np.sum([h["time_capped"] for h in ucd]))
    tries_capped = int(np.sum([h["tries_capped"] for h in ucd]))
    print(
        f"\nUCD: mean meeting time {meeting:.2f} steps, {rejections:.3f} rejected residual "
        f"draws per chain and iteration; caps hit: meeting time {time_capped} chains, "
        f"rejection tries {tries_capped} coupling steps (over all iterations and runs)."
    )

    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    colours = {"CD-1": "tab:blue", "PCD": "tab:orange", "UCD": "tab:green"}
    for name, curve in curves.items():
        values = curve[:, shown]
        axes[0].plot(steps[shown], np.median(values, 0), color=colours[name], label=name)
        axes[0].fill_between(
            steps[shown], values.min(0), values.max(0), color=colours[name], alpha=0.2
        )
        clock = np.median([h["seconds"] for h in extras[name]], axis=0)[shown]
        axes[1].plot(clock, np.median(values, 0), color=colours[name], label=name)
        axes[1].fill_between(clock, values.min(0), values.max(0), color=colours[name], alpha=0.2)
    for ax, xlabel in ((axes[0], "iteration"), (axes[1], "training seconds (median over runs)")):
        ax.axhline(best, color="k", lw=0.8, ls="--", label="log(1/30)")
        ax.set(xlabel=xlabel, ylabel="exact average log-likelihood", title="learning")
        ax.legend()
    window = max(1, args.steps // 100)
    for ax, key, title in (
        (axes[2], "meeting_time", "UCD mean meeting time"),
        (axes[3], "rejections", "UCD rejected draws per chain"),
    ):
        series = np.mean([h[key] for h in ucd], axis=0)
        smooth = np.convolve(series, np.ones(window) / window, mode="valid")
        ax.plot(np.arange(len(smooth)) + window, smooth, color="tab:green")
        ax.set(xlabel="iteration", title=title)
    fig.tight_layout()
    out = Path(args.out) / "ebm_bars_and_stripes.png"
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
