"""Pyro's PlateGibbs on a chain given term by term: the colour sweep against
``pyro_ext.DiscreteGibbs`` and ``pyro_ext.DMALA``.

A 1-D Ising denoising chain of 50 binary sites, one Gaussian observation per site and the
neighbour couplings ``0.8 s_i s_{i+1}`` given to ``pyro.factor`` as a tensor of edge terms (the
form the colouring reads). One chain per sampler, one torch thread, the same warmup and
draws; ESS of the number of sites at 1 and of the number of agreeing neighbours
(``numpyro``'s ESS on the one chain); marginals against the exact ones (transfer matrices).
Seconds: the whole ``pyro.infer.MCMC`` run, setup included (with ``torch_compile=True``, the
compilation at the first step too).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from numpyro.diagnostics import effective_sample_size
from pyro.infer import MCMC

import pyro_ext as px
from benchmarks._common import ratio_under_rule, write_section

SITES = 50
COUPLING = 0.8


def data() -> torch.Tensor:
    rng = np.random.default_rng(0)
    truth = np.where((np.arange(SITES) // 10) % 2 == 0, 1.0, -1.0)
    return torch.tensor(truth + rng.standard_normal(SITES), dtype=torch.float32)


def chain(y: torch.Tensor) -> None:
    with pyro.plate("sites", SITES):
        x = pyro.sample("x", dist.Bernoulli(0.5))
        s = 2.0 * x - 1.0
        pyro.sample("y", dist.Normal(s, 1.0), obs=y)
    pyro.factor("pairs", COUPLING * s[1:] * s[:-1])


def exact_marginals(y: np.ndarray) -> np.ndarray:
    """P(x_i = 1 | y) by forward and backward passes over the chain."""
    spins = np.array([-1.0, 1.0])
    unary = -0.5 * (y[:, None] - spins[None]) ** 2  # (N, 2)
    pair = COUPLING * spins[:, None] * spins[None]
    forward = [unary[0]]
    for i in range(1, SITES):
        prev = forward[-1][:, None] + pair
        forward.append(unary[i] + np.logaddexp.reduce(prev, axis=0))
    backward = [np.zeros(2)]
    for i in range(SITES - 1, 0, -1):
        nxt = pair + (unary[i] + backward[-1])[None]
        backward.append(np.logaddexp.reduce(nxt, axis=1))
    backward = backward[::-1]
    log_marginal = np.stack(forward) + np.stack(backward)
    log_marginal -= np.logaddexp.reduce(log_marginal, axis=1, keepdims=True)
    return np.exp(log_marginal[:, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=1500)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    draws = 100 if args.quick else args.draws
    torch.set_num_threads(1)
    y = data()
    exact = exact_marginals(y.numpy().astype(float))
    samplers = {
        "PlateGibbs": lambda: px.PlateGibbs(chain),
        "DiscreteGibbs": lambda: px.DiscreteGibbs(chain),
        "DMALA": lambda: px.DMALA(chain),
        "DMALA, `torch_compile=True`": lambda: px.DMALA(chain, torch_compile=True),
    }
    rows = {}
    for name, make in samplers.items():
        pyro.set_rng_seed(0)
        mcmc = MCMC(make(), num_samples=draws, warmup_steps=draws // 5, disable_progbar=True)
        start = time.perf_counter()
        mcmc.run(y)
        seconds = time.perf_counter() - start
        x = mcmc.get_samples()["x"].numpy().astype(float)
        agreements = (x[:, 1:] == x[:, :-1]).sum(1)
        statistics = np.stack([x.sum(1), agreements], -1)[None]
        ess = effective_sample_size(statistics)
        error = np.abs(x.mean(0) - exact).max()
        rows[name] = (seconds, ess, error)
        print(name, f"{seconds:.1f} s", np.round(ess), f"max |mean - exact| {error:.3f}")
    reference = rows["DiscreteGibbs"]
    lines = [
        "## Pyro PlateGibbs on a chain",
        "",
        __doc__.split("\n\n", 1)[1].replace("\n", " ").strip(),
        "",
        "| sampler | seconds | ESS (sites at 1, agreements) | min ESS/s | ratio to "
        "DiscreteGibbs | max abs error of a marginal |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, (seconds, ess, error) in rows.items():
        record = {"ess_per_second": ess.min() / seconds, "ess": ess.min()}
        base = {"ess_per_second": reference[1].min() / reference[0], "ess": reference[1].min()}
        ratio = (
            "1 (reference)"
            if name == "DiscreteGibbs"
            else ratio_under_rule([record], [base])["text"]
        )
        lines.append(
            f"| {name} | {seconds:.1f} | {', '.join(f'{e:.0f}' for e in ess)} | "
            f"{ess.min() / seconds:.1f} | {ratio} | {error:.3f} |"
        )
    print("\n".join(lines))
    if not args.quick:
        write_section("pyro_chain", "\n".join(lines))


if __name__ == "__main__":
    main()
