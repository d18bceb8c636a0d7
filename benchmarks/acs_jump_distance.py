"""Why an acceptance-based tuner keeps ACS inside one mode of the 2-D multimodal target
(``examples/multimodal_acs.py``): per step size, the DLP proposal's expected acceptance,
expected squared jump distance and rate of accepted mode-to-mode moves, from states drawn
exactly from the target (no chain: each state proposes once, and each proposal counts with
its acceptance probability, so rare jumps are weighed without waiting for one).

Run ``python benchmarks/acs_jump_distance.py`` (``--quick``: fewer states, nothing written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._common import write_section
from discrete_kernels.domains import Ordinal
from discrete_kernels.samplers.dlp import dlp_leaf_log_prob, dlp_leaf_logits, dlp_leaf_sample

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from multimodal_acs import MODES, SIZE, exact_distribution, log_density  # noqa: E402

STEP_SIZES = (4, 16, 64, 256, 1024, 4096, 16384, 202500)
BALANCES = (0.95, 0.5)


def nearest_mode(x: jax.Array) -> jax.Array:
    return jnp.argmin(jnp.sum((x[..., None, :] - MODES) ** 2, -1), -1)


def measure(states: jax.Array, key: jax.Array, step_size: float, balance: float) -> dict:
    """One proposal from each state (shape (n, 2)) at ``(step_size, balance)``: its expected
    acceptance, squared jump distance and mode-change rate, averaged over the states."""
    domain = Ordinal(SIZE)

    def one(x, key_u):
        key_u = jax.random.split(key_u)[0]
        grad = jax.grad(log_density)(x.astype(jnp.float32))
        logits = dlp_leaf_logits(domain, x, grad, False, step_size, balance)
        y = dlp_leaf_sample(domain, x, logits, jax.random.uniform(key_u, x.shape))
        grad_y = jax.grad(log_density)(y.astype(jnp.float32))
        reverse = dlp_leaf_logits(domain, y, grad_y, False, step_size, balance)
        log_accept = (
            log_density(y)
            - log_density(x)
            + dlp_leaf_log_prob(domain, y, x, reverse)
            - dlp_leaf_log_prob(domain, x, y, logits)
        )
        accept = jnp.minimum(1.0, jnp.exp(log_accept))
        jump2 = jnp.sum((y - x).astype(jnp.float32) ** 2)
        return accept, accept * jump2, accept * (nearest_mode(y) != nearest_mode(x))

    accept, jump2, mode_moves = jax.jit(jax.vmap(one))(
        states, jax.random.split(key, states.shape[0])
    )
    return {
        "accept": float(accept.mean()),
        "jump2": float(jump2.mean()),
        "mode_moves": 1000 * float(mode_moves.mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--states", type=int, default=16384)
    args = parser.parse_args()
    n = 512 if args.quick else args.states
    key = jax.random.key(0)
    p = exact_distribution().ravel()
    index = np.random.default_rng(0).choice(p.size, size=n, p=p / p.sum())
    states = jnp.stack([index // SIZE, index % SIZE], -1).astype(jnp.int32)
    lines = [
        "## ACS on the multimodal target: what each step size buys",
        "",
        f"{n:,} states drawn exactly from the 25-mode target of `examples/multimodal_acs.py`, "
        "one DLP proposal each (the library's `dlp_leaf_logits`, `dlp_leaf_sample` and "
        "`dlp_leaf_log_prob`), weighed by its acceptance probability: the expected "
        "acceptance, the expected squared jump distance (ESJD) and the expected number of "
        "accepted moves into another mode per 1,000 steps.",
        "",
        "| balance | step size | acceptance | ESJD | mode moves per 1,000 steps |",
        "| --- | --- | --- | --- | --- |",
    ]
    for balance in BALANCES:
        for step_size in STEP_SIZES:
            got = measure(states, jax.random.fold_in(key, step_size), step_size, balance)
            lines.append(
                f"| {balance} | {step_size:,} | {got['accept']:.4f} | {got['jump2']:.1f} | "
                f"{got['mode_moves']:.2f} |"
            )
            print(lines[-1], flush=True)
    lines += [
        "",
        "Acceptance 1/2 (the tuner's target) lies between step sizes 16 and 64 at either "
        "balance, where no proposal leaves its mode; mode moves happen at 256-4,096, at a few "
        "per 1,000 steps. The squared jump distance does not single them out from a short "
        "search either: at balance 1/2 it is about as large at 1,024 as at 64, but there it "
        "comes from the few proposals in 1,000 that change mode, which a tuner's search of "
        "tens of proposals per candidate would almost never draw. Hence ACS's defaults stay "
        "in the start mode here, and the paper sets this target's cycle by hand (App. D.1).",
    ]
    if not args.quick:
        write_section("acs_jump_distance", "\n".join(lines))


if __name__ == "__main__":
    main()
