"""A Gaussian mixture with categorical assignments (NumPyro): every assignment sampled by DMALA
in parallel, the component means, scale and weights by NUTS, in ``numpyro.infer.Gibbs``.

NumPyro's NUTS cannot sample discrete sites (it enumerates them away with ``funsor``); here
each data point keeps its assignment ``z_i ~ Categorical(weights)``, so the posterior of every
assignment is in the draws. Three components in one dimension, 150 simulated points, means
ordered by a prior on their gaps so the labels cannot switch:
``loc_1 ~ Normal(-4, 2)``, ``gap_k ~ LogNormal(1, 0.5)``, ``loc_k = loc_1 + gap_2 + ... + gap_k``,
``scale ~ HalfNormal(2)``, ``weights ~ Dirichlet(1, 1, 1)``. The same model is also sampled
by NumPyro's ``DiscreteHMCGibbs`` (NUTS with one-site Gibbs moves) as a check. Started from
the prior, the DMALA composition needs a longer warmup than ``DiscreteHMCGibbs`` (with 500
warmup steps one chain was still settling 250 draws later): 1,500 here. The script
prints the ArviZ summaries and writes ``examples/figures/gaussian_mixture.png`` (the data
coloured by posterior assignment, with the posterior-mean density). A Pyro version of a
mixture is ``examples/pyro_mixture.py``.

Run ``python examples/gaussian_mixture.py`` (``--quick`` for the reduced mode).
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
import xarray as xr
from numpyro.infer import MCMC, NUTS, DiscreteHMCGibbs, Gibbs
from numpyro.infer.gibbs import discrete_latent_sites

import numpyro_ext as nx

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# arviz.summary's columns by name: ArviZ 0.2x and 1.x order them differently
SUMMARY_COLUMNS = ["mean", "sd", "mcse_mean", "ess_bulk", "r_hat"]
STATS_COLUMNS = ["mean", "sd"]  # a sampler statistic's mean and spread

COMPONENTS = 3
TRUE_LOCS, TRUE_WEIGHTS, TRUE_SCALE = np.array([-4.0, 0.0, 3.5]), np.array([0.3, 0.5, 0.2]), 1.0


def model(y):
    first = numpyro.sample("first_loc", dist.Normal(-4.0, 2.0))
    gaps = numpyro.sample("gaps", dist.LogNormal(1.0, 0.5).expand([COMPONENTS - 1]))
    locs = numpyro.deterministic("locs", first + jnp.concatenate([jnp.zeros(1), jnp.cumsum(gaps)]))
    scale = numpyro.sample("scale", dist.HalfNormal(2.0))
    weights = numpyro.sample("weights", dist.Dirichlet(jnp.ones(COMPONENTS)))
    with numpyro.plate("data", y.shape[0]):
        z = numpyro.sample("z", dist.Categorical(weights))
        numpyro.sample("y", dist.Normal(locs[z], scale), obs=y)


def simulate(size: int = 150, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    z = rng.choice(COMPONENTS, size, p=TRUE_WEIGHTS)
    return (TRUE_LOCS[z] + TRUE_SCALE * rng.standard_normal(size)).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced mode (the test suite's)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "figures"))
    args = parser.parse_args()
    num_warmup, num_samples, num_chains = (30, 30, 1) if args.quick else (1500, 2000, 2)
    y = jnp.asarray(simulate())
    dmala = Gibbs([(nx.DMALA(model), discrete_latent_sites), (NUTS(model), None)])
    samplers = {
        "Gibbs(DMALA, NUTS)": (dmala, nx.gibbs_fields(dmala)),
        "DiscreteHMCGibbs(NUTS)": (DiscreteHMCGibbs(NUTS(model)), ()),
    }
    results = {}
    for name, (kernel, fields) in samplers.items():
        mcmc = MCMC(
            kernel,
            num_warmup=num_warmup,
            num_samples=num_samples,
            num_chains=num_chains,
            chain_method="sequential",
            progress_bar=False,
        )
        start = time.perf_counter()
        mcmc.run(jax.random.key(0), y, extra_fields=fields)
        seconds = time.perf_counter() - start
        idata = nx.to_arviz(mcmc)
        locs = mcmc.get_samples(group_by_chain=True)["locs"]
        # a DataArray: a (dims, values) tuple is stored as one object in ArviZ 1.x's DataTree
        idata.posterior["locs"] = xr.DataArray(
            np.asarray(locs), dims=("chain", "draw", "component")
        )
        results[name] = idata
        print(f"\n{name}: {seconds:.1f} s for {num_chains} chains x ({num_warmup} + {num_samples})")
        summary = az.summary(idata, var_names=["locs", "scale", "weights"])
        print(summary[SUMMARY_COLUMNS].to_string())
        if fields:
            stats = ["dmala_acceptance_rate", "dmala_hamming_distance"]
            summary = az.summary(idata, group="sample_stats", var_names=stats, kind="stats")
            print(summary[STATS_COLUMNS].to_string())
    print(f"\ntrue values: locs {TRUE_LOCS}, weights {TRUE_WEIGHTS}, scale {TRUE_SCALE}")

    idata = results["Gibbs(DMALA, NUTS)"]
    z = idata.posterior["z"].values.reshape(-1, y.shape[0])
    probabilities = np.stack([(z == k).mean(0) for k in range(COMPONENTS)], -1)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    grid = np.linspace(float(y.min()) - 1, float(y.max()) + 1, 300)
    post = idata.posterior
    locs = post["locs"].values.reshape(-1, COMPONENTS)
    scale = post["scale"].values.reshape(-1, 1, 1)
    weights = post["weights"].values.reshape(-1, COMPONENTS)
    density = (
        weights[:, None, :]
        * np.exp(-0.5 * ((grid[None, :, None] - locs[:, None, :]) / scale) ** 2)
        / (np.sqrt(2 * np.pi) * scale)
    ).sum(-1)
    axes[0].hist(np.asarray(y), bins=40, density=True, color="0.85")
    axes[0].plot(grid, density.mean(0), "k", label="posterior mean density")
    axes[0].scatter(np.asarray(y), np.full(y.shape, -0.01), c=probabilities, s=12)
    axes[0].set_title("data coloured by posterior assignment probabilities (RGB)")
    axes[0].legend(fontsize=8)
    for (name, idata), colour in zip(results.items(), ("C0", "C1")):
        for k in range(COMPONENTS):
            label = name if k == 0 else None
            axes[1].plot(idata.posterior["locs"].values[0, :, k], colour, lw=0.4, label=label)
    axes[1].set_title("component means, chain 0")
    axes[1].set_xlabel("draw after warmup")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "gaussian_mixture.png", dpi=110)
    print(f"\nwrote {out / 'gaussian_mixture.png'}")


if __name__ == "__main__":
    main()
