"""Exact invariance of a Gibbs sweep of two blocks, through each PPL's conditioning.

Joint target on (z, c): three binary sites ``z`` and a discretised continuous site ``c`` (four
grid values). Block A is DMALA on ``z`` given ``c``, with the local information computed by the
adapter from the model conditioned on ``c`` the way the composites condition it (NumPyro's
``_gibbs_sites`` keyword, ``pyro_ext.Gibbs``'s conditioned model). Block B draws ``c`` from its
exact conditional (the stand-in for NUTS on the continuous part). Both blocks and the sweep
must leave the joint law invariant to 1e-6, from full transition matrices. Power: the same
sweep with block A's cached ``f(x)`` left stale after block B moved (what a missing refresh
does) is not invariant.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")

import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as ndist  # noqa: E402
import pyro  # noqa: E402
import pyro.distributions as pdist  # noqa: E402
from numpyro.infer.gibbs import with_conditioning  # noqa: E402

import discrete_kernels as dk  # noqa: E402
import numpyro_ext as nx  # noqa: E402
import pyro_ext as px  # noqa: E402
from pyro_ext.gibbs import _ConditionedModel, _Store  # noqa: E402
from tests.core.transition import _log_q_dlp  # noqa: E402

GRID = np.array([-1.0, -0.3, 0.4, 1.2])
COUPLING = np.array([0.8, -0.5, 0.3])
BIAS = np.array([0.2, -0.4, 0.1])
Z_STATES = [np.array(z) for z in itertools.product([0, 1], repeat=3)]


def n_model():
    c = numpyro.sample("c", ndist.Categorical(logits=jnp.asarray(-(GRID**2))))
    z = numpyro.sample("z", ndist.Bernoulli(0.5).expand([3]))
    s = jnp.sum(z)
    # cubic in z so that the first-order proposal is not exact
    numpyro.factor("f", jnp.asarray(GRID)[c] * (jnp.asarray(COUPLING) @ z) + BIAS @ z + 0.2 * s**3)


def p_model():
    grid = torch.as_tensor(GRID)
    c = pyro.sample("c", pdist.Categorical(logits=-(grid**2)))
    z = pyro.sample("z", pdist.Bernoulli(0.5).expand([3]).to_event(1)).double()
    s = z.sum()
    pyro.factor("f", grid[c] * (torch.as_tensor(COUPLING) @ z) + torch.as_tensor(BIAS) @ z
                + 0.2 * s**3)  # fmt: skip


def numpyro_block_local_fns():
    """Per grid index, the adapter's ``local_fn`` of DMALA's block on ``z`` given ``c``."""
    out = []
    for c in range(len(GRID)):
        kwargs = with_conditioning({}, {"c": jnp.asarray(c)})
        kernel = nx.DMALA(n_model, exact_sites=[])
        kernel._setup = kernel._site_setup(jax.random.key(0), None, (), kwargs)
        assert kernel._setup.names == ["z"]
        out.append(kernel._local_fn((), kwargs))
    return out


def pyro_block_local_fns():
    out = []
    for c in range(len(GRID)):
        store = _Store()
        store.values = {"c": torch.tensor(c), "z": torch.zeros(3)}
        kernel = px.DMALA(_ConditionedModel(p_model, store, frozenset({"z"})), exact_sites=[])
        kernel.setup(0)
        assert kernel._setup.names == ["z"]
        out.append(kernel._local_fn())
    return out


def _as_numpy(local_fn, backend):
    def fn(leaves):
        x = jnp.asarray(leaves[0]) if backend == "numpyro" else torch.as_tensor(leaves[0]).float()
        f, local = local_fn((x,))
        return np.float64(np.asarray(f)), tuple(np.asarray(v, np.float64) for v in local)

    return fn


def sweep_matrices(local_fns, step_size=0.6, stale=False):
    """Joint law and the matrices of block A, block B on states ``(z, c)``, index z * 4 + c.

    ``stale``: block A's MH uses ``f(x)`` cached at the previous ``c`` (one grid step lower),
    as if the block had not been refreshed after block B moved.
    """
    nc, nz = len(GRID), len(Z_STATES)
    domains = (dk.Binary(),)
    cache = [[fn((z,)) for z in Z_STATES] for fn in local_fns]  # [c][z] -> (f, locals)
    f = np.array([[cache[c][a][0] for c in range(nc)] for a in range(nz)])
    pi = np.exp(f - f.max()).ravel()
    pi /= pi.sum()
    index = lambda a, c: a * nc + c  # noqa: E731
    block_a = np.zeros((nz * nc, nz * nc))
    for c in range(nc):

        class Conditional:  # the interface _log_q_dlp reads
            is_table = (False,)

        Conditional.domains = domains
        log_q = np.array(
            [
                [
                    _log_q_dlp(Conditional, (x,), cache[c][a][1], (y,), step_size, 0.5)
                    for y in Z_STATES
                ]
                for a, x in enumerate(Z_STATES)
            ]
        )
        for a in range(nz):
            f_x = cache[(c - 1) % nc][a][0] if stale else cache[c][a][0]
            for b in range(nz):
                if a == b:
                    continue
                log_ratio = dk.metropolis.mh_log_ratio(
                    np.float64(f_x), np.float64(cache[c][b][0]), log_q[a, b], log_q[b, a]
                )
                block_a[index(a, c), index(b, c)] = np.exp(log_q[a, b]) * float(
                    dk.metropolis.accept_probability(log_ratio)
                )
            block_a[index(a, c), index(a, c)] = 1.0 - block_a[index(a, c)].sum()
    block_b = np.zeros_like(block_a)
    for a in range(nz):
        conditional = np.exp(f[a] - f[a].max())
        conditional /= conditional.sum()
        for c in range(nc):
            block_b[index(a, c), [index(a, k) for k in range(nc)]] = conditional
    return pi, block_a, block_b


@pytest.mark.parametrize("backend", ["numpyro", "pyro"])
def test_gibbs_sweep_of_two_blocks_is_exactly_invariant(backend):
    fns = numpyro_block_local_fns() if backend == "numpyro" else pyro_block_local_fns()
    fns = [_as_numpy(fn, backend) for fn in fns]
    pi, block_a, block_b = sweep_matrices(fns)
    assert np.all(block_a >= -1e-12)
    assert np.max(np.abs(pi @ block_a - pi)) < 1e-6
    assert np.max(np.abs(pi @ block_b - pi)) < 1e-6
    assert np.max(np.abs(pi @ block_a @ block_b - pi)) < 1e-6
    # power: a stale cached f(x) after the other block moved breaks invariance
    pi, stale_a, block_b = sweep_matrices(fns, stale=True)
    assert np.max(np.abs(pi @ stale_a @ block_b - pi)) > 1e-3
