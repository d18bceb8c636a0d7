"""20x20 critical Ising model in Pyro: ``pyro_ext.DMALA`` against ``pyro_ext.DiscreteGibbs``,
and the Pyro kernel's time per step against a plain torch loop of the same update.

Run ``python benchmarks/ising_pyro.py`` (``--quick`` for a smoke run); results are printed and
written into ``docs/benchmarks.md`` between this benchmark's markers. Every sampler gets the
same wall-clock budget per chain; medians over repeats.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import MCMC

import discrete_kernels as dk
import pyro_ext as px

SIDE = 20
COUPLING = 0.4407
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import write_section  # noqa: E402


def ising_log_density(x: torch.Tensor) -> torch.Tensor:
    """Log density (up to a constant) of spins ``s = 2x - 1`` on a periodic square lattice."""
    side = int(round(x.shape[-1] ** 0.5))
    s = (2.0 * x - 1.0).reshape(side, side)
    return COUPLING * (s * (s.roll(1, 0) + s.roll(1, 1))).sum()


def ising_model(side: int = SIDE) -> None:
    x = pyro.sample("x", dist.Bernoulli(0.5).expand([side * side]).to_event(1))
    pyro.factor("ising", ising_log_density(x))


def summaries(x: torch.Tensor) -> dict[str, np.ndarray]:
    """Energy and |magnetisation| per draw from draws (N, d)."""
    energy = torch.stack([-ising_log_density(row) for row in x])
    magnetisation = (2.0 * x - 1.0).mean(-1).abs()
    return {"energy": energy.numpy(), "|magnetisation|": magnetisation.numpy()}


def ess(values: np.ndarray) -> float:
    """ESS of one chain's draws (ArviZ's FFT estimator; Pyro's needs memory ~ draws^2)."""
    return float(az.ess(np.asarray(values, dtype=np.float64)[None, :]))


def run_for(kernel, seconds: float, warmup: int, seed: int, probe: int = 20):
    """Time a probe run, then run as many draws as fit in ``seconds``; returns draws, time."""
    pyro.set_rng_seed(seed)
    start = time.perf_counter()
    MCMC(kernel, num_samples=probe, warmup_steps=0, disable_progbar=True).run()
    per_draw = (time.perf_counter() - start) / probe
    num_samples = max(int(seconds / per_draw), 50)
    pyro.set_rng_seed(seed)
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, disable_progbar=True)
    start = time.perf_counter()
    mcmc.run()
    return mcmc, time.perf_counter() - start


def plain_loop(step_size: float, num_steps: int, log_density) -> float:
    """The same DMALA update as a plain torch loop over ``discrete_kernels.dlp_step``."""

    def local_fn(leaves):
        x = leaves[0].detach().clone().requires_grad_(True)
        f = log_density(x)
        (g,) = torch.autograd.grad(f, [x])
        return f.detach(), (g,)

    x = torch.bernoulli(torch.full((SIDE * SIDE,), 0.5))
    f, local = local_fn((x,))
    state = dk.ChainState((x,), f, local)
    start = time.perf_counter()
    for _ in range(num_steps):
        u = torch.rand(SIDE * SIDE + 1)
        state, _ = dk.dlp.dlp_step(
            state,
            [u[:-1]],
            u[-1],
            local_fn=local_fn,
            domains=[dk.Binary()],
            is_table=[False],
            step_size=step_size,
        )
    return time.perf_counter() - start


def model_log_density(x: torch.Tensor) -> torch.Tensor:
    """The Pyro model's log joint at ``x`` (what the kernel evaluates), via poutine."""
    return poutine.trace(poutine.condition(ising_model, data={"x": x})).get_trace().log_prob_sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small run, no docs update")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    budget = 5.0 if args.quick else 60.0
    overhead_steps = 200 if args.quick else 3000
    torch.set_num_threads(1)

    rows = {"DMALA": [], "DiscreteGibbs": []}
    step_sizes = []
    for repeat in range(args.repeats):
        for name in rows:
            if name == "DMALA":
                kernel, warmup = px.DMALA(ising_model), 500 if not args.quick else 50
            else:
                kernel, warmup = px.DiscreteGibbs(ising_model), 10
            mcmc, seconds = run_for(kernel, budget, warmup, repeat)
            x = mcmc.get_samples()["x"]
            record = {"seconds": seconds, "draws": x.shape[0]}
            for key, values in summaries(x).items():
                record[key] = ess(values)
            stats = px.to_arviz(mcmc).sample_stats
            record["accept"] = float(stats["acceptance_rate"].mean())
            record["flips"] = float(stats["hamming_distance"].mean())
            if name == "DMALA":
                step_sizes.append(float(stats["step_size"].values[0, 0]))
            rows[name].append(record)
            print(name, repeat, {k: round(v, 3) for k, v in record.items()}, flush=True)

    step_size = float(np.median(step_sizes))
    kernel_times, model_loop_times, direct_loop_times = [], [], []
    for repeat in range(args.repeats):
        pyro.set_rng_seed(repeat)
        mcmc = MCMC(
            px.DMALA(ising_model, step_size=step_size, adapt_step_size=False),
            num_samples=overhead_steps,
            warmup_steps=0,
            disable_progbar=True,
        )
        start = time.perf_counter()
        mcmc.run()
        kernel_times.append(time.perf_counter() - start)
        model_loop_times.append(plain_loop(step_size, overhead_steps, model_log_density))
        direct_loop_times.append(plain_loop(step_size, overhead_steps, ising_log_density))

    def median(name, key):
        return float(np.median([r[key] for r in rows[name]]))

    def ess_per_second(name, key):
        return float(np.median([r[key] / r["seconds"] for r in rows[name]]))

    def per_step(times):
        return 1e3 * float(np.median(times)) / overhead_steps

    lines = [
        "## Pyro: 20x20 Ising at the critical coupling J = 0.4407",
        "",
        f"Command: `python benchmarks/ising_pyro.py` (repeats = {args.repeats}); "
        f"{platform.machine()}, torch {torch.__version__} (1 thread), pyro {pyro.__version__}. "
        f"One chain per run with a budget of about {budget:.0f} s of sampling each (draw count "
        "set from a short probe run); ESS from ArviZ; medians over repeats.",
        "",
        "| sampler | draws | seconds | ESS energy | ESS abs(mag) | ESS/s energy "
        "| ESS/s abs(mag) | ratio vs DiscreteGibbs (energy, abs(mag)) | accept | flips/draw |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    base_e = ess_per_second("DiscreteGibbs", "energy")
    base_m = ess_per_second("DiscreteGibbs", "|magnetisation|")
    for name in rows:
        e, m = ess_per_second(name, "energy"), ess_per_second(name, "|magnetisation|")
        lines.append(
            f"| {name} | {int(median(name, 'draws'))} | {median(name, 'seconds'):.1f} "
            f"| {median(name, 'energy'):.0f} | {median(name, '|magnetisation|'):.0f} "
            f"| {e:.2f} | {m:.2f} | {e / base_e:.1f}x, {m / base_m:.1f}x "
            f"| {median(name, 'accept'):.2f} | {median(name, 'flips'):.1f} |"
        )
    lines += [
        "",
        f"DMALA's warmup adapted the step size to {step_size:.3f}. A DiscreteGibbs draw is a "
        "sweep of 400 single-site updates, each one model evaluation (Pyro's trace of the "
        "model), which is why its draws are few.",
        "",
        f"Time per step at that fixed step size ({overhead_steps} steps):",
        "",
        "| loop | ms/step | ratio to the plain loop |",
        "| --- | --- | --- |",
        f"| `pyro.infer.MCMC(px.DMALA(model))` | {per_step(kernel_times):.3f} "
        f"| {np.median(kernel_times) / np.median(model_loop_times):.2f}x |",
        "| plain torch loop of `discrete_kernels.dlp_step`, log density by tracing the same "
        f"Pyro model | {per_step(model_loop_times):.3f} | 1 |",
        "| plain torch loop, log density written directly in torch (no Pyro) "
        f"| {per_step(direct_loop_times):.3f} "
        f"| {np.median(direct_loop_times) / np.median(model_loop_times):.2f}x |",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.quick:
        write_section("ising_pyro", text, header=False)


if __name__ == "__main__":
    sys.exit(main())
