"""Pyro's PairedGibbs on a variable-selection model: each indicator drawn with its coefficient,
against the indicators alone with ``pyro_ext.DiscreteGibbs`` and ``pyro_ext.DMALA``, each a
block of ``pyro_ext.Gibbs`` next to Pyro's NUTS.

The model of the warmup-check tests (``tests/variable_selection.py``): 40 rows, 8 predictors,
``gamma_j ~ Bernoulli(0.2)``, ``beta_j ~ Normal(0, 2)``, ``sigma ~ HalfCauchy(5)``,
``y ~ Normal(X (gamma * beta), sigma)``; exact inclusion probabilities from the 256 subsets
(coefficients integrated in closed form, ``sigma`` by quadrature). NUTS moves what the
discrete block does not own (``sigma`` beside PairedGibbs; ``beta`` and ``sigma`` beside the
others). One chain per sampler, one torch thread, the same warmup; ESS of each inclusion indicator
(``numpyro``'s ESS on the one chain), the smallest reported; |z| of the
inclusion frequencies against the exact probabilities (standard error from the ESS). Seconds:
the whole ``pyro.infer.MCMC`` run, setup included.
"""

from __future__ import annotations

import argparse
import time
import warnings

import pyro
import pyro.distributions as dist
import torch
from pyro.infer import MCMC, NUTS

import pyro_ext as px
from benchmarks._common import ratio_under_rule, run_until_ess, write_section
from tests.variable_selection import (
    INCLUSION,
    NOISE_SCALE,
    SEL_D,
    SEL_X,
    SEL_Y,
    SLAB,
    binary_z,
    selection_exact,
)


def model(x: torch.Tensor, y: torch.Tensor) -> None:
    gamma = pyro.sample("gamma", dist.Bernoulli(INCLUSION * torch.ones(SEL_D)).to_event(1))
    beta = pyro.sample("beta", dist.Normal(torch.zeros(SEL_D), SLAB).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfCauchy(torch.tensor(NOISE_SCALE)))
    pyro.sample("y", dist.Normal(x @ (gamma * beta), sigma).to_event(1), obs=y)


SAMPLERS = {
    "Gibbs(PairedGibbs, NUTS)": (
        lambda: px.PairedGibbs(model, pairs={"gamma": "beta"}),
        ["gamma", "beta"],
    ),
    "Gibbs(DiscreteGibbs, NUTS)": (lambda: px.DiscreteGibbs(model), ["gamma"]),
    "Gibbs(DMALA, NUTS)": (lambda: px.DMALA(model), ["gamma"]),
}
REFERENCE = "Gibbs(DiscreteGibbs, NUTS)"
WARMUP = 300


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=1500, help="draws of the first run")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per sampler")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    x = torch.as_tensor(SEL_X, dtype=torch.float32)
    y = torch.as_tensor(SEL_Y, dtype=torch.float32)
    exact = selection_exact()
    warmup = 20 if args.quick else WARMUP
    records, errors = {}, {}
    for name, (make, sites) in SAMPLERS.items():

        def run(num_draws: int, seed: int, make=make, sites=sites, name=name) -> tuple:
            pyro.set_rng_seed(seed)
            kernel = px.Gibbs([(make(), sites), (NUTS(model), None)])
            mcmc = MCMC(kernel, num_samples=num_draws, warmup_steps=warmup, disable_progbar=True)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # DMALA's switch to exact differences, told once
                mcmc.run(x, y)
            seconds = time.perf_counter() - start
            gamma = mcmc.get_samples(group_by_chain=True)["gamma"].numpy().astype(float)
            errors[name] = float(binary_z(gamma, exact).max())
            return gamma, seconds

        first = 40 if args.quick else args.draws
        budget = 30.0 if args.quick else args.budget
        records[name] = record = run_until_ess(run, first, seed=0, budget_seconds=budget)
        print(name, {k: round(v, 1) for k, v in record.items()}, f"max |z| {errors[name]:.1f}")
    reference = records[REFERENCE]
    lines = [
        "## Pyro PairedGibbs on variable selection",
        "",
        __doc__.split("\n\n", 1)[1].replace("\n", " ").strip(),
        "",
        f"Warmup {WARMUP} steps; the draws grow from {args.draws} until the smallest ESS "
        f"reaches 400 or the next run would pass {args.budget:.0f} s (`run_until_ess`).",
        "",
        "| sampler | draws | seconds | min ESS (inclusions) | ESS/s | ratio to "
        f"`{REFERENCE}` | max abs z (inclusions) | right |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, record in records.items():
        ratio = (
            "1 (reference)"
            if name == REFERENCE
            else ratio_under_rule([record], [reference])["text"]
        )
        z = errors[name]
        lines.append(
            f"| `{name}` | {record['draws']} | {record['seconds']:.1f} | {record['ess']:.0f} | "
            f"{record['ess_per_second']:.1f} | {ratio} | {z:.1f} | {'yes' if z < 4 else '**no**'} |"
        )
    print("\n".join(lines))
    if not args.quick:
        write_section("pyro_paired", "\n".join(lines))


if __name__ == "__main__":
    main()
