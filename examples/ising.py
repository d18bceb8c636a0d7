"""The Ising model (NumPyro): DMALA, GWG and ACS against NumPyro's DiscreteGibbs on a lattice
whose exact answers are known, then on a large lattice near the critical temperature.

The model is an ordinary NumPyro model: spins ``s = 2b - 1`` with ``b ~ Bernoulli(1/2)`` on an
``L x L`` periodic lattice and ``numpyro.factor`` adding ``J * sum over neighbours of s_i s_j``.
On the 4 x 4 lattice (65,536 states) the script enumerates every state for the exact mean
energy per site and mean ``|m|`` (absolute magnetisation), and prints each sampler's estimate
with its Monte Carlo standard error from ArviZ. The full run adds a 32 x 32 lattice at
``J = 0.4`` (critical coupling 0.4407): 4 vectorised chains per gradient kernel against
DiscreteGibbs sweeps, the ArviZ summary of ``|m|`` and energy, and
``examples/figures/ising.png`` (traces of ``|m|`` against seconds, and a final configuration).

Run ``python examples/ising.py`` (``--quick`` for the reduced mode: shorter runs, 8 x 8).
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
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, DiscreteGibbs

import numpyro_ext as nx

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# arviz.summary's columns by name: ArviZ 0.2x and 1.x order them differently
SUMMARY_COLUMNS = ["mean", "sd", "mcse_mean", "ess_bulk", "r_hat"]


def neighbour_sum(spins):
    """``sum over neighbouring pairs of s_i s_j`` on a periodic lattice (..., L, L)."""
    return (spins * jnp.roll(spins, 1, -1) + spins * jnp.roll(spins, 1, -2)).sum((-1, -2))


def model(size: int, coupling: float):
    bits = numpyro.sample("b", dist.Bernoulli(0.5).expand([size, size]))
    numpyro.factor("coupling", coupling * neighbour_sum(2.0 * bits - 1.0))


def observables(bits: np.ndarray):
    """Energy per site and ``|m|`` of draws (..., L, L)."""
    spins = 2.0 * np.asarray(bits, np.float64) - 1.0
    energy = -np.asarray(neighbour_sum(jnp.asarray(spins))) / (spins.shape[-1] * spins.shape[-2])
    return energy, np.abs(spins.mean((-1, -2)))


def exact_4x4(coupling: float):
    states = np.array(list(itertools.product([0, 1], repeat=16)), np.float64).reshape(-1, 4, 4)
    energy, magnetisation = observables(states)
    weight = np.exp(-coupling * 16 * energy - (-coupling * 16 * energy).max())
    weight /= weight.sum()
    return float((weight * energy).sum()), float((weight * magnetisation).sum())


def samplers():
    return {
        "DMALA": (lambda m: nx.DMALA(m), "vectorized"),
        "GWG": (lambda m: nx.GWG(m), "vectorized"),
        "ACS": (lambda m: nx.ACS(m), "vectorized"),
        "DiscreteGibbs": (lambda m: DiscreteGibbs(m), "sequential"),
    }


def run(make, chain_method, size, coupling, num_warmup, num_samples, num_chains):
    mcmc = MCMC(
        make(model),
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=chain_method,
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(0), size, coupling)
    bits = np.asarray(mcmc.get_samples(group_by_chain=True)["b"])
    seconds = time.perf_counter() - start
    energy, magnetisation = observables(bits)
    # a Dataset of (chain, draw) arrays: arviz.summary and arviz.ess read it on ArviZ 0.2x and 1.x
    draws = az.convert_to_dataset({"energy": energy, "abs_m": magnetisation})
    return draws, seconds, bits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced mode (the test suite's)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "figures"))
    args = parser.parse_args()
    coupling = 0.4
    small = (100, 300, 2) if args.quick else (1000, 20_000, 4)
    exact_energy, exact_m = exact_4x4(coupling)
    print(
        f"4 x 4 lattice, J = {coupling}: exact energy per site {exact_energy:.4f}, "
        f"|m| {exact_m:.4f}"
    )
    print("| sampler | energy per site (MCSE) | z | abs m (MCSE) | z |")
    print("| --- | --- | --- | --- | --- |")
    for name, (make, method) in samplers().items():
        budget = small if name != "DiscreteGibbs" else (small[0] // 10, small[1] // 10, small[2])
        draws, _, _ = run(make, method, 4, coupling, *budget)
        summary = az.summary(draws)
        row = [name]
        for var, exact in (("energy", exact_energy), ("abs_m", exact_m)):
            mean, mcse = summary.loc[var, "mean"], summary.loc[var, "mcse_mean"]
            row += [f"{mean:.4f} ({mcse:.4f})", f"{(mean - exact) / max(mcse, 1e-12):+.1f}"]
        print("| " + " | ".join(row) + " |")

    size, results = (8, {}) if args.quick else (32, {})
    print(f"\n{size} x {size} lattice, J = {coupling}, 4 chains per sampler")
    for name, (make, method) in samplers().items():
        budget = (500, 5000, 4) if name != "DiscreteGibbs" else (20, 200, 4)
        if args.quick:
            budget = (20, 40, 4) if name != "DiscreteGibbs" else (2, 4, 4)
        draws, seconds, bits = run(make, method, size, coupling, *budget)
        results[name] = (draws, seconds, bits)
        ess = az.ess(draws)["abs_m"].item()
        print(f"{name}: {seconds:.1f} s, ESS of |m| {ess:.0f} ({ess / seconds:.1f} per second)")
        print(az.summary(draws)[SUMMARY_COLUMNS].to_string())
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [2.2, 1]})
    for name, (draws, seconds, _) in results.items():
        trace = draws["abs_m"].values[0]
        axes[0].plot(np.linspace(0, seconds / 4, len(trace)), trace, lw=0.6, label=name)
    axes[0].set_xlabel("seconds (chain 0; a quarter of each run)")
    axes[0].set_ylabel("|m|")
    axes[0].legend(fontsize=8)
    axes[1].imshow(results["DMALA"][2][0, -1], cmap="gray")
    axes[1].set_title("DMALA: last draw of chain 0")
    axes[1].axis("off")
    fig.tight_layout()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "ising.png", dpi=110)
    print(f"\nwrote {out / 'ising.png'}")


if __name__ == "__main__":
    main()
