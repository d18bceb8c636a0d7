"""Binary Bayesian neural networks (Pyro): DMALA, DULA, GWG, AB and ACS against
``pyro_ext.DiscreteGibbs`` (one coordinate at a time) at equal wall time.

The Pyro version of ``examples/binary_bnn.py``, same model and data (``examples/bnn_data.py``):
a two-layer tanh network with every weight a sign in {-1, +1} (Sec. 7.4 of Zhang et al., 2022),
``diabetes`` (regression, ``y ~ Normal(f(x), 0.7)`` on standardised targets; training
log-likelihood per row and test RMSE in the data's units) and ``breast_cancer``
(classification; test error rate). Pyro has no vectorised chains: each sampler runs
``--num-chains`` chains one after another, each with its share of the ``--seconds`` budget
(warmup included), the number of steps set from the cost of a step measured in a short pilot
(counted in the budget). Every kept draw is time-stamped by ``MCMC``'s ``hook_fn``. The script
prints ArviZ summaries (``pyro_ext.to_arviz``), a table per data set, and writes a figure per
data set: test error of the running posterior mean and the training log-likelihood against
seconds.

Run ``python examples/pyro_binary_bnn.py`` (breast cancer, 32 hidden units),
``--dataset both --paper-width`` for the paper-width run, ``--quick`` for the reduced mode.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import arviz as az
import matplotlib
import numpy as np
import pyro
import pyro.distributions as dist
import torch
import xarray as xr
from pyro.infer import MCMC

import pyro_ext as px

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bnn_data import (  # noqa: E402
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


def network_output(b1: torch.Tensor, b2: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Network output for inputs ``x`` (n, D), bit weights ``b1`` (D, H) and ``b2`` (H,)."""
    hidden = torch.tanh(x @ (2.0 * b1 - 1.0) / x.shape[1] ** 0.5)
    return hidden @ (2.0 * b2 - 1.0) / b2.shape[-1] ** 0.5


def likelihood(output: torch.Tensor, task: str) -> dist.Distribution:
    if task == "classification":
        return dist.Bernoulli(logits=OUTPUT_SCALE * output)
    return dist.Normal(output, NOISE)


def model(x, y=None, hidden=32, task="classification"):
    b1 = pyro.sample("b1", dist.Bernoulli(0.5).expand([x.shape[1], hidden]).to_event(2))
    b2 = pyro.sample("b2", dist.Bernoulli(0.5).expand([hidden]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", likelihood(network_output(b1, b2, x), task), obs=y)


def make_kernel(name: str):
    # The paper's setting: every weight proposed from the gradient (exact_sites=[]). The MH step
    # keeps DMALA, GWG, AB and ACS exact either way; the automatic check (exact_sites="auto")
    # finds the output weights' gradient estimate off by about 5 nats per flip at these widths
    # (a borderline call that depends on the random point it checks) and would then pay one
    # network evaluation per output weight per step.
    gradient = dict(exact_sites=[])
    kernels = {
        "DMALA": lambda: px.DMALA(model, **gradient),
        "DULA": lambda: px.DULA(model, step_size=0.1, **gradient),  # the paper's alpha, no MH
        "GWG": lambda: px.GWG(model, **gradient),
        "AB": lambda: px.AB(model, **gradient),
        "ACS": lambda: px.ACS(model, **gradient),
        "DiscreteGibbs": lambda: px.DiscreteGibbs(model),
    }
    return kernels[name]()


def run_chain(name, data: Data, hidden, num_warmup, num_samples, seed, clock):
    """One chain; returns the MCMC object and the clock reading after each kept draw."""
    pyro.set_rng_seed(seed)
    stamps = []

    def hook(kernel, params, stage, i):
        if stage == "Sample":
            stamps.append(clock())

    mcmc = MCMC(
        make_kernel(name),
        num_samples=num_samples,
        warmup_steps=num_warmup,
        num_chains=1,
        hook_fn=hook,
        disable_progbar=True,
    )
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    mcmc.run(x, y, hidden=hidden, task=data.task)
    return mcmc, np.asarray(stamps)


def sample_for(name, data: Data, hidden, num_chains, seconds, quick):
    """Run ``num_chains`` chains of one sampler one after another in about ``seconds``."""
    gibbs = name == "DiscreteGibbs"
    # ACS tunes its cycle in at least 110 warmup steps; a Gibbs sweep adapts nothing
    num_warmup = 1 if gibbs else 300
    start = time.perf_counter()
    clock = lambda: time.perf_counter() - start  # noqa: E731
    if quick:  # (ACS warns that its tuning is cut short)
        num_warmup, num_samples = (1, 4) if gibbs else (40, 20)
    else:  # pilot: the cost of a step (Pyro compiles nothing: no fixed cost to separate)
        pilot_steps = 1 if gibbs else 20
        _, stamps = run_chain(name, data, hidden, 0, pilot_steps + 1, 0, clock)
        per_step = (stamps[-1] - stamps[0]) / pilot_steps
        per_chain = (seconds - clock()) / num_chains
        # at least 2 sweeps per chain, even past the budget (a sweep over 3,100 weights takes
        # about 20 s in Pyro)
        num_samples = max(int(per_chain / per_step) - num_warmup, 2 if gibbs else 40)
    runs = [
        run_chain(name, data, hidden, num_warmup, num_samples, 1 + chain, clock)
        for chain in range(num_chains)
    ]
    print(
        f"{name}: {clock():.1f} s for {num_chains} chains one after another x "
        f"({num_warmup} + {num_samples}) steps",
        flush=True,
    )
    # each run is one chain: their sample_stats side by side (xarray.concat of Datasets, the
    # same on ArviZ 0.2x and 1.x; 1.x has no arviz.concat)
    exports = [px.to_arviz(mcmc) for mcmc, _ in runs]
    sample_stats = None
    if all("sample_stats" in idata for idata in exports):
        sample_stats = xr.concat(
            [az.convert_to_dataset(idata, group="sample_stats") for idata in exports], dim="chain"
        ).assign_coords(chain=np.arange(num_chains))
    draws = {
        site: np.stack([mcmc.get_samples()[site].numpy() for mcmc, _ in runs])
        for site in ("b1", "b2")
    }
    return draws, np.stack([stamps for _, stamps in runs]), sample_stats, num_samples


def evaluate(draws, times, data: Data):
    """Training log-likelihood per row for each draw (chains, draws), and the test error of the
    running posterior mean over every draw made so far, after each draw in time order."""
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    x_test = torch.from_numpy(data.x_test)
    b1 = torch.from_numpy(draws["b1"]).float()
    b2 = torch.from_numpy(draws["b2"]).float()
    with torch.no_grad():
        hidden_train = torch.tanh(x @ (2.0 * b1 - 1.0) / x.shape[1] ** 0.5)  # (C, N, n, H)
        out = (hidden_train @ (2.0 * b2 - 1.0).unsqueeze(-1)).squeeze(-1) / b2.shape[-1] ** 0.5
        train_ll = likelihood(out, data.task).log_prob(y).mean(-1).numpy()
        hidden_test = torch.tanh(x_test @ (2.0 * b1 - 1.0) / x.shape[1] ** 0.5)
        test = (hidden_test @ (2.0 * b2 - 1.0).unsqueeze(-1)).squeeze(-1) / b2.shape[-1] ** 0.5
        if data.task == "classification":
            test = torch.sigmoid(OUTPUT_SCALE * test)
    order = np.argsort(times.ravel(), kind="stable")
    prediction = test.reshape(-1, test.shape[-1]).numpy().astype(np.float64)[order]
    running = np.cumsum(prediction, axis=0) / np.arange(1, len(order) + 1)[:, None]
    if data.task == "classification":
        error = ((running > 0.5) != data.y_test).mean(-1)
    else:
        error = np.sqrt(((running - data.y_test) ** 2).mean(-1)) * data.target_scale
    return train_ll, times.ravel()[order], error


def run_dataset(data: Data, hidden: int, args) -> None:
    print(
        f"\n== {data.name} ({data.task}): {len(data.y_train)} training / {len(data.y_test)} "
        f"test rows, {data.num_weights(hidden)} sign weights, {args.seconds:g} s per sampler",
        flush=True,
    )
    results = {}
    for name in args.samplers:
        draws, times, sample_stats, num_samples = sample_for(
            name, data, hidden, args.num_chains, args.seconds, args.quick
        )
        train_ll, error_times, error = evaluate(draws, times, data)
        results[name] = dict(
            posterior=az.convert_to_dataset({"train_log_lik": train_ll}),
            sample_stats=sample_stats,
            times=times,
            train_ll=train_ll,
            error_times=error_times,
            error=error,
            seconds=float(times.max()),
            steps=num_samples,
        )

    print_summaries(results)
    table = results_table(results, data)
    print("\n" + "\n".join(table))

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for name, r in results.items():
        line = "--" if name == "DiscreteGibbs" else "-"
        axes[0].plot(r["error_times"], r["error"], line, label=name, lw=1.2)
        (handle,) = axes[1].plot(r["times"][0], r["train_ll"][0], line, label=name, lw=0.8)
        for chain in range(1, len(r["times"])):
            axes[1].plot(
                r["times"][chain], r["train_ll"][chain], line, lw=0.8, c=handle.get_color()
            )
    axes[0].set_ylabel(error_name(data) + " (running posterior mean)")
    axes[1].set_ylabel("training log-likelihood per row")
    for ax in axes:
        ax.set_xlabel("seconds (chains one after another, warmup included)")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"Pyro binary BNN, {data.name}: {data.num_weights(hidden)} sign weights, "
        f"{args.num_chains} chains per sampler"
    )
    fig.tight_layout()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figure_path = out / f"pyro_binary_bnn_{data.name}_h{hidden}.png"
    fig.savefig(figure_path, dpi=110)
    plt.close(fig)
    print(f"wrote {figure_path}")
    if args.write_doc and not args.quick:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
        from _common import write_section

        text = "\n".join(
            [
                f"## Pyro binary Bayesian neural network: {data.name}, {hidden} hidden units",
                "",
                f"`examples/pyro_binary_bnn.py`: {data.num_weights(hidden)} sign weights, "
                f"{args.num_chains} chains per sampler one after another, {args.seconds:g} s "
                "of wall time each (warmup included; each DiscreteGibbs step a sweep); "
                "training log-likelihood per row averaged over the second half of the draws; "
                f"{error_name(data)} of the posterior-mean prediction; ESS from ArviZ.",
                "",
                *table,
            ]
        )
        write_section(f"pyro_binary_bnn_{data.name}_h{hidden}", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser, seconds=20.0, chains=2)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "figures"))
    args = parser.parse_args()
    torch.set_default_dtype(torch.float32)
    names = ["breast_cancer", "diabetes"] if args.dataset == "both" else [args.dataset]
    for name in names:
        hidden = PAPER_WIDTH[name] if args.paper_width else (16 if args.quick else args.hidden)
        run_dataset(load(name), hidden, args)


if __name__ == "__main__":
    main()
