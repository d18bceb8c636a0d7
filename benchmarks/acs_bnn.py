"""ACS with its defaults against DMALA on the binary BNN of the README demo
(``examples/binary_bnn.py``): does ACS's automatic tuning mix from a random start?

Per seed (the key that draws the chains' starts and the noise), each sampler runs ``CHAINS``
vectorised chains for ``--warmup`` + ``--draws`` steps (the demo's 300 warmup steps by
default). Reported per sampler: R-hat and ESS (multi-chain, ``_common.ess``) of the training
log-likelihood per row, its mean over the draws, and ESS per 1,000 steps; then the ratio of
ACS's ESS per step to DMALA's, per seed (median and range), and of their steady-state seconds
per step (one process, the samplers' runs interleaved), whose product is the ESS/s ratio.
Counting steps, not seconds, keeps the ESS comparison free of the machine's load; the time per
step is a separate, rerunnable ratio.

Run ``python benchmarks/acs_bnn.py`` (``--hidden 100`` for the paper width; ``--quick`` for a
smoke run; ``--write-doc`` puts the table in ``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))
from _common import ess, write_section  # noqa: E402
from binary_bnn import evaluate, make_kernel  # noqa: E402
from bnn_data import load  # noqa: E402

CHAINS = 4
SAMPLERS = ("DMALA", "ACS")


def rhat(draws: np.ndarray) -> float:
    """Split R-hat (NumPyro's) of draws grouped by chain (chains, draws)."""
    from numpyro.diagnostics import split_gelman_rubin

    return float(split_gelman_rubin(draws))


def run(name: str, data, hidden: int, warmup: int, draws: int, seed: int) -> dict:
    """One run: the training log-likelihood per row (chains, draws), seconds of the sampling
    call after a first (compiling) call of the same length, and ACS's per-chain cycle."""
    args = (jnp.asarray(data.x_train), jnp.asarray(data.y_train))
    kwargs = dict(hidden=hidden, task=data.task)
    kernel = make_kernel(name)
    mcmc = MCMC(
        kernel,
        num_warmup=warmup,
        num_samples=draws,
        num_chains=CHAINS,
        chain_method="vectorized",
        progress_bar=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.warmup(jax.random.key(seed), *args, **kwargs)
        state = mcmc.post_warmup_state
        mcmc.run(state.rng_key, *args, **kwargs)  # compiles the sampling loop
        samples = mcmc.get_samples(group_by_chain=True)
        jax.block_until_ready(samples)
        mcmc.post_warmup_state = state  # the same draws again, timed without compilation
        start = time.perf_counter()
        mcmc.run(state.rng_key, *args, **kwargs)
        jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
        seconds = time.perf_counter() - start
    train_ll, _ = evaluate(samples, data)
    out = {"train_ll": train_ll, "seconds": seconds, "warnings": [str(w.message) for w in caught]}
    if name == "ACS":
        out["cycle"] = {k: np.asarray(v, float) for k, v in kernel.schedule(state).items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write-doc", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.hidden, args.seeds, args.draws = 8, 1, 50
    data = load("breast_cancer")
    rows, ratios, time_ratios = [], [], []
    for seed in range(args.seeds):
        result = {}
        for name in args.samplers:  # interleaved: both samplers per seed
            r = run(name, data, args.hidden, args.warmup, args.draws, seed)
            ll = r["train_ll"]
            result[name] = dict(
                rhat=rhat(ll),
                ess=ess(ll),
                mean=float(ll.mean()),
                seconds=r["seconds"],
                frozen=any("made no move" in w for w in r["warnings"]),
            )
            cycle = r.get("cycle")
            if cycle is not None:
                result[name]["alpha_max"] = cycle["alpha"][:, 0]
            row = result[name]
            print(
                f"seed {seed} {name}: R-hat {row['rhat']:.3f}, ESS {row['ess']:.0f}, mean "
                f"{row['mean']:.4f}, {row['seconds']:.1f} s"
                + (f", alpha_max per chain {np.round(cycle['alpha'][:, 0], 3)}" if cycle else ""),
                flush=True,
            )
            rows.append((seed, name, row))
        if len(result) == len(SAMPLERS):
            ratios.append(result["ACS"]["ess"] / result["DMALA"]["ess"])
            time_ratios.append(result["ACS"]["seconds"] / result["DMALA"]["seconds"])

    steps = args.draws
    lines = [
        "| seed | sampler | R-hat | ESS | ESS per 1,000 steps | mean train log-lik per row "
        "| frozen-chain warning |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for seed, name, row in rows:
        lines.append(
            f"| {seed} | {name} | {row['rhat']:.3f} | {row['ess']:.0f} "
            f"| {1000 * row['ess'] / steps:.1f} | {row['mean']:.4f} "
            f"| {'yes' if row['frozen'] else 'no'} |"
        )
    summary = "(one sampler: no ratio)"
    if ratios:
        ratio, spread = np.median(ratios), (min(ratios), max(ratios))
        time_ratio = np.median(time_ratios)
        summary = (
            f"ACS / DMALA, ESS per step: median {ratio:.2f} over {len(ratios)} seeds "
            f"(range {spread[0]:.2f}-{spread[1]:.2f}); seconds per step: median "
            f"{time_ratio:.2f}; so ESS/s: about {ratio / time_ratio:.2f}."
        )
    print("\n" + "\n".join(lines) + "\n\n" + summary)
    if args.write_doc and not args.quick:
        weights = data.num_weights(args.hidden)
        text = "\n".join(
            [
                f"## ACS defaults on the binary BNN ({weights} weights)",
                "",
                f"`benchmarks/acs_bnn.py`: breast cancer, {args.hidden} hidden units, "
                f"{CHAINS} vectorised chains, {args.warmup} warmup + {args.draws} draws per "
                "seed and sampler (the demo's warmup); R-hat and ESS of the training "
                "log-likelihood per row.",
                "",
                *lines,
                "",
                summary,
            ]
        )
        write_section(f"acs_bnn_h{args.hidden}", text)


if __name__ == "__main__":
    main()
