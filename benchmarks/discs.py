"""The DISCS benchmark's classical models and metric, as an outside yardstick.

DISCS (Goshvadi et al., 2023, https://github.com/google-research/discs) scores discrete
samplers on classical models by the effective sample size of the **Hamming distance to a
fixed reference state** (drawn uniformly at random once), computed per chain over the second
half of each chain (the first half is burn-in) and averaged over chains, divided by the
running time and by the number of energy evaluations. Its models, written here from their
definitions (log densities of x, with s = 2x - 1 for spins):

- **Bernoulli**: ``theta . x``, ``theta ~ N(0, 0.5^2)`` per coordinate (DISCS: 10,000).
- **Categorical**: ``sum_i theta[i, x_i]``, ``theta ~ N(0, 1.5^2)``, q = 4 (DISCS: 2,000).
- **Ising**: ``lambda sum_<ij> s_i s_j - sum_i b_i s_i`` on an L x L lattice with open
  boundaries, ``lambda = 0.5``, ``b_i = 1.5 u_i + 0.5 c_i`` with ``u_i ~ U(-1, 1)`` and
  ``c_i = +1`` inside the centred disc of area one half, -1 outside (DISCS: 50 x 50).
- **Potts**: ``lambda sum_<ij> [x_i = x_j] - sum_i b_{i, x_i}``, q = 4, ``lambda = 1``, the
  same field construction per colour (DISCS: 30 x 30).
- **Factorial HMM** (binary): K independent two-state chains of length L with
  ``P(x_0 = 1) = 0.1`` and ``P(x_l = x_{l-1}) = 0.8``, observed through
  ``y_l ~ N(x_l . w + b, 2^2)``; the posterior of x given one simulated y (DISCS: L = 200,
  K = 50).

Samplers: ``nx.DMALA`` and ``nx.GWG`` (energy mode, 4 vectorised chains, every 10th draw kept)
and NumPyro's ``DiscreteGibbs`` on the same log density written as a model (4 sequential
chains, each draw a sweep). Energy evaluations are counted as DISCS counts them: 4 per
gradient-based step, q per single-site Gibbs update (d q per sweep). Each run grows until the
multi-chain ESS reaches 400 or ``--budget`` (``_common.run_until_ess``); ratios to
``DiscreteGibbs`` follow the ratio rule (``_common.ratio_under_rule``).

Run ``python benchmarks/discs.py`` (sizes that fit a 2-core CPU; ``--discs-sizes`` for the
published ones; ``--quick`` for a smoke run that writes nothing).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC, DiscreteGibbs

import numpyro_ext as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MIN_ESS, ratio_under_rule, run_until_ess, write_section  # noqa: E402

CHAINS = 4
THINNING = 10  # for the gradient-based kernels; a Gibbs draw is a whole sweep
#: model -> (our size, DISCS's size): number of sites, lattice side or (L, K)
SIZES: dict[str, tuple[Any, Any]] = {
    "bernoulli": (1000, 10_000),
    "categorical": (500, 2000),
    "ising": (20, 50),
    "potts": (12, 30),
    "fhmm": ((50, 10), (200, 50)),
}
SAMPLERS = ("DMALA", "GWG", "DiscreteGibbs")


class Target:
    """A DISCS model: ``log_density(x)`` of x with shape ``shape`` (binary 0/1, or one-hot
    with a last axis of ``categories`` when ``categories > 2``)."""

    def __init__(
        self,
        name: str,
        shape: tuple[int, ...],
        categories: int,
        log_density: Callable[[Any], Any],
        parameters: dict[str, np.ndarray] | None = None,
    ):
        self.name, self.shape, self.categories = name, shape, categories
        self.log_density = log_density
        self.parameters = parameters or {}

    @property
    def sites(self) -> int:
        return int(np.prod(self.shape))

    def encode(self, labels: Any) -> Any:
        """Labels (..., *shape) to the kernel's representation (one-hot past two values)."""
        if self.categories == 2:
            return labels
        return jax.nn.one_hot(labels, self.categories, dtype=jnp.int32)

    def labels(self, x: Any) -> np.ndarray:
        """The kernel's representation back to labels (..., *shape)."""
        x = np.asarray(x)
        return x if self.categories == 2 else x.argmax(-1)


def lattice_field(side: int, categories: int | None, rng: np.random.Generator) -> np.ndarray:
    """DISCS's external field: ``1.5 u + 0.5 c`` with ``u ~ U(-1, 1)`` per entry and ``c``
    = +1 inside the centred disc of area one half of the unit square, -1 outside."""
    shape = (side, side) if categories is None else (side, side, categories)
    uniform = rng.uniform(-1.0, 1.0, shape) * 1.5
    rows, cols = np.indices((side, side)) / side
    disc = np.where((rows - 0.5) ** 2 + (cols - 0.5) ** 2 < 0.5 / np.pi, 1.0, -1.0)
    if categories is not None:
        disc = disc[..., None]
    return (uniform + 0.5 * disc).astype(np.float32)


def make_target(name: str, size: Any, seed: int = 0) -> Target:
    """The DISCS model ``name`` at ``size`` with parameters drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    if name == "bernoulli":
        theta = jnp.asarray(rng.normal(0.0, 0.5, size), jnp.float32)
        return Target(name, (size,), 2, lambda x: jnp.sum(theta * x))
    if name == "categorical":
        theta = jnp.asarray(rng.normal(0.0, 1.5, (size, 4)), jnp.float32)
        return Target(name, (size,), 4, lambda one_hot: jnp.sum(theta * one_hot))
    if name == "ising":
        field = jnp.asarray(lattice_field(size, None, rng))

        def ising(x):
            s = 2.0 * x - 1.0
            pairs = jnp.sum(s[1:, :] * s[:-1, :]) + jnp.sum(s[:, 1:] * s[:, :-1])
            return 0.5 * pairs - jnp.sum(field * s)

        return Target(name, (size, size), 2, ising)
    if name == "potts":
        field = jnp.asarray(lattice_field(size, 4, rng))

        def potts(one_hot):
            agree = jnp.sum(one_hot[1:] * one_hot[:-1]) + jnp.sum(one_hot[:, 1:] * one_hot[:, :-1])
            return 1.0 * agree - jnp.sum(field * one_hot)

        return Target(name, (size, size), 4, potts)
    if name == "fhmm":
        length, chains = size
        alpha, stay, sigma = 0.1, 0.8, 2.0
        x = np.zeros((length, chains))
        x[0] = rng.random(chains) < alpha
        for step in range(1, length):
            x[step] = np.where(rng.random(chains) < stay, x[step - 1], 1 - x[step - 1])
        w, b = rng.standard_normal(chains), rng.standard_normal()
        y = jnp.asarray(x @ w + b + sigma * rng.standard_normal(length), jnp.float32)
        w32 = jnp.asarray(w, jnp.float32)

        def fhmm(x):
            start = jnp.sum(x[0] * np.log(alpha) + (1 - x[0]) * np.log(1 - alpha))
            switch = x[1:] * (1 - x[:-1]) + (1 - x[1:]) * x[:-1]
            moves = jnp.sum(switch * np.log(1 - stay) + (1 - switch) * np.log(stay))
            fit = -jnp.sum((y - x @ w32 - b) ** 2) / (2 * sigma**2)
            return start + moves + fit

        parameters = {"w": w, "b": np.asarray(b), "y": np.asarray(y), "x": x}
        return Target(name, (length, chains), 2, fhmm, parameters)
    raise ValueError(f"unknown DISCS model {name!r}")


def as_model(target: Target) -> Callable[[], None]:
    """The target as a NumPyro model with one discrete site ``x`` of labels."""

    def model() -> None:
        if target.categories == 2:
            site = dist.Bernoulli(0.5).expand(list(target.shape))
        else:
            uniform = jnp.zeros(target.categories)
            site = dist.Categorical(logits=uniform).expand(list(target.shape))
        x = numpyro.sample("x", site)
        numpyro.factor("log_density", target.log_density(target.encode(x)))

    return model


def hamming_to_reference(labels: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Number of sites that differ from ``reference`` (shape ``target.shape``), per draw:
    labels (chains, draws, *shape) -> (chains, draws)."""
    differ = labels != reference
    return differ.reshape(differ.shape[0], differ.shape[1], -1).sum(-1).astype(np.float64)


def mean_chain_ess(values: np.ndarray) -> float:
    """DISCS's statistic: the single-chain ESS of each chain, averaged over chains."""
    return float(np.mean([effective_sample_size(chain[None]) for chain in values]))


def sampler_run(name: str, target: Target, reference: np.ndarray, extra: dict):
    """``run(draws, seed)`` for :func:`run_until_ess`: burn-in as long as the kept part (as
    DISCS), the Hamming distances of the kept draws (chains, kept) and the seconds (compile
    included); ``extra`` receives the last run's DISCS metrics."""
    sites, categories = target.sites, target.categories
    domain = nx.Binary() if categories == 2 else nx.Categorical(categories)

    def potential(x):
        return -target.log_density(x)

    def run(draws: int, seed: int):
        key_init, key_run = jax.random.split(jax.random.key(seed))
        labels0 = jax.random.randint(key_init, (CHAINS, *target.shape), 0, categories)
        if name == "DiscreteGibbs":
            kernel, method, thinning = DiscreteGibbs(as_model(target)), "sequential", 1
            init = {"x": labels0}
            steps_per_draw, evaluations_per_step = 1, sites * categories
        else:
            make = {"DMALA": nx.DMALA, "GWG": nx.GWG}[name]
            kernel = make(potential_fn=potential, domain=domain)
            method, thinning = "vectorized", THINNING
            init = target.encode(labels0)
            steps_per_draw, evaluations_per_step = 1, 4
        mcmc = MCMC(
            kernel,
            num_warmup=draws,
            num_samples=draws,
            num_chains=CHAINS,
            thinning=thinning,
            chain_method=method,
            progress_bar=False,
        )
        start = time.perf_counter()
        mcmc.run(key_run, init_params=init)
        samples = mcmc.get_samples(group_by_chain=True)
        samples = jax.block_until_ready(samples["x"] if isinstance(samples, dict) else samples)
        seconds = time.perf_counter() - start
        labels = np.asarray(samples) if name == "DiscreteGibbs" else target.labels(samples)
        distance = hamming_to_reference(labels, reference)
        kept_evaluations = draws * steps_per_draw * evaluations_per_step  # per chain
        per_chain = mean_chain_ess(distance)
        extra.update(
            chain_ess=per_chain,
            chain_ess_per_kilo_evaluation=1e3 * per_chain / kept_evaluations,
            steps=draws,
        )
        return distance, seconds

    return run


def first_draws(name: str, target: Target, quick: bool) -> int:
    if quick:
        return 100 if name != "DiscreteGibbs" else 10
    return 5000 if name != "DiscreteGibbs" else max(50, 50_000 // target.sites)


def benchmark(
    model: str, size: Any, seeds: int, budget: float, quick: bool, samplers=SAMPLERS
) -> dict:
    target = make_target(model, size)
    reference = np.asarray(
        jax.random.randint(jax.random.key(12345), target.shape, 0, target.categories)
    )
    runs: dict[str, list[dict]] = {name: [] for name in samplers}
    for seed in range(seeds):
        for name in samplers:
            extra: dict = {}
            run = sampler_run(name, target, reference, extra)
            record = run_until_ess(
                run, first_draws(name, target, quick), seed, budget_seconds=budget
            )
            record.update(extra)
            runs[name].append(record)
            print(model, name, seed, {k: round(float(v), 3) for k, v in record.items()}, flush=True)
    ratios = {
        name: ratio_under_rule(runs[name], runs["DiscreteGibbs"])
        for name in samplers
        if name != "DiscreteGibbs" and "DiscreteGibbs" in runs
    }
    return {"model": model, "size": size, "sites": target.sites, "runs": runs, "ratios": ratios}


def describe(model: str, size: Any) -> str:
    if model in ("ising", "potts"):
        return f"{model} {size}x{size}" + (", q = 4" if model == "potts" else "")
    if model == "fhmm":
        return f"factorial HMM L = {size[0]}, K = {size[1]}"
    return f"{model} d = {size}" + (", q = 4" if model == "categorical" else "")


def report(results: list[dict], budget: float, seeds: int) -> str:
    lines = [
        "## DISCS classical models: ESS of the Hamming distance to a reference state",
        "",
        "The classical models of DISCS (Goshvadi et al., 2023, "
        "[google-research/discs](https://github.com/google-research/discs)) at sizes that fit "
        "this CPU, with its metric: the ESS of the Hamming distance to a fixed random "
        "reference state over the second half of each chain (burn-in as long as the kept "
        "part). `chain ESS` is DISCS's statistic (single-chain ESS averaged over the 4 "
        "chains); `per 1k evals` divides it by the energy evaluations of one chain's kept "
        "part, counted as DISCS counts them (4 per gradient step, q per single-site Gibbs "
        "update): this column is independent of the hardware and can be set beside DISCS's "
        "published ESS per evaluation. `ESS/s` is the multi-chain ESS per second of the whole "
        "run (compilation and burn-in included; DISCS divides by the sampling time only). "
        f"Each run grows until its multi-chain ESS is at least {MIN_ESS} or the next run would "
        f"not fit {budget:.0f} s; {seeds} seed(s); ratios by the ratio rule (a number only "
        f"where every ESS reached {MIN_ESS}, or as median and range over at least 5 seeds). "
        "Medians over seeds.",
        "",
        "| model | sampler | steps kept | seconds | ESS | chain ESS | per 1k evals | ESS/s "
        "| ESS/s ratio to DiscreteGibbs |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        for name, rs in result["runs"].items():

            def med(key: str, rs=rs) -> float:
                return float(np.median([r[key] for r in rs]))

            ratio = result["ratios"].get(name, {}).get("text", "")
            lines.append(
                f"| {describe(result['model'], result['size'])} | {name} | {med('steps'):.0f} "
                f"| {med('seconds'):.1f} | {med('ess'):.0f} | {med('chain_ess'):.0f} "
                f"| {med('chain_ess_per_kilo_evaluation'):.3g} | {med('ess_per_second'):.1f} "
                f"| {ratio} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run, no docs update")
    parser.add_argument("--models", default=",".join(SIZES), help=f"of {list(SIZES)}")
    parser.add_argument("--samplers", default=",".join(SAMPLERS), help=f"of {SAMPLERS}")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per run at most")
    parser.add_argument("--discs-sizes", action="store_true", help="DISCS's published sizes")
    args = parser.parse_args()
    models = args.models.split(",")
    samplers = tuple(args.samplers.split(","))
    budget = 5.0 if args.quick else args.budget
    results = []
    for model in models:
        ours, published = SIZES[model]
        size = published if args.discs_sizes else ours
        if args.quick:
            size = (6, 3) if model == "fhmm" else (4 if model in ("ising", "potts") else 20)
        results.append(benchmark(model, size, args.seeds, budget, args.quick, samplers))
    text = report(results, budget, args.seeds)
    print(text)
    if not args.quick:
        write_section("discs", text)


if __name__ == "__main__":
    main()
