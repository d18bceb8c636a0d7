"""Cost of a plate site's exact table against one ``value_and_grad`` of the model.

A zero-inflated Poisson regression with one binary indicator per row in a plate (N rows, 5
covariates): the kernels' ``local_fn`` with the site in plate mode (``exact_sites=["z"]``:
the ``(N, 2)`` table of exact single-site changes and the log density) against the jitted
``value_and_grad`` of the same log density in the relaxed indicators (what a gradient
kernel's ``local_fn`` costs), and against the single-site table the plate table replaces
(``N (S - 1)`` vmapped evaluations, each coordinate at its other value; measured up to
N = 10^3 only, where it still fits). Each time is the minimum over repeated calls of the
compiled function (the machine's noise only adds).

Run ``python benchmarks/plate_table_cost.py`` (``--quick``: N = 10^3 only, nothing written).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

import numpyro_ext as nx
from benchmarks._common import write_section
from discrete_kernels.sites import EXACT, LeafSpec
from numpyro_ext._target import make_local_fn

COEFFICIENTS = np.array([0.3, -0.2, 0.1, 0.0, 0.5], np.float32)


def zip_regression(y, covariates):
    """z_i ~ Bernoulli(0.3) (a structural zero), y_i ~ Poisson(exp(x_i b)) otherwise."""
    with numpyro.plate("rows", y.shape[0]):
        z = numpyro.sample("z", dist.Bernoulli(0.3))
        rate = jnp.exp(covariates @ jnp.asarray(COEFFICIENTS))
        numpyro.sample("y", dist.Poisson(jnp.where(z > 0, 1e-6, rate)), obs=y)


def best_time(fn, *args, repeats: int = 200) -> float:
    """Minimum seconds of one call of the compiled ``fn(*args)``."""
    jax.block_until_ready(fn(*args))
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def measure(num_rows: int) -> dict:
    rng = np.random.default_rng(0)
    covariates = rng.normal(size=(num_rows, 5)).astype(np.float32)
    y = np.where(rng.random(num_rows) < 0.3, 0, rng.poisson(2.0, num_rows))
    kernel = nx.DMALA(zip_regression, exact_sites=["z"])
    setup = kernel._site_setup(jax.random.key(0), None, (y, covariates), {})
    assert setup.leaves[0].is_plate
    log_density = setup.log_density_fn((y, covariates), {})
    x = (jnp.asarray(rng.random(num_rows) < 0.3, jnp.int32),)
    plate = best_time(jax.jit(setup.local_fn((y, covariates), {})), x)
    gradient = best_time(
        jax.jit(jax.value_and_grad(lambda v: log_density((v,)))), jnp.asarray(x[0], jnp.float32)
    )
    row = {"rows": num_rows, "plate": plate, "gradient": gradient, "single": None}
    if num_rows <= 1000:
        single_site = make_local_fn(log_density, (LeafSpec("z", setup.leaves[0].domain, EXACT),))
        row["single"] = best_time(jax.jit(single_site), x, repeats=20)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = [1000] if args.quick else [1000, 10_000, 100_000]
    lines = [
        "## Plate tables against value_and_grad",
        "",
        "A zero-inflated Poisson regression, one binary indicator per row in a plate: the time "
        "of the site's exact table from its per-coordinate terms (`exact_sites=['z']`, plate "
        "mode: 2 evaluations of the terms plus the log density) against one jitted "
        "`value_and_grad` of the model, and against the single-site table it replaces "
        "(`N` vmapped evaluations, each coordinate at its other value; `N x 2` before "
        "2026-12-01). Minimum over repeated calls of compiled functions.",
        "",
        "| rows N | plate table (ms) | value_and_grad (ms) | ratio | single-site table (ms) |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for num_rows in sizes:
        row = measure(num_rows)
        single = "-" if row["single"] is None else f"{row['single'] * 1e3:.2f}"
        line = (
            f"| {num_rows:,} | {row['plate'] * 1e3:.3f} | {row['gradient'] * 1e3:.3f} | "
            f"{row['plate'] / row['gradient']:.2f} | {single} |"
        )
        print(line, flush=True)
        lines.append(line)
    if not args.quick:
        write_section("plate_table_cost", "\n".join(lines))


if __name__ == "__main__":
    main()
