"""What one DMALA step costs on the device at hand, against the algorithm's own cost.

Run ``python benchmarks/device_step.py`` (``--quick``: small sizes, nothing written). It
measures on JAX's and torch's default device, so the same command gives the CPU rows here and
the GPU rows on a machine with one (written to their own ``device_step-gpu`` block of
``docs/benchmarks.md``, titled with the device):

1. **The DLP paper's RBM task** (784 x 500 Bernoulli RBM, step 0.2) at 100 / 1,000 / 10,000
   chains: the paper's torch step, ``MCMC(nx.DMALA)`` (vectorised chains, every 10th draw
   kept; steady state from the difference of two runs of n and 2n draws, which cancels
   compilation), ``nx.DMALA(...).sample`` in a compiled loop, a hand-written jitted DMALA step
   (the same algorithm: gradient carried in the state, one ``value_and_grad`` per step) and
   one batched ``value_and_grad`` (the floor).
2. **Periodic Ising lattice**, 100 chains, d = 10^3 .. 10^6: the same three JAX loops.
3. **Pyro, one chain**: ``px.DMALA`` (and GWG, AB, ACS) in potential mode on the RBM,
   ``kernel.sample`` in a loop (Pyro's ``MCMC`` adds its own bookkeeping per draw), against
   the paper's torch step with one chain.
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
from _common import (  # noqa: E402
    CRITICAL_COUPLING,
    accelerator,
    ising_log_density,
    rbm_log_density,
    rbm_parameters,
    write_section,
)
from _torch_operations import aten_operations_per_step  # noqa: E402
from scaling import (  # noqa: E402
    STEP_SIZE,
    _compiled_loop,
    _seconds_per_step,
    floor_step_seconds,
    kernel_step_seconds,
    torch_dlp_step,
    torch_dlp_step_seconds,
)

COLLECTED_BYTES = 2**30  # the kept draws of the longer MCMC run


def hand_dmala_step_seconds(log_density, d: int, chains: int, budget: float) -> float:
    """Seconds per step of DMALA on binary ``x`` written by hand as one jitted function:
    flip probabilities from the carried gradient, one ``value_and_grad`` at the proposal, the
    reverse probabilities, the MH test; vmapped over ``chains``."""
    value_and_grad = jax.value_and_grad(log_density)
    term = 1.0 / (2.0 * STEP_SIZE)

    def one(x, f, g, key):
        k_flip, k_accept = jax.random.split(key)
        logit = 0.5 * g * (1.0 - 2.0 * x) - term
        flip = jax.random.uniform(k_flip, x.shape) < jax.nn.sigmoid(logit)
        y = jnp.where(flip, 1.0 - x, x)
        log_forward = jnp.sum(
            jnp.where(flip, jax.nn.log_sigmoid(logit), jax.nn.log_sigmoid(-logit))
        )
        f_y, g_y = value_and_grad(y)
        logit_y = 0.5 * g_y * (1.0 - 2.0 * y) - term
        log_reverse = jnp.sum(
            jnp.where(flip, jax.nn.log_sigmoid(logit_y), jax.nn.log_sigmoid(-logit_y))
        )
        accept = jnp.log(jax.random.uniform(k_accept)) < f_y - f + log_reverse - log_forward
        return jnp.where(accept, y, x), jnp.where(accept, f_y, f), jnp.where(accept, g_y, g)

    step = jax.vmap(one)

    def body(carry):
        x, f, g, key = carry
        key, sub = jax.random.split(key)
        return (*step(x, f, g, jax.random.split(sub, chains)), key)

    x0 = jax.random.bernoulli(jax.random.key(1), 0.5, (chains, d)).astype(jnp.float32)
    f0, g0 = jax.vmap(value_and_grad)(x0)
    carry = (x0, f0, g0, jax.random.key(0))
    return _seconds_per_step(_compiled_loop(body, carry), carry, budget)


def mcmc_step_seconds(
    log_density, d: int, chains: int, draws: int, repeats: int = 2, kernel_class=nx.DMALA
) -> tuple[float, float]:
    """Steady-state seconds per step of ``MCMC(kernel_class)`` (DMALA or a subclass) and its
    mean acceptance (NaN where it is not collected): runs of ``draws`` and ``2 draws`` steps
    (best of ``repeats`` each); their difference cancels compilation and the run's fixed
    costs."""
    kernel = kernel_class(
        potential_fn=lambda x: -log_density(x),
        domain=nx.Binary(),
        step_size=STEP_SIZE,
        adapt_step_size=False,
    )
    x0 = jax.random.bernoulli(jax.random.key(1), 0.5, (chains, d)).astype(jnp.int32)
    seconds, accept = {}, 0.0
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
        for _ in range(repeats):
            start = time.perf_counter()
            mcmc.run(jax.random.key(0), init_params=x0)
            jax.block_until_ready(mcmc.last_state)
            best = min(best, time.perf_counter() - start)
        seconds[n] = best
        fields = mcmc.get_extra_fields()
        accept = float(np.mean(fields["accept_prob"])) if "accept_prob" in fields else np.nan
    return max(seconds[2 * draws] - seconds[draws], 1e-9) / draws, accept


def mcmc_draws(step_seconds: float, budget: float, chains: int, d: int) -> int:
    """Draws of the shorter MCMC run: about ``4 budget`` seconds of steps, at least 20, and at
    most what keeps :data:`COLLECTED_BYTES` of states (MCMC keeps every 10th int32 state and
    NumPyro copies them once more at the end: on a GPU, 10,000 chains of the RBM at 6,340
    draws wanted 20 GB)."""
    most = 10 * COLLECTED_BYTES // (4 * chains * d)
    return int(max(20, min(4 * budget / step_seconds, most)))


def jax_rows(log_density, d: int, chains: int, budget: float) -> dict:
    """The three compiled loops, then MCMC with runs long enough (about ``4 budget`` seconds
    for the shorter) that the difference of the two is not lost in their fixed costs."""
    sample = kernel_step_seconds(log_density, d, chains, budget)
    draws = mcmc_draws(sample, budget, chains, d)
    mcmc, accept = mcmc_step_seconds(log_density, d, chains, draws)
    return dict(
        d=d,
        chains=chains,
        draws=draws,
        mcmc=mcmc,
        accept=accept,
        sample=sample,
        hand=hand_dmala_step_seconds(log_density, d, chains, budget),
        floor=floor_step_seconds(log_density, d, chains, budget),
    )


def rbm_rows(quick: bool, budget: float) -> list[dict]:
    params = rbm_parameters(784, 500, scale=0.1)
    log_density = rbm_log_density(tuple(map(jnp.asarray, params)))
    rows = []
    for chains in (100,) if quick else (100, 1_000, 10_000):
        row = jax_rows(log_density, 784, chains, 0.05 if quick else budget)
        steps = max(5, min(row["draws"], 200))
        row["torch"], row["torch_accept"] = torch_dlp_step_seconds(params, chains, steps)
        rows.append(row)
        print(row, flush=True)
    return rows


def ising_rows(quick: bool, budget: float) -> list[dict]:
    rows = []
    for side in (32,) if quick else (32, 100, 316, 1000):
        d = side * side

        def log_density(x):
            return ising_log_density(x, CRITICAL_COUPLING)

        rows.append(jax_rows(log_density, d, 100, 0.05 if quick else budget))
        print(rows[-1], flush=True)
    return rows


def pyro_rows(quick: bool) -> list[dict]:
    """One chain of Pyro kernels on the RBM against the paper's torch step with one chain."""
    import torch

    import pyro_ext as px

    device = "cuda" if torch.cuda.is_available() else "cpu"
    params = rbm_parameters(784, 500, scale=0.1)
    w, b, c = (torch.as_tensor(p, device=device) for p in params)

    def potential(values):
        x = values["x"]
        return -(x @ b + torch.nn.functional.softplus(x @ w + c).sum())

    steps = 20 if quick else 1000
    paper, _ = torch_dlp_step_seconds(params, 1, steps, device)
    paper_step, x, _ = torch_dlp_step(params, 1, device)
    paper_operations = aten_operations_per_step(paper_step, x)
    kernels = {
        "DMALA": lambda: px.DMALA(potential_fn=potential, domain=px.Binary(), step_size=0.2),
        "GWG": lambda: px.GWG(potential_fn=potential, domain=px.Binary()),
        "AB (1st)": lambda: px.AB(potential_fn=potential, domain=px.Binary()),
        "ACS": lambda: px.ACS(potential_fn=potential, domain=px.Binary()),
    }
    rows = []
    for name, make in kernels.items():
        kernel = make()
        kernel.initial_params = {"x": (torch.rand(784, device=device) < 0.5).float()}
        kernel.setup(0)
        values = dict(kernel.initial_params)
        for _ in range(5):
            values = kernel.sample(values)
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            values = kernel.sample(values)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / steps
        operations = aten_operations_per_step(kernel.sample, values)
        rows.append(
            dict(
                kernel=name,
                seconds=seconds,
                paper=paper,
                device=device,
                operations=operations,
                paper_operations=paper_operations,
            )
        )
        print(rows[-1], flush=True)
    return rows


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def report(rbm: list[dict], ising: list[dict], pyro: list[dict]) -> str:
    where = accelerator() or "CPU"
    lines = [
        "## Cost of a step on the device",
        "",
        f"Device: {where}. µs per step, steady state (`benchmarks/device_step.py`: MCMC from the "
        "difference of runs of n and 2n draws, every 10th draw kept; the other loops compiled "
        "and called twice). The hand-written step is DMALA for binary variables in one jitted "
        "function (gradient carried, one `value_and_grad` per step); `MCMC / hand` is the "
        "library's whole driver step over the algorithm's own cost. `n` is the shorter MCMC "
        "run: where it is small (slow steps) the MCMC column is rough, and a ratio below 1 "
        "there is timing noise.",
        "",
        "### The DLP paper's RBM task (784 x 500, step 0.2)",
        "",
        "| chains | paper's torch step | `MCMC(nx.DMALA)` (n) | `nx.DMALA.sample` loop | "
        "hand-written DMALA | one `value_and_grad` | MCMC / hand | torch / MCMC | "
        "acceptance (MCMC, torch) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rbm:
        lines.append(
            f"| {r['chains']:,} | {_us(r['torch'])} | {_us(r['mcmc'])} ({r['draws']:,}) | "
            f"{_us(r['sample'])} | "
            f"{_us(r['hand'])} | {_us(r['floor'])} | {r['mcmc'] / r['hand']:.2f}x | "
            f"{r['torch'] / r['mcmc']:.1f}x | {r['accept']:.2f}, {r['torch_accept']:.2f} |"
        )
    lines += [
        "",
        "### Periodic Ising lattice, 100 chains",
        "",
        "| d | `MCMC(nx.DMALA)` (n) | `nx.DMALA.sample` loop | hand-written DMALA | "
        "one `value_and_grad` | MCMC / hand | sample / hand |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in ising:
        lines.append(
            f"| {r['d']:,} | {_us(r['mcmc'])} ({r['draws']:,}) | {_us(r['sample'])} | "
            f"{_us(r['hand'])} | "
            f"{_us(r['floor'])} | {r['mcmc'] / r['hand']:.2f}x | "
            f"{r['sample'] / r['hand']:.2f}x |"
        )
    lines += [
        "",
        f"### Pyro kernels, one chain, on {pyro[0]['device'] if pyro else '-'}",
        "",
        "`kernel.sample` in a loop on the RBM in potential mode against the paper's torch step "
        "with one chain. Operations: what torch dispatches per step, forward and backward, "
        "views included (counted with a `TorchDispatchMode`; on a GPU each is launched "
        "separately, so at one chain their number, not arithmetic, sets the time).",
        "",
        "| kernel | µs per step | paper's torch step | kernel / paper | operations per step "
        "(paper's step) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in pyro:
        lines.append(
            f"| {r['kernel']} | {_us(r['seconds'])} | {_us(r['paper'])} | "
            f"{r['seconds'] / r['paper']:.2f}x | {r['operations']:.0f} "
            f"({r['paper_operations']:.0f}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run, no docs update")
    parser.add_argument(
        "--budget",
        type=float,
        default=2.0,
        help="seconds each compiled loop is timed for (default 2; GPU timings are steadier)",
    )
    args = parser.parse_args()
    rbm = rbm_rows(args.quick, args.budget)
    ising = ising_rows(args.quick, args.budget)
    pyro = pyro_rows(args.quick)
    text = report(rbm, ising, pyro)
    print(text)
    if not args.quick:
        write_section("device_step", text)


if __name__ == "__main__":
    main()
