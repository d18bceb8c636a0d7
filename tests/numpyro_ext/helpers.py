"""Enumeration of small NumPyro models; the Monte Carlo checks live in :mod:`tests.mc`
(re-exported here)."""

from __future__ import annotations

import itertools

import jax
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
    states = list(itertools.product(*grids))
    stacked = {n: jnp.asarray(np.stack([c[j] for c in states])) for j, n in enumerate(names)}

    def one(params):
        return log_density(model, args, {}, params)[0]

    logp = np.asarray(jax.jit(jax.vmap(one))(stacked), dtype=np.float64)  # one batched call
    w = np.exp(logp - logp.max())
    return states, w / w.sum()
