"""PlateGibbs as the EBM trainers' negative phase: mixing per second on a lattice Ising energy.

    python benchmarks/ebm_plate_gibbs.py [--quick]

The negative phase of PCD is a set of chains advanced a few steps per iteration on the current
energy; how fast they mix per second decides how good the model term is. On a lattice Ising
energy (``IsingEnergy(side)``, couplings ``J`` on the lattice's edges, no field) the trainers'
``PlateGibbs`` sweeps a checkerboard (found from the energy's single-site tables: two colours,
each drawn at once from its exact conditionals), where ``SiteGibbs`` updates one random
coordinate per step (``d`` steps for about one sweep) and the gradient kernels propose from the
energy's input gradient. Each sampler's chains (100) run ``--burn-in`` iterations, then
``--iterations`` timed ones (the trainers' own functions: ``numpyro_ext._ebm_chains.advance``
in one compiled ``lax.scan``, its second call timed; ``pyro_ext._ebm_chains.negative_samples``
eagerly, torch at one thread); the ESS of the chains' energies over the timed iterations per
second and the mean energy with its standard error (every sampler has the same target: their
means agree within a few standard errors where they mix). Writes the ``ebm_plate_gibbs``
section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpyro_ext as nx  # noqa: E402
import pyro_ext as px  # noqa: E402
from benchmarks._common import ess, write_section  # noqa: E402
from numpyro_ext import _ebm_chains as jax_chains  # noqa: E402
from numpyro_ext import ebm as jebm  # noqa: E402
from pyro_ext import _ebm_chains as torch_chains  # noqa: E402
from pyro_ext import ebm as tebm  # noqa: E402

CHAINS = 100


def samplers(backend: str, dim: int) -> dict:
    """Name -> (sampler, its steps per iteration)."""
    lib = nx if backend == "JAX" else px
    gibbs = jebm.SiteGibbs() if backend == "JAX" else tebm.SiteGibbs()
    return {
        "PlateGibbs": (lib.PlateGibbs(), 1),
        "SiteGibbs": (gibbs, dim),
        "DMALA": (lib.DMALA(step_size=0.5), 1),
        "GWG": (lib.GWG(), 1),
    }


def run_jax(side: int, coupling: float, burn_in: int, iterations: int) -> list[dict]:
    energy = jebm.IsingEnergy(side)
    dim = side * side
    params = {"couplings": coupling * energy.mask(), "field": jnp.zeros(dim)}
    rows = []
    for name, (sampler, steps) in samplers("JAX", dim).items():
        colours = jax_chains.plate_colouring(sampler, energy, params, dim)

        def scan(x, key, length, sampler=sampler, steps=steps, colours=colours):
            def body(x, k):
                x, _ = jax_chains.advance(sampler, energy, params, x, k, steps, dim, colours)
                return x, energy(params, x)

            return jax.lax.scan(body, x, jax.random.split(key, length))

        run = jax.jit(scan, static_argnums=2)
        start = (jax.random.uniform(jax.random.key(1), (CHAINS, dim)) < 0.5).astype(jnp.float32)
        x, _ = run(start, jax.random.key(2), burn_in)
        x, energies = run(x, jax.random.key(3), iterations)  # compiled: the timed call next
        began = time.perf_counter()
        x, energies = run(x, jax.random.key(4), iterations)
        energies.block_until_ready()
        rows.append(_row("JAX", side, name, steps, time.perf_counter() - began, energies))
        print(rows[-1], flush=True)
    return rows


def run_torch(side: int, coupling: float, burn_in: int, iterations: int) -> list[dict]:
    torch.manual_seed(0)
    energy = tebm.IsingEnergy(side)
    dim = side * side
    with torch.no_grad():
        energy.couplings.copy_(coupling * energy.mask)
    rows = []
    for name, (sampler, steps) in samplers("torch", dim).items():
        colours = torch_chains.plate_colouring(sampler, energy, torch.zeros((2, dim)))
        x = (torch.rand(CHAINS, dim) < 0.5).float()

        def advance(x, sampler=sampler, steps=steps, colours=colours):
            one = torch_chains.ONE_PROCESS
            return torch_chains.negative_samples(sampler, energy, x, steps, one, colours)[0]

        for _ in range(burn_in):
            x = advance(x)
        values = []
        began = time.perf_counter()
        for _ in range(iterations):
            x = advance(x)
            with torch.no_grad():
                values.append(energy(x))
        seconds = time.perf_counter() - began
        rows.append(_row("torch", side, name, steps, seconds, torch.stack(values).numpy()))
        print(rows[-1], flush=True)
    return rows


def _row(backend: str, side: int, name: str, steps: int, seconds: float, energies) -> dict:
    values = np.asarray(energies, np.float64).T  # (chains, iterations)
    value = ess(values)
    return dict(
        backend=backend,
        side=side,
        sampler=name,
        steps=steps,
        ms=1e3 * seconds / values.shape[1],
        ess=value,
        ess_per_second=value / seconds,
        mean=float(values.mean()),
        se=float(values.std() / np.sqrt(max(value, 1.0))),
    )


def table(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        "## PlateGibbs as the EBM negative phase (lattice Ising energy)",
        "",
        f"`IsingEnergy(side)` with coupling {args.coupling} on every lattice edge (open "
        f"boundaries) and no field, {CHAINS} chains from uniform random states, "
        f"{args.burn_in} iterations of burn-in, then {args.iterations} timed iterations (JAX: "
        "the trainer's `advance` in one compiled `lax.scan`, its second call timed; torch: "
        "`negative_samples` eagerly at one thread, the first sampler of each backend also "
        "paying its warm-up). An iteration: one checkerboard sweep (`PlateGibbs`, its two "
        "colours found from the energy's single-site tables), `d` single-site updates at "
        "random coordinates (`SiteGibbs`, about one sweep), one step (`DMALA` at step size "
        "0.5, `GWG`). ESS: of the chains' energies over the timed iterations. Mean energy "
        f"(standard error): every sampler has the same target. Load average "
        f"{os.getloadavg()[0]:.1f} at the end.",
        "",
        "| backend | side (d) | sampler | ms / iteration | ESS | ESS / s | mean energy (s.e.) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['side']} ({r['side'] ** 2}) | {r['sampler']} | "
            f"{r['ms']:.2f} | {r['ess']:.0f} | {r['ess_per_second']:.0f} | "
            f"{r['mean']:.2f} ({r['se']:.2f}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sides", default="8,12", help="JAX lattice sides")
    parser.add_argument("--torch-sides", default="8")
    parser.add_argument("--coupling", type=float, default=0.4)
    parser.add_argument("--burn-in", type=int, default=300)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--torch-iterations", type=int, default=400)
    parser.add_argument("--quick", action="store_true", help="small run, nothing written")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.quick:
        args.sides, args.torch_sides = "4", "4"
        args.burn_in, args.iterations, args.torch_iterations = 5, 20, 10
    rows = []
    for side in [int(s) for s in args.sides.split(",") if s]:
        rows += run_jax(side, args.coupling, args.burn_in, args.iterations)
    for side in [int(s) for s in args.torch_sides.split(",") if s]:
        rows += run_torch(side, args.coupling, args.burn_in, args.torch_iterations)
    text = table(rows, args)
    print(text)
    if not args.quick:
        write_section("ebm_plate_gibbs", text)


if __name__ == "__main__":
    main()
