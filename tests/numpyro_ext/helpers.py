"""Enumeration of small NumPyro models; the Monte Carlo checks live in :mod:`tests.mc`
(re-exported here)."""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
from numpyro.infer.util import log_density

from ..mc import assert_mc_close, ising_weights

__all__ = ["assert_mc_close", "enumerate_posterior", "ising_weights"]


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
