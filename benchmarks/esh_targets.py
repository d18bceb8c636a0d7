"""ESH against NumPyro's NUTS, MALA and ULA on the synthetic targets of the ESH paper (Sec. 3):
MMD to exact samples as a function of gradient evaluations per chain, and ESS per gradient
evaluation.

Targets: 2-D mixture of 8 Gaussians on a circle (radius 4, sd 0.5), the same with every chain
started in one mode, a 2-D Gaussian with correlation 0.99 with and without a start biased to
one end (x = (2.5, 2.5)), a 50-D ill-conditioned Gaussian (variances log-spaced from 1e-2 to
1e2) and a 20-D funnel (x_0 ~ N(0, 3^2), x_i ~ N(0, exp(x_0))). Unbiased starts are N(0, I).

Protocol (as in the paper): ``CHAINS`` chains in parallel; after ``b`` gradient evaluations
per chain, the unbiased MMD^2 (Gaussian kernel, median-heuristic bandwidth from the exact
samples) between the chains' current states and 1,000 exact samples. ESH adapted: ``nx.ESH()``
with its defaults (step size and orbit length adapted in ``ESH_WARMUP`` warmup draws, counted
in the budget). ESH: ``nx.ESH`` (exact
orbit weighting; the paper's step 0.1 with 10 steps per draw, and step 0.3 with 30 steps per
draw, an orbit long enough to cross between modes; gradients counted per draw); NUTS: NumPyro's,
200 warmup draws counted in the budget (its ``num_steps`` per draw); MALA and ULA: step 0.1,
one gradient per step, written here in a ``lax.scan``. ESS: multi-chain ESS of the first
coordinate over the second half of each chain, per gradient evaluation.

Run ``python benchmarks/esh_targets.py`` (``--quick`` for a smoke run); writes its section of
``docs/benchmarks.md`` and ``docs/figures/esh_mmd.png``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC, NUTS

import numpyro_ext as nx

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import write_section  # noqa: E402

CHAINS = 100
SAMPLERS = ["ESH adapted", "ESH 0.1x10", "ESH 0.3x30", "NUTS", "MALA", "ULA"]
# warmup draws of the adapted ESH (their gradients count in the budget)
ESH_WARMUP = 10


# ------------------------------------------------------------------------------ targets


def mog_target(prior_start: bool):
    angles = 2 * np.pi * np.arange(8) / 8
    centers = jnp.asarray(4.0 * np.stack([np.cos(angles), np.sin(angles)], -1), jnp.float32)
    sd = 0.5

    def log_density(x):
        d2 = jnp.sum((x[None, :] - centers) ** 2, -1)
        return jax.nn.logsumexp(-0.5 * d2 / sd**2) - math.log(8)

    def exact(key, n):
        k1, k2 = jax.random.split(key)
        which = jax.random.randint(k1, (n,), 0, 8)
        return centers[which] + sd * jax.random.normal(k2, (n, 2))

    def start(key, n):
        base = centers[0] if prior_start else jnp.zeros(2)
        return base + (0.1 if prior_start else 1.0) * jax.random.normal(key, (n, 2))

    return log_density, exact, start, 2


def scg_target(biased: bool):
    cov = jnp.array([[1.0, 0.99], [0.99, 1.0]])
    precision = jnp.linalg.inv(cov)
    chol = jnp.linalg.cholesky(cov)

    def log_density(x):
        return -0.5 * x @ precision @ x

    def exact(key, n):
        return jax.random.normal(key, (n, 2)) @ chol.T

    def start(key, n):
        base = jnp.array([2.5, 2.5]) if biased else jnp.zeros(2)
        return base + (0.1 if biased else 1.0) * jax.random.normal(key, (n, 2))

    return log_density, exact, start, 2


def icg_target():
    d = 50
    variances = jnp.asarray(np.logspace(-2, 2, d), jnp.float32)

    def log_density(x):
        return -0.5 * jnp.sum(x**2 / variances)

    def exact(key, n):
        return jax.random.normal(key, (n, d)) * jnp.sqrt(variances)

    def start(key, n):
        return jax.random.normal(key, (n, d))

    return log_density, exact, start, d


def funnel_target():
    d = 20

    def log_density(x):
        v, rest = x[0], x[1:]
        return -0.5 * v**2 / 9.0 - 0.5 * jnp.sum(rest**2) * jnp.exp(-v) - 0.5 * (d - 1) * v

    def exact(key, n):
        k1, k2 = jax.random.split(key)
        v = 3.0 * jax.random.normal(k1, (n, 1))
        return jnp.concatenate([v, jnp.exp(v / 2) * jax.random.normal(k2, (n, d - 1))], -1)

    def start(key, n):
        return jax.random.normal(key, (n, d))

    return log_density, exact, start, d


TARGETS = {
    "2D MOG": lambda: mog_target(False),
    "2D MOG-prior": lambda: mog_target(True),
    "2D SCG": lambda: scg_target(False),
    "2D SCG-bias": lambda: scg_target(True),
    "50D ICG": icg_target,
    "20D Funnel": funnel_target,
}


# ------------------------------------------------------------------------------ samplers
# each returns (states (chains, draws, d), gradient evaluations per chain at each draw)


def run_esh(log_density, x0, num_draws, key, step_size=0.1, num_steps=10):
    kernel = nx.ESH(
        potential_fn=lambda z: -log_density(z["x"]), step_size=step_size, num_steps=num_steps
    )
    mcmc = MCMC(
        kernel,
        num_warmup=0,
        num_samples=num_draws,
        num_chains=x0.shape[0],
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(key, init_params={"x": x0})
    states = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    grads = num_steps * np.arange(1, num_draws + 1)
    return states, np.broadcast_to(grads, states.shape[:2])


def run_with_warmup(kernel, x0, num_warmup, num_samples, key, grads_field):
    """Warmup draws (kept) then sampling draws of vectorized chains, with the gradient
    evaluations per chain up to each draw from the per-draw statistic ``grads_field``."""
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=x0.shape[0],
        chain_method="vectorized",
        progress_bar=False,
    )
    key_warm, key_run = jax.random.split(key)
    fields = (grads_field,)
    mcmc.warmup(key_warm, init_params={"x": x0}, collect_warmup=True, extra_fields=fields)
    warm_x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    warm_grads = np.asarray(mcmc.get_extra_fields(group_by_chain=True)[grads_field])
    mcmc.run(key_run, extra_fields=fields)
    run_x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    run_grads = np.asarray(mcmc.get_extra_fields(group_by_chain=True)[grads_field])
    states = np.concatenate([warm_x, run_x], axis=1)
    grads = np.cumsum(np.concatenate([warm_grads, run_grads], axis=1), axis=1)
    return states, grads


def run_esh_adapted(log_density, x0, budget, key, num_warmup=ESH_WARMUP):
    """ESH with its defaults: step size and orbit length adapted in ``num_warmup`` draws,
    whose gradients count in the budget (the warmup draws are part of the curve)."""
    kernel = nx.ESH(potential_fn=lambda z: -log_density(z["x"]))
    first = kernel.adaptation.initial_num_steps
    # enough draws for the budget even at the shortest orbit the adaptation allows
    num_samples = max(budget // first + 1 - num_warmup, 1)
    return run_with_warmup(kernel, x0, num_warmup, num_samples, key, "num_grad_evals")


def run_nuts(log_density, x0, num_draws, key, num_warmup=200):
    kernel = NUTS(potential_fn=lambda z: -log_density(z["x"]))
    return run_with_warmup(kernel, x0, num_warmup, num_draws, key, "num_steps")


def run_langevin(log_density, x0, num_draws, key, step_size=0.1, adjusted=True):
    value_and_grad = jax.vmap(jax.value_and_grad(log_density))

    def step(carry, key):
        x, f, g = carry
        k1, k2 = jax.random.split(key)
        noise = jax.random.normal(k1, x.shape)
        y = x + step_size * g + jnp.sqrt(2 * step_size) * noise
        f_y, g_y = value_and_grad(y)
        if adjusted:
            forward = -jnp.sum((y - x - step_size * g) ** 2, -1) / (4 * step_size)
            reverse = -jnp.sum((x - y - step_size * g_y) ** 2, -1) / (4 * step_size)
            log_a = f_y - f + reverse - forward
            log_a = jnp.where(jnp.isfinite(log_a), log_a, -jnp.inf)
            accept = jnp.log(jax.random.uniform(k2, f.shape)) < log_a
        else:
            accept = jnp.isfinite(f_y)
        x = jnp.where(accept[:, None], y, x)
        f = jnp.where(accept, f_y, f)
        g = jnp.where(accept[:, None], g_y, g)
        return (x, f, g), x

    @jax.jit
    def run(x0, key):
        f, g = value_and_grad(x0)
        _, xs = jax.lax.scan(step, (x0, f, g), jax.random.split(key, num_draws))
        return xs

    states = np.swapaxes(np.asarray(run(x0, key)), 0, 1)
    return states, np.broadcast_to(np.arange(1, num_draws + 1), states.shape[:2])


def run_sampler(name, log_density, x0, budget, key):
    if name == "ESH adapted":
        return run_esh_adapted(log_density, x0, budget, key)
    if name.startswith("ESH"):
        step_size, num_steps = (float(v) for v in name.split()[1].split("x"))
        num_steps = int(num_steps)
        return run_esh(log_density, x0, budget // num_steps + 1, key, step_size, num_steps)
    if name == "NUTS":
        return run_nuts(log_density, x0, max(budget // 4, 50), key)
    return run_langevin(log_density, x0, budget + 1, key, adjusted=name == "MALA")


# ------------------------------------------------------------------------------ timing


def logistic_target(seed: int = 0, n: int = 2000, d: int = 50):
    """Bayesian logistic regression log density (a gradient costing real work)."""
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(n, d)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 2, size=n), jnp.float32)

    def log_density(w):
        logits = x @ w
        return jnp.sum(y * logits - jnp.logaddexp(0.0, logits)) - 0.5 * jnp.sum(w**2)

    return log_density, d


def steady_seconds(run, argument, repeats: int = 3) -> float:
    """Median wall time of a jitted ``run(argument)`` after its first (compiling) call."""
    jax.block_until_ready(run(argument))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(argument))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def leapfrog_and_gradient_times(log_density, d: int, num_draws: int, num_steps: int = 50):
    """Seconds per ESH leapfrog step (``nx.ESH.sample`` in a ``lax.scan``, one chain,
    ``num_steps`` per draw) and per ``value_and_grad`` in a bare ``lax.scan``, compiled."""
    kernel = nx.ESH(potential_fn=lambda z: -log_density(z["x"]), num_steps=num_steps)
    state = kernel.init(jax.random.key(0), 0, {"x": jnp.zeros(d)}, (), {})
    esh_run = jax.jit(
        lambda s: jax.lax.scan(
            lambda s, _: (kernel.sample(s, (), {}), None), s, None, length=num_draws
        )[0].z["x"]
    )

    def body(x, _):
        f, g = jax.value_and_grad(log_density)(x)
        return x + 1e-9 * g, f

    grad_run = jax.jit(lambda x: jax.lax.scan(body, x, None, length=num_draws * num_steps)[0])
    per_step = steady_seconds(esh_run, state) / (num_draws * num_steps)
    per_grad = steady_seconds(grad_run, jnp.zeros(d)) / (num_draws * num_steps)
    return per_step, per_grad


def timing_rows(quick: bool) -> list[str]:
    """ESH leapfrog step against one value_and_grad, both compiled (steady state)."""
    targets = {"50D ICG": icg_target()[::3], "logistic regression, 2000 x 50": logistic_target()}
    draws = 100 if quick else 1000
    lines = [
        "| target | µs per ESH leapfrog step | µs per value_and_grad | ratio |",
        "| --- | --- | --- | --- |",
    ]
    for name, (log_density, d) in targets.items():
        step, grad = leapfrog_and_gradient_times(log_density, d, draws)
        lines.append(f"| {name} | {1e6 * step:.2f} | {1e6 * grad:.2f} | {step / grad:.2f}x |")
    return lines


# ------------------------------------------------------------------------------ metrics


def mmd2(x, y, bandwidth):
    """Unbiased MMD^2 between samples x (n, d) and y (m, d), Gaussian kernel."""

    def gram(a, b):
        d2 = np.sum(a**2, 1)[:, None] + np.sum(b**2, 1)[None, :] - 2 * a @ b.T
        return np.exp(-np.maximum(d2, 0) / (2 * bandwidth**2))

    n, m = len(x), len(y)
    kxx, kyy, kxy = gram(x, x), gram(y, y), gram(x, y)
    return (
        (kxx.sum() - np.trace(kxx)) / (n * (n - 1))
        + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
        - 2 * kxy.mean()
    )


def states_at(states, grads, budget):
    """Each chain's state after at most ``budget`` gradient evaluations, (chains, d)."""
    index = np.array([max(np.searchsorted(g, budget, side="right") - 1, 0) for g in grads])
    return states[np.arange(len(states)), index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small run, no docs update")
    args = parser.parse_args()
    budgets = [100, 300, 1000, 3000] if not args.quick else [100, 300]
    max_budget = budgets[-1]
    rows, curves = [], {}
    key = jax.random.key(0)
    for target_name, make in TARGETS.items():
        log_density, exact, start, d = make()
        key, k_exact, k_start, k_bw = jax.random.split(key, 4)
        truth = np.asarray(exact(k_exact, 1000), np.float64)
        sub = truth[:300]
        d2 = np.sum((sub[:, None] - sub[None]) ** 2, -1)
        bandwidth = float(np.sqrt(np.median(d2[np.triu_indices(300, 1)]) / 2))
        x0 = start(k_start, CHAINS)
        for name in SAMPLERS:
            key, k_run = jax.random.split(key)
            t0 = time.perf_counter()
            states, grads = run_sampler(name, log_density, x0, max_budget, k_run)
            seconds = time.perf_counter() - t0
            states = np.asarray(states, np.float64)
            curve = []
            for b in budgets:
                current = states_at(states, grads, b)
                ok = np.all(np.isfinite(current), axis=1)
                curve.append(mmd2(current[ok], truth, bandwidth) if ok.sum() > 2 else np.nan)
            curves[(target_name, name)] = curve
            half = states[:, states.shape[1] // 2 :, 0]
            finite = np.all(np.isfinite(half), axis=1)
            ess = float(effective_sample_size(half[finite])) if finite.sum() > 1 else float("nan")
            grads_used = float(np.mean(grads[:, -1] - grads[:, states.shape[1] // 2 - 1]))
            rows.append((target_name, name, curve, ess / (grads_used * finite.sum()), seconds))
            print(target_name, name, [f"{c:.4f}" for c in curve], f"{ess:.1f}", flush=True)
    text = report(rows, budgets)
    text += "\n\nTime per ESH leapfrog step (`nx.ESH.sample` in a `lax.scan`, one chain, 50 "
    text += "steps per draw, 50,000 steps) against one `value_and_grad` of the same target in a "
    text += "bare `lax.scan`, both compiled (medians of 3 timed calls after the compiling one):"
    text += "\n\n"
    text += "\n".join(timing_rows(args.quick))
    text += "\n\n![MMD over gradient evaluations](figures/esh_mmd.png)"
    print(text)
    if not args.quick:
        write_section("esh_targets", text, header=False)
        figure(curves, budgets, ROOT / "docs" / "figures" / "esh_mmd.png")


def report(rows, budgets) -> str:
    lines = [
        "## ESH on the ESH paper's synthetic targets (NumPyro)",
        "",
        f"Command: `python benchmarks/esh_targets.py`. {CHAINS} chains per sampler; MMD^2 "
        "(unbiased, so it can dip below 0) between the chains' states after b gradient "
        "evaluations per chain and 1,000 exact samples (its noise here is about ±0.005, the "
        "grey band of the figure); ESS of the first coordinate over "
        "the second half of the run, per gradient evaluation per chain. Bold: best MMD at "
        f"1,000 evaluations. ESH adapted: `nx.ESH()` with its defaults, step size and orbit "
        f"length adapted in {ESH_WARMUP} warmup draws whose gradients count in the budget.",
        "",
        "| target | sampler | "
        + " | ".join(f"MMD² @ {b}" for b in budgets)
        + " | ESS / grad eval | seconds |",
        "| --- | --- | " + " | ".join("---" for _ in budgets) + " | --- | --- |",
    ]
    at = budgets.index(1000) if 1000 in budgets else len(budgets) - 1
    best = {}
    for target, name, curve, _, _ in rows:
        value = curve[at]
        if np.isfinite(value) and (target not in best or value < best[target][1]):
            best[target] = (name, value)
    for target, name, curve, ess, seconds in rows:
        cells = []
        for i, c in enumerate(curve):
            cell = f"{c:.4f}"
            if i == at and best.get(target, (None,))[0] == name:
                cell = f"**{cell}**"
            cells.append(cell)
        lines.append(
            f"| {target} | {name} | " + " | ".join(cells) + f" | {ess:.2e} | {seconds:.1f} |"
        )
    return "\n".join(lines)


def figure(curves, budgets, path: Path) -> None:
    targets = list(TARGETS)
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, target in zip(axes.ravel(), targets):
        for name in SAMPLERS:
            ax.plot(budgets, curves[(target, name)], marker="o", label=name)
        ax.set_xscale("log")
        # unbiased MMD^2 dips below 0; its noise here is about +-0.005
        ax.set_yscale("symlog", linthresh=5e-3)
        ax.axhspan(-5e-3, 5e-3, color="0.9")
        ax.set_title(target)
        ax.set_xlabel("gradient evaluations per chain")
        ax.set_ylabel("MMD² to exact samples")
    axes[0, 0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
