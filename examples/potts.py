"""A Potts lattice in energy mode (NumPyro): categorical sites given by a potential, no model.

The ``q``-state Potts model on an ``L x L`` periodic lattice: each site takes one of ``q = 3``
colours, and neighbouring sites that agree lower the energy,
``U(z) = -J * sum over neighbours of [z_i == z_j]``. The potential is written on one-hot arrays
(``(L, L, q)``: energy mode presents ``Categorical(q)`` leaves one-hot and uses the gradient with
respect to the one-hot encoding, App. B of the DLP paper). DMALA, GWG, AB and ACS sample it.

On a 3 x 3 lattice (19,683 states) the script enumerates the exact mean energy per site and the
exact probability that two opposite corners agree, and prints each kernel's estimate with its
Monte Carlo standard error from ArviZ. The full run adds a 48 x 48 lattice at the critical
coupling ``J = log(1 + sqrt(3)) = 1.005``: 4 vectorised chains per kernel, ArviZ summaries, and
``examples/figures/potts.png`` (energy traces and a final configuration).

Run ``python examples/potts.py`` (``--quick`` for the reduced mode: shorter runs, 8 x 8).
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import arviz as az
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from numpyro.infer import MCMC

import numpyro_ext as nx

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# arviz.summary's columns by name: ArviZ 0.2x and 1.x order them differently
SUMMARY_COLUMNS = ["mean", "sd", "mcse_mean", "ess_bulk", "r_hat"]

COLOURS = 3
CRITICAL = float(np.log(1 + np.sqrt(COLOURS)))


def agreements(one_hot):
    """Number of agreeing neighbour pairs of one-hot lattices (..., L, L, q)."""
    right = one_hot * jnp.roll(one_hot, 1, -2)
    down = one_hot * jnp.roll(one_hot, 1, -3)
    return (right + down).sum((-1, -2, -3))


def potential(coupling: float):
    return lambda one_hot: -coupling * agreements(one_hot)


KERNELS = {
    "DMALA": lambda u: nx.DMALA(potential_fn=u, domain=nx.Categorical(COLOURS)),
    "GWG": lambda u: nx.GWG(potential_fn=u, domain=nx.Categorical(COLOURS)),
    "AB": lambda u: nx.AB(potential_fn=u, domain=nx.Categorical(COLOURS)),
    "ACS": lambda u: nx.ACS(potential_fn=u, domain=nx.Categorical(COLOURS)),
}


def observables(one_hot: np.ndarray):
    """Energy per site (at J = 1) and whether sites (0, 0) and (L//2, L//2) agree."""
    one_hot = np.asarray(one_hot, np.float64)
    sites = one_hot.shape[-2] * one_hot.shape[-3]
    energy = -np.asarray(agreements(jnp.asarray(one_hot))) / sites
    half = one_hot.shape[-2] // 2
    agree = (one_hot[..., 0, 0, :] * one_hot[..., half, half, :]).sum(-1)
    return energy, agree


def exact_3x3(coupling: float):
    labels = np.array(list(itertools.product(range(COLOURS), repeat=9))).reshape(-1, 3, 3)
    energy, agree = observables(np.eye(COLOURS)[labels])
    log_weight = -coupling * 9 * energy
    weight = np.exp(log_weight - log_weight.max())
    weight /= weight.sum()
    return float((weight * energy).sum()), float((weight * agree).sum())


def run(name, size, coupling, num_warmup, num_samples, num_chains, seed=0):
    start_labels = jax.random.randint(jax.random.key(seed), (num_chains, size, size), 0, COLOURS)
    init = jax.nn.one_hot(start_labels, COLOURS, dtype=jnp.int32)
    mcmc = MCMC(
        KERNELS[name](potential(coupling)),
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(1), init_params=init)
    draws = np.asarray(mcmc.get_samples(group_by_chain=True))
    seconds = time.perf_counter() - start
    energy, agree = observables(draws)
    # a Dataset of (chain, draw) arrays: arviz.summary and arviz.ess read it on ArviZ 0.2x and 1.x
    observed = az.convert_to_dataset({"energy": energy, "corners_agree": agree})
    return observed, seconds, draws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced mode (the test suite's)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "figures"))
    args = parser.parse_args()
    coupling = 0.8
    exact_energy, exact_agree = exact_3x3(coupling)
    print(
        f"3 x 3 lattice, q = {COLOURS}, J = {coupling}: exact energy per site "
        f"{exact_energy:.4f}, P(opposite corners agree) {exact_agree:.4f}"
    )
    print("| kernel | energy per site (MCSE) | z | corners agree (MCSE) | z |")
    print("| --- | --- | --- | --- | --- |")
    budget = (200, 300, 2) if args.quick else (1000, 20_000, 4)
    for name in KERNELS:
        observed, _, _ = run(name, 3, coupling, *budget)
        summary = az.summary(observed)
        row = [name]
        for var, exact in (("energy", exact_energy), ("corners_agree", exact_agree)):
            mean, mcse = summary.loc[var, "mean"], summary.loc[var, "mcse_mean"]
            row += [f"{mean:.4f} ({mcse:.4f})", f"{(mean - exact) / max(mcse, 1e-12):+.1f}"]
        print("| " + " | ".join(row) + " |")

    size, budget = (8, (20, 40, 4)) if args.quick else (48, (1000, 4000, 4))
    results = {}
    print(f"\n{size} x {size} lattice, J = {CRITICAL:.3f} (critical), 4 vectorised chains")
    for name in KERNELS:
        observed, seconds, draws = run(name, size, CRITICAL, *budget)
        results[name] = (observed, seconds, draws)
        ess = az.ess(observed)["energy"].item()
        print(
            f"{name}: {seconds:.1f} s, ESS of the energy {ess:.0f} ({ess / seconds:.1f} per second)"
        )
        print(az.summary(observed, var_names=["energy"])[SUMMARY_COLUMNS].to_string())
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [2.2, 1]})
    for name, (observed, seconds, _) in results.items():
        trace = observed["energy"].values[0]
        axes[0].plot(np.linspace(0, seconds, len(trace)), trace, lw=0.6, label=name)
    axes[0].set_xlabel("seconds (4 vectorised chains; chain 0 shown)")
    axes[0].set_ylabel("energy per site (J = 1)")
    axes[0].legend(fontsize=8)
    axes[1].imshow(results["DMALA"][2][0, -1].argmax(-1), cmap="viridis")
    axes[1].set_title("DMALA: last draw of chain 0")
    axes[1].axis("off")
    fig.tight_layout()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "potts.png", dpi=110)
    print(f"\nwrote {out / 'potts.png'}")


if __name__ == "__main__":
    main()
