"""Stochastic-gradient DULA on a binary Bayesian neural network (NumPyro): minibatches of 10,
100 and 500 rows against full-batch DULA and DMALA, as in App. I.5 (Table 4) of Zhang et al.
(2022).

The network of ``examples/binary_bnn.py`` (two layers, tanh, every weight a sign in {-1, +1})
on scikit-learn's ``digits`` images labelled odd or even (``--dataset digits``: 1,437 training
and 360 test rows, 64 pixel features) or on generated rows (``--dataset synthetic``: 12,500 by
default, 10,000 training and 2,500 test rows, 20 features; ``--rows`` for more;
``examples/bnn_data.py``). The minibatch is
the model's own ``numpyro.plate("data", N, subsample_size=b)``: ``nx.DULA`` then evaluates the
log density and its gradient on a new minibatch at every step, the likelihood scaled by
``N / b`` (SG-DULA, Sec. 6 of the paper). Batch sizes at or above the training size are the
full batch and are skipped. Every sampler runs the same number of steps (DULA at a fixed
``alpha``, ``STEP_SIZE`` per data set, DMALA adapting its step size in the warmup); the script
records, against wall time (compilation and warmup included), the test error of the running
posterior-mean prediction and the full training log-likelihood per row, prints a table (with
the signs flipped per step, the first diagnostic to read: a large share of all signs means the
step size is too large for the data's gradients) and writes a figure.

Run ``python examples/sg_binary_bnn.py`` (``--steps``, ``--num-chains``, ``--batch-sizes``),
``--quick`` for the reduced mode the test suite runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_ext as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from binary_bnn import evaluate, likelihood, network_output  # noqa: E402
from bnn_data import Data, error_name, load  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

#: DULA's alpha per data set. digits: the paper's alpha = 0.1 (App. I.5), not retuned. synthetic:
#: 1e-3 on 10,000 training rows, the best of 5e-4, 1e-3, 2e-3 (full batch) and 1e-4 ... 3e-3
#: (b = 100) in 200-step runs on the training log-likelihood and test error. The full-data
#: gradient of one sign there is 30 to 2,600 nats (10,000 rows), so alpha = 0.1 flips about 200
#: of the 336 signs at every step (a flip is proposed with probability
#: sigmoid(gain / 2 - 1 / (2 alpha))) and the chain falls into a cycle of period two; below about
#: 5e-4 nothing moves. The gains grow with the rows, so with more rows alpha shrinks in
#: proportion (:func:`default_step_size`; 2e-4 on 50,000 rows, the best full-batch DULA test
#: error of 5e-5, 1e-4, 2e-4, 4e-4 and 1e-3 there).
STEP_SIZE = {"digits": 0.1, "synthetic": 1e-3}
SYNTHETIC_ROWS = 10_000  # the training rows STEP_SIZE["synthetic"] was chosen for


def default_step_size(data: Data) -> float:
    """DULA's alpha for ``data``: ``STEP_SIZE``, scaled by 10,000 / training rows on
    "synthetic"."""
    if data.name == "synthetic":
        return STEP_SIZE["synthetic"] * SYNTHETIC_ROWS / len(data.y_train)
    return STEP_SIZE[data.name]


def make_model(batch: int | None) -> Callable:
    """The binary BNN with its likelihood in a plate of ``batch`` rows (None: every row)."""

    def model(x, y, hidden=16, task="classification"):
        b1 = numpyro.sample("b1", dist.Bernoulli(0.5).expand([x.shape[1], hidden]))
        b2 = numpyro.sample("b2", dist.Bernoulli(0.5).expand([hidden]))
        with numpyro.plate("data", x.shape[0], subsample_size=batch) as rows:
            out = network_output(b1, b2, x[rows])
            numpyro.sample("y", likelihood(out, task), obs=y[rows])

    return model


def samplers(batch_sizes: list[int], num_rows: int, step_size: float) -> dict[str, Callable]:
    """Kernel constructors by label: DMALA and DULA on the full batch, SG-DULA per batch size
    below ``num_rows``. Every gradient is kept (``exact_sites=[]``, as in the paper; a minibatch
    cannot have exact differences)."""
    out: dict[str, Callable] = {
        "DMALA (full batch)": lambda: nx.DMALA(make_model(None), exact_sites=[]),
        "DULA (full batch)": lambda: nx.DULA(make_model(None), step_size=step_size, exact_sites=[]),
    }
    for b in sorted(set(batch_sizes)):
        if b >= num_rows:
            print(f"batch size {b} >= {num_rows} training rows: the full batch, skipped")
            continue
        out[f"SG-DULA b={b}"] = lambda b=b: nx.DULA(
            make_model(b), step_size=step_size, exact_sites=[]
        )
    return out


def run(make_kernel: Callable, data: Data, args, key: jax.Array) -> dict:
    """Warmup then sampling, timed; the seconds at which each kept draw was made (the run's
    time spread evenly over its draws, every step costing the same)."""
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    kwargs = dict(hidden=args.hidden, task=data.task)
    thinning = max(1, args.steps // 200)
    num_samples = args.steps - args.steps % thinning

    def mcmc_for(num_samples: int, thinning: int = 1) -> MCMC:
        return MCMC(
            make_kernel(),
            num_warmup=args.warmup,
            num_samples=num_samples,
            thinning=thinning,
            num_chains=args.num_chains,
            chain_method="vectorized",
            progress_bar=False,
        )

    warmup = mcmc_for(1)
    start = time.perf_counter()
    warmup.warmup(key, x, y, **kwargs)
    warm_end = time.perf_counter() - start
    mcmc = mcmc_for(num_samples, thinning)
    mcmc.post_warmup_state = warmup.post_warmup_state
    mcmc.run(
        warmup.post_warmup_state.rng_key,
        x,
        y,
        extra_fields=("accept_prob", "hamming_distance"),
        **kwargs,
    )
    draws = mcmc.get_samples(group_by_chain=True)
    jax.block_until_ready(draws)
    total = time.perf_counter() - start
    kept = num_samples // thinning
    times = warm_end + (total - warm_end) * np.arange(1, kept + 1) / kept
    train_ll, error = evaluate(draws, data)
    extra = mcmc.get_extra_fields()
    accept = float(np.mean(extra["accept_prob"]))
    flips = float(np.mean(extra["hamming_distance"]))  # signs changed per kept step
    return dict(
        times=times,
        train_ll=train_ll,
        error=error,
        seconds=total,
        warmup=warm_end,
        accept=accept,
        flips=flips,
    )


def seconds_to_reach(r: dict, error: float) -> float:
    """The first time at which the running posterior mean's test error is at most ``error``
    (inf: never)."""
    reached = np.flatnonzero(r["error"] <= error)
    return float(r["times"][reached[0]]) if reached.size else float("inf")


def table(results: dict, data: Data, args) -> list[str]:
    """Markdown rows: seconds (warmup included), seconds per 1,000 steps after warmup, signs
    changed per step, the training log-likelihood per row (full data, second half of the
    draws), the final test error of the running posterior mean, and the seconds each sampler
    took to reach full-batch DULA's final test error."""
    reference = results.get("DULA (full batch)")
    target = reference["error"][-1] if reference else float("nan")
    rows = [
        f"| sampler | seconds | s per 1,000 steps | signs flipped per step "
        f"| train log-lik per row | {error_name(data)} | s to DULA's final error |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results.items():
        per_k = 1000 * (r["seconds"] - r["warmup"]) / args.steps
        later = r["train_ll"][:, r["train_ll"].shape[1] // 2 :]
        rows.append(
            f"| {name} | {r['seconds']:.1f} | {per_k:.2f} | {r['flips']:.1f} "
            f"| {later.mean():.3f} | {r['error'][-1]:.3f} | {seconds_to_reach(r, target):.1f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced mode (the test suite's)")
    parser.add_argument("--steps", type=int, default=3000, help="steps per chain after warmup")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--num-chains", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=16, help="hidden units")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[10, 100, 500])
    parser.add_argument("--dataset", choices=["digits", "synthetic"], default="digits")
    parser.add_argument("--rows", type=int, default=12_500, help="rows of 'synthetic' (80%% train)")
    parser.add_argument("--seed", type=int, default=1, help="the samplers' random key")
    parser.add_argument(
        "--step-size", type=float, default=None, help=f"DULA's alpha (default {STEP_SIZE})"
    )
    parser.add_argument(
        "--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "figures" / "gallery")
    )
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.num_chains, args.hidden = 60, 20, 2, 4
    data = load(args.dataset, rows=args.rows)
    if args.step_size is None:
        args.step_size = default_step_size(data)
    print(
        f"{args.dataset}: {len(data.y_train)} training / {len(data.y_test)} test rows, "
        f"{data.num_weights(args.hidden)} sign weights, {args.num_chains} chains x "
        f"({args.warmup} + {args.steps}) steps per sampler",
        flush=True,
    )
    results = {}
    for name, make_kernel in samplers(args.batch_sizes, len(data.y_train), args.step_size).items():
        results[name] = run(make_kernel, data, args, jax.random.key(args.seed))
        r = results[name]
        print(
            f"{name}: {r['seconds']:.1f} s, test error {r['error'][-1]:.3f}, MH acceptance "
            f"(DULA: of the moves it makes unadjusted) {r['accept']:.2f}, signs flipped per "
            f"step {r['flips']:.1f}",
            flush=True,
        )
    print("\n" + "\n".join(table(results, data, args)))

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for name, r in results.items():
        line = "--" if "full" in name else "-"
        axes[0].plot(r["times"], r["error"], line, label=name, lw=1.2)
        axes[1].plot(r["times"], r["train_ll"].mean(0), line, label=name, lw=0.8)
    axes[0].set_ylabel(error_name(data) + " (running posterior mean)")
    axes[1].set_ylabel("training log-likelihood per row (chain mean)")
    for ax in axes:
        ax.set_xlabel("seconds (warmup and compilation included)")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"binary BNN on {args.dataset}: {data.num_weights(args.hidden)} sign weights, SG-DULA "
        f"(alpha = {args.step_size:g}) against full-batch DULA and DMALA"
    )
    fig.tight_layout()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sg_binary_bnn.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
