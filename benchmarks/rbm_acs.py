"""Mode-initialised RBM sampling (App. D.2 protocol of the ACS paper): DMALA, AB and ACS against
block-Gibbs ground truth, MMD over steps.

An RBM with 64 visible units (binarised 8x8 scikit-learn digits) and 32 hidden units is fitted
by persistent contrastive divergence with block Gibbs (a few lines here; the library's EBM
training module is another issue). Ground truth: many long block-Gibbs chains. Each sampler
then runs ``CHAINS`` chains on the visible marginal ``log p(x) = b'x + sum_j softplus(c_j +
W_j x)``, all started at the same training image (inside one mode), and the MMD between the
chains' current states and the ground truth (kernel ``exp(-hamming / d)``) is recorded over
steps. AB runs with its defaults (AB-1st, (sigma, alpha) tuned on the jump distance in the
same warmup).

Run ``python benchmarks/rbm_acs.py`` (``--quick`` for a smoke run); writes its section of
``docs/benchmarks.md`` and ``docs/figures/rbm_acs.png``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from numpyro.infer import MCMC
from sklearn.datasets import load_digits

import discrete_kernels as dk
import numpyro_ext as nx

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import write_section  # noqa: E402

HIDDEN = 32
CHAINS = 128


def binarised_digits() -> jax.Array:
    data = load_digits().data
    return jnp.asarray(data > 7, jnp.float32)  # pixel values 0..16


def block_gibbs(params, v, key, num_steps: int):
    """``num_steps`` sweeps of block Gibbs on (v, h) for a batch ``v`` (n, 64)."""
    w, b, c = params

    def sweep(v, key):
        key_h, key_v = jax.random.split(key)
        h = jax.random.bernoulli(key_h, jax.nn.sigmoid(v @ w + c)).astype(jnp.float32)
        v = jax.random.bernoulli(key_v, jax.nn.sigmoid(h @ w.T + b)).astype(jnp.float32)
        return v, None

    v, _ = jax.lax.scan(sweep, v, jax.random.split(key, num_steps))
    return v


def train_rbm(data: jax.Array, key: jax.Array, epochs: int, lr: float = 0.05):
    """Persistent contrastive divergence with block Gibbs, full batch."""
    d = data.shape[1]
    key, key_w = jax.random.split(key)
    params = (0.01 * jax.random.normal(key_w, (d, HIDDEN)), jnp.zeros(d), jnp.zeros(HIDDEN))

    @jax.jit
    def update(params, persistent, key):
        w, b, c = params
        persistent = block_gibbs(params, persistent, key, 1)
        ph_data = jax.nn.sigmoid(data @ w + c)
        ph_model = jax.nn.sigmoid(persistent @ w + c)
        n = data.shape[0]
        grad_w = data.T @ ph_data / n - persistent.T @ ph_model / persistent.shape[0]
        grad_b = data.mean(0) - persistent.mean(0)
        grad_c = ph_data.mean(0) - ph_model.mean(0)
        return (w + lr * grad_w, b + lr * grad_b, c + lr * grad_c), persistent

    persistent = data[:256]
    for epoch_key in jax.random.split(key, epochs):
        params, persistent = update(params, persistent, epoch_key)
    return params


def log_marginal(params, x):
    w, b, c = params
    x = x.astype(jnp.float32)
    return x @ b + jnp.sum(jax.nn.softplus(x @ w + c))


def mmd(x: jax.Array, y: jax.Array) -> jax.Array:
    """Unbiased squared MMD with the kernel ``exp(-hamming / d)``."""
    d = x.shape[1]

    def k(a, b):
        hamming = a @ (1 - b).T + (1 - a) @ b.T
        return jnp.exp(-hamming / d)

    def within(a):
        n = a.shape[0]
        return (k(a, a).sum() - n) / (n * (n - 1))  # k(a_i, a_i) = 1 on the diagonal

    return within(x) + within(y) - 2 * k(x, y).mean()


def run_sampler(kernel, start, num_steps: int, num_warmup: int, key):
    """Draws of every step, warmup included, grouped by chain: (chains, steps, 64)."""
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_steps - num_warmup,
        num_chains=CHAINS,
        chain_method="vectorized",
        progress_bar=False,
    )
    init = jnp.broadcast_to(start, (CHAINS,) + start.shape).astype(jnp.int32)
    mcmc.warmup(key, init_params=init, collect_warmup=True)
    warmup = np.asarray(mcmc.get_samples(group_by_chain=True))
    mcmc.run(jax.random.fold_in(key, 1))
    return np.concatenate([warmup, np.asarray(mcmc.get_samples(group_by_chain=True))], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small run, no docs update")
    args = parser.parse_args()
    epochs, truth_steps, num_steps = (200, 200, 300) if args.quick else (2000, 2000, 3000)
    key = jax.random.key(0)
    data = binarised_digits()
    params = train_rbm(data, key, epochs)
    truth = block_gibbs(
        params, data[jax.random.permutation(key, data.shape[0])[:500]], key, truth_steps
    )

    def potential(x):
        return -log_marginal(params, x)

    start = data[0]  # a training image: inside one mode
    kernels = {
        "DMALA": nx.DMALA(potential_fn=potential, domain=nx.Binary()),
        "AB": nx.AB(potential_fn=potential, domain=nx.Binary()),
        # the paper's search from sigma = 0.1, without the dual-averaging start
        "AB (paper start)": nx.AB(potential_fn=potential, domain=nx.Binary(), initial_steps=0),
        "ACS": nx.ACS(potential_fn=potential, domain=nx.Binary()),
        # Alg. 4 as the paper writes it (the default before the range search)
        "ACS (paper search)": nx.ACS(
            potential_fn=potential, domain=nx.Binary(), tuning={"search": "paper"}
        ),
    }
    # the same steps for all from the same start, warmup included: ACS tunes its cycle, AB
    # its (sigma, alpha) and DMALA its step size in the first num_warmup steps
    num_warmup = dk.samplers.acs_schedule.tuning_steps(kernels["ACS"].spec.config)
    checkpoints = np.unique(np.geomspace(1, num_steps, 30).astype(int)) - 1
    curves = {}
    for name, kernel in kernels.items():
        samples = run_sampler(kernel, start, num_steps, num_warmup, key)
        curves[name] = np.array(
            [float(mmd(jnp.asarray(samples[:, t], jnp.float32), truth)) for t in checkpoints]
        )
        print(name, "final MMD", curves[name][-1], flush=True)
    start_mmd = float(mmd(jnp.broadcast_to(start, (CHAINS, start.shape[0])), truth))

    def first_step_below(curve, level):
        below = np.nonzero(curve <= level)[0]
        return int(checkpoints[below[0]]) + 1 if below.size else None

    final_dmala = curves["DMALA"][-1]
    thresholds = (0.01, 0.002)
    lines = [
        "## ACS: mode-initialised RBM sampling (binarised digits)",
        "",
        f"Command: `python benchmarks/rbm_acs.py`. RBM 64 x {HIDDEN} fitted by PCD ({epochs} "
        f"full-batch epochs); ground truth: 500 block-Gibbs chains of {truth_steps} sweeps; "
        f"{CHAINS} chains per sampler, all started at the same training image; steps are "
        f"counted from that start, warmup included (the first {num_warmup}: ACS tunes its "
        "cycle there, AB its (sigma, alpha), DMALA its step size); unbiased MMD^2 with kernel "
        "exp(-hamming/64) between the chains' states at a step and the ground truth (its noise "
        "level here is about ±5e-4, so values near 0 are indistinguishable). "
        'Rows "(paper ...)": the search as the papers write it (the defaults before '
        "issue 15).",
        "",
        "| sampler | MMD^2 after 1 step | after 100 steps | final (step "
        f"{num_steps}) | steps to MMD^2 <= {thresholds[0]} | steps to <= {thresholds[1]} "
        "| steps to DMALA's final MMD^2 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    at_100 = int(np.argmin(np.abs(checkpoints + 1 - 100)))
    for name, curve in curves.items():
        cells = [first_step_below(curve, level) for level in (*thresholds, final_dmala)]
        cells = [str(c) if c is not None else "not reached" for c in cells]
        lines.append(
            f"| {name} | {curve[0]:.4f} | {curve[at_100]:.4f} | {curve[-1]:.4f} "
            f"| {' | '.join(cells)} |"
        )
    lines += ["", f"MMD^2 of the starting state itself: {start_mmd:.4f}.", ""]
    lines.append("![MMD over steps](figures/rbm_acs.png)")
    text = "\n".join(lines)
    print(text)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, curve in curves.items():
        ax.plot(checkpoints + 1, curve, label=name)
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.axhspan(-5e-4, 5e-4, color="0.9", label="noise level")
    ax.set_xlabel("step from the start (warmup included)")
    ax.set_ylabel("MMD^2 to block-Gibbs truth")
    ax.legend()
    fig.tight_layout()
    if not args.quick:
        (ROOT / "docs" / "figures").mkdir(exist_ok=True)
        fig.savefig(ROOT / "docs" / "figures" / "rbm_acs.png", dpi=110)
        write_section("rbm_acs", text, header=False)


if __name__ == "__main__":
    sys.exit(main())
