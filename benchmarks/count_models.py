"""Count latents (the ``Integer`` window domain): DMALA against NumPyro's DiscreteHMCGibbs on
two models with exact posteriors.

- **population size**: ``N ~ Poisson(lam)``, ``y_k ~ Binomial(N, p)`` for ``K`` surveys, ``p``
  known. The exact posterior of ``N`` is a sum over ``N = max(y) .. 2000``.
- **zero-inflated counts**: ``J`` sites, ``n_j ~ ZeroInflatedPoisson(gate, rate)``, each
  surveyed ``K`` times, ``y_jk ~ Binomial(n_j, p)``. The sites are independent a posteriori;
  each one's exact posterior is a sum over ``n_j = max_k y_jk .. 2000``.

Samplers, 4 chains each, run one after the other (``chain_method="sequential"``: NumPyro's
Gibbs kernels take no other), and DMALA once more with its chains vectorized:

- ``nx.DMALA(model)`` on the model as written (Poisson and ZeroInflatedPoisson sites, window
  proposal of half-width ``w``, each of ``--windows``), and with ``per_coordinate_mh=True``
  (one MH decision per count: the counts are conditionally independent) at the smallest and
  largest window;
- ``DiscreteHMCGibbs(NUTS(model), random_walk=True)`` and ``DiscreteHMCGibbs(NUTS(model))``
  (Gibbs over the whole support): NumPyro's samplers need a finite support, so they run the
  same model with each count written as a ``Categorical`` over ``0 .. M``, ``M`` the count
  prior's ``1 - 1e-9`` quantile (the truncated prior mass is below ``1e-9``).

Each sampler runs ``--draws`` draws per chain after as many warmup steps; when the smallest
ESS over the latent coordinates is below 400 the run is repeated with twice the draws (up to
``--max-draws``). Reported: that ESS, the run's wall time (compilation included, as a user
waits for it) and ESS/s with its ratio to DiscreteHMCGibbs (random walk), the same without
compilation (the wall time less that of a run of one warmup step and one draw: NumPyro
compiles every ``MCMC.run`` afresh), and the largest ``|z|`` of the posterior means against
the exact ones (``z = (mean - exact) / (sd_exact / sqrt(ESS))``).

Run ``python benchmarks/count_models.py`` (``--quick`` for a smoke run that writes nothing).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC, NUTS, DiscreteHMCGibbs
from scipy import special, stats

import numpyro_ext as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, write_section  # noqa: E402

EXACT_BOUND = 2000
TRUNCATED_MASS = 1e-9
ESS_TARGET = 400


@dataclass(frozen=True)
class CountModel:
    """One benchmark model: the model as written, its truncated twin for NumPyro's samplers,
    the observed counts, start values, and the exact posterior moments per coordinate."""

    name: str
    description: str
    model: Callable
    truncated_model: Callable
    site: str
    init: np.ndarray  # (chains, *site shape), every start of positive density
    exact_mean: np.ndarray
    exact_sd: np.ndarray


def exact_moments(log_prior: np.ndarray, log_lik: np.ndarray) -> tuple[float, float]:
    """Posterior mean and sd of a count on ``0 .. EXACT_BOUND`` from its log prior and log
    likelihood at every value."""
    log_post = log_prior + log_lik
    p = np.exp(log_post - special.logsumexp(log_post))
    values = np.arange(log_prior.shape[0])
    mean = float(p @ values)
    return mean, float(np.sqrt(p @ (values - mean) ** 2))


def population_model(rate: float, detection: float, counts: np.ndarray) -> CountModel:
    y = jnp.asarray(counts)
    bound = int(stats.poisson.ppf(1 - TRUNCATED_MASS, rate))
    logits = jnp.asarray(stats.poisson.logpmf(np.arange(bound + 1), rate), jnp.float32)

    def model():
        n = numpyro.sample("N", dist.Poisson(rate))
        with numpyro.plate("surveys", len(counts)):
            numpyro.sample("y", dist.Binomial(n, detection), obs=y)

    def truncated():
        n = numpyro.sample("N", dist.Categorical(logits=logits))
        with numpyro.plate("surveys", len(counts)):
            numpyro.sample("y", dist.Binomial(n, detection), obs=y)

    values = np.arange(EXACT_BOUND + 1)
    log_lik = sum(stats.binom.logpmf(k, values, detection) for k in counts)
    mean, sd = exact_moments(stats.poisson.logpmf(values, rate), log_lik)
    top = int(counts.max())
    return CountModel(
        "population size",
        f"N ~ Poisson({rate:g}), {len(counts)} surveys y_k ~ Binomial(N, {detection:g}); "
        f"truncated at M = {bound}",
        model,
        truncated,
        "N",
        np.array([top, top + 5, top + 15, top + 30]),
        np.array([mean]),
        np.array([sd]),
    )


def zero_inflated_model(
    gate: float, rate: float, detection: float, counts: np.ndarray
) -> CountModel:
    """``counts``: (J, K) detections per site and survey."""
    y = jnp.asarray(counts)
    sites, surveys = counts.shape
    values = np.arange(EXACT_BOUND + 1)
    log_prior = np.log(1 - gate) + stats.poisson.logpmf(values, rate)
    log_prior[0] = np.logaddexp(np.log(gate), log_prior[0])
    prior_cdf = np.cumsum(np.exp(log_prior))
    bound = int(np.argmax(prior_cdf >= 1 - TRUNCATED_MASS))
    logits = jnp.asarray(log_prior[: bound + 1], jnp.float32)

    def model():
        with numpyro.plate("sites", sites, dim=-2):
            n = numpyro.sample("n", dist.ZeroInflatedPoisson(gate, rate))
            with numpyro.plate("surveys", surveys, dim=-1):
                numpyro.sample("y", dist.Binomial(n, detection), obs=y)

    def truncated():
        with numpyro.plate("sites", sites, dim=-2):
            n = numpyro.sample("n", dist.Categorical(logits=logits))
            with numpyro.plate("surveys", surveys, dim=-1):
                numpyro.sample("y", dist.Binomial(n, detection), obs=y)

    means, sds = [], []
    for row in counts:
        log_lik = sum(stats.binom.logpmf(k, values, detection) for k in row)
        mean, sd = exact_moments(log_prior, log_lik)
        means.append(mean)
        sds.append(sd)
    top = counts.max(axis=1, keepdims=True)
    init = np.stack([top + shift for shift in (0, 2, 5, 9)])  # (4, J, 1)
    return CountModel(
        "zero-inflated counts",
        f"{sites} sites n_j ~ ZeroInflatedPoisson(gate={gate:g}, rate={rate:g}), {surveys} "
        f"surveys y_jk ~ Binomial(n_j, {detection:g}); truncated at M = {bound}",
        model,
        truncated,
        "n",
        init,
        np.array(means),
        np.array(sds),
    )


def benchmark_models(quick: bool) -> list[CountModel]:
    rng = np.random.default_rng(0)
    rate, detection = 150.0, 0.25
    population_counts = rng.binomial(160, detection, size=8)
    gate, site_rate, site_detection = 0.3, 10.0, 0.4
    sites = 6 if quick else 30
    occupied = rng.random(sites) > gate
    abundance = np.where(occupied, rng.poisson(site_rate, sites), 0)
    detections = rng.binomial(abundance[:, None], site_detection, size=(sites, 3))
    return [
        population_model(rate, detection, population_counts),
        zero_inflated_model(gate, site_rate, site_detection, detections),
    ]


def samplers(windows: list[int]) -> dict[str, Callable[[CountModel], tuple]]:
    """``label -> (count model -> (kernel, chain method))``."""
    out: dict[str, Callable[[CountModel], tuple]] = {
        "DiscreteHMCGibbs(NUTS), random walk": lambda m: (
            DiscreteHMCGibbs(NUTS(m.truncated_model), random_walk=True),
            "sequential",
        ),
        "DiscreteHMCGibbs(NUTS), Gibbs": lambda m: (
            DiscreteHMCGibbs(NUTS(m.truncated_model)),
            "sequential",
        ),
    }
    for w in windows:
        out[f"DMALA, window {w}"] = lambda m, w=w: (
            nx.DMALA(m.model, window={m.site: w}),
            "sequential",
        )
    widest = max(windows)
    out[f"DMALA, window {widest}, vectorized chains"] = lambda m: (
        nx.DMALA(m.model, window={m.site: widest}),
        "vectorized",
    )
    for w in sorted({min(windows), widest}):
        out[f"DMALA per coordinate, window {w}"] = lambda m, w=w: (
            nx.DMALA(m.model, window={m.site: w}, per_coordinate_mh=True),
            "sequential",
        )
    out[f"DMALA per coordinate, window {widest}, vectorized chains"] = lambda m: (
        nx.DMALA(m.model, window={m.site: widest}, per_coordinate_mh=True),
        "vectorized",
    )
    return out


def run_once(
    kernel, chain_method: str, m: CountModel, draws: int, seed: int
) -> tuple[np.ndarray, float, float]:
    """Draws ``(chains, draws, coordinates)`` of a run of ``draws`` warmup steps and draws,
    its seconds (compilation included), and the seconds of a run of one warmup step and one
    draw (compilation and per-run overhead: NumPyro compiles each ``MCMC.run`` afresh)."""
    init = {m.site: jnp.asarray(m.init, jnp.int32)}
    times, samples = [], None
    for length in (1, draws):
        mcmc = MCMC(
            kernel,
            num_warmup=length,
            num_samples=length,
            num_chains=len(m.init),
            chain_method=chain_method,
            progress_bar=False,
        )
        start = time.perf_counter()
        mcmc.run(jax.random.key(seed), init_params=init)
        samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True)[m.site])
        times.append(time.perf_counter() - start)
    values = np.asarray(samples, np.float64).reshape(len(m.init), draws, -1)
    # NumPyro compiles every run (every sequential chain) afresh and JAX keeps each program
    # mapped: without this the benchmark's ~40 runs reach the kernel's limit of 65,530 memory
    # maps ("LLVM compilation error: Cannot allocate memory")
    jax.clear_caches()
    return values, times[1], times[0]


def measure(label: str, make: Callable, m: CountModel, draws: int, max_draws: int) -> dict:
    while True:
        kernel, chain_method = make(m)
        values, total, overhead = run_once(kernel, chain_method, m, draws, seed=1)
        ess = np.asarray(effective_sample_size(values), np.float64)
        # a coordinate that no chain ever moved has no ESS (NaN): it is counted apart
        varied = np.isfinite(ess)
        least = float(ess[varied].min()) if varied.any() else float("nan")
        if least >= ESS_TARGET or 2 * draws > max_draws:
            break
        draws *= 2
    mean = values.mean(axis=(0, 1))
    z = (mean[varied] - m.exact_mean[varied]) / (m.exact_sd[varied] / np.sqrt(ess[varied]))
    # never moved: the error of its mean in exact standard deviations
    still = np.abs(mean[~varied] - m.exact_mean[~varied]) / m.exact_sd[~varied]
    return dict(
        sampler=label,
        draws=draws,
        ess=least,
        never_moved=int((~varied).sum()),
        still_error=float(still.max()) if still.size else 0.0,
        total=total,
        seconds=max(total - overhead, 1e-3),
        ess_per_s=least / total,
        sampling_ess_per_s=least / max(total - overhead, 1e-3),
        z=float(np.abs(z).max()) if z.size else float("nan"),
    )


#: a run shorter than this beyond its one-step twin has no usable sampling time
MIN_SAMPLING_SECONDS = 1.0


def sampling_cells(row: dict, base: dict) -> str:
    """The sampling-time cells of a row (``-`` where the run took less than
    :data:`MIN_SAMPLING_SECONDS` beyond its one-step twin: compilation varies more than that)."""

    def usable(r: dict) -> bool:
        return r["total"] - (r["total"] - r["seconds"]) >= MIN_SAMPLING_SECONDS

    if not usable(row):
        return "- | - | -"
    ratio = (
        f"{row['sampling_ess_per_s'] / base['sampling_ess_per_s']:.1f}x" if usable(base) else "-"
    )
    return f"{row['seconds']:.1f} | {row['sampling_ess_per_s']:.1f} | {ratio}"


def model_lines(m: CountModel, rows: list[dict]) -> list[str]:
    """The markdown block of one model: its description and a row per sampler (the first
    row, the random walk, is the ratios' reference)."""
    base = rows[0]
    lines = [
        f"**{m.name}**: {m.description}; exact posterior mean "
        + (
            f"{m.exact_mean[0]:.2f}, sd {m.exact_sd[0]:.2f}."
            if m.exact_mean.size == 1
            else f"{m.exact_mean.min():.2f} .. {m.exact_mean.max():.2f} over the "
            f"{m.exact_mean.size} sites, sd up to {m.exact_sd.max():.2f}."
        ),
        "",
        "| sampler | draws per chain | min ESS | seconds | ESS/s | ratio to random walk "
        "| sampling s | ESS/s sampling | ratio | max abs z | never moved (error in sd) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['sampler']} | {r['draws']} | {r['ess']:.0f} | {r['total']:.1f} | "
            f"{r['ess_per_s']:.1f} | {r['ess_per_s'] / base['ess_per_s']:.1f}x | "
            f"{sampling_cells(r, base)} | {r['z']:.2f} | "
            f"{r['never_moved']} ({r['still_error']:.3f}) |"
        )
    return lines + [""]


def rows_from_log(path: str) -> dict[str, list[dict]]:
    """The rows a run printed (``model name {row}`` per line), by model name."""
    import ast

    out: dict[str, list[dict]] = {}
    for line in Path(path).read_text().splitlines():
        if " {'sampler'" in line:
            name, row = line.split(" {", 1)
            out.setdefault(name, []).append(ast.literal_eval("{" + row))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run, no docs update")
    parser.add_argument("--windows", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--draws", type=int, default=1000, help="first draws per chain")
    parser.add_argument("--max-draws", type=int, default=64000)
    parser.add_argument("--models", nargs="+", default=None, help="model names (default all)")
    parser.add_argument(
        "--rows-from",
        nargs=2,
        metavar=("LOG", "COMMAND"),
        default=None,
        help="rewrite the section from the rows a full run printed (its saved output) and "
        "the command that run was",
    )
    args = parser.parse_args()
    draws, max_draws = (50, 50) if args.quick else (args.draws, args.max_draws)
    logged = rows_from_log(args.rows_from[0]) if args.rows_from else None
    if logged:
        max_draws = max(r["draws"] for rows in logged.values() for r in rows)
    lines = [
        "## Count latents: DMALA's window proposal against DiscreteHMCGibbs",
        "",
        "DMALA samples the counts as written (`Poisson`, `ZeroInflatedPoisson`: the `Integer` "
        "domain, a window of half-width `w` around each count); NumPyro's "
        "`DiscreteHMCGibbs` needs a finite support, so it runs the same model with each "
        "count a `Categorical` over `0 .. M`, `M` the prior's `1 - 1e-9` quantile. 4 "
        "chains one after the other (`DiscreteHMCGibbs` takes no other chain method; one "
        "DMALA row with vectorized chains), warmup as long as the sampling, draws doubled "
        "until the smallest "
        f"ESS over the latent coordinates reaches {ESS_TARGET} (or {max_draws} draws per "
        "chain). Seconds: the run's wall time, compilation included; sampling s: the same "
        "less the wall time of a run of one warmup step and one draw (compilation and "
        f"per-run overhead; `-` where that leaves under {MIN_SAMPLING_SECONDS:g} s). `|z|`: "
        "the largest over the coordinates of the posterior "
        "mean's error against the exact mean (a sum over the counts), in ESS-based standard "
        "errors. Min ESS and `|z|` are over the coordinates some chain moved; a coordinate no "
        "chain moved after its start has no ESS and is counted under 'never moved', with "
        "the largest error of such a mean in exact posterior standard deviations (a site "
        "with no detection sits at 0 with posterior probability 0.998).",
        "",
    ]
    for m in benchmark_models(args.quick):
        if args.models is not None and m.name not in args.models:
            continue
        if logged is not None:
            rows = logged[m.name]
        else:
            rows = []
            for label, make in samplers(args.windows).items():
                row = measure(label, make, m, draws, max_draws)
                rows.append(row)
                print(m.name, row, flush=True)
        lines += model_lines(m, rows)
    text = "\n".join(lines).rstrip()
    print(text)
    if not args.quick and logged is None:
        write_section("count_models", text)
    elif logged is not None:
        head, rest = text.split("\n", 1)
        origin = (
            f"Command: `{args.rows_from[1]}` (the table rewritten from its printed rows by "
            f"`--rows-from`); {machine()}.\n"
        )
        write_section("count_models", f"{head}\n\n{origin}{rest}", header=False)


if __name__ == "__main__":
    main()
