"""Enumeration of small NumPyro models and Monte Carlo tolerances."""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
from numpyro.diagnostics import effective_sample_size
from numpyro.infer.util import log_density


def enumerate_posterior(model, sites: dict, *args):
    """All joint values of ``sites`` ({name: (shape, values)}) with their posterior mass."""
    names = list(sites)
    grids = []
    for name in names:
        shape, values = sites[name]
        n = int(np.prod(shape))
        grids.append([np.asarray(c).reshape(shape) for c in itertools.product(values, repeat=n)])
    states, logp = [], []
    for combo in itertools.product(*grids):
        params = {n: jnp.asarray(v) for n, v in zip(names, combo)}
        lp, _ = log_density(model, args, {}, params)
        states.append(combo)
        logp.append(float(lp))
    logp = np.asarray(logp)
    w = np.exp(logp - logp.max())
    return states, w / w.sum()


def assert_mc_close(samples: np.ndarray, expected: np.ndarray, num_se: float = 5.0):
    """``samples`` (chains, draws, k): chain-pooled means within ``num_se`` MC standard errors.

    The standard error uses the effective sample size of each statistic, floored at 1e-3 so
    that statistics with no spread (sd 0) still need to match closely.
    """
    samples = np.asarray(samples, dtype=np.float64)
    mean = samples.mean(axis=(0, 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        ess = np.asarray(effective_sample_size(samples))
    ess = np.where(np.isfinite(ess), ess, 1.0)  # a constant statistic has no ESS
    sd = samples.std(axis=(0, 1))
    se = np.maximum(sd / np.sqrt(np.maximum(ess, 1.0)), 1e-3)
    z = np.abs(mean - expected) / se
    assert np.all(z < num_se), f"max z {z.max():.2f} at {np.argmax(z)}: {mean} vs {expected}"
    return z


def ising_weights(side: int) -> np.ndarray:
    """Adjacency of a ``side x side`` lattice with open boundaries, shape (d, d)."""
    d = side * side
    w = np.zeros((d, d))
    for r in range(side):
        for c in range(side):
            i = r * side + c
            if c + 1 < side:
                w[i, i + 1] = w[i + 1, i] = 1.0
            if r + 1 < side:
                w[i, i + side] = w[i + side, i] = 1.0
    return w
