"""Cost of a UCD iteration against a CD-1 iteration at equal batch, both trainers.

    python benchmarks/ucd_cost.py [--quick] [--write]

The RBM (16 visible, 16 hidden) is trained on 4 x 4 bars-and-stripes by CD-1 (JAX trainer,
SGD 0.05, batch 1,000) for 300 iterations ("early") and for 3,000 ("trained", the setting of
issue 37); from each, one trainer call of ``--iterations`` iterations of CD-1 and of UCD
(coupled block Gibbs, ``k = 1``) runs from the same parameters with batch 1,000, and the
median time per iteration over interleaved repeats is printed with the ratio UCD / CD-1 and
UCD's mean meeting time. The lr is 0 in the timed runs (SGD 0), so every repeat times the
same model. ``--write`` writes the table into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import write_section  # noqa: E402
from discrete_kernels import ebm as core  # noqa: E402
from numpyro_ext import ebm as jebm  # noqa: E402
from pyro_ext import ebm as tebm  # noqa: E402


def trained_params(iterations: int) -> core.RBMParams:
    """CD-1 from a fixed start, SGD 0.05, batch 1,000 (JAX trainer)."""
    data = jnp.asarray(core.bars_and_stripes(), jnp.float32)
    rbm = jebm.RBM(16, 16)
    result = jebm.train(
        rbm,
        rbm.init(jax.random.key(0)),
        data,
        optimizer=optax.sgd(0.05),
        method=jebm.CD(1),
        num_steps=iterations,
        batch_size=1000,
        rng_key=jax.random.key(1),
        progress_bar=False,
    )
    return result.params


def jax_runner(params, method, iterations: int, batch: int):
    data = jnp.asarray(core.bars_and_stripes(), jnp.float32)
    rbm = jebm.RBM(16, 16)
    optimizer = optax.sgd(0.0)  # one object: the trainer's compiled update is cached on it

    def run(seed: int) -> dict:
        result = jebm.train(
            rbm,
            params,
            data,
            optimizer=optimizer,
            method=method,
            num_steps=iterations,
            batch_size=batch,
            rng_key=jax.random.key(seed),
            progress_bar=False,
        )
        jax.block_until_ready(result.params)
        return result.history

    return run


def torch_runner(params, method, iterations: int, batch: int):
    data = torch.as_tensor(core.bars_and_stripes(), dtype=torch.float32)
    rbm = tebm.RBM(16, 16)
    with torch.no_grad():
        for target, value in zip(rbm.rbm_params(), params):
            target.copy_(torch.as_tensor(np.array(value)))

    def run(seed: int) -> dict:
        torch.manual_seed(seed)
        optimizer = torch.optim.SGD(rbm.parameters(), lr=0.0)
        result = tebm.train(
            rbm,
            data,
            optimizer=optimizer,
            method=method,
            num_steps=iterations,
            batch_size=batch,
            progress_bar=False,
        )
        return result.history

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--torch-threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)"
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)  # a busy machine: no spinning thread pool
    if args.quick:
        args.iterations, args.repeats = 5, 2
    rows = []
    for label, pretrain in (("early (300 CD-1 its)", 300), ("trained (3,000 CD-1 its)", 3000)):
        params = trained_params(pretrain)
        for backend, runner in (("JAX", jax_runner), ("torch", torch_runner)):
            runs = {
                "CD-1": runner(params, core.CD(1), args.iterations, args.batch),
                "UCD": runner(params, core.UCD(k=1, max_time=100_000), args.iterations, args.batch),
            }
            for run in runs.values():
                run(0)  # compile / warm up
            times: dict[str, list[float]] = {name: [] for name in runs}
            tau: list[float] = []
            for r in range(args.repeats):
                for name, run in runs.items():
                    start = time.perf_counter()
                    history = run(r + 1)
                    times[name].append((time.perf_counter() - start) / args.iterations)
                    if name == "UCD":
                        tau.append(float(np.mean(history["meeting_time"])))
            cd, ucd = np.median(times["CD-1"]), np.median(times["UCD"])
            rows.append(
                f"| {label} | {backend} | {1e3 * cd:.2f} | {1e3 * ucd:.2f} | {ucd / cd:.1f} "
                f"| {np.mean(tau):.1f} |"
            )
            print(rows[-1], flush=True)
    load = os.getloadavg()[0]
    text = "\n".join(
        [
            f"RBM 16x16 on bars-and-stripes, batch {args.batch}, {args.iterations} iterations "
            f"per call, median of {args.repeats} interleaved repeats; load average "
            f"{load:.1f} at the end; torch threads {torch.get_num_threads()}.",
            "",
            "| model | trainer | CD-1 ms/it | UCD ms/it | UCD / CD-1 | mean meeting time |",
            "| --- | --- | --- | --- | --- | --- |",
            *rows,
        ]
    )
    print(text)
    if args.write:
        write_section("ucd_cost", text)


if __name__ == "__main__":
    main()
