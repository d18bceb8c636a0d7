"""20x20 critical Ising model: DMALA and GWG against numpyro's DiscreteGibbs, and the overhead
of DMALA inside ``MCMC`` against a plain ``lax.scan`` loop of the same update.

Run ``python benchmarks/ising_numpyro.py`` (add ``--quick`` for a smoke run); the results are
printed and written into ``docs/benchmarks.md`` between this benchmark's markers.
Wall-clock times include compilation for every sampler; medians over repeats.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, DiscreteGibbs

import discrete_kernels as dk
import numpyro_ext as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MIN_ESS, MIN_SEEDS, ess, ratio_under_rule, write_section  # noqa: E402
from _common import ising_log_density as _ising  # noqa: E402

SIDE = 20
COUPLING = 0.4407  # critical coupling of the 2-D Ising model
ROOT = Path(__file__).resolve().parents[1]


def ising_log_density(x: jax.Array) -> jax.Array:
    """Log density (up to a constant) of spins ``s = 2x - 1`` on a periodic square lattice."""
    return _ising(x, COUPLING)


def ising_model(side: int = SIDE) -> None:
    x = numpyro.sample("x", dist.Bernoulli(0.5).expand([side * side]))
    numpyro.factor("ising", ising_log_density(x))


def warm_up() -> None:
    """Pay JAX's one-off start-up costs on a 4x4 lattice (other shapes: no compile is reused)."""
    for kernel in (nx.DMALA(ising_model), nx.GWG(ising_model), DiscreteGibbs(ising_model)):
        MCMC(kernel, num_warmup=5, num_samples=5, progress_bar=False).run(jax.random.key(0), 4)
    plain_scan_dmala(0.5, 10, 0, side=4)
    value_and_grad_floor(5, 0, side=4)


def summaries(x: np.ndarray) -> dict[str, np.ndarray]:
    """Energy and |magnetisation| per draw, from draws of shape (C, N, d); each (C, N)."""
    x = jnp.asarray(x, jnp.float32)
    energy = -jax.vmap(jax.vmap(ising_log_density))(x)
    magnetisation = jnp.abs(jnp.mean(2.0 * x - 1.0, axis=-1))
    return {"energy": np.asarray(energy), "|magnetisation|": np.asarray(magnetisation)}


def run_mcmc(kernel, num_warmup: int, num_samples: int, seed: int, num_chains=1, thinning=1):
    """Run and time ``MCMC`` (compile included); draws of x grouped by chain (C, N, d)."""
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        thinning=thinning,
        chain_method="sequential",
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(seed))
    x = np.asarray(jax.block_until_ready(mcmc.get_samples(group_by_chain=True)["x"]))
    return mcmc, x, time.perf_counter() - start


def plain_scan_dmala(
    step_size: float, num_steps: int, seed: int, side: int = SIDE, thinning: int = 10
) -> float:
    """The same DMALA update in a bare ``lax.scan``, keeping every ``thinning``-th x and all
    step statistics, as ``MCMC`` does; returns seconds, compile included."""

    def local_fn(leaves):
        f, g = jax.value_and_grad(ising_log_density)(leaves[0].astype(jnp.float32))
        return f, (g,)

    domains, is_table = [dk.Binary()], [False]

    def step(state, key):
        u = jax.random.uniform(key, (state.x[0].shape[0] + 1,))
        state, info = dk.dlp.dlp_step(
            state,
            [u[:-1]],
            u[-1],
            local_fn=local_fn,
            domains=domains,
            is_table=is_table,
            step_size=step_size,
        )
        return state, info

    def thinned(state, key):
        state, info = jax.lax.scan(step, state, jax.random.split(key, thinning))
        return state, (state.x[0], -state.log_density, info)

    @jax.jit
    def run(key):
        key_init, key_steps = jax.random.split(key)
        x0 = jax.random.bernoulli(key_init, 0.5, (side * side,)).astype(jnp.int32)
        f, local = local_fn((x0,))
        state = dk.ChainState((x0,), f, local)
        return jax.lax.scan(thinned, state, jax.random.split(key_steps, num_steps // thinning))

    start = time.perf_counter()
    jax.block_until_ready(run(jax.random.key(seed)))
    return time.perf_counter() - start


def kernel_in_scan(step_size: float, num_steps: int, seed: int, thinning: int = 10) -> float:
    """``nx.DMALA.sample`` in a bare ``lax.scan`` (no ``MCMC`` loop), keeping every
    ``thinning``-th state; seconds, compile included. Separates the kernel's own overhead
    from that of ``MCMC``'s collection loop."""
    kernel = nx.DMALA(ising_model, step_size=step_size, adapt_step_size=False)
    state = kernel.init(jax.random.key(seed), 0, None, (), {})

    def thinned(state, _):
        state = jax.lax.fori_loop(0, thinning, lambda i, s: kernel.sample(s, (), {}), state)
        return state, (state.z["x"], state.potential_energy, state.accept_prob)

    @jax.jit
    def run(state):
        return jax.lax.scan(thinned, state, None, length=num_steps // thinning)

    start = time.perf_counter()
    jax.block_until_ready(run(state))
    return time.perf_counter() - start


def value_and_grad_floor(num_steps: int, seed: int, side: int = SIDE) -> float:
    """Seconds for ``num_steps`` value_and_grad evaluations of the target in a scan."""

    def body(x, _):
        f, g = jax.value_and_grad(ising_log_density)(x)
        return x + 1e-9 * g, f

    @jax.jit
    def run(x):
        return jax.lax.scan(body, x, None, length=num_steps)

    x = jax.random.bernoulli(jax.random.key(seed), 0.5, (side * side,)).astype(jnp.float32)
    start = time.perf_counter()
    jax.block_until_ready(run(x))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small run, no docs update")
    parser.add_argument("--repeats", type=int, default=MIN_SEEDS)
    args = parser.parse_args()
    chains = 4
    # (warmup, samples, thinning): DiscreteGibbs draws are sweeps of 400 site updates
    budgets = {
        "DMALA": (2000, 100_000, 10),
        "GWG": (2000, 100_000, 10),
        "DiscreteGibbs": (200, 5_000, 1),
    }
    if args.quick:
        budgets = {name: (w // 10, n // 10, t) for name, (w, n, t) in budgets.items()}
    overhead_steps = 10_000 if args.quick else 100_000
    warm_up()

    rows = {name: [] for name in budgets}
    step_sizes = []
    for repeat in range(args.repeats):
        for name, (warmup, samples, thinning) in budgets.items():
            kernel = {
                "DMALA": lambda: nx.DMALA(ising_model),
                "GWG": lambda: nx.GWG(ising_model),
                "DiscreteGibbs": lambda: DiscreteGibbs(ising_model),
            }[name]()
            mcmc, x, seconds = run_mcmc(kernel, warmup, samples, repeat, chains, thinning)
            record = {"seconds": seconds, "draws": samples}
            for key, values in summaries(x).items():
                record[key] = ess(values)
            if name != "DiscreteGibbs":
                extra = mcmc.get_extra_fields()
                record["accept"] = float(np.mean(extra["accept_prob"]))
                record["flips"] = float(np.mean(extra["hamming_distance"]))
                if name == "DMALA":
                    step_sizes.append(float(np.median(extra["step_size"])))
            rows[name].append(record)
            print(name, repeat, {k: round(v, 3) for k, v in record.items()}, flush=True)

    def median(name: str, key: str) -> float:
        return float(np.median([r[key] for r in rows[name]]))

    def ess_per_second(name: str, key: str) -> float:
        return float(np.median([r[key] / r["seconds"] for r in rows[name]]))

    step_size = float(np.median(step_sizes))
    mcmc_times, kernel_times, scan_times, floor_times = [], [], [], []
    for repeat in range(args.repeats):
        # each loop at two lengths: the long run's time per step includes compilation; the
        # difference of the two runs divided by the extra steps is the steady-state cost
        short = overhead_steps // 10
        timings = {"mcmc": [], "kernel": [], "scan": [], "floor": []}
        for num_steps in (short, overhead_steps):
            kernel = nx.DMALA(ising_model, step_size=step_size, adapt_step_size=False)
            timings["mcmc"].append(run_mcmc(kernel, 0, num_steps, repeat, thinning=10)[2])
            timings["kernel"].append(kernel_in_scan(step_size, num_steps, repeat))
            timings["scan"].append(plain_scan_dmala(step_size, num_steps, repeat))
            timings["floor"].append(value_and_grad_floor(num_steps, repeat))
        for name, times in zip(
            ("mcmc", "kernel", "scan", "floor"), (mcmc_times, kernel_times, scan_times, floor_times)
        ):
            t_short, t_long = timings[name]
            times.append((t_long, (t_long - t_short) * overhead_steps / (overhead_steps - short)))

    def per_step(times, which):
        return 1e6 * float(np.median([t[which] for t in times])) / overhead_steps

    def ratio(times, which):
        return per_step(times, which) / per_step(scan_times, which)

    lines = [
        "## NumPyro: 20x20 Ising at the critical coupling J = 0.4407",
        "",
        f"Command: `python benchmarks/ising_numpyro.py` (repeats = {args.repeats}); "
        f"{platform.processor() or platform.machine()}, {jax.device_count()} JAX CPU device(s), "
        f"jax {jax.__version__}, numpyro {numpyro.__version__}. {chains} chains per run "
        "(`chain_method='sequential'`, the method all three support), wall time includes "
        "compilation, medians over repeats; multi-chain ESS from `numpyro.diagnostics` "
        "(DMALA and GWG keep every 10th draw). Ratios by the ratio rule of "
        f"`benchmarks/_common.py`: a number where every run reached ESS {MIN_ESS}, else the "
        f"median and range over at least {MIN_SEEDS} repeats (`--repeats`), else none.",
        "",
        "| sampler | draws per chain | seconds | ESS energy | ESS abs(mag) | ESS/s energy "
        "| ESS/s abs(mag) | ratio vs DiscreteGibbs (energy, abs(mag)) | accept | flips/step |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def rule(name: str, key: str) -> str:
        """The ratio to DiscreteGibbs under the ratio rule (ESS >= 400 or 5 seeds)."""
        if name == "DiscreteGibbs":
            return "1"
        per_seed = [
            [{"ess": r[key], "ess_per_second": r[key] / r["seconds"]} for r in rows[n]]
            for n in (name, "DiscreteGibbs")
        ]
        return ratio_under_rule(*per_seed)["text"]

    for name in rows:
        e, m = ess_per_second(name, "energy"), ess_per_second(name, "|magnetisation|")
        accept = f"{median(name, 'accept'):.2f}" if name != "DiscreteGibbs" else "1 (Gibbs)"
        flips = f"{median(name, 'flips'):.1f}" if name != "DiscreteGibbs" else "sweep"
        lines.append(
            f"| {name} | {int(median(name, 'draws'))} | {median(name, 'seconds'):.2f} "
            f"| {median(name, 'energy'):.0f} | {median(name, '|magnetisation|'):.0f} "
            f"| {e:.1f} | {m:.1f} | {rule(name, 'energy')}; {rule(name, '|magnetisation|')} "
            f"| {accept} | {flips} |"
        )
    lines += [
        "",
        f"DMALA's warmup adapted the step size to {step_size:.3f} (target acceptance 0.574). "
        "DiscreteGibbs draws are full sweeps (400 single-site updates each).",
        "",
        f"Overhead at that fixed step size, one chain of {overhead_steps} steps keeping every "
        "10th draw (compile included), and the steady-state cost per step from the difference "
        "with a run of a tenth of the length.",
        "",
        "| loop | µs/step, compile included | ratio | µs/step, steady state | ratio |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, times in [
        ("`MCMC(nx.DMALA(model))`", mcmc_times),
        ("`nx.DMALA(model).sample` in a bare `lax.scan`", kernel_times),
        ("plain `lax.scan` of `discrete_kernels.dlp_step`", scan_times),
        ("one `value_and_grad` of the target", floor_times),
    ]:
        lines.append(
            f"| {label} | {per_step(times, 0):.1f} | {ratio(times, 0):.2f}x "
            f"| {per_step(times, 1):.1f} | {ratio(times, 1):.2f}x |"
        )
    text = "\n".join(lines)
    print(text)
    if not args.quick:
        write_section("ising_numpyro", text, header=False)


if __name__ == "__main__":
    sys.exit(main())
