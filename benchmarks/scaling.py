"""Scaling with dimension and chains: the cost of a DMALA step against its floor, one batched
``value_and_grad`` of the same target (ESS per second: ``benchmarks/ising_ess.py``).

Sections written into ``docs/benchmarks.md`` (markers ``scaling``) with two figures under
``docs/figures/``:

1. **Time per step against d** (``scaling_dimension.png``): the 2-D Ising model written with
   shifted lattices (cost linear in d) and with a dense coupling matrix (as a user writes it,
   cost d^2), and RBM visible marginals of growing width; 1 and 100 vectorised chains. The
   kernel's step is ``nx.DMALA(...).sample`` in a compiled loop (the driver's whole step:
   noise, proposal, MH, statistics, adaptation branch); the floor is the same loop around one
   ``vmap(value_and_grad)`` of the target. Steady state (second call of the compiled loop).
2. **Time per chain-step against vectorised chains** (``scaling_chains.png``), 1 to 1,024.
3. **ESS per second against one-site Gibbs**: moved to ``benchmarks/ising_ess.py`` (section
   ``ising_ess``), which runs each sampler until its ESS reaches 400 and prints ratios only
   under the ratio rule of ``benchmarks/_common.py``.
4. **Paper scale and memory**: the DLP paper's RBM sampling step (784 x 500, 100 chains,
   step 0.2) against a torch implementation of the paper's step; chains split over two host
   devices; peak memory at 10^4 - 10^6 binary variables and with 1,000 chains.

Run ``python benchmarks/scaling.py`` (``--quick`` for a smoke run that writes nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from numpyro.infer import MCMC

import numpyro_ext as nx

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    CRITICAL_COUPLING,
    FIGURES,
    ROOT,
    dense_ising_log_density,
    ising_coupling_matrix,
    ising_log_density,
    rbm_log_density,
    rbm_parameters,
    timed,
    write_section,
)

STEP_SIZE = 0.2  # DMALA's step for the timing runs (acceptance does not change the cost)
ROWS = FIGURES / "scaling_rows.json"  # the measured rows behind the figures (for --replot)


# ------------------------------------------------------------------------------ step timing


def _compiled_loop(body, carry):
    """A jitted ``n -> carry after n bodies`` (n dynamic: one compilation for every length)."""
    return jax.jit(lambda c, n: jax.lax.fori_loop(0, n, lambda i, s: body(s), c))


def _seconds_per_step(loop, carry, budget: float) -> float:
    """Steady-state seconds per iteration of ``loop``: a calibration call (compiles), then a
    run of about ``budget`` seconds."""
    jax.block_until_ready(loop(carry, 2))
    _, seconds = timed(loop, carry, 2)
    num = int(max(3, min(100_000, 2 * budget / max(seconds, 1e-7))))
    _, seconds = timed(loop, carry, num)
    return seconds / num


def kernel_step_seconds(log_density, d: int, chains: int, budget: float) -> float:
    """Seconds per step of ``nx.DMALA`` (energy mode, fixed step size) on ``chains``
    vectorised chains; the whole driver step (noise, proposal, MH, statistics)."""
    kernel = nx.DMALA(
        potential_fn=lambda x: -log_density(x),
        domain=nx.Binary(),
        step_size=STEP_SIZE,
        adapt_step_size=False,
    )
    keys = jax.random.split(jax.random.key(0), chains)
    x0 = jax.random.bernoulli(jax.random.key(1), 0.5, (chains, d)).astype(jnp.int32)
    state = kernel.init(keys, 0, x0, (), {})
    loop = _compiled_loop(lambda s: kernel.sample(s, (), {}), state)
    return _seconds_per_step(loop, state, budget)


def floor_step_seconds(log_density, d: int, chains: int, budget: float) -> float:
    """Seconds per batched ``value_and_grad`` of the target over ``chains`` points."""
    value_and_grad = jax.vmap(jax.value_and_grad(log_density))

    def body(carry):
        x, total = carry
        f, g = value_and_grad(x)
        return x + 1e-30 * g, total + f.sum()  # a data dependence the compiler keeps

    x0 = jax.random.bernoulli(jax.random.key(1), 0.5, (chains, d)).astype(jnp.float32)
    carry = (x0, jnp.zeros(()))
    return _seconds_per_step(_compiled_loop(body, carry), carry, budget)


def targets(quick: bool) -> dict[str, list[tuple[int, object]]]:
    """Per family, ``(d, log_density)`` in growing d."""
    ising_sides = [10] if quick else [10, 20, 50, 100, 200, 300]
    dense_sides = [10] if quick else [10, 20, 32, 50, 70]
    widths = [100] if quick else [100, 300, 1000, 3000]
    return {
        "Ising, shifted lattices": [
            (s * s, lambda x: ising_log_density(x, CRITICAL_COUPLING)) for s in ising_sides
        ],
        "Ising, dense matrix": [
            (s * s, dense_ising_log_density(jnp.asarray(ising_coupling_matrix(s))))
            for s in dense_sides
        ],
        "RBM, hidden = visible": [
            (w, rbm_log_density(tuple(map(jnp.asarray, rbm_parameters(w, w))))) for w in widths
        ],
    }


def dimension_sweep(quick: bool, chain_counts: tuple[int, ...]) -> list[dict]:
    budget = 0.1 if quick else 0.6
    rows = []
    for family, items in targets(quick).items():
        for d, log_density in items:
            for chains in chain_counts:
                step = kernel_step_seconds(log_density, d, chains, budget)
                floor = floor_step_seconds(log_density, d, chains, budget)
                rows.append(dict(family=family, d=d, chains=chains, step=step, floor=floor))
                print(rows[-1], flush=True)
    return rows


def chain_sweep(quick: bool) -> list[dict]:
    budget = 0.1 if quick else 0.6
    counts = [1, 4] if quick else [1, 4, 16, 64, 256, 1024]
    cases = {
        "Ising 20x20, dense matrix": (
            400,
            dense_ising_log_density(jnp.asarray(ising_coupling_matrix(20))),
        ),
        "Ising 100x100, shifted lattices": (10_000, ising_log_density),
    }
    if quick:
        cases.pop("Ising 100x100, shifted lattices")
    rows = []
    for name, (d, log_density) in cases.items():
        for chains in counts:
            step = kernel_step_seconds(log_density, d, chains, budget)
            floor = floor_step_seconds(log_density, d, chains, budget)
            rows.append(dict(case=name, d=d, chains=chains, step=step, floor=floor))
            print(rows[-1], flush=True)
    return rows


# ------------------------------------------------------------------------------ paper scale


def torch_dlp_step(params, chains: int, device: str | None = None):
    """The DLP paper's binary DMALA step as its reference code writes it in torch (a
    gradient of the summed log density for each of the forward and reverse flip
    probabilities, the two log densities evaluated again for the MH ratio, ``log(p + 1e-10)``
    for the proposal probabilities, temperature 2 in the difference, the acceptance read back
    every step): ``(step, x, accepted)``, the step function, a start of ``chains`` rows on
    ``device`` (default: CUDA where present, else the CPU) and the list it appends each
    step's mean acceptance to."""
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    w, b, c = (torch.as_tensor(np.asarray(p), device=device) for p in params)

    def log_density(x):
        return x @ b + torch.nn.functional.softplus(x @ w + c).sum(-1)

    def difference(x):
        x = x.detach().requires_grad_()
        (grad,) = torch.autograd.grad(log_density(x).sum(), x)
        return (grad * -(2.0 * x - 1.0)).detach() / 2.0

    generator = torch.Generator(device=device).manual_seed(0)
    x = (torch.rand(chains, w.shape[0], generator=generator, device=device) < 0.5).float()
    term = 1.0 / (2.0 * STEP_SIZE)
    accepted: list[float] = []

    def step(x):
        forward = torch.sigmoid(difference(x) - term)
        flip = (torch.rand(x.shape, generator=generator, device=device) < forward).float()
        y = (1.0 - x) * flip + x * (1.0 - flip)
        lp_forward = torch.log(forward * flip + (1 - forward) * (1 - flip) + 1e-10).sum(-1)
        reverse = torch.sigmoid(difference(y) - term)
        lp_reverse = torch.log(reverse * flip + (1 - reverse) * (1 - flip) + 1e-10).sum(-1)
        log_ratio = log_density(y) - log_density(x) + lp_reverse - lp_forward
        uniform = torch.rand(chains, generator=generator, device=device)
        accept = (log_ratio.exp() > uniform).float()
        accepted.append(float(accept.mean()))
        return y * accept[:, None] + x * (1.0 - accept[:, None])

    return step, x, accepted


def torch_dlp_step_seconds(
    params, chains: int, num_steps: int, device: str | None = None
) -> tuple[float, float]:
    """Seconds per step and mean acceptance of :func:`torch_dlp_step` on ``device``
    (default: CUDA where present, else the CPU with torch's default threads)."""
    import torch

    step, x, accepted = torch_dlp_step(params, chains, device)
    on_cuda = x.device.type == "cuda"
    for _ in range(5):
        x = step(x)
    if on_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(num_steps):
        x = step(x)
    if on_cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / num_steps, float(np.mean(accepted))


def rbm_paper_row(quick: bool) -> dict:
    """784 x 500 RBM, 100 chains, step 0.2: ``nx.DMALA`` through ``MCMC`` (a run of
    ``steps`` draws, compile included) and the kernel's step, against the torch step."""
    params = rbm_parameters(784, 500, scale=0.1)
    log_density = rbm_log_density(tuple(map(jnp.asarray, params)))
    chains, steps = 100, (10 if quick else 2000)
    kernel = nx.DMALA(
        potential_fn=lambda x: -log_density(x),
        domain=nx.Binary(),
        step_size=STEP_SIZE,
        adapt_step_size=False,
    )
    x0 = jax.random.bernoulli(jax.random.key(1), 0.5, (chains, 784)).astype(jnp.int32)

    mcmc = MCMC(
        kernel,
        num_warmup=0,
        num_samples=steps,
        num_chains=chains,
        chain_method="vectorized",
        progress_bar=False,
        thinning=10,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(0), init_params=x0)
    jax.block_until_ready(mcmc.last_state)
    mcmc_step = (time.perf_counter() - start) / steps
    accept = float(np.mean(mcmc.get_extra_fields()["accept_prob"]))
    jax_step = kernel_step_seconds(log_density, 784, chains, 0.05 if quick else 1.0)
    floor = floor_step_seconds(log_density, 784, chains, 0.05 if quick else 1.0)
    torch_step, torch_accept = torch_dlp_step_seconds(params, chains, steps)
    return dict(
        mcmc=mcmc_step,
        step=jax_step,
        floor=floor,
        accept=accept,
        torch=torch_step,
        torch_accept=torch_accept,
    )


SUBPROCESS = """
import json, sys, time
import jax, jax.numpy as jnp
from numpyro.infer import MCMC
import numpyro_ext as nx
sys.path.insert(0, "benchmarks")
from _common import ising_log_density
d, chains, steps, shard = (int(a) for a in sys.argv[1:5])
kernel = nx.DMALA(potential_fn=lambda x: -ising_log_density(x), domain=nx.Binary(),
                  step_size=0.2, adapt_step_size=False)
kernel.shard_chains = bool(shard)
x0 = jnp.zeros((chains, d), jnp.int32)
mcmc = MCMC(kernel, num_warmup=0, num_samples=steps, num_chains=chains, thinning=10,
            chain_method="vectorized", progress_bar=False)
start = time.perf_counter()
mcmc.run(jax.random.key(0), init_params=x0)
jax.block_until_ready(mcmc.last_state)
seconds = time.perf_counter() - start
# the high-water mark of this process's own memory (ru_maxrss would carry the parent's over
# fork and exec)
status = open("/proc/self/status").read().split("VmHWM:")[1]
peak = int(status.split()[0]) / 1024
print(json.dumps(dict(devices=len(jax.devices()), step=seconds / steps, peak_mib=peak, d=d,
                      chains=chains, steps=steps)))
"""


def subprocess_run(d: int, chains: int, steps: int, devices: int = 1, shard: bool = True):
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    out = subprocess.run(
        [sys.executable, "-c", SUBPROCESS, str(d), str(chains), str(steps), str(int(shard))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    row = json.loads(out.stdout.strip().splitlines()[-1])
    print(row, flush=True)
    return row


def memory_and_devices(quick: bool) -> dict:
    """Peak memory against d (4 chains) and with 1,000 chains; chains over two host devices.
    Each in its own process; ``steps`` draws, compile included."""
    if quick:
        small = subprocess_run(100, 4, 20)
        return dict(
            memory=[small],
            many=small,
            devices=[subprocess_run(100, 4, 20, 2, shard) for shard in (False, True)],
        )
    sizes = ((100, 20_000), (10_000, 5_000), (90_000, 1000), (1_000_000, 200))
    return dict(
        memory=[subprocess_run(d, 4, steps) for d, steps in sizes],
        many=subprocess_run(10_000, 1000, 100),
        devices=[subprocess_run(10_000, 16, 2000, 2, shard) for shard in (False, True)],
    )


# ------------------------------------------------------------------------------ report


def figures(dimension: list[dict], chains: list[dict], folder: Path):
    colours = dict(zip(sorted({r["family"] for r in dimension}), ["C0", "C1", "C2"]))
    counts = sorted({r["chains"] for r in dimension})
    fig, axes = plt.subplots(1, len(counts), figsize=(5.5 * len(counts), 4.2), squeeze=False)
    for ax, count in zip(axes[0], counts):
        for family, colour in colours.items():
            rows = [r for r in dimension if r["family"] == family and r["chains"] == count]
            d = [r["d"] for r in rows]
            ax.loglog(d, [1e6 * r["step"] for r in rows], "o-", color=colour, label=family)
            ax.loglog(d, [1e6 * r["floor"] for r in rows], "x--", color=colour, alpha=0.6)
        ax.set(xlabel="dimension d", ylabel="µs per step", title=f"{count} chain(s)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(title="DMALA step (o) / value_and_grad (x)", fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "scaling_dimension.png")

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, case in enumerate(sorted({r["case"] for r in chains})):
        rows = [r for r in chains if r["case"] == case]
        n = [r["chains"] for r in rows]
        ax.loglog(n, [1e6 * r["step"] / r["chains"] for r in rows], "o-", color=f"C{i}", label=case)
        ax.loglog(
            n, [1e6 * r["floor"] / r["chains"] for r in rows], "x--", color=f"C{i}", alpha=0.6
        )
    ax.set(
        xlabel="vectorised chains",
        ylabel="µs per chain-step",
        title="DMALA step (o) and value_and_grad (x) per chain",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "scaling_chains.png")

    plt.close("all")


def report(dimension, chains, paper, memory) -> str:
    us = lambda s: f"{1e6 * s:,.1f}"  # noqa: E731
    lines = [
        "## Scaling with dimension and chains",
        "",
        "### Time per step against d",
        "",
        "`nx.DMALA` (energy mode, step size 0.2) in a compiled loop of its `sample`, against "
        "the same loop around one `vmap(value_and_grad)` of the target; steady state. "
        "Figure: `docs/figures/scaling_dimension.png`.",
        "",
        "![time per step against d](figures/scaling_dimension.png)",
        "",
        "| target | d | chains | µs per step | µs per value_and_grad | ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in dimension:
        lines.append(
            f"| {r['family']} | {r['d']:,} | {r['chains']} | {us(r['step'])} | "
            f"{us(r['floor'])} | {r['step'] / r['floor']:.2f}x |"
        )
    lines += [
        "",
        "### Time per chain-step against vectorised chains",
        "",
        "Same loops; per chain-step cost and its ratio to one chain's step. Figure: "
        "`docs/figures/scaling_chains.png`.",
        "",
        "![time per chain-step against chains](figures/scaling_chains.png)",
        "",
        "| target | chains | µs per step | µs per chain-step | vs 1 chain "
        "| step / value_and_grad |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    single = {r["case"]: r["step"] for r in chains if r["chains"] == 1}
    for r in chains:
        per = r["step"] / r["chains"]
        lines.append(
            f"| {r['case']} | {r['chains']} | {us(r['step'])} | {us(per)} | "
            f"{per / single[r['case']]:.3f} | {r['step'] / r['floor']:.2f}x |"
        )
    lines += [
        "",
        "### ESS per second against one-site Gibbs",
        "",
        'Moved to `benchmarks/ising_ess.py` (section "Ising: ESS per second, DMALA against '
        'one-site Gibbs" below): the earlier table here took ratios from runs with ESS as '
        "low as 9, which the ratio rule no longer allows.",
        "",
        "### Paper scale, devices and memory",
        "",
        "The DLP paper's RBM sampling task (784 visible x 500 hidden units, 100 chains, step "
        "0.2, binary DMALA): `MCMC(nx.DMALA(potential_fn=...), chain_method='vectorized')` "
        "(one run of 2,000 draws, compilation included, every 10th draw kept), the kernel's "
        "step in a compiled loop and one batched `value_and_grad` (steady state), against the "
        "paper's step in torch on the same CPU (see `torch_dlp_step_seconds`).",
        "",
        "| loop | ms per step | acceptance | ratio to torch |",
        "| --- | --- | --- | --- |",
        f"| `MCMC(nx.DMALA)` | {1e3 * paper['mcmc']:.2f} | {paper['accept']:.2f} | "
        f"{paper['mcmc'] / paper['torch']:.2f}x |",
        f"| `nx.DMALA(...).sample` in a compiled loop | {1e3 * paper['step']:.2f} | | "
        f"{paper['step'] / paper['torch']:.2f}x |",
        f"| one `vmap(value_and_grad)` | {1e3 * paper['floor']:.2f} | | "
        f"{paper['floor'] / paper['torch']:.2f}x |",
        f"| the paper's step in torch | {1e3 * paper['torch']:.2f} | "
        f"{paper['torch_accept']:.2f} | 1.00x |",
        "",
        "`MCMC(nx.DMALA)` on the shifted-lattice Ising target, `chain_method='vectorized'`, "
        "every 10th draw kept, one process per row: peak resident memory of the whole process "
        "(Python, JAX and the compiler included) and time per step with compilation.",
        "",
        "| d | chains | host devices | µs per step | peak memory (MiB) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in memory["memory"] + [memory["many"]]:
        lines.append(
            f"| {r['d']:,} | {r['chains']} | {r['devices']} | {us(r['step'])} | "
            f"{r['peak_mib']:.0f} |"
        )
    one, two = memory["devices"]
    lines += [
        f"| {two['d']:,} | {two['chains']} | 2 (`XLA_FLAGS=--xla_force_host_platform_device_"
        f"count=2`), chains on one | {us(one['step'])} | {one['peak_mib']:.0f} |",
        f"| {two['d']:,} | {two['chains']} | 2, chains split over both | {us(two['step'])} | "
        f"{two['peak_mib']:.0f} |",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run, no docs update")
    parser.add_argument(
        "--replot", action="store_true", help=f"redraw the figures from {ROWS.name} and exit"
    )
    args = parser.parse_args()
    if args.replot:
        saved = json.loads(ROWS.read_text())
        figures(saved["dimension"], saved["chains"], FIGURES)
        return
    dimension = dimension_sweep(args.quick, (1, 4) if args.quick else (1, 100))
    chains = chain_sweep(args.quick)
    paper = rbm_paper_row(args.quick)
    print(paper, flush=True)
    memory = memory_and_devices(args.quick)
    # a smoke run's figures go to the temporary folder, never over the committed ones
    figures(dimension, chains, Path(tempfile.gettempdir()) if args.quick else FIGURES)
    text = report(dimension, chains, paper, memory)
    print(text)
    if not args.quick:
        write_section("scaling", text)
        rows = {"dimension": dimension, "chains": chains}
        ROWS.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
