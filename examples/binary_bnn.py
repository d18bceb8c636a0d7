"""Binary Bayesian neural networks (NumPyro): DMALA, DULA, GWG, AB and ACS against NumPyro's
one-coordinate DiscreteGibbs at equal wall time.

The setting of Sec. 7.4 of Zhang et al. (2022): a two-layer tanh network whose every weight is
a sign in {-1, +1} (``w = 2b - 1``, ``b ~ Bernoulli(1/2)``, a uniform prior), fitted on full
batches. Two data sets that ship with scikit-learn (``examples/bnn_data.py``, 80 / 20 split):

- ``diabetes`` (regression, 10 features): ``y ~ Normal(f(x), 0.7)`` on standardised targets
  (0.7 is about the residual scale of a linear fit; the paper's energy ``-sum (f(x) - y)^2`` on
  targets scaled to (0, 1) is a nearly flat posterior on 353 rows). Reported like the paper's
  Table 2: training log-likelihood per data point and test RMSE (in the data's units) of the
  posterior-mean prediction.
- ``breast_cancer`` (classification, 30 features): ``y ~ Bernoulli(logits=3 f(x))``; training
  log-likelihood per data point and test error of the posterior-mean probability.

Every sampler gets the same wall-time budget (``--seconds``), compilation and warmup included,
and runs on (up to ``--max-seconds``) while the ESS of its training log-likelihood is below 400,
so that every ESS/s ratio the table prints compares runs of ESS 400 or more (a ratio of ESS
estimates from a few dozen effective draws is noise). DULA has no MH correction: the table
shows its bias (its mean training log-likelihood per row against the exact samplers'), not an
ESS/s multiple. Chains:
the gradient kernels run ``--num-chains`` vectorised chains (one compilation, every chain in
each step), DiscreteGibbs the same number of chains one after another (the only chain method
it supports; each draw is a sweep over every weight). The script prints ArviZ summaries, a table
per data set, and writes a figure per data set: test error of the running posterior mean and
the training log-likelihood against seconds.

Run ``python examples/binary_bnn.py`` (the README demo: breast cancer, 32 hidden units, 992
weights), ``--dataset both --paper-width`` for the paper-width run (3,100 and 3,300 weights),
``--quick`` for the reduced mode the test suite runs.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import arviz as az
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, DiscreteGibbs

import numpyro_ext as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bnn_data import (  # noqa: E402
    MIN_ESS,
    PAPER_WIDTH,
    Data,
    add_arguments,
    error_name,
    load,
    print_summaries,
    results_table,
)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OUTPUT_SCALE = 3.0  # logit scale of the classification output
NOISE = 0.7  # regression noise, standardised units


def network_output(b1: jax.Array, b2: jax.Array, x: jax.Array) -> jax.Array:
    """Network output for inputs ``x`` (n, D), bit weights ``b1`` (D, H) and ``b2`` (H,)."""
    hidden = jnp.tanh(x @ (2.0 * b1 - 1.0) / jnp.sqrt(x.shape[1]))
    return hidden @ (2.0 * b2 - 1.0) / jnp.sqrt(b2.shape[-1])


def likelihood(output: jax.Array, task: str) -> dist.Distribution:
    if task == "classification":
        return dist.Bernoulli(logits=OUTPUT_SCALE * output)
    return dist.Normal(output, NOISE)


def model(x, y=None, hidden=32, task="classification"):
    b1 = numpyro.sample("b1", dist.Bernoulli(0.5).expand([x.shape[1], hidden]))
    b2 = numpyro.sample("b2", dist.Bernoulli(0.5).expand([hidden]))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", likelihood(network_output(b1, b2, x), task), obs=y)


def make_kernel(name: str):
    # The paper's setting: every weight proposed from the gradient (exact_sites=[]). The MH step
    # keeps DMALA, GWG, AB and ACS exact either way; the automatic check (exact_sites="auto")
    # finds the output weights' gradient estimate off by about 5 nats per flip at these widths
    # (a borderline call that depends on the random point it checks) and would then pay one
    # network evaluation per output weight per step.
    gradient = dict(exact_sites=[])
    kernels = {
        "DMALA": lambda: nx.DMALA(model, **gradient),
        "DULA": lambda: nx.DULA(model, step_size=0.1, **gradient),  # the paper's alpha, no MH
        "GWG": lambda: nx.GWG(model, **gradient),
        "AB": lambda: nx.AB(model, **gradient),
        "ACS": lambda: nx.ACS(model, **gradient),
        "DiscreteGibbs": lambda: DiscreteGibbs(model),
    }
    return kernels[name]()


def calibrate(mcmc_for, key, args, kwargs, first_steps: int, seconds: float):
    """Seconds per step, and the fixed cost of a run call (compilation), from runs of growing
    length (no warmup: the cost of a step does not depend on its step size)."""
    timings, steps = [], first_steps
    while True:
        probe = mcmc_for(0, steps)
        start = time.perf_counter()
        with warnings.catch_warnings():  # ACS: "no warmup to tune in" is expected here
            warnings.simplefilter("ignore")
            probe.run(key, *args, **kwargs)
        jax.block_until_ready(probe.get_samples())
        timings.append((steps, time.perf_counter() - start))
        if timings[-1][1] > min(2.0 * timings[0][1] + 0.5, seconds / 2) or steps > 10**6:
            break
        steps *= 8
    (n0, t0), (n1, t1) = timings[0], timings[-1]
    per_step = max(t1 - t0, 1e-3) / (n1 - n0) if n1 > n0 else t0 / n0  # at most
    return per_step, max(t0 - n0 * per_step, 0.0)


def sample_for(name, data: Data, hidden, num_chains, seconds, key, calibrated=True, until=None):
    """Run one sampler for about ``seconds`` of wall time, warmup and compilation included.

    Calibrated first (not counted), then one ``warmup`` and one ``run`` call, as a user would
    run it, with as many steps as fill the budget. ``until=(ess_of, min_ess, max_seconds)``:
    while ``ess_of(draws)`` is below ``min_ess`` the run goes on (the same number of steps
    again, from where it stopped) as long as that fits in ``max_seconds`` (the ESS check
    itself is not timed). Returns the draws grouped by chain (each leaf (chains, draws, ...)),
    the second at which each kept draw was made, the MCMC object of the last run call and the
    steps per chain after warmup. ``calibrated=False`` (the reduced mode) skips the calibration
    and takes the fewest steps.
    """
    gibbs = name == "DiscreteGibbs"
    chain_method = "sequential" if gibbs else "vectorized"
    num_warmup = 4 if gibbs else 300  # ACS tunes its cycle in at least 110 warmup steps
    args = (jnp.asarray(data.x_train), jnp.asarray(data.y_train))
    kwargs = dict(hidden=hidden, task=data.task)
    kernel = make_kernel(name)

    def mcmc_for(num_warmup, num_samples, thinning=1):
        return MCMC(
            kernel,
            num_warmup=num_warmup,
            num_samples=num_samples,
            thinning=thinning,
            num_chains=num_chains,
            chain_method=chain_method,
            progress_bar=False,
        )

    per_step, overhead = (
        calibrate(mcmc_for, key, args, kwargs, 1 if gibbs else 16, seconds)
        if calibrated
        else (np.inf, 0.0)
    )
    warmup = mcmc_for(num_warmup, 1)
    start = time.perf_counter()
    warmup.warmup(key, *args, **kwargs)
    warm_end = time.perf_counter() - start
    num_samples = int((seconds - warm_end - overhead) / per_step)
    num_samples = max(num_samples, 4 if gibbs else 40)
    thinning = max(1, num_samples // 300)  # about 300 kept draws per chain
    num_samples -= num_samples % thinning
    mcmc = mcmc_for(num_warmup, num_samples, thinning)
    state = warmup.post_warmup_state
    parts, times, elapsed = [], [], warm_end
    while True:
        mcmc.post_warmup_state = state
        began = time.perf_counter()
        mcmc.run(state.rng_key, *args, **kwargs)
        parts.append(mcmc.get_samples(group_by_chain=True))
        jax.block_until_ready(parts[-1])
        took = time.perf_counter() - began
        state = mcmc.last_state
        kept = num_samples // thinning
        # every step costs the same: spread the run's time over its draws (the first run's
        # fixed cost, compilation and warmup, before its first draw)
        first = min(warm_end + overhead, elapsed + took) if len(parts) == 1 else elapsed
        times.append(first + (elapsed + took - first) * np.arange(1, kept + 1) / kept)
        elapsed += took
        if until is None:
            break
        ess_of, min_ess, max_seconds = until
        draws = {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}
        if ess_of(draws) >= min_ess or elapsed + took > max_seconds:
            break
    draws = {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}
    steps = num_samples * len(parts)
    print(
        f"{name}: {elapsed:.1f} s ({warm_end:.1f} s warmup) for {num_chains} {chain_method} "
        f"chains x ({num_warmup} + {steps}) steps, every {thinning}th kept",
        flush=True,
    )
    return draws, np.concatenate(times), mcmc, steps


def evaluate(draws, data: Data):
    """Training log-likelihood per row for each draw (chains, draws), and the test error of the
    running posterior mean (pooled over chains, draws in time order) after each draw (draws,):
    RMSE in the data's units (regression) or the misclassification rate."""
    x, y, x_test = (jnp.asarray(a) for a in (data.x_train, data.y_train, data.x_test))

    def one(b1, b2):
        train_ll = likelihood(network_output(b1, b2, x), data.task).log_prob(y).mean()
        test_out = network_output(b1, b2, x_test)
        if data.task == "classification":
            test_out = jax.nn.sigmoid(OUTPUT_SCALE * test_out)
        return train_ll, test_out

    train_ll, prediction = jax.jit(jax.vmap(jax.vmap(one)))(draws["b1"], draws["b2"])
    prediction = np.asarray(prediction, np.float64)  # (chains, draws, rows)
    counts = np.arange(1, prediction.shape[1] + 1)[:, None]
    running = (np.cumsum(prediction, axis=1) / counts).mean(0)  # (draws, rows)
    if data.task == "classification":
        error = ((running > 0.5) != data.y_test).mean(-1)
    else:
        error = np.sqrt(((running - data.y_test) ** 2).mean(-1)) * data.target_scale
    return np.asarray(train_ll), error


def run_dataset(data: Data, hidden: int, args) -> dict:
    print(
        f"\n== {data.name} ({data.task}): {len(data.y_train)} training / {len(data.y_test)} "
        f"test rows, {data.num_weights(hidden)} sign weights, {args.seconds:g} s per sampler",
        flush=True,
    )
    results = {}

    def ess_of(draws) -> float:
        train_ll = az.convert_to_dataset({"ll": evaluate(draws, data)[0]})
        return float(az.ess(train_ll)["ll"])

    # a sampler whose ESS is below MIN_ESS after its budget runs on (at most --max-seconds):
    # ESS/s ratios are shown only between samplers that reached it (bnn_data.results_table)
    until = None if args.quick else (ess_of, MIN_ESS, args.max_seconds)
    for name in args.samplers:
        draws, times, mcmc, steps = sample_for(
            name,
            data,
            hidden,
            args.num_chains,
            args.seconds,
            jax.random.key(1),
            not args.quick,
            until,
        )
        train_ll, error = evaluate(draws, data)
        idata = az.from_numpyro(mcmc, log_likelihood=False)
        results[name] = dict(
            # the summaries read Datasets, the same on ArviZ 0.2x and 1.x (examples/bnn_data.py)
            posterior=az.convert_to_dataset({"train_log_lik": train_ll}),
            sample_stats=(
                az.convert_to_dataset(idata, group="sample_stats")
                if "sample_stats" in idata
                else None
            ),
            times=times,
            train_ll=train_ll,
            error=error,
            seconds=times[-1],
            steps=steps,
        )

    print_summaries(results)
    acs_stats = results.get("ACS", {}).get("sample_stats")
    if acs_stats is not None and "alpha_max" in acs_stats:
        # each chain tunes its own cycle in warmup: its ends, one row per chain
        print("\nACS's tuned cycle per chain (alpha_max, alpha_min):")
        ends = zip(acs_stats["alpha_max"].values[:, -1], acs_stats["alpha_min"].values[:, -1])
        for chain, (high, low) in enumerate(ends):
            print(f"  chain {chain}: {high:.3g}, {low:.3g}")
    table = results_table(results, data)
    print("\n" + "\n".join(table))

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for name, r in results.items():
        line = "--" if name == "DiscreteGibbs" else "-"
        axes[0].plot(r["times"], r["error"], line, label=name, lw=1.2)
        axes[1].plot(r["times"], r["train_ll"].mean(0), line, label=name, lw=0.8)
    axes[0].set_ylabel(error_name(data) + " (running posterior mean)")
    axes[1].set_ylabel("training log-likelihood per row (chain mean)")
    for ax in axes:
        ax.set_xlabel("seconds (warmup and compilation included)")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"binary BNN, {data.name}: {data.num_weights(hidden)} sign weights, "
        f"{args.num_chains} chains per sampler"
    )
    fig.tight_layout()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figure_path = out / f"binary_bnn_{data.name}_h{hidden}.png"
    fig.savefig(figure_path, dpi=110)
    plt.close(fig)
    print(f"wrote {figure_path}")
    if args.write_doc and not args.quick:
        write_doc(data, hidden, args, table)
    return results


def write_doc(data: Data, hidden: int, args, table: list) -> None:
    """The table as a section of ``docs/benchmarks.md`` (``--write-doc``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _common import write_section

    text = "\n".join(
        [
            f"## Binary Bayesian neural network: {data.name}, {hidden} hidden units",
            "",
            f"`examples/binary_bnn.py`: {data.num_weights(hidden)} sign weights, "
            f"{args.num_chains} chains per sampler, {args.seconds:g} s of wall time each "
            "(warmup and compilation included; the gradient kernels' chains vectorised, "
            "DiscreteGibbs's sequential, each of its steps a sweep); training log-likelihood "
            f"per row averaged over the second half of the draws; {error_name(data)} of the "
            "posterior-mean prediction; ESS of the training log-likelihood from ArviZ.",
            "",
            *table,
        ]
    )
    write_section(f"binary_bnn_{data.name}_h{hidden}", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser, seconds=10.0, chains=4)
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=40.0,
        help=f"a sampler below ESS {MIN_ESS} after --seconds runs on up to this long",
    )
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "figures"))
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.num_chains = 1.0, 2
    names = ["breast_cancer", "diabetes"] if args.dataset == "both" else [args.dataset]
    for name in names:
        hidden = PAPER_WIDTH[name] if args.paper_width else (16 if args.quick else args.hidden)
        run_dataset(load(name), hidden, args)


if __name__ == "__main__":
    main()
