"""An RBM on binarised scikit-learn digits trained by PCD with block Gibbs, DMALA and ACS
negative phases, compared by held-out log-likelihood at equal wall time.

The 1,797 8x8 digits of ``sklearn.datasets.load_digits`` are binarised (pixel > 8 of 16) and
split into 1,500 training and 297 held-out images. An RBM with 64 visible and ``--hidden``
hidden units is trained with Adam by PCD (``--chains`` persistent chains, ``--sampler-steps``
sampler steps per iteration) for ``--seconds`` of training time per run (compilation and
evaluation excluded), with three samplers:

- ``BlockGibbs()``: the classic RBM sampler (``v -> h -> v``);
- ``nx.DMALA(step_size=0.2)``: the step size of the ACS paper's RBM experiments;
- ``nx.ACS()``: with the ACS paper's PCD schedule (App. B, Alg. 6), tuned by the trainer.

With at most 20 hidden units the exact held-out log-likelihood is computed by enumerating
the hidden layer (:meth:`RBM.log_likelihood`); at the end, annealed importance sampling
(``ebm.ais_log_partition``, DMALA transitions) estimates the same quantity, as one would for
a larger RBM, and is printed next to the exact value. The script prints a table and writes
``examples/figures/ebm_digits.png``.

Run ``python examples/ebm_digits.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import matplotlib
import numpy as np
import optax
from sklearn.datasets import load_digits

import numpyro_ext as nx
from numpyro_ext import ebm

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def digits() -> tuple[np.ndarray, np.ndarray]:
    """Binarised digits, (1500, 64) for training and (297, 64) held out."""
    images = (load_digits().data > 8).astype(np.float32)
    order = np.random.default_rng(0).permutation(len(images))
    return images[order[:1500]], images[order[1500:]]


def run(sampler, train, test, args, seed):
    """PCD for ``args.seconds`` of training time: (seconds, held-out log-lik.) at each
    evaluation, the final parameters and the mean acceptance."""
    rbm = ebm.RBM(train.shape[1], args.hidden)
    optimizer = optax.adam(args.lr)
    method = ebm.PCD(sampler=sampler, steps=args.sampler_steps, num_chains=args.chains)

    def fit(num_steps, params, resume=None):
        return ebm.train(
            rbm,
            params,
            train,
            optimizer=optimizer,
            method=method,
            num_steps=num_steps,
            batch_size=args.batch,
            rng_key=jax.random.key(seed),
            resume=resume,
            progress_bar=False,
        )

    params = rbm.init(jax.random.key(100 + seed))
    jax.block_until_ready(fit(1, params).params)  # compile outside the timed chunks
    seconds, held_out = [0.0], [float(rbm.log_likelihood(params, test))]
    result, elapsed = None, 0.0
    while elapsed < args.seconds:
        start = time.perf_counter()
        result = fit(args.eval_every, params, resume=result)
        jax.block_until_ready(result.params)
        elapsed += time.perf_counter() - start
        seconds.append(elapsed)
        held_out.append(float(rbm.log_likelihood(result.params, test)))
    assert result is not None
    accept = float(np.mean(result.history["accept_prob"]))  # NaN for block Gibbs
    return np.array(seconds), np.array(held_out), result, accept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=30.0, help="training time per run")
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--sampler-steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a short run for the tests")
    args = parser.parse_args()
    if args.quick:
        args.hidden, args.seconds, args.repeats, args.eval_every = 6, 0.5, 1, 20
    train, test = digits()
    samplers = {
        "block Gibbs": ebm.BlockGibbs(),
        "DMALA": nx.DMALA(step_size=0.2),
        "ACS": nx.ACS(),
    }
    results = {}
    for name, sampler in samplers.items():
        results[name] = [run(sampler, train, test, args, seed) for seed in range(args.repeats)]
        finals = [r[1][-1] for r in results[name]]
        print(f"{name}: final held-out log-lik. {np.round(finals, 3)}", flush=True)

    # equal wall time: every run's held-out log-likelihood at the shortest run's end
    budget = min(r[0][-1] for runs in results.values() for r in runs)
    rbm = ebm.RBM(train.shape[1], args.hidden)
    logits = np.log(np.clip(train.mean(0), 0.01, 0.99) / (1 - np.clip(train.mean(0), 0.01, 0.99)))
    num_temperatures = 100 if args.quick else 2000
    print(
        f"\nRBM 64 x {args.hidden} on binarised digits (1,500 train, 297 held out), PCD with "
        f"{args.chains} chains, {args.sampler_steps} sampler steps per iteration, "
        f"{args.repeats} runs of {args.seconds:g} s each (median shown).\n"
    )
    print(
        f"| sampler | iterations | held-out log-lik. at {budget:.1f} s | final (exact) | "
        f"final (AIS +- se) | acceptance |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, runs in results.items():
        at_budget = np.median([np.interp(budget, r[0], r[1]) for r in runs])
        last = runs[0][2]
        params = last.params
        log_z, se = ebm.ais_log_partition(
            rbm,
            params,
            jax.random.key(7),
            sampler=nx.DMALA(step_size=0.2),
            base_logits=logits,
            num_chains=100,
            num_temperatures=num_temperatures,
        )
        ais = float(np.mean(-rbm(params, test)) - log_z)
        exact = float(rbm.log_likelihood(params, test))
        iterations = int(np.median([r[2].step for r in runs]))
        accept = np.mean([r[3] for r in runs])
        print(
            f"| {name} | {iterations} | {at_budget:.3f} | {exact:.3f} | {ais:.3f} +- "
            f"{se:.3f} | {accept:.3f} |"
        )
    print("(final exact and AIS: the first run of each sampler)")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colours = {"block Gibbs": "tab:blue", "DMALA": "tab:green", "ACS": "tab:red"}
    for name, runs in results.items():
        for k, (secs, held, _, _) in enumerate(runs):
            axes[0].plot(secs, held, color=colours[name], label=name if k == 0 else None)
    axes[0].set(
        xlabel="training seconds (compilation and evaluation excluded)",
        ylabel="held-out log-likelihood (exact)",
        title=f"RBM 64 x {args.hidden} on digits, PCD",
    )
    axes[0].legend()
    final = runs[0][2] if (runs := results.get("ACS")) else None
    if final is not None:
        buffer = np.asarray(final.method_state.buffer)[:40]
        grid = buffer.reshape(4, 10, 8, 8).transpose(0, 2, 1, 3).reshape(32, 80)
        axes[1].imshow(grid, cmap="gray_r")
        axes[1].set(title="ACS-PCD persistent chains at the end", xticks=[], yticks=[])
    fig.tight_layout()
    out = Path(__file__).parent / "figures" / "ebm_digits.png"
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
