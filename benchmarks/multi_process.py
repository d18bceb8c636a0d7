"""Two local processes against one, both runtimes: the wall time of the same sampling run
(vectorised DMALA chains in JAX, ``pyro_ext.distributed.run_chains`` in Pyro) and of the same
EBM training, on loopback (gloo). Each configuration runs as fresh processes (imports,
``initialize``, compilation and the final gather included), interleaved over repetitions;
the table gives the medians and the ratio two/one.

    python benchmarks/multi_process.py [--quick] [--repeats 3] [--write-doc]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def jax_work(process_id: int, num_processes: int, port: int, size: dict) -> dict:
    """Sampling then training in JAX; the seconds each phase took in this process."""
    import jax

    from numpyro_ext import distributed

    if num_processes > 1:
        distributed.initialize(f"127.0.0.1:{port}", num_processes, process_id)
    import numpyro
    import numpyro.distributions as dist
    import optax
    from numpyro.infer import MCMC

    import numpyro_ext as nx
    from discrete_kernels.ebm import bars_and_stripes
    from numpyro_ext import ebm

    dim = size["dim"]

    def model():
        x = numpyro.sample("x", dist.Bernoulli(0.5).expand([dim]))
        numpyro.factor("coupling", 0.3 * (x[:-1] * x[1:]).sum())

    start = time.perf_counter()
    draws, chains = size["draws"], size["chains"]
    mcmc = MCMC(nx.DMALA(model), num_warmup=draws, num_samples=draws, num_chains=chains,
                chain_method="vectorized", progress_bar=False)  # fmt: skip
    mcmc.run(jax.random.key(0))
    distributed.to_arviz(mcmc)
    sampled = time.perf_counter()
    data, rbm = bars_and_stripes(), ebm.RBM(16, 32)
    result = ebm.train(rbm, rbm.init(jax.random.key(0)), data, optimizer=optax.adam(0.01),
                       method=ebm.PCD(steps=5), num_steps=size["steps"], batch_size=64,
                       rng_key=jax.random.key(1), progress_bar=False)  # fmt: skip
    jax.block_until_ready(result.params)
    return {"sample": sampled - start, "train": time.perf_counter() - sampled}


def torch_work(process_id: int, num_processes: int, port: int, size: dict) -> dict:
    """Sampling then training in Pyro; the seconds each phase took in this process."""
    import torch

    torch.set_num_threads(1)
    from pyro_ext import distributed

    if num_processes > 1:
        distributed.initialize(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=process_id,
            world_size=num_processes,
        )  # fmt: skip
    import pyro
    import pyro.distributions as dist
    from pyro.infer import MCMC

    import pyro_ext as px
    from discrete_kernels.ebm import bars_and_stripes
    from pyro_ext import ebm

    dim = size["dim"]

    def model():
        x = pyro.sample("x", dist.Bernoulli(0.5 * torch.ones(dim)).to_event(1))
        pyro.factor("coupling", 0.3 * (x[:-1] * x[1:]).sum())

    def make_mcmc():
        return MCMC(px.DMALA(model), num_samples=size["draws"], warmup_steps=size["draws"],
                    disable_progbar=True)  # fmt: skip

    start = time.perf_counter()
    distributed.run_chains(make_mcmc, size["torch_chains"], 0)
    sampled = time.perf_counter()
    torch.manual_seed(0)
    rbm = ebm.RBM(16, 32)
    data = torch.as_tensor(bars_and_stripes(), dtype=torch.float32)
    distributed.train(rbm, data, optimizer=torch.optim.Adam(rbm.parameters(), lr=0.01),
                      method=ebm.PCD(steps=5), num_steps=size["steps"], batch_size=64, seed=0,
                      progress_bar=False)  # fmt: skip
    return {"sample": sampled - start, "train": time.perf_counter() - sampled}


SIZES = {
    "full": {"dim": 100, "chains": 8, "torch_chains": 4, "draws": 500, "steps": 300},
    "quick": {"dim": 10, "chains": 4, "torch_chains": 2, "draws": 20, "steps": 10},
}


def launch(runtime: str, num_processes: int, size: str) -> tuple[float, dict]:
    """Wall seconds of one run with ``num_processes`` fresh processes, and process 0's phases."""
    from tests.multiprocess import free_port, last_json

    port = str(free_port())
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", runtime, str(i), str(num_processes), port, size],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(num_processes)
    ]
    outputs = [proc.communicate(timeout=600) for proc in procs]
    wall = time.perf_counter() - start
    for proc, (_, err) in zip(procs, outputs, strict=True):
        if proc.returncode:
            raise RuntimeError(err[-3000:])
    return wall, last_json(outputs[0][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write-doc", action="store_true")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        runtime, process_id, num_processes, port, size = args.worker
        work = jax_work if runtime == "jax" else torch_work
        print(json.dumps(work(int(process_id), int(num_processes), int(port), SIZES[size])))
        return
    size = "quick" if args.quick else "full"
    repeats = 1 if args.quick else args.repeats
    results: dict = {}
    for _ in range(repeats):  # interleaved: one, two, one, two ...
        for runtime in ("jax", "torch"):
            for n in (1, 2):
                wall, phases = launch(runtime, n, size)
                row = results.setdefault((runtime, n), {"wall": [], "sample": [], "train": []})
                row["wall"].append(wall)
                row["sample"].append(phases["sample"])
                row["train"].append(phases["train"])
    lines = [
        f"sizes: {SIZES[size]}; medians of {repeats} interleaved runs; load: "
        f"{os.getloadavg()[0]:.1f} (1-min average at the end)",
        "",
        "| runtime | processes | whole run (s) | sampling (s) | training (s) | two/one whole |",
        "|---|---|---|---|---|---|",
    ]
    for runtime in ("jax", "torch"):
        med = {
            n: {k: float(np.median(v)) for k, v in results[(runtime, n)].items()} for n in (1, 2)
        }
        for n in (1, 2):
            ratio = f"{med[2]['wall'] / med[1]['wall']:.2f}" if n == 2 else ""
            lines.append(
                f"| {runtime} | {n} | {med[n]['wall']:.1f} | {med[n]['sample']:.1f} | "
                f"{med[n]['train']:.1f} | {ratio} |"
            )
    text = "\n".join(lines)
    print(text)
    if args.write_doc:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from _common import write_section

        write_section("multi_process", text)


if __name__ == "__main__":
    main()
