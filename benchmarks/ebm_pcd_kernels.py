"""Time per PCD iteration of the JAX and torch EBM trainers with the library's kernels.

    python benchmarks/ebm_pcd_kernels.py [--quick] [--write]

RBM 16x16 on 4 x 4 bars-and-stripes, PCD with 100 chains (one step per iteration) and each
of DMALA, GWG, AB and ACS; each trainer runs ``--iterations`` iterations per call after a
warm-up call (compilation), the calls interleaved over ``--repeats`` repeats; printed are the
medians per iteration and the ratio torch / JAX. The torch trainer steps all chains at once
(as the rows of one leaf, ``Sites.chains_in_rows``; ACS's re-tuning runs with
``torch.func.vmap`` of the spec's one-chain step), eagerly and with ``torch_compile=True``
(each iteration one ``torch.compile`` program; not for ACS's PCD schedule).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpyro_ext as nx  # noqa: E402
import pyro_ext as px  # noqa: E402
from benchmarks._common import write_section  # noqa: E402
from discrete_kernels import ebm as core  # noqa: E402
from numpyro_ext import ebm as jebm  # noqa: E402
from pyro_ext import ebm as tebm  # noqa: E402

KERNELS = {
    "DMALA": (lambda: nx.DMALA(step_size=0.5), lambda: px.DMALA(step_size=0.5)),
    "GWG": (nx.GWG, px.GWG),
    "AB": (nx.AB, px.AB),
    "ACS": (nx.ACS, px.ACS),
}


def time_kernel(name: str, args: argparse.Namespace, data: np.ndarray) -> dict:
    """Seconds per iteration of both trainers, per repeat."""
    jax_kernel, torch_kernel = KERNELS[name]
    rbm = jebm.RBM(16, 16)
    params = rbm.init(jax.random.key(0), scale=0.5)
    jax_method = core.PCD(sampler=jax_kernel(), num_chains=args.chains)
    torch_method = core.PCD(sampler=torch_kernel(), num_chains=args.chains)
    torch_rbm = tebm.RBM(16, 16)
    optimizer = optax.sgd(0.01)  # one object: the trainer's compiled update is cached on it
    with torch.no_grad():
        for target, value in zip(torch_rbm.rbm_params(), params):
            target.copy_(torch.as_tensor(np.array(value)))

    def run_jax(seed: int, length: int) -> None:
        result = jebm.train(
            rbm,
            params,
            jnp.asarray(data),
            optimizer=optimizer,
            method=jax_method,
            num_steps=length,
            batch_size=args.chains,
            rng_key=jax.random.key(seed),
            progress_bar=False,
        )
        jax.block_until_ready(result.params)

    def run_torch(seed: int, length: int, compiled: bool = False) -> None:
        torch.manual_seed(seed)
        tebm.train(
            torch_rbm,
            torch.as_tensor(data),
            optimizer=torch.optim.SGD(torch_rbm.parameters(), lr=0.01),
            method=torch_method,
            num_steps=length,
            batch_size=args.chains,
            progress_bar=False,
            torch_compile=compiled,
        )

    runs = {"JAX": run_jax, "torch": run_torch}
    if name != "ACS":  # ACS's PCD schedule runs eagerly only
        runs["compiled"] = lambda seed, length: run_torch(seed, length, compiled=True)
    for run in runs.values():
        run(0, args.iterations)  # compile / warm up
    times: dict[str, list[float]] = {backend: [] for backend in runs}
    for r in range(args.repeats):
        for backend, run in runs.items():
            start = time.perf_counter()
            run(r + 1, args.iterations)
            times[backend].append((time.perf_counter() - start) / args.iterations)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--kernels", default="DMALA,GWG,AB,ACS")
    parser.add_argument(
        "--torch-threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)"
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)  # a busy machine: no spinning thread pool
    if args.quick:
        args.iterations, args.repeats, args.kernels = 5, 1, "DMALA"
    data = core.bars_and_stripes()
    rows = []
    for name in args.kernels.split(","):
        times = time_kernel(name, args, data)
        j, t = np.median(times["JAX"]), np.median(times["torch"])
        c = np.median(times["compiled"]) if "compiled" in times else math.nan
        cells = [
            f"{1e3 * j:.2f}",
            f"{1e3 * t:.2f}",
            f"{t / j:.2f}",
            f"{1e3 * c:.2f}",
            f"{c / j:.2f}",
        ]
        rows.append(f"| {name} | {' | '.join(cells)} |")
        print(rows[-1], flush=True)
    text = "\n".join(
        [
            f"PCD, RBM 16x16, {args.chains} chains, one step per iteration, {args.iterations} "
            f"iterations per call, median of {args.repeats} interleaved repeats; load "
            f"average {os.getloadavg()[0]:.1f} at the end; torch threads "
            f"{torch.get_num_threads()}.",
            "",
            "| kernel | JAX ms/it | torch ms/it | torch / JAX | torch_compile=True ms/it "
            "| compiled / JAX |",
            "| --- | --- | --- | --- | --- | --- |",
            *rows,
        ]
    )
    print(text)
    if args.write:
        write_section("ebm_pcd_kernels", text)


if __name__ == "__main__":
    main()
