"""A change-point model written once and run in both PPLs, against its exact posterior.

Counts ``y_t ~ Poisson(rate_t)`` over ``T = 100`` time steps, the rate ``early`` before an
unknown change point ``tau`` and ``late`` from it on: ``tau ~ Categorical(uniform)``,
``early, late ~ Gamma(2, 1)``. The data are simulated (rates 3 and 1, change at 40). The model
function takes the PPL module and its distributions as arguments, so the same lines run as a
NumPyro and as a Pyro model; the change point is sampled by DMALA (it is used through a
comparison, so the kernel evaluates the exact change of the log density for every other value
of ``tau``: ``exact_sites="auto"``), the rates by NUTS, in NumPyro's ``Gibbs`` and in
``pyro_ext.Gibbs``. With Gamma priors the rates integrate out, so the exact posterior of
``tau`` is known: the script prints the ArviZ summaries, the total-variation distance of each
PPL's histogram of ``tau`` from the exact posterior, and writes
``examples/figures/change_point.png``.

Run ``python examples/change_point.py`` (``--quick`` for the reduced mode, ``--ppl numpyro``
for the NumPyro run alone, without torch).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import arviz as az
import matplotlib
import numpy as np
from scipy.special import gammaln

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# arviz.summary's columns by name: ArviZ 0.2x and 1.x order them differently
STATS_COLUMNS = ["mean", "sd"]  # a sampler statistic's mean and spread

PRIOR_SHAPE, PRIOR_RATE = 2.0, 1.0


def model(ppl, dist, t, counts):
    """The model, written once: ``ppl`` is ``numpyro`` or ``pyro``, ``dist`` its distributions,
    ``t`` the time steps (float array of the PPL's framework), ``counts`` the data."""
    early = ppl.sample("early", dist.Gamma(PRIOR_SHAPE, PRIOR_RATE))
    late = ppl.sample("late", dist.Gamma(PRIOR_SHAPE, PRIOR_RATE))
    tau = ppl.sample("tau", dist.Categorical(logits=0.0 * t))  # uniform over the T positions
    rate = late + (early - late) * (t < tau)
    with ppl.plate("time", counts.shape[0]):
        ppl.sample("y", dist.Poisson(rate), obs=counts)


def simulate(num_steps: int = 100, change: int = 40, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rates = np.where(np.arange(num_steps) < change, 3.0, 1.0)
    return rng.poisson(rates).astype(np.float32)


def exact_posterior(counts: np.ndarray) -> np.ndarray:
    """``p(tau | y)`` for ``tau = 0 .. T-1``, the rates integrated out (Gamma-Poisson)."""

    def log_marginal(total, length):  # log of the integral of Gamma(rate) * Poisson terms
        a, b = PRIOR_SHAPE, PRIOR_RATE
        return a * np.log(b) - gammaln(a) + gammaln(a + total) - (a + total) * np.log(b + length)

    cumulative = np.concatenate([[0.0], np.cumsum(counts)])
    taus = np.arange(len(counts))
    log_p = log_marginal(cumulative[taus], taus) + log_marginal(
        cumulative[-1] - cumulative[taus], len(counts) - taus
    )
    p = np.exp(log_p - log_p.max())
    return p / p.sum()


def run_numpyro(counts, num_warmup, num_samples, num_chains):
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS, Gibbs
    from numpyro.infer.gibbs import discrete_latent_sites

    import numpyro_ext as nx

    def numpyro_model(t, y):
        model(numpyro, dist, t, y)

    kernel = Gibbs([(nx.DMALA(numpyro_model), discrete_latent_sites), (NUTS(numpyro_model), None)])
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="sequential",
        progress_bar=False,
    )
    t = jnp.arange(len(counts), dtype=jnp.float32)
    mcmc.run(jax.random.key(0), t, jnp.asarray(counts), extra_fields=nx.gibbs_fields(kernel))
    return nx.to_arviz(mcmc)


def run_pyro(counts, num_warmup, num_samples, num_chains):
    import pyro
    import pyro.distributions as dist
    import torch
    from pyro.infer import MCMC, NUTS

    import pyro_ext as px

    def pyro_model(t, y):
        model(pyro, dist, t, y)

    pyro.set_rng_seed(0)
    kernel = px.Gibbs([(px.DMALA(pyro_model), px.discrete_sites), (NUTS(pyro_model), None)])
    mcmc = MCMC(
        kernel,
        num_samples=num_samples,
        warmup_steps=num_warmup,
        num_chains=num_chains,
        disable_progbar=True,
    )
    mcmc.run(torch.arange(len(counts), dtype=torch.float32), torch.from_numpy(counts))
    return px.to_arviz(mcmc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced mode (the test suite's)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "figures"))
    parser.add_argument(
        "--ppl",
        choices=["both", "numpyro", "pyro"],
        default="both",
        help="which PPL runs the model (numpyro: no torch needed)",
    )
    args = parser.parse_args()
    # (warmup, draws, chains) per PPL: a Pyro step evaluates the model once per other value of
    # tau in a Python loop (about 0.25 s a step here), NumPyro's batches them in one program
    budgets = {"NumPyro": (500, 2000, 2), "Pyro": (200, 800, 1)}
    if args.quick:
        budgets = {"NumPyro": (30, 30, 1), "Pyro": (20, 20, 1)}
    counts = simulate()
    exact = exact_posterior(counts)
    print(f"{len(counts)} counts; exact posterior mode of tau: {exact.argmax()}")
    results = {}
    runs = {"NumPyro": run_numpyro, "Pyro": run_pyro}
    if args.ppl != "both":
        runs = {name: run for name, run in runs.items() if name.lower() == args.ppl}
    for name, run in runs.items():
        num_warmup, num_samples, num_chains = budgets[name]
        start = time.perf_counter()
        idata = run(counts, num_warmup, num_samples, num_chains)
        seconds = time.perf_counter() - start
        print(
            f"\n{name}: Gibbs(DMALA on tau, NUTS on the rates), {num_chains} chain(s) x "
            f"({num_warmup} + {num_samples}) in {seconds:.1f} s"
        )
        print(az.summary(idata, var_names=["tau", "early", "late"]).to_string())
        stats = [v for v in idata.sample_stats.data_vars if v.startswith("dmala_acceptance")]
        summary = az.summary(idata, group="sample_stats", var_names=stats, kind="stats")
        print(summary[STATS_COLUMNS].to_string())
        tau = idata.posterior["tau"].values.ravel().astype(int)
        histogram = np.bincount(tau, minlength=len(counts)) / tau.size
        results[name] = (histogram, idata)
        mean_exact = float((exact * np.arange(len(counts))).sum())
        print(
            f"{name}: total variation from the exact posterior of tau "
            f"{0.5 * np.abs(histogram - exact).sum():.3f}; mean tau {tau.mean():.2f} "
            f"(exact {mean_exact:.2f})"
        )

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    axes[0].bar(np.arange(len(counts)), counts, color="0.7")
    axes[0].set_title("simulated counts (change at 40)")
    axes[0].set_xlabel("t")
    window = slice(max(exact.argmax() - 15, 0), exact.argmax() + 15)
    steps = np.arange(len(counts))[window]
    axes[1].bar(steps, exact[window], color="0.8", label="exact posterior")
    for (name, (histogram, _)), marker in zip(results.items(), ("o", "x")):
        axes[1].plot(steps, histogram[window], marker, label=name)
    axes[1].set_title("posterior of the change point tau")
    axes[1].set_xlabel("tau")
    axes[1].legend()
    fig.tight_layout()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "change_point.png", dpi=110)
    print(f"\nwrote {out / 'change_point.png'}")


if __name__ == "__main__":
    main()
