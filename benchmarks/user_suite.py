"""The user-model suite (``benchmarks/user_models.py``): ESS per second of this library's
kernels against NumPyro's ``DiscreteGibbs``, ``DiscreteHMCGibbs`` and ``MixedHMC`` on models
users write, each checked against its exact answer.

For each model at its benchmark size, every sampler that runs on it: the library's kernels
that apply (alone on purely discrete models, as a ``Gibbs`` block next to NUTS otherwise;
the recommended one marked) and NumPyro's built-ins (``DiscreteGibbs`` where every latent is
discrete; ``DiscreteHMCGibbs(NUTS)`` and ``MixedHMC(HMC(trajectory_length=1.2))`` where some
are continuous). Each runs ``CHAINS`` chains (vectorised on discrete models, sequential where
NumPyro's ``Gibbs`` runs: it takes one key) with as many warmup steps as draws; the draws are
doubled until the smallest ESS over the model's reported statistics reaches 400 or a run
would pass ``--max-seconds`` (its time predicted from two probe runs: a fixed cost of setup
and compilation, and a cost per step; then its ESS is reported as it is; runs longer than 4,000
draws per chain are thinned to 4,000 kept draws). Columns:

- **seconds**: wall time of the last run, compilation included (one process, side by side);
- **min ESS**: the smallest multi-chain ESS (``numpyro.diagnostics``) over the statistics
  (a statistic constant over every draw left out);
- **ESS/s**: min ESS over seconds; **ratio**: to the best built-in whose answer is right,
  printed only where both runs reached a min ESS of 400 (the ratio rule of
  ``benchmarks/_common.py``; one seed per sampler here);
- **max |z|**: the largest distance of a posterior mean from the exact answer in standard
  errors (ESS-based, the reference's own MC error added where the answer is a stored
  reference run); **right** when below 4.

Run ``python benchmarks/user_suite.py`` (writes its section of ``docs/benchmarks.md``),
``--quick`` for a smoke run (reduced sizes, the recommended kernel only, 30 draws, nothing
written), names to select models (``python benchmarks/user_suite.py zip gmm``).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

FLAGS = os.environ.get("XLA_FLAGS", "")
if "--quick" in sys.argv and "xla_backend_optimization_level" not in FLAGS:
    # the smoke run compiles without LLVM's optimisation, as the tests do (compile time is
    # most of a short run); set before JAX starts
    os.environ["XLA_FLAGS"] = (FLAGS + " --xla_backend_optimization_level=0").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import ratio_under_rule, write_section  # noqa: E402

from benchmarks import user_models as um  # noqa: E402

CHAINS = 4
TARGET_ESS = 400
#: draws kept per chain (longer runs are thinned: the draws of a large plate site fill the
#: memory otherwise)
KEPT_DRAWS = 4000


PROBE_DRAWS = (25, 125)


def probe_seconds(name: str, sampler: str, size: int, max_seconds: float) -> list[float]:
    """Wall times of the probes (``PROBE_DRAWS`` warmup steps and draws, one chain) in this
    process."""
    entry = um.MODELS[name]
    data = entry.data(size)
    seconds: list[float] = []
    for draws in PROBE_DRAWS:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            um.run(entry, sampler, data, num_warmup=draws, num_samples=draws)
        seconds.append(time.perf_counter() - start)
    return seconds


#: the draws a probe-based estimate may give are at most this many times those the whole
#: second probe's time gives (a per-step cost from a difference of two noisy times can be
#: near 0)
MAX_DRAWS_OVER_PROBE = 10


def affordable_draws(
    entry: um.UserModel, sampler: str, size: int, chains: int, max_seconds: float
) -> tuple[int, float] | str:
    """``(draws, fixed)``: draws per chain (warmup as many) that fit about half of
    ``max_seconds``, and the estimated fixed cost of a run (setup and compilation), seconds.

    Both probes compile (each builds a new kernel), so the difference of their wall times is
    the cost of the extra steps: the cost of a step is that difference over the extra steps,
    and the fixed cost what remains of the second probe. The draws are at least the smaller
    probe and at most :data:`MAX_DRAWS_OVER_PROBE` times those the second probe's whole time
    gives. The probes run in a child process stopped after ``max_seconds``: a sampler too
    slow for its first probe gets the reason (a string) instead."""
    command = [sys.executable, __file__, "--probe", entry.name, sampler, str(size)]
    command += ["--max-seconds", str(max_seconds)]
    try:
        out = subprocess.run(
            command, capture_output=True, text=True, timeout=max_seconds, check=True
        )
    except subprocess.TimeoutExpired:
        first = PROBE_DRAWS[0]
        return f"{first} warmup steps and draws of one chain take more than {max_seconds:.0f} s"
    except subprocess.CalledProcessError:
        return PROBE_DRAWS[0], 0.0  # the measured run reports the error
    seconds = [float(v) for v in out.stdout.split()[-2:]]
    if len(seconds) < 2:
        return PROBE_DRAWS[0], 0.0
    whole = seconds[1] / (2 * PROBE_DRAWS[1])  # compilation included: at most a step's cost
    extra = (seconds[1] - seconds[0]) / (2 * (PROBE_DRAWS[1] - PROBE_DRAWS[0]))
    per_step = max(extra, whole / MAX_DRAWS_OVER_PROBE)
    fixed = max(0.0, seconds[1] - 2 * PROBE_DRAWS[1] * per_step)
    budget = max(0.0, max_seconds / 2 - fixed)
    return max(PROBE_DRAWS[0], int(budget / (2 * chains * per_step))), fixed


class RunFailed(Exception):
    """A run that raised, or passed its time limit (the message says which)."""


def run_here(
    entry: um.UserModel, sampler: str, size: int, draws: int, chains: int, seed: int = 0
) -> tuple:
    """``(stats, seconds, notes)`` of one run in this process: the statistics' draws, the wall
    time of ``MCMC`` (compilation included) and the first line of each warning."""
    data = entry.data(size)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stats = um.run(
            entry,
            sampler,
            data,
            num_warmup=draws,
            num_samples=draws,
            num_chains=chains,
            seed=seed,
            thinning=max(1, draws // KEPT_DRAWS),
        )
    seconds = time.perf_counter() - start
    notes = sorted({str(w.message).split(";")[0][:90] for w in caught})
    return stats, seconds, notes


def timed_run(
    entry: um.UserModel,
    sampler: str,
    size: int,
    draws: int,
    chains: int,
    max_seconds: float,
    seed: int = 0,
) -> tuple:
    """:func:`run_here` in a child process stopped after ``3 max_seconds`` (a sampler whose
    cost per step grows during warmup, MixedHMC's trajectories, can pass any estimate)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run.npz"
        command = [sys.executable, __file__, "--run", entry.name, sampler, str(size)]
        command += [str(draws), str(chains), str(out), str(seed)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=3 * max_seconds)
        except subprocess.TimeoutExpired:
            raise RunFailed(
                f"too slow: {draws} warmup steps and draws of {chains} chains took more than "
                f"{3 * max_seconds:.0f} s"
            ) from None
        if done.returncode or not out.exists():
            raise RunFailed(done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
        saved = np.load(out, allow_pickle=False)
        return saved["stats"], float(saved["seconds"]), [str(n) for n in saved["notes"]]


#: the probes' answer per (model, sampler, size, chains, max_seconds)
_AFFORDABLE: dict[tuple, tuple[int, float] | str] = {}


def measure(
    entry: um.UserModel,
    sampler: str,
    data: tuple,
    answer: um.Answer,
    draws: int,
    max_seconds: float,
    chains: int,
    grow: bool,
    size: int = 0,
    seed: int = 0,
) -> dict:
    """Run ``sampler`` with the key ``seed`` (doubling the draws while the ESS is short and
    time allows) and return its row."""
    from numpyro.diagnostics import effective_sample_size

    if grow:  # a slow sampler (MixedHMC at 1,000 coordinates) starts with fewer draws
        key = (entry.name, sampler, size, chains, max_seconds)
        if key not in _AFFORDABLE:  # probed once for all seeds
            _AFFORDABLE[key] = affordable_draws(entry, sampler, size, chains, max_seconds)
        affordable = _AFFORDABLE[key]
        if isinstance(affordable, str):
            return dict(sampler=sampler, error=f"too slow: {affordable}")
        draws, fixed = min(draws, affordable[0]), affordable[1]
    else:
        fixed = 0.0
    while True:
        try:
            if grow:
                stats, seconds, notes = timed_run(
                    entry, sampler, size, draws, chains, max_seconds, seed
                )
            else:  # the smoke run: in this process
                stats, seconds, notes = run_here(entry, sampler, size, draws, chains, seed)
        except RunFailed as error:
            return dict(sampler=sampler, error=str(error)[:160])
        except Exception as error:  # a sampler that does not run on the model is a row too
            return dict(sampler=sampler, error=f"{type(error).__name__}: {error}"[:160])
        # every run compiles new programs; a long session of them exhausts the process's
        # memory maps (LLVM: "Cannot allocate memory") unless they are dropped
        jax.clear_caches()
        gc.collect()
        with np.errstate(invalid="ignore", divide="ignore"):
            ess = np.asarray(effective_sample_size(stats))
        # a statistic constant over every draw (an inclusion of posterior 0.998) has no ESS:
        # it is left out of the minimum, and its standard error floored as in the tests
        varies = stats.std((0, 1)) > 0
        low = float(ess[varies].min()) if varies.any() else float("nan")
        # the next run's time: the fixed cost once, the steps' cost doubled (with a margin)
        if not grow or not low < TARGET_ESS or fixed + 2.2 * (seconds - fixed) > max_seconds:
            break
        draws *= 2
    ess = np.where(np.isfinite(ess), ess, 1.0)
    sd = stats.std((0, 1))
    se = np.hypot(np.maximum(sd / np.sqrt(np.maximum(ess, 1.0)), 1e-3), answer.se)
    z = np.abs(stats.mean((0, 1)) - answer.mean) / se
    return dict(
        sampler=sampler,
        seconds=seconds,
        draws=draws,
        ess=low,
        ess_per_second=low / seconds,
        z=float(z.max()),
        worst=answer.names[int(np.argmax(z))],
        notes=notes,
    )


def _summary(runs: list[dict]) -> dict:
    """One row from a sampler's runs over seeds: medians of seconds, ESS and ESS/s, the
    largest |z|, the runs kept for the ratio rule (the first failed run's row if any
    failed)."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    if len(runs) == 1:
        return {**runs[0], "runs": runs}
    worst = max(runs, key=lambda r: r["z"])
    return dict(
        sampler=runs[0]["sampler"],
        seconds=float(np.median([r["seconds"] for r in runs])),
        draws=int(np.median([r["draws"] for r in runs])),
        ess=float(np.median([r["ess"] for r in runs])),
        ess_per_second=float(np.median([r["ess_per_second"] for r in runs])),
        z=worst["z"],
        worst=worst["worst"],
        notes=sorted({n for r in runs for n in r["notes"]}),
        runs=runs,
    )


def model_rows(
    entry: um.UserModel,
    quick: bool,
    max_seconds: float,
    only: list[str] | None = None,
    seeds: int = 1,
    builtin_draws: int = 500,
) -> tuple[list, str, str]:
    """The rows of one model (every sampler, or the recommended one in the smoke mode, or
    those in ``only``), its size and how its exact answer was computed. With ``seeds`` > 1
    each sampler runs with the keys 0, 1, ...: its row gives medians, and the ratio follows
    the rule over the seeds (a number from 5 seeds even where the ESS stays under 400).
    ``builtin_draws``: the built-ins' first run's draws per chain (the doubling starts there)."""
    size = entry.sizes[0] if quick else entry.sizes[1]
    data = entry.data(size)
    answer = entry.exact(data)
    samplers = [*entry.kernels, *entry.builtins]
    if only:
        groups = {"recommended": [entry.recommended], "builtins": list(entry.builtins)}
        wanted = {name for item in only for name in groups.get(item, [item])}
        samplers = [s for s in samplers if s in wanted]
    elif quick:
        samplers = [entry.recommended]
    rows = []
    for sampler in samplers:
        runs = []
        for seed in range(seeds):
            run = measure(
                entry,
                sampler,
                data,
                answer,
                draws=30 if quick else (builtin_draws if sampler in entry.builtins else 500),
                max_seconds=max_seconds,
                chains=1 if quick else CHAINS,
                grow=not quick,
                size=size,
                seed=seed,
            )
            shown = {k: v for k, v in run.items() if k not in ("notes",)}
            print(entry.name, f"seed {seed}", shown, flush=True)
            runs.append(run)
        row = _summary(runs)
        row["label"] = um.label(entry, sampler) + (" *" if sampler == entry.recommended else "")
        row["builtin"] = sampler in entry.builtins
        row["smoke"] = quick
        rows.append(row)
    right_builtins = [r for r in rows if r["builtin"] and "error" not in r and r["z"] < 4]
    best = max(right_builtins, key=lambda r: r["ess_per_second"]) if right_builtins else None
    for row in rows:
        if "error" not in row and best is not None:
            # one seed: a number only if both ESS >= 400; five or more: median and range
            rule = ratio_under_rule(row["runs"], best["runs"])
            row["ratio"] = rule["median"]
            row["ratio_text"] = "1 (reference)" if row is best else rule["text"]
    return rows, f"{size}", answer.method


def table(results: dict) -> list[str]:
    lines = [
        "| model | size | sampler | seconds | min ESS | ESS/s | ratio to the "
        "best right built-in | max abs z (statistic) | right |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, (rows, size, _) in results.items():
        for row in rows:
            head = f"| {name} | {size} | {row['label']} |"
            if "error" in row:
                lines.append(f"{head} fails: {row['error']} | | | | | | |")
                continue
            ratio = row.get("ratio_text", "-")
            # a smoke run's 30 draws of one chain judge nothing
            right = "-" if row.get("smoke") else ("yes" if row["z"] < 4 else "**no**")
            lines.append(
                f"{head} {row['seconds']:.1f} | {row['ess']:.0f} | {row['ess_per_second']:.1f} "
                f"| {ratio} | {row['z']:.1f} ({row['worst']}) | {right} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="models to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="smoke run, no docs update")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="per sampler run")
    parser.add_argument(
        "--samplers",
        default="",
        help="comma-separated sampler names, or the groups 'recommended' and 'builtins' "
        "(with every model, the docs section is written naming them)",
    )
    parser.add_argument(
        "--probe", nargs=3, metavar=("MODEL", "SAMPLER", "SIZE"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--seeds", type=int, default=1, help="runs per sampler with keys 0, 1, ... (medians)"
    )
    parser.add_argument(
        "--builtin-draws",
        type=int,
        default=500,
        help="draws per chain of a built-in's first run (a slow one then needs no doublings "
        "to reach the ESS; the run must fit half of --max-seconds)",
    )
    parser.add_argument("--run", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        name, sampler, size, draws, chains, out, seed = args.run
        stats, seconds, notes = run_here(
            um.MODELS[name], sampler, int(size), int(draws), int(chains), int(seed)
        )
        np.savez(out, stats=stats, seconds=seconds, notes=np.array(notes, dtype=str))
        return
    if args.probe:
        name, sampler, size = args.probe
        print(*probe_seconds(name, sampler, int(size), args.max_seconds))
        return
    unknown = [n for n in args.names if n not in um.MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(um.MODELS)}")
    results = {}
    only = [s for s in args.samplers.split(",") if s]
    for name in args.names or um.MODELS:
        results[name] = model_rows(
            um.MODELS[name], args.quick, args.max_seconds, only, args.seeds, args.builtin_draws
        )
    lines = [
        "## User-model suite: this library's kernels against NumPyro's built-ins",
        "",
        "Each model of `benchmarks/user_models.py` at its benchmark size, "
        + (
            "every sampler that runs on it"
            if not only
            else "the suite's recommended kernel (`*`) and NumPyro's built-ins"
        )
        + f", {CHAINS} chains per sampler, warmup as long as the sampling, the draws "
        + (
            f"(from {args.builtin_draws} per chain for the built-ins) "
            if args.builtin_draws != 500
            else ""
        )
        + f"doubled until the smallest ESS over the model's reported statistics reaches "
        f"{TARGET_ESS} or the run would pass "
        f"{args.max_seconds:.0f} s (then the ESS as it is). Seconds: wall time with "
        "compilation. Ratio: ESS/s over the best built-in whose answer is right (the reference), "
        "printed only where both runs reached a min ESS of 400 (one seed: the ratio rule of "
        "`benchmarks/_common.py`)"
        + (
            f"; {args.seeds} seeds per sampler: seconds, ESS and ESS/s are medians, the ratio "
            "the median and range of the per-seed ratios, max abs z the largest over seeds"
            if args.seeds > 1
            else ""
        )
        + ". Right: every "
        "reported statistic within 4 standard errors of the exact answer. `*`: the kernel "
        "the suite recommends for the model.",
        "",
        *table(results),
        "",
        "Exact answers: "
        + "; ".join(f"{name}: {method}" for name, (_, _, method) in results.items())
        + ".",
    ]
    text = "\n".join(lines)
    print(text)
    groups_only = set(only) <= {"recommended", "builtins"}
    if not args.quick and not args.names and groups_only:
        write_section("user_suite", text)
    elif not args.quick:
        print("(a subset of the models: docs/benchmarks.md not written)")


if __name__ == "__main__":
    main()
