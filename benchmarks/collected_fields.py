"""What NumPyro's collection of a kernel's statistics costs per step, on the device at hand.

``python benchmarks/collected_fields.py`` times ``MCMC(nx.DMALA)`` on the DLP paper's RBM
(784 x 500, 100 vectorised chains, step 0.2) as ``benchmarks/device_step.py`` does (steady
state from the difference of runs of n and 2n draws), once with the kernel's default fields
(the state and five statistics) and once keeping only the state. NumPyro's collection loop
updates each collected field under its own ``lax.cond`` every iteration; on the CPU that is
cheap, and this measures whether it is on an accelerator (on an H200 the whole ``MCMC`` step
cost about 70 µs more than the library's step in a plain compiled loop). Prints only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

import numpyro_ext as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import accelerator, rbm_log_density, rbm_parameters  # noqa: E402
from scaling import STEP_SIZE, kernel_step_seconds  # noqa: E402


class _StateOnly(nx.DMALA):
    """DMALA whose MCMC collects the state alone (no statistics)."""

    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z",)


def mcmc_seconds_per_step(kernel_class, log_density, d: int, chains: int, draws: int) -> float:
    """Steady-state seconds per step of ``MCMC(kernel_class(...))``: best of two runs of
    ``draws`` and of ``2 draws`` steps, every 10th state kept, their difference per step."""
    kernel = kernel_class(
        potential_fn=lambda x: -log_density(x),
        domain=nx.Binary(),
        step_size=STEP_SIZE,
        adapt_step_size=False,
    )
    x0 = jax.random.bernoulli(jax.random.key(1), 0.5, (chains, d)).astype(jnp.int32)
    seconds = {}
    for n in (draws, 2 * draws):
        mcmc = MCMC(
            kernel,
            num_warmup=0,
            num_samples=n,
            num_chains=chains,
            chain_method="vectorized",
            progress_bar=False,
            thinning=10,
        )
        best = np.inf
        for _ in range(2):
            start = time.perf_counter()
            mcmc.run(jax.random.key(0), init_params=x0)
            jax.block_until_ready(mcmc.last_state)
            best = min(best, time.perf_counter() - start)
        seconds[n] = best
    return max(seconds[2 * draws] - seconds[draws], 1e-9) / draws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--budget", type=float, default=0.5, help="seconds per timed loop")
    args = parser.parse_args()
    log_density = rbm_log_density(tuple(map(jnp.asarray, rbm_parameters(784, 500, scale=0.1))))
    sample = kernel_step_seconds(log_density, 784, args.chains, args.budget)
    draws = int(max(20, 4 * args.budget / sample))
    rows = {"`nx.DMALA.sample` loop": sample}
    for label, kernel_class in (
        ("MCMC, default fields", nx.DMALA),
        ("MCMC, state only", _StateOnly),
    ):
        rows[label] = mcmc_seconds_per_step(kernel_class, log_density, 784, args.chains, draws)
    print(f"{accelerator() or 'CPU'}; RBM 784 x 500, {args.chains} chains, n = {draws}")
    print("| loop | µs per step |\n| --- | --- |")
    for label, seconds in rows.items():
        print(f"| {label} | {seconds * 1e6:,.1f} |")


if __name__ == "__main__":
    main()
