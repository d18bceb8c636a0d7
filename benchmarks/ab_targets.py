"""AB samplers on the targets of the AB paper (Sec. 5, App. B) against DMALA and NumPyro's
DiscreteGibbs: ESS per 10,000 energy evaluations and per second.

Targets (all through NumPyro models, so DiscreteGibbs runs on the same ones):

- ``ising``: 20x20 periodic Ising at J = 0.4407 (critical), binary spins, no field.
- ``blr``: Bayesian logistic regression with 100 binary coefficients and 50 observations,
  generated as in App. B.4 (rows of X ~ N(0, 0.25 L S L), S_ii = 1.25, S_ij = 0.25,
  L_ii = exp(-0.25 + (i - 1) / 99); beta_i = 1 for i <= 7), uniform prior.
- ``lattice``: 100-d lattice Gaussian on {0, ..., 20}^100, ``f = -(x - b)' Q (x - b) / 2``
  with the "sparse" precision of App. B.3 (a cycle) at condition L = 10:
  ``Q = Lam M Lam``, ``M_ii = 1``, ``M_{i,i+1} ~ N(0, 0.04)`` around the cycle,
  ``Lam_ii^2 = 99 / (99 + (i - 1)(L - 1))`` (variances from 1 to about 10: heterogeneous);
  ``b ~ U(5, 15)``. The appendix's formula is garbled in our copy; this is our reading.
- ``quartic``: 50-d quartic mixture on {0, ..., 20}^50, ``f = log sum_k exp(-sum_i
  phi((P (x - mu_k))_i / s_i))`` with ``phi(z) = z^2 / 2 + 0.1 z^4``, K = 4 components with
  ``mu_k = 10 + 1.5 N(0, I)``, a shared random rotation ``P`` and scales
  ``s_i = 2 exp(-0.5 + (i - 1) / 49)``. App. B.5's generator is garbled in our copy, so this is
  our own heterogeneous quartic mixture in its spirit, not the paper's exact target.

Protocol: ``CHAINS`` chains (vectorized) per sampler, the same warmup and sampling steps for
DMALA and every AB variant; one energy evaluation per step (a ``value_and_grad``).
DiscreteGibbs draws are sweeps over all coordinates, each coordinate update evaluating the
energy at the other ``S - 1`` values of its support, so a sweep costs ``d (S - 1)``
evaluations; it runs fewer sweeps. ESS (multi-chain, ``numpyro.diagnostics``) of two scalar
summaries: the energy and a fixed random projection ``<v, x>``; per 10,000 evaluations of the
sampling phase and per second of wall time (compile and warmup included); medians over
repeats.

Run ``python benchmarks/ab_targets.py`` (``--quick`` for a smoke run); writes its section of
``docs/benchmarks.md``.
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
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC, DiscreteGibbs

import numpyro_ext as nx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import ratio_under_rule, write_section  # noqa: E402

CHAINS = 4
NUM_VALUES = 21  # {0, ..., 20}


# ------------------------------------------------------------------------------ targets


def ising_target(side: int = 20, coupling: float = 0.4407):
    def log_density(x):
        s = jnp.reshape(2.0 * x - 1.0, (side, side))
        return coupling * jnp.sum(s * (jnp.roll(s, 1, axis=0) + jnp.roll(s, 1, axis=1)))

    def model():
        x = numpyro.sample("x", dist.Bernoulli(0.5).expand([side * side]))
        numpyro.factor("f", log_density(x))

    return model, log_density, side * side, 2


def blr_target(seed: int = 0):
    rng = np.random.default_rng(seed)
    m, d = 50, 100
    sigma = np.full((d, d), 0.25) + np.eye(d)  # 1.25 on the diagonal, 0.25 off it
    lam = np.diag(np.exp(-0.25 + np.arange(d) / 99))
    x = rng.multivariate_normal(np.zeros(d), 0.25 * lam @ sigma @ lam, size=m)
    beta = (np.arange(d) < 7).astype(float)
    y = rng.binomial(1, 1 / (1 + np.exp(-x @ beta)))
    x, y = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)

    def log_density(b):
        logits = x @ b
        return jnp.sum(y * logits - jnp.logaddexp(0.0, logits))

    def model():
        b = numpyro.sample("x", dist.Bernoulli(0.5).expand([d]))
        numpyro.factor("f", log_density(b))

    return model, log_density, d, 2


def lattice_target(seed: int = 0, condition: float = 10.0):
    rng = np.random.default_rng(seed)
    d = 100
    while True:
        m = np.eye(d)
        off = rng.normal(0.0, 0.2, size=d)
        idx = np.arange(d)
        m[idx, (idx + 1) % d] = off
        m[(idx + 1) % d, idx] = off
        if np.linalg.eigvalsh(m)[0] > 0.05:
            break
    lam = np.sqrt(99.0 / (99.0 + idx * (condition - 1.0)))
    q = jnp.asarray(lam[:, None] * m * lam[None, :], jnp.float32)
    b = jnp.asarray(rng.uniform(5, 15, size=d), jnp.float32)

    def log_density(x):
        c = x - b
        return -0.5 * c @ q @ c

    def model():
        x = numpyro.sample("x", dist.DiscreteUniform(0, NUM_VALUES - 1).expand([d]))
        numpyro.factor("f", log_density(x))

    return model, log_density, d, NUM_VALUES


def quartic_target(seed: int = 0, components: int = 4):
    rng = np.random.default_rng(seed)
    d = 50
    rotation, _ = np.linalg.qr(rng.normal(size=(d, d)))
    p = jnp.asarray(rotation, jnp.float32)
    mu = jnp.asarray(10.0 + 1.5 * rng.normal(size=(components, d)), jnp.float32)
    s = jnp.asarray(2.0 * np.exp(-0.5 + np.arange(d) / 49), jnp.float32)

    def log_density(x):
        z = ((x[None, :] - mu) @ p.T) / s
        return jax.nn.logsumexp(-jnp.sum(0.5 * z**2 + 0.1 * z**4, axis=-1))

    def model():
        x = numpyro.sample("x", dist.DiscreteUniform(0, NUM_VALUES - 1).expand([d]))
        numpyro.factor("f", log_density(x))

    return model, log_density, d, NUM_VALUES


TARGETS = {
    "ising": ising_target,
    "blr": blr_target,
    "lattice": lattice_target,
    "quartic": quartic_target,
}
# AB-1st-paper-start: AB-1st as the paper starts its search, at sigma = 0.1 without the
# dual-averaging phase (initial_steps=0; the default before issue 15)
SAMPLERS = [
    "DMALA",
    "AB-1st",
    "AB-1st-paper-start",
    "AB-trace",
    "AB-shift",
    "AB-max",
    "DiscreteGibbs",
]


# ------------------------------------------------------------------------------ running


def make_kernel(name: str, model):
    if name == "DMALA":
        return nx.DMALA(model)
    if name == "DiscreteGibbs":
        return DiscreteGibbs(model)
    if name == "AB-1st-paper-start":
        return nx.AB(model, initial_steps=0)
    return nx.AB(model, variant=name.split("-")[1])


def summaries(x: np.ndarray, log_density, direction: np.ndarray) -> dict[str, np.ndarray]:
    """Energy and a fixed projection per draw, from draws (C, N, d); each (C, N)."""
    xf = jnp.asarray(x, jnp.float32)
    energy = -jax.vmap(jax.vmap(log_density))(xf)
    return {"energy": np.asarray(energy), "projection": np.asarray(x, np.float64) @ direction}


def run_one(name, target, warmup, samples, sweeps, seed):
    model, log_density, d, num_values = target
    kernel = make_kernel(name, model)
    gibbs = name == "DiscreteGibbs"
    mcmc = MCMC(
        kernel,
        num_warmup=warmup // 10 if gibbs else warmup,
        num_samples=sweeps if gibbs else samples,
        num_chains=CHAINS,
        chain_method="sequential" if gibbs else "vectorized",
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(seed))
    x = np.asarray(jax.block_until_ready(mcmc.get_samples(group_by_chain=True)["x"]))
    seconds = time.perf_counter() - start
    direction = np.random.default_rng(123).normal(size=d)
    evaluations = CHAINS * (sweeps * d * (num_values - 1) if gibbs else samples)
    record = {"seconds": seconds}
    for key, values in summaries(x, log_density, direction).items():
        value = float(effective_sample_size(np.asarray(values, np.float64)))
        record[key] = value
        record[key + "/10k"] = 1e4 * value / evaluations
        record[key + "/s"] = value / seconds
    if not gibbs:
        extra = mcmc.get_extra_fields()
        record["accept"] = float(np.mean(extra["accept_prob"]))
        record["hamming"] = float(np.mean(extra["hamming_distance"]))
        record["sigma"] = float(np.median(extra["step_size"]))
        record["alpha"] = float(np.median(extra["balance"])) if name != "DMALA" else 0.5
    return record


def warm_up() -> None:
    """Pay JAX's one-off start-up costs on a tiny model before anything is timed."""

    def tiny():
        x = numpyro.sample("x", dist.Bernoulli(0.5).expand([4]))
        numpyro.factor("f", jnp.sum(x[:-1] * x[1:]))

    for kernel in (nx.DMALA(tiny), nx.AB(tiny), nx.AB(tiny, variant="trace"), DiscreteGibbs(tiny)):
        MCMC(kernel, num_warmup=10, num_samples=10, progress_bar=False).run(jax.random.key(0))


def time_per_step(name: str, num_steps: int, seed: int) -> tuple[float, float]:
    """Seconds per step of one chain on the Ising target at fixed parameters (no adaptation),
    keeping every 10th draw: compile included, and steady state from the difference with a
    run a tenth as long."""
    model = ising_target()[0]
    times = []
    for steps in (num_steps // 10, num_steps):
        if name == "DMALA":
            kernel = nx.DMALA(model, step_size=0.2, adapt_step_size=False)
        else:
            kernel = nx.AB(model, variant="1st", step_size=0.2, balance=0.6, adapt=False)
        mcmc = MCMC(kernel, num_warmup=0, num_samples=steps, thinning=10, progress_bar=False)
        start = time.perf_counter()
        mcmc.run(jax.random.key(seed))
        jax.block_until_ready(mcmc.get_samples()["x"])
        times.append(time.perf_counter() - start)
    short, long = times
    return long / num_steps, (long - short) / (num_steps - num_steps // 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small run, no docs update")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--targets", nargs="*", default=list(TARGETS))
    parser.add_argument("--samplers", nargs="*", default=SAMPLERS, choices=SAMPLERS)
    parser.add_argument("--warmup", type=int, default=None, help="warmup steps (500)")
    args = parser.parse_args()
    warmup, samples = (500, 10000) if not args.quick else (300, 400)
    warmup = args.warmup or warmup
    sweeps = {"ising": 1000, "blr": 1000, "lattice": 200, "quartic": 200}
    if args.quick:
        sweeps = {k: 10 for k in sweeps}
    repeats = 1 if args.quick else args.repeats
    warm_up()
    timing_steps = 5_000 if args.quick else 50_000
    timing = {"DMALA": [], "AB-1st": []}
    for repeat in range(repeats):
        for name in timing:
            timing[name].append(time_per_step(name, timing_steps, repeat))
    results = {}
    for target_name in args.targets:
        target = TARGETS[target_name]()
        rows = {name: [] for name in args.samplers}
        for repeat in range(repeats):
            for name in args.samplers:
                record = run_one(name, target, warmup, samples, sweeps[target_name], repeat)
                rows[name].append(record)
                print(target_name, name, repeat, {k: round(v, 3) for k, v in record.items()})
        results[target_name] = rows
    text = report(results, warmup, samples, sweeps, repeats)
    per_step = {
        name: [1e6 * float(np.median([t[k] for t in values])) for k in (0, 1)]
        for name, values in timing.items()
    }
    ratio = [per_step["AB-1st"][k] / per_step["DMALA"][k] for k in (0, 1)]
    text += (
        "\n\nTime per step on the Ising target, one chain of "
        f"{timing_steps} steps at fixed parameters keeping every 10th draw: DMALA "
        f"{per_step['DMALA'][0]:.1f} µs (steady state {per_step['DMALA'][1]:.1f} µs), AB-1st "
        f"{per_step['AB-1st'][0]:.1f} µs ({per_step['AB-1st'][1]:.1f} µs): AB-1st / DMALA = "
        f"{ratio[0]:.2f}x compile included, {ratio[1]:.2f}x steady state."
    )
    print(text)
    if not args.quick and args.samplers == SAMPLERS and args.targets == list(TARGETS):
        write_section("ab_targets", text, header=False)


def report(results, warmup, samples, sweeps, repeats) -> str:
    lines = [
        "## AB samplers on the AB paper's targets (NumPyro)",
        "",
        f"Command: `python benchmarks/ab_targets.py` (repeats = {repeats}); "
        f"{platform.processor() or platform.machine()}, jax {jax.__version__}, numpyro "
        f"{numpyro.__version__}. {CHAINS} vectorized chains; DMALA and AB: {warmup} warmup + "
        f"{samples} sampling steps, one energy evaluation each; DiscreteGibbs: sweeps "
        "(d (S - 1) evaluations each), sequential chains. ESS of the energy and of a fixed "
        "random projection; per 10,000 sampling-phase evaluations and per second (wall time "
        "with compile and warmup). Medians over repeats; the ratios to DMALA by the ratio rule "
        "of `benchmarks/_common.py` (a number where every repeat of both reached ESS 400, "
        "else the median and range over at least 5 repeats, else none). sigma, alpha: "
        "medians of the tuned "
        "values over chains (DMALA: its adapted step size, balance 1/2). AB's warmup first "
        "adapts sigma by dual averaging (a quarter of it), then runs the jump-distance "
        "search; AB-1st-paper-start is AB-1st with `initial_steps=0`, the paper's search "
        "from sigma = 0.1 (the default before).",
        "",
        "| target | sampler | ESS/10k evals (energy, proj.) | ESS/s (energy, proj.) "
        "| vs DMALA per eval (energy, proj.) | accept | coords changed/step | sigma | alpha "
        "| seconds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for target_name, rows in results.items():

        def med(name, key, rows=rows):
            return float(np.median([r[key] for r in rows[name]]))

        def versus(name: str, key: str, rows=rows) -> str:
            """ESS per evaluation against DMALA's, under the ratio rule (ESS >= 400 in
            every repeat, or at least 5 repeats)."""
            records = [
                [{"ess": r[key], "per_eval": r[key + "/10k"]} for r in rows[n]]
                for n in (name, "DMALA")
            ]
            return str(ratio_under_rule(*records, key="per_eval")["text"])

        for name in rows:
            e, p = med(name, "energy/10k"), med(name, "projection/10k")
            gibbs = name == "DiscreteGibbs"
            tail = (
                f"| 1 (Gibbs) | sweep ({sweeps[target_name]}) | - | - "
                if gibbs
                else f"| {med(name, 'accept'):.2f} | {med(name, 'hamming'):.1f} "
                f"| {med(name, 'sigma'):.3g} | {med(name, 'alpha'):.2f} "
            )
            lines.append(
                f"| {target_name} | {name} | {e:.1f}, {p:.1f} "
                f"| {med(name, 'energy/s'):.1f}, {med(name, 'projection/s'):.1f} "
                f"| {versus(name, 'energy')}; {versus(name, 'projection')} {tail}"
                f"| {med(name, 'seconds'):.1f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
