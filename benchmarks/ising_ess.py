"""ESS per second on the Ising model: ``nx.DMALA`` against NumPyro's one-site
``DiscreteGibbs``, under the ratio rule of ``benchmarks/_common.py``.

The Ising model as a NumPyro model (uniform prior, one ``factor``): the critical 20x20 lattice
written with shifted copies (cost linear in d) and as a dense coupling matrix (as a user
writes it, cost d^2), 10x10 and 32x32 critical, 50x50 at J = 0.35. 4 chains per run:
``nx.DMALA`` with ``chain_method='vectorized'`` (every 10th draw kept), ``DiscreteGibbs``
(plain and ``modified=True``; each draw a sweep of d site updates) with
``chain_method='sequential'`` (the method it supports); wall time with compilation; ESS of the
energy from ``numpyro.diagnostics``.

Each sampler's run grows (:func:`_common.run_until_ess`) until its ESS is at least 400 or
its next run would not fit ``--budget`` seconds; a ratio is printed from runs where every
ESS reached 400, else as the median and range over at least 5 seeds (more seeds are run when
needed), else not at all (:func:`_common.ratio_under_rule`).

Run ``python benchmarks/ising_ess.py`` (``--cases 20d`` for one case, ``--quick`` for a
smoke run that writes nothing).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, DiscreteGibbs

import numpyro_ext as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    CRITICAL_COUPLING,
    MIN_ESS,
    MIN_SEEDS,
    dense_ising_log_density,
    ising_coupling_matrix,
    ising_log_density,
    ratio_under_rule,
    run_until_ess,
    write_section,
)

#: name -> (side, dense coupling matrix, coupling)
CASES = {
    "10": (10, False, CRITICAL_COUPLING),
    "20": (20, False, CRITICAL_COUPLING),
    "20d": (20, True, CRITICAL_COUPLING),
    "32": (32, False, CRITICAL_COUPLING),
    "50": (50, False, 0.35),
}
SAMPLERS = ("DMALA", "DiscreteGibbs", "DiscreteGibbs modified")
CHAINS = 4


def ising_model(side: int, dense: bool = False, coupling: float = CRITICAL_COUPLING):
    """The Ising model as a NumPyro model (uniform prior, one factor) and its log density."""
    log_density = (
        dense_ising_log_density(jnp.asarray(ising_coupling_matrix(side, coupling)))
        if dense
        else lambda x: ising_log_density(x, coupling)
    )

    def model():
        x = numpyro.sample("x", dist.Bernoulli(0.5).expand([side * side]))
        numpyro.factor("ising", log_density(x))

    return model, log_density


def energy_run(name: str, model, log_density, draws: int, seed: int):
    """One timed ``MCMC`` run of :data:`CHAINS` chains (compile included, warmup a tenth of
    the draws): the energy of the kept draws, shape (chains, kept), and the seconds."""
    if name == "DMALA":
        kernel, method, thinning = nx.DMALA(model), "vectorized", 10
    else:
        kernel = DiscreteGibbs(model, modified=name.endswith("modified"))
        method, thinning = "sequential", 1
    mcmc = MCMC(
        kernel,
        num_warmup=max(draws // 10, 20),
        num_samples=draws,
        num_chains=CHAINS,
        thinning=thinning,
        chain_method=method,
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(seed))
    x = jax.block_until_ready(mcmc.get_samples(group_by_chain=True)["x"])
    seconds = time.perf_counter() - start
    energy = -jax.vmap(jax.vmap(log_density))(jnp.asarray(x, jnp.float32))
    return energy, seconds


def first_draws(name: str, side: int, dense: bool, quick: bool) -> int:
    """A first run of seconds; :func:`run_until_ess` grows it."""
    if quick:
        return 200 if name == "DMALA" else 20
    if name == "DMALA":
        return 20_000
    return max(100, 100_000 // (side * side)) // (2 if dense else 1)


def compare(case: str, seeds: int, budget: float, quick: bool, samplers=SAMPLERS) -> dict:
    """Runs of every sampler per seed; more seeds (up to :data:`MIN_SEEDS`) when any ESS
    stayed below :data:`MIN_ESS`. Returns the runs per sampler and the ratios."""
    side, dense, coupling = CASES[case]
    model, log_density = ising_model(side, dense, coupling)
    runs: dict[str, list[dict]] = {name: [] for name in samplers}
    seed = 0
    while True:
        for name in samplers:

            def run(draws, seed, name=name):
                return energy_run(name, model, log_density, draws, seed)

            start = first_draws(name, side, dense, quick)
            record = run_until_ess(run, start, seed, budget_seconds=budget)
            runs[name].append(record)
            print(case, name, seed, {k: round(float(v), 2) for k, v in record.items()}, flush=True)
        seed += 1
        short = any(not r["reached"] for rs in runs.values() for r in rs)
        if seed >= seeds and (not short or seed >= MIN_SEEDS or quick):
            break
    ratios = {
        name: ratio_under_rule(runs["DMALA"], runs[name]) for name in samplers if name != "DMALA"
    }
    return {"case": case, "runs": runs, "ratios": ratios}


def report(results: list[dict], budget: float) -> str:
    lines = [
        "## Ising: ESS per second, DMALA against one-site Gibbs (ratio rule)",
        "",
        "The Ising model as a NumPyro model (uniform prior, one `factor`); 4 chains per run, "
        "`nx.DMALA` vectorised (every 10th draw kept), NumPyro's `DiscreteGibbs` (each draw a "
        "sweep of d site updates) sequential; wall time with compilation; ESS of the energy. "
        f"Each run grows until its ESS is at least {MIN_ESS} or its next run would not fit "
        f"{budget:.0f} s; a ratio is printed from runs that all reached ESS {MIN_ESS}, else "
        f"as the median and range over at least {MIN_SEEDS} seeds, else not at all. Per "
        "sampler: median (range) over seeds of the last run's seconds, ESS and ESS/s.",
        "",
        "| lattice | sampler | seeds | seconds | ESS | ESS/s | DMALA's ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]

    def spread(rs: list[dict], key: str, digits: int) -> str:
        values = sorted(r[key] for r in rs)
        middle = float(np.median(values))
        if len(values) == 1:
            return f"{middle:.{digits}f}"
        return f"{middle:.{digits}f} ({values[0]:.{digits}f}-{values[-1]:.{digits}f})"

    for result in results:
        side, dense, coupling = CASES[result["case"]]
        lattice = f"{side}x{side}, J = {coupling:.4g}" + (", dense matrix" if dense else "")
        for name, rs in result["runs"].items():
            ratio = result["ratios"].get(name, {}).get("text", "")
            lines.append(
                f"| {lattice} | {name} | {len(rs)} | {spread(rs, 'seconds', 1)} | "
                f"{spread(rs, 'ess', 0)} | {spread(rs, 'ess_per_second', 1)} | {ratio} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run, no docs update")
    parser.add_argument("--cases", default="10,20,20d,32,50", help=f"of {list(CASES)}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds when every ESS >= 400")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per run at most")
    parser.add_argument(
        "--samplers", default=",".join(SAMPLERS), help=f"DMALA and some of {SAMPLERS[1:]}"
    )
    args = parser.parse_args()
    samplers = tuple(args.samplers.split(","))
    cases = ["10"] if args.quick else args.cases.split(",")
    seeds = 1 if args.quick else args.seeds
    budget = 5.0 if args.quick else args.budget
    results = [compare(case, seeds, budget, args.quick, samplers) for case in cases]
    text = report(results, budget)
    print(text)
    if not args.quick:
        write_section("ising_ess", text)


if __name__ == "__main__":
    main()
