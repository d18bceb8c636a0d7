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
from pathlib import Path

import jax.numpy as jnp

import numpyro_ext as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import accelerator, rbm_log_density, rbm_parameters  # noqa: E402
from device_step import mcmc_draws, mcmc_step_seconds  # noqa: E402
from scaling import kernel_step_seconds  # noqa: E402


class _StateOnly(nx.DMALA):
    """DMALA whose MCMC collects the state alone (no statistics)."""

    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z",)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--budget", type=float, default=0.5, help="seconds per timed loop")
    args = parser.parse_args()
    log_density = rbm_log_density(tuple(map(jnp.asarray, rbm_parameters(784, 500, scale=0.1))))
    sample = kernel_step_seconds(log_density, 784, args.chains, args.budget)
    draws = mcmc_draws(sample, args.budget, args.chains, 784)
    rows = {"`nx.DMALA.sample` loop": sample}
    for label, kernel_class in (
        ("MCMC, default fields", nx.DMALA),
        ("MCMC, state only", _StateOnly),
    ):
        seconds, _ = mcmc_step_seconds(
            log_density, 784, args.chains, draws, kernel_class=kernel_class
        )
        rows[label] = seconds
    print(f"{accelerator() or 'CPU'}; RBM 784 x 500, {args.chains} chains, n = {draws}")
    print("| loop | µs per step |\n| --- | --- |")
    for label, seconds in rows.items():
        print(f"| {label} | {seconds * 1e6:,.1f} |")


if __name__ == "__main__":
    main()
