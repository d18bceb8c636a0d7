"""Run the benchmarks and regenerate ``docs/benchmarks.md``: ``python -m benchmarks``.

``python -m benchmarks`` runs every script below in turn, each in its own process (so each
starts with a fresh JAX and measures only itself), and each writes its own section of
``docs/benchmarks.md`` with its command and the machine. ``--quick`` runs each script's smoke
mode (small sizes, nothing written); names select scripts (``python -m benchmarks scaling``);
``--list`` prints them.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: scripts outside benchmarks/ that the command runs, with the arguments of the full run
EXTERNAL = {
    "bnn_width": (
        "examples/binary_bnn.py",
        [
            "--dataset",
            "both",
            "--paper-width",
            "--seconds",
            "60",
            "--write-doc",
            "--out",
            "docs/figures/gallery",
        ],
    ),
    "pyro_bnn_width": (
        "examples/pyro_binary_bnn.py",
        [
            "--dataset",
            "both",
            "--paper-width",
            "--seconds",
            "60",
            "--write-doc",
            "--out",
            "docs/figures/gallery",
        ],
    ),
}

#: every benchmark, in the order the full run takes them
SCRIPTS = {
    "scaling": "time per step against d and chains, paper scale, memory",
    "device_step": "a DMALA step on the device at hand against a hand-written one and the paper's",
    "collected_fields": "MCMC(nx.DMALA) with its statistics collected against the state only",
    "small_models": "small models: MCMC(nx.DMALA) and px.DMALA against plain loops, DiscreteGibbs",
    "ising_ess": "Ising lattices: DMALA's ESS/s against DiscreteGibbs under the ratio rule",
    "discs": "DISCS's classical models and metric (Hamming-distance ESS per s and per evaluation)",
    "ising_numpyro": "critical 20x20 Ising: DMALA and GWG against NumPyro's DiscreteGibbs",
    "ising_pyro": "critical 20x20 Ising in Pyro against pyro_ext.DiscreteGibbs",
    "mixed_gibbs": "spike-and-slab: Gibbs(DMALA or AB, NUTS) against DiscreteHMCGibbs",
    "bnn_width": "paper-width binary BNNs: every kernel against DiscreteGibbs, equal wall time",
    "pyro_bnn_width": "the same in Pyro against pyro_ext.DiscreteGibbs",
    "rbm_acs": "mode-initialised RBM: MMD over steps for DMALA, AB and ACS",
    "acs_jump_distance": "ACS's multimodal target: acceptance and jump distance per step size",
    "acs_bnn": "ACS against DMALA on the demo's binary BNN, per seed, counted in steps",
    "ab_targets": "AB variants against DMALA on the AB paper's four targets",
    "esh_targets": "ESH against NUTS, MALA and ULA on the ESH paper's targets",
    "ucd_couplings": "UCD: meeting times of the two couplings",
    "ucd_cost": "UCD against CD-1 per iteration on an early and a trained RBM, both trainers",
    "ucd_noise": "UCD's gradient noise against CD-k and the exact gradient on bars-and-stripes",
    "ebm_trainer_overhead": "EBM trainer against a plain jitted update",
    "ebm_pcd_kernels": "PCD with library kernels: the torch trainer against the JAX one",
    "ebm_plate_gibbs": "PlateGibbs as the EBM negative phase: mixing per second on an Ising energy",
    "plate_table_cost": "a plate site's exact table against one value_and_grad, N to 10^5",
    "pyro_chain": "Pyro's PlateGibbs colour sweep on a chain against DiscreteGibbs and DMALA",
    "pyro_paired": "Pyro's PairedGibbs on variable selection against DiscreteGibbs and DMALA",
    "user_suite": "models users write, exact answers: every kernel against NumPyro's built-ins",
    "multi_process": "two local processes against one, JAX and torch: sampling and EBM training",
    "count_models": "count latents: DMALA's window proposal against DiscreteHMCGibbs",
}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", help="scripts to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="smoke runs; nothing written")
    parser.add_argument("--list", action="store_true", help="list the scripts and exit")
    args = parser.parse_args()
    if args.list:
        for name, what in SCRIPTS.items():
            print(f"{name:22s} {what}")
        return 0
    unknown = [n for n in args.names if n not in SCRIPTS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(SCRIPTS)}")
    failed = []
    for name in args.names or SCRIPTS:
        script, full = EXTERNAL.get(name, (f"benchmarks/{name}.py", []))
        command = [sys.executable, str(HERE.parent / script)]
        command += ["--quick"] if args.quick else full
        print(f"== {name}: {' '.join(command[1:])}", flush=True)
        start = time.perf_counter()
        code = subprocess.call(command, cwd=HERE.parent)
        print(f"== {name}: exit {code} after {time.perf_counter() - start:.0f} s", flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
