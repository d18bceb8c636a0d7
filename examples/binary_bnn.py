"""Binary Bayesian neural network on the breast-cancer data: DMALA, DULA, GWG and AB against
numpyro's DiscreteGibbs.

The network has one hidden layer of 32 tanh units (``--hidden``); every weight is a sign in
{-1, +1} (``w = 2b - 1`` with ``b ~ Bernoulli(1/2)``), 30 x 32 + 32 = 992 binary sites in
all, the setting of Sec. 7.4 of Zhang et al. (2022). The posterior over sign patterns is
sampled by each kernel with 4 chains: the gradient kernels vectorise them
(``chain_method="vectorized"``: one compilation, every chain in each step), DiscreteGibbs runs
them one after another (the method it supports), each of its draws a sweep over all sites.
The script prints the ArviZ summary (sampler statistics and a few weights), an ESS-per-second
table with held-out accuracy (wall time includes compilation), and writes
``examples/figures/binary_bnn.png`` (traces and autocorrelations of the training
log-likelihood).

Run ``python examples/binary_bnn.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import arviz as az
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, DiscreteGibbs
from sklearn.datasets import load_breast_cancer

import numpyro_ext as nx

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OUTPUT_SCALE = 3.0  # logit scale of the output unit


def load_data(seed: int = 0):
    """Standardised features, split 400 / 169 into training and held-out sets."""
    data = load_breast_cancer()
    x = (data.data - data.data.mean(0)) / data.data.std(0)
    order = np.random.default_rng(seed).permutation(len(data.target))
    train, test = order[:400], order[400:]
    as_jax = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    return as_jax(x[train]), as_jax(data.target[train]), as_jax(x[test]), data.target[test]


def network_logits(b1: jax.Array, b2: jax.Array, x: jax.Array) -> jax.Array:
    """Output logits for inputs ``x`` (n, 30) and bit weights ``b1`` (30, H), ``b2`` (H,)."""
    hidden = jnp.tanh(x @ (2.0 * b1 - 1.0) / jnp.sqrt(x.shape[1]))
    return OUTPUT_SCALE * hidden @ (2.0 * b2 - 1.0) / jnp.sqrt(b2.shape[-1])


def model(x, y=None, hidden=32):
    b1 = numpyro.sample("b1", dist.Bernoulli(0.5).expand([x.shape[1], hidden]))
    b2 = numpyro.sample("b2", dist.Bernoulli(0.5).expand([hidden]))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=network_logits(b1, b2, x)), obs=y)


def warm_up_jax() -> None:
    """Pay JAX's one-off start-up cost before anything is timed."""
    mcmc = MCMC(
        nx.DMALA(model),
        num_warmup=2,
        num_samples=2,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), jnp.zeros((3, 30)), jnp.zeros(3), hidden=2)


def run(name, kernel, data, budget, num_chains, hidden):
    num_warmup, num_samples, thinning, chain_method = budget
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        thinning=thinning,
        chain_method=chain_method,
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(1), *data, hidden=hidden)
    jax.block_until_ready(mcmc.get_samples())
    seconds = time.perf_counter() - start
    print(
        f"{name}: {seconds:.1f} s for {num_chains} {chain_method} chains x ({num_warmup} + "
        f"{num_samples}) draws"
    )
    return mcmc, seconds


def write_doc(hidden: int, chains: int, gradient: tuple, gibbs: tuple, table: list) -> None:
    """The ESS table as a section of ``docs/benchmarks.md`` (``--write-doc``)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _common import write_section

    text = "\n".join(
        [
            f"## Binary Bayesian neural network, {hidden} hidden units",
            "",
            f"`examples/binary_bnn.py` on the breast-cancer data: {30 * hidden + hidden} sign "
            f"weights, {chains} chains per sampler; the gradient kernels {gradient[0]} warmup "
            f"and {gradient[1]} draws (every {gradient[2]}th kept) with vectorised chains, "
            f"DiscreteGibbs {gibbs[0]} warmup and {gibbs[1]} sweeps with sequential chains; "
            "wall time includes compilation; ESS of the training log-likelihood from ArviZ.",
            "",
            *table,
        ]
    )
    write_section(f"binary_bnn_h{hidden}", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run for a smoke test")
    parser.add_argument("--num-chains", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=32, help="hidden units")
    parser.add_argument(
        "--write-doc", action="store_true", help="write the table into docs/benchmarks.md"
    )
    args = parser.parse_args()
    x, y, x_test, y_test = load_data()
    hidden = 4 if args.quick else args.hidden
    print(
        f"breast cancer: {x.shape[0]} training / {x_test.shape[0]} held-out rows, "
        f"{x.shape[1] * hidden + hidden} binary weights\n"
    )
    warm_up_jax()

    # (warmup, draws, thinning, chain method); a DiscreteGibbs draw is a sweep over all sites
    gradient = (30, 60, 1, "vectorized") if args.quick else (1000, 30_000, 15, "vectorized")
    # a sweep costs as many network evaluations as there are weights: fewer at larger widths
    sweeps = max(20, 3200 // hidden)
    gibbs = (3, 6, 1, "sequential") if args.quick else (sweeps // 10, sweeps, 1, "sequential")
    samplers = {
        "DMALA": (nx.DMALA(model), gradient),
        "DULA": (nx.DULA(model, step_size=0.1), gradient),
        "GWG": (nx.GWG(model), gradient),
        "AB": (nx.AB(model), gradient),
        "DiscreteGibbs": (DiscreteGibbs(model), gibbs),
    }
    log_lik = jax.jit(
        jax.vmap(lambda b1, b2: dist.Bernoulli(logits=network_logits(b1, b2, x)).log_prob(y).sum())
    )
    results = {}
    for name, (kernel, budget) in samplers.items():
        mcmc, seconds = run(name, kernel, (x, y), budget, args.num_chains, hidden)
        idata = az.from_numpyro(mcmc, log_likelihood=False)
        s = mcmc.get_samples()
        num_samples = budget[1] // budget[2]
        ll = np.asarray(log_lik(s["b1"], s["b2"])).reshape(args.num_chains, num_samples)
        idata.posterior["train_log_lik"] = (("chain", "draw"), ll)
        probs = jax.nn.sigmoid(
            jax.vmap(lambda b1, b2: network_logits(b1, b2, x_test))(s["b1"], s["b2"])
        )
        accuracy = float(np.mean((np.asarray(probs.mean(0)) > 0.5) == y_test))
        results[name] = (idata, seconds, num_samples, accuracy)

    idata = results["DMALA"][0]
    print("\nArviZ summary (DMALA): sampler statistics")
    print(
        az.summary(
            idata.sample_stats, var_names=["acceptance_rate", "step_size", "hamming_distance", "lp"]
        ).iloc[:, :4]
    )
    print(
        "\nArviZ summary (DMALA): training log-likelihood and the output layer's first bits.\n"
        "The bits are not identifiable (flipping every sign into and out of a hidden unit\n"
        "leaves the network unchanged, tanh being odd), so their R-hat is large by design;\n"
        "judge mixing by the log-likelihood."
    )
    first_bits = {"b2_dim_0": list(range(4))}
    print(az.summary(idata, var_names=["train_log_lik", "b2"], coords=first_bits).to_string())

    table = [
        "| sampler | seconds | draws kept/chain | ESS train log-lik | ESS/s "
        "| vs DiscreteGibbs | held-out accuracy |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    rates = {
        name: float(az.ess(r[0], var_names=["train_log_lik"])["train_log_lik"]) / r[1]
        for name, r in results.items()
    }
    for name, (_, seconds, num_samples, accuracy) in results.items():
        ess = rates[name] * seconds
        table.append(
            f"| {name} | {seconds:.1f} | {num_samples} | {ess:.0f} | {rates[name]:.1f} "
            f"| {rates[name] / rates['DiscreteGibbs']:.1f}x | {accuracy:.3f} |"
        )
    print("\n" + "\n".join(table))
    if args.write_doc and not args.quick:
        write_doc(hidden, args.num_chains, gradient, gibbs, table)

    name = "binary_bnn.png" if hidden == 32 or args.quick else f"binary_bnn_h{hidden}.png"
    figure_path = Path(__file__).resolve().parent / "figures" / name
    figure_path.parent.mkdir(exist_ok=True)
    fig, axes = plt.subplots(len(results), 2, figsize=(10, 2.1 * len(results)))
    for row, (name, (idata, seconds, _, _)) in enumerate(results.items()):
        ll = idata.posterior["train_log_lik"].values[0]
        axes[row, 0].plot(np.linspace(0, seconds / args.num_chains, len(ll)), ll, lw=0.5)
        axes[row, 0].set_ylabel(name)
        centred = ll - ll.mean()
        lags = min(60, len(ll) // 2)
        acf = [1.0] + [float(np.corrcoef(centred[:-k], centred[k:])[0, 1]) for k in range(1, lags)]
        axes[row, 1].bar(range(lags), acf, width=1.0)
        axes[row, 1].set_ylim(-0.2, 1.0)
    axes[0, 0].set_title("training log-likelihood, chain 0, against seconds")
    axes[0, 1].set_title("autocorrelation (lag in draws)")
    axes[-1, 0].set_xlabel("seconds of sampling (chain 0)")
    axes[-1, 1].set_xlabel("lag")
    fig.tight_layout()
    fig.savefig(figure_path, dpi=110)
    print(f"\nwrote {figure_path}")


if __name__ == "__main__":
    main()
