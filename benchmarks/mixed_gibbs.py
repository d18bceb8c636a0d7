"""A mixed model through ``numpyro.infer.Gibbs``: spike-and-slab regression with Bernoulli
indicators next to continuous coefficients, a discrete kernel of this library with NUTS
against what a NumPyro user picks today.

The model: ``gamma_j ~ Bernoulli(0.1)``, ``beta_j ~ Normal(0, 2)``, ``sigma ~ HalfNormal(1)``,
``y ~ Normal(X (gamma * beta), sigma)``, with ``P`` predictors of which 5 are active and ``N``
rows of simulated data. Samplers, 4 chains each (``chain_method='sequential'``, the method the
peers support), wall time with compilation:

- ``Gibbs([(nx.DMALA(model), discrete_latent_sites), (NUTS(model), None)])`` and the same with
  ``nx.AB``;
- ``DiscreteHMCGibbs(NUTS(model))``: NumPyro's HMC-within-Gibbs, one discrete site per step;
- ``DiscreteHMCGibbs(NUTS(model), modified=True)``.

Reported: ESS per second of the model size ``sum(gamma)``, of ``sigma`` and of the log
likelihood, and the posterior inclusion probabilities of the active predictors (agreement
between samplers is the sanity check).

Run ``python benchmarks/mixed_gibbs.py`` (``--quick`` for a smoke run that writes nothing).
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
from numpyro.infer import MCMC, NUTS, DiscreteHMCGibbs, Gibbs
from numpyro.infer.gibbs import discrete_latent_sites

import numpyro_ext as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ess, ratio_under_rule, write_section  # noqa: E402

ACTIVE = 5


def simulated_data(rows: int, predictors: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, predictors)).astype(np.float32)
    beta = np.zeros(predictors, np.float32)
    beta[:ACTIVE] = rng.choice([-1.0, 1.0], ACTIVE) * rng.uniform(0.5, 1.5, ACTIVE)
    y = x @ beta + 0.5 * rng.standard_normal(rows).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(y)


def model(x, y=None):
    predictors = x.shape[1]
    gamma = numpyro.sample("gamma", dist.Bernoulli(0.1).expand([predictors]))
    beta = numpyro.sample("beta", dist.Normal(0.0, 2.0).expand([predictors]))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    numpyro.sample("y", dist.Normal(x @ (gamma * beta), sigma), obs=y)


def kernels() -> dict:
    return {
        "Gibbs(DMALA, NUTS)": lambda: Gibbs(
            [(nx.DMALA(model), discrete_latent_sites), (NUTS(model), None)]
        ),
        "Gibbs(AB, NUTS)": lambda: Gibbs(
            [(nx.AB(model), discrete_latent_sites), (NUTS(model), None)]
        ),
        "DiscreteHMCGibbs(NUTS)": lambda: DiscreteHMCGibbs(NUTS(model)),
        "DiscreteHMCGibbs(NUTS), modified": lambda: DiscreteHMCGibbs(NUTS(model), modified=True),
    }


def run(name: str, data, warmup: int, samples: int, seed: int) -> dict:
    mcmc = MCMC(
        kernels()[name](),
        num_warmup=warmup,
        num_samples=samples,
        num_chains=4,
        chain_method="sequential",
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(seed), *data)
    draws = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    seconds = time.perf_counter() - start
    x, y = data
    gamma, beta, sigma = (np.asarray(draws[k]) for k in ("gamma", "beta", "sigma"))
    mean = np.einsum("np,cdp->cdn", np.asarray(x), gamma * beta)
    resid = np.asarray(y)[None, None] - mean
    log_lik = (-0.5 * (resid / sigma[..., None]) ** 2 - np.log(sigma[..., None])).sum(-1)
    values = {"size": ess(gamma.sum(-1)), "sigma": ess(sigma), "log_lik": ess(log_lik)}
    return dict(
        sampler=name,
        seconds=seconds,
        **{key: value / seconds for key, value in values.items()},
        **{f"ess_{key}": value for key, value in values.items()},
        inclusion=gamma.mean((0, 1)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run, no docs update")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows, predictors = (50, 8) if args.quick else (200, 50)
    warmup, samples = (20, 40) if args.quick else (1000, 3000)
    repeats = 1 if args.quick else args.repeats
    data = simulated_data(rows, predictors)
    results = []
    for name in kernels():
        runs = [run(name, data, warmup, samples, seed) for seed in range(repeats)]
        row = {
            k: float(np.median([r[k] for r in runs]))
            for k in ("seconds", "size", "sigma", "log_lik")
        }
        row["sampler"], row["inclusion"] = name, np.mean([r["inclusion"] for r in runs], 0)
        row["runs"] = runs
        results.append(row)
        print({k: v for k, v in row.items() if k not in ("inclusion", "runs")}, flush=True)
    base = results[2]
    lines = [
        "## Mixed model through `Gibbs`: spike-and-slab regression",
        "",
        f"{rows} rows, {predictors} predictors ({ACTIVE} active), Bernoulli(0.1) indicators "
        f"next to Normal coefficients and a noise scale; 4 sequential chains of {warmup} "
        f"warmup and {samples} draws, wall time with compilation, medians over {repeats} "
        "repeats; ESS from `numpyro.diagnostics`. The ratio is to "
        "`DiscreteHMCGibbs(NUTS)`, by the ratio rule of `benchmarks/_common.py` (a number "
        "where every repeat reached ESS 400, with the range over repeats).",
        "",
        "| sampler | seconds | ESS/s model size | ESS/s sigma | ESS/s log-lik | ratio (size, "
        "sigma, log-lik) | inclusion of the active predictors | largest inclusion of an "
        "inactive one |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        ratios = "; ".join(
            ratio_under_rule(
                [{"ess": x[f"ess_{k}"], "ess_per_second": x[k]} for x in r["runs"]],
                [{"ess": x[f"ess_{k}"], "ess_per_second": x[k]} for x in base["runs"]],
            )["text"]
            for k in ("size", "sigma", "log_lik")
        )
        active = " ".join(f"{p:.2f}" for p in r["inclusion"][:ACTIVE])
        lines.append(
            f"| {r['sampler']} | {r['seconds']:.1f} | {r['size']:.1f} | {r['sigma']:.1f} | "
            f"{r['log_lik']:.1f} | {ratios} | {active} | {r['inclusion'][ACTIVE:].max():.2f} |"
        )
    text = "\n".join(lines)
    print(text)
    if not args.quick:
        write_section("mixed_gibbs", text)


if __name__ == "__main__":
    main()
