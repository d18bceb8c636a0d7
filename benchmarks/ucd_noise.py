"""Why UCD trails PCD on bars-and-stripes: the noise of its gradient estimate at a trained
RBM, against the exact gradient and against CD-k at the same batch.

    python benchmarks/ucd_noise.py [--quick]

The 16 x 16 RBM is trained on the 30 bars-and-stripes patterns with the exact gradient
(``log Z`` by enumerating the hidden layer), SGD 0.1 from the example's initialisation
(``examples/ebm_bars_and_stripes.py``, seeds 0-2): the curve an unbiased estimator follows
in expectation. At seed 2's parameters after ``--iterations`` such steps, each estimator of
the model term ``E_model[grad F]`` is drawn ``--repeats`` times with 1,000 chains (pairs for
UCD) started at data points: the spread of the estimates around their mean (noise), the
distance of their mean from the exact value (bias, within the noise over the repeats), and
the time per estimate. UCD runs coupled block Gibbs chains with ``k`` and the time-averaged
``m``; CD-k runs ``k`` block Gibbs sweeps. Writes the section ``ucd_noise`` of
docs/benchmarks.md (not with ``--quick``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import write_section  # noqa: E402
from discrete_kernels import ebm as core  # noqa: E402
from numpyro_ext import _ebm_chains, _ucd  # noqa: E402
from numpyro_ext import ebm as jebm  # noqa: E402

LEARNING_RATE = 0.1
CHAINS = 1000
EVERY = 250


def exact_training(seed: int, iterations: int) -> tuple[core.RBMParams, list[float]]:
    """SGD on the exact average log-likelihood from the example's initialisation; the
    parameters at the end and the log-likelihood every ``EVERY`` iterations."""
    data = jnp.asarray(core.bars_and_stripes(), jnp.float32)
    optimizer = optax.sgd(LEARNING_RATE)

    def loss(params: core.RBMParams) -> jax.Array:
        return -core.rbm_log_likelihood(params, data)

    @jax.jit
    def segment(params, state):
        def body(carry, _):
            params, state = carry
            updates, state = optimizer.update(jax.grad(loss)(params), state, params)
            return (optax.apply_updates(params, updates), state), None

        return jax.lax.scan(body, (params, state), None, length=EVERY)[0]

    params = jebm.RBM(16, 16).init(jax.random.key(1000 + seed), scale=0.01)
    state, curve = optimizer.init(params), []
    for _ in range(iterations // EVERY):
        params, state = segment(params, state)
        curve.append(float(-loss(params)))
    return params, curve


def flat(tree) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(leaf)) for leaf in tree])


def estimator_rows(params: core.RBMParams, repeats: int, settings: list, label: str) -> list[str]:
    """One table row per estimator (first column ``label``): noise, bias and milliseconds
    per estimate."""
    data = jnp.asarray(core.bars_and_stripes(), jnp.float32)
    rbm = jebm.RBM(16, 16)
    exact = flat(jax.tree.map(jnp.negative, jax.grad(core.rbm_log_partition)(params)))
    rows_of = jax.random.randint(jax.random.key(5), (repeats + 1, CHAINS), 0, data.shape[0])
    lines = []
    for name, method in settings:
        if isinstance(method, core.UCD):

            def estimate(key, rows, method=method):
                _, grad, info = _ucd.ucd_negative(method, rbm, params, data[rows], key)
                return grad, info["meeting_time"]

        else:

            def estimate(key, rows, method=method):
                samples, _ = _ebm_chains.advance(
                    core.BlockGibbs(), rbm, params, data[rows], key, method.k, 16
                )
                return _ebm_chains.mean_energy_grad(rbm, params, samples)[1], jnp.nan

        run = jax.jit(estimate)
        jax.block_until_ready(run(jax.random.key(0), rows_of[0]))  # compile
        grads, taus = [], []
        start = time.perf_counter()
        for i in range(repeats):
            grad, tau = run(jax.random.key(i + 1), rows_of[i + 1])
            grads.append(flat(grad))
            taus.append(float(tau))
        ms = (time.perf_counter() - start) / repeats * 1e3
        grads_array = np.array(grads)
        noise = float(np.sqrt(np.mean(grads_array.var(0, ddof=1))))
        bias = float(np.sqrt(np.mean((grads_array.mean(0) - exact) ** 2)))
        bias_se = noise / np.sqrt(repeats)
        tau_text = "" if np.isnan(taus[0]) else f"{np.mean(taus):.1f}"
        lines.append(
            f"| {label} | {name} | {noise:.4f} | {bias:.4f} (+-{bias_se:.4f}) | {ms:.1f} | "
            f"{tau_text} |"
        )
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--iterations", type=int, default=1750)
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    if args.quick:
        args.iterations, args.repeats = EVERY, 3
    seeds = [2] if args.quick else [0, 1, 2]
    curves = {}
    for seed in seeds:
        params, curve = exact_training(seed, max(args.iterations, 2000))
        curves[seed] = curve
        print(f"exact gradient, seed {seed}: {np.round(curve, 3).tolist()}", flush=True)
    points = [EVERY] if args.quick else [500, 1000, args.iterations]
    header = [
        "| exact steps (log-lik.) | model-term estimate | noise (rms sd per component) | "
        "bias (rms, +- its noise) | ms per estimate | UCD mean meeting time |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    print("\n".join(header))
    rows = []
    for point in points:
        params, curve = exact_training(2, point)
        settings = [("UCD k=1 (the default)", core.UCD(k=1, max_time=10_000))]
        if point == points[-1] and not args.quick:
            settings += [
                (f"UCD k={k}, m={m}", core.UCD(k=k, m=m, max_time=10_000))
                for k, m in ((1, 10), (5, 20), (20, 80))
            ]
        settings += [("CD-1", core.CD(1))]
        if point == points[-1] and not args.quick:
            settings += [("CD-100", core.CD(100))]
        rows += estimator_rows(params, args.repeats, settings, f"{point} ({curve[-1]:.3f})")
    if args.quick:
        return
    marks = list(range(EVERY, max(args.iterations, 2000) + 1, EVERY))
    curve_lines = [
        "| iteration | " + " | ".join(f"seed {s}" for s in seeds) + " |",
        "| --- |" + " --- |" * len(seeds),
    ] + [
        f"| {it} | " + " | ".join(f"{curves[s][i]:.3f}" for s in seeds) + " |"
        for i, it in enumerate(marks)
    ]
    text = "\n".join(
        [
            "## UCD's gradient noise on bars-and-stripes",
            "",
            f"Exact-gradient training (SGD {LEARNING_RATE}, the example's initialisation; the "
            "curve an unbiased estimator follows in expectation), exact average log-likelihood:",
            "",
            *curve_lines,
            "",
            f"At seed 2's parameters after {', '.join(map(str, points))} exact steps, "
            f"{args.repeats} estimates of the model term `E_model[grad F]` each, {CHAINS} "
            "chains (UCD: pairs) started at data points, block Gibbs; noise is the spread "
            "of one estimate, bias the distance of the estimates' mean from the exact value:",
            "",
            *header,
            *rows,
        ]
    )
    write_section("ucd_noise", text)


if __name__ == "__main__":
    main()
