"""Meeting times of UCD's two couplings on the same RBMs: coupled block Gibbs (Alg. 3 of Qiu,
Zhang and Wang) against coupled DMALA chains (the coordinate-wise maximal coupling of the DLP
proposals with a common MH uniform, ``discrete_kernels.dlp.coupled_step``).

    python benchmarks/ucd_couplings.py [--quick]

Chains start at the bars-and-stripes images (4 x 4); the RBM has 16 hidden units and
Gaussian weights of the given scale (an untrained RBM is scale ~0.01, a trained one ~1-3).
Prints, per coupling and scale, the mean and 90% quantile of the meeting time over the
pairs, the share capped at ``max_time``, and the wall time of one negative phase.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import numpyro_ext as nx
from discrete_kernels import ebm as core
from discrete_kernels.ebm import bars_and_stripes
from numpyro_ext import _ucd, ebm


def meeting_times(coupling, params, batch, key, max_time):
    method = ebm.UCD(k=1, max_time=max_time, max_tries=10, coupling=coupling)
    rbm = ebm.RBM(*params.weights.shape)
    run = jax.jit(lambda k: _ucd.ucd_negative(method, rbm, params, batch, k))
    jax.block_until_ready(run(key))  # compile
    start = time.perf_counter()
    _, _, info = jax.block_until_ready(run(key))
    return float(info["meeting_time"]), int(info["time_capped"]), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    data = jnp.asarray(bars_and_stripes(), jnp.float32)
    reps = 4 if args.quick else 34
    batch = jnp.tile(data, (reps, 1))  # 120 or 1020 pairs
    rng = np.random.default_rng(0)
    print("| weight scale | coupling | mean meeting time | capped | seconds per phase |")
    print("| --- | --- | --- | --- | --- |")
    for scale in (0.1, 0.5, 1.0):
        params = core.RBMParams(
            jnp.asarray(rng.normal(scale=scale, size=(16, 16)), jnp.float32),
            jnp.zeros(16, jnp.float32),
            jnp.zeros(16, jnp.float32),
        )
        couplings = [("block Gibbs", None)] + [
            (f"DMALA step {s}", nx.DMALA(step_size=s)) for s in (1.0, 2.0, 4.0)
        ]
        for name, coupling in couplings:
            tau, capped, secs = meeting_times(coupling, params, batch, jax.random.key(1), 1000)
            print(f"| {scale} | {name} | {tau:.2f} | {capped} | {secs:.4f} |")


if __name__ == "__main__":
    main()
