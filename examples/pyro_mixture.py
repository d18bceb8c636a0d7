"""Pyro: a Gaussian mixture with discrete assignments, sampled with ``pyro_ext``.

Pyro's own HMC/NUTS cannot sample discrete sites (they enumerate them away). Here each data
point keeps its assignment ``z_i ~ Categorical(weights)``; ``pyro_ext.DMALA`` updates all
assignments in parallel inside a ``pyro_ext.Gibbs`` composite with Pyro's NUTS on the
component means. Two chains, then ``pyro_ext.to_arviz`` gives the posterior and the sampler
statistics, printed with ``arviz.summary``; the script writes
``examples/figures/pyro_mixture.png`` (data coloured by the posterior mode of each
assignment, and the trace of the component means).

Run ``python examples/pyro_mixture.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import arviz as az
import matplotlib
import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import MCMC, NUTS

import pyro_ext as px

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# equal weights: the two label orderings are equally good modes, and a chain settles in one
WEIGHTS = torch.tensor([0.5, 0.5])


def model(y):
    locs = pyro.sample("locs", dist.Normal(0.0, 5.0).expand([2]).to_event(1))
    with pyro.plate("data", y.shape[0]):
        z = pyro.sample("z", dist.Categorical(WEIGHTS))
        pyro.sample("y", dist.Normal(locs[z], 1.0), obs=y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "figures"))
    args = parser.parse_args()
    num_samples, warmup = (40, 20) if args.quick else (600, 300)
    pyro.set_rng_seed(0)
    y = torch.cat([torch.randn(12) - 2.5, torch.randn(28) + 2.0])

    # Categorical sites used as indices have no gradient: the kernels evaluate the exact change
    # of the log density for every single-site change (K - 1 model evaluations per data point)
    kernel = px.Gibbs([(px.DMALA(model), px.discrete_sites), (NUTS(model), None)])
    mcmc = MCMC(
        kernel,
        num_samples=num_samples,
        warmup_steps=warmup,
        num_chains=2,
        disable_progbar=args.quick,
    )
    mcmc.run(y)

    idata = px.to_arviz(mcmc)
    print("component means (data: 12 points around -2.5, 28 around 2.0; labels may swap)")
    print(az.summary(idata, var_names=["locs"]))
    stats = ["dmala_acceptance_rate", "dmala_hamming_distance"]  # the discrete block's
    print(az.summary(idata, group="sample_stats", var_names=stats))

    z = idata.posterior["z"].values.reshape(-1, y.shape[0])
    mode = (z.mean(0) > 0.5).astype(int)
    figure_path = Path(args.out) / "pyro_mixture.png"
    figure_path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3))
    axes[0].scatter(y.numpy(), np.zeros(len(y)), c=mode, cmap="coolwarm", s=30)
    axes[0].set_title("data, coloured by posterior mode of z")
    axes[0].set_yticks([])
    locs = idata.posterior["locs"].values
    for chain in range(locs.shape[0]):
        axes[1].plot(locs[chain, :, 0], lw=0.6, label=f"chain {chain}, locs[0]")
        axes[1].plot(locs[chain, :, 1], lw=0.6, label=f"chain {chain}, locs[1]")
    axes[1].set_title("component means (trace)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(figure_path, dpi=110)
    print(f"wrote {figure_path}")


if __name__ == "__main__":
    main()
