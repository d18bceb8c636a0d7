"""The core on torch: exact stationarity from transition matrices, and parity with JAX."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import discrete_kernels as dk

from ..core.targets import ALL_TARGETS
from ..core.transition import stationary

TARGETS = [make() for make in ALL_TARGETS]
IDS = [t.name for t in TARGETS]


def _torch_local(target, state):
    f, local = target.local_fn(state)
    return float(f), tuple(torch.as_tensor(np.asarray(loc), dtype=torch.float64) for loc in local)


def _log_q(kernel, target, x, local, y, step_size):
    xt = tuple(torch.as_tensor(a) for a in x)
    yt = tuple(torch.as_tensor(a) for a in y)
    if kernel == "gwg":
        if sum(int((a != b).sum()) for a, b in zip(xt, yt)) != 1:
            return -np.inf
        logits = [
            dk.gwg_move_logits(d, a, loc, t)
            for d, a, loc, t in zip(target.domains, xt, local, target.is_table)
        ]
        return float(dk.gwg_log_prob(target.domains, xt, yt, logits))
    total = 0.0
    for d, a, loc, t, b in zip(target.domains, xt, local, target.is_table, yt):
        logits = dk.dlp_leaf_logits(d, a, loc, t, step_size)
        total += float(dk.dlp_leaf_log_prob(d, a, b, logits))
    return total


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("kernel", ["dmala", "gwg"])
def test_torch_path_is_exactly_stationary(target, kernel):
    states = target.states()
    cache = [_torch_local(target, s) for s in states]
    n = len(states)
    log_q = np.array(
        [
            [_log_q(kernel, target, x, cache[a][1], y, 0.6) for y in states]
            for a, x in enumerate(states)
        ]
    )
    q = np.exp(log_q)
    np.testing.assert_allclose(q.sum(1), 1.0, atol=1e-10)
    f = torch.tensor([c[0] for c in cache], dtype=torch.float64)
    p = np.zeros((n, n))
    for a in range(n):
        for b in range(n):
            if a != b and q[a, b] > 0:
                log_ratio = dk.mh_log_ratio(
                    f[a], f[b], torch.tensor(log_q[a, b]), torch.tensor(log_q[b, a])
                )
                p[a, b] = q[a, b] * float(dk.accept_probability(log_ratio))
        p[a, a] = 1 - p[a].sum()
    pi = target.exact_pi()
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    np.testing.assert_allclose(stationary(p), pi, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_torch_and_jax_give_the_same_proposal_probabilities(target):
    state = target.states()[1]
    _, local = target.local_fn(state)
    for j, (d, x, loc, t) in enumerate(zip(target.domains, state, local, target.is_table)):
        lt = dk.dlp_leaf_logits(
            d, torch.as_tensor(x), torch.as_tensor(loc, dtype=torch.float32), t, 0.6
        )
        lj = dk.dlp_leaf_logits(d, jnp.asarray(x), jnp.asarray(loc, dtype=jnp.float32), t, 0.6)
        np.testing.assert_allclose(lt.numpy(), np.asarray(lj), rtol=1e-5, atol=1e-6)
        for y in target.states()[:20]:
            yl = y[j]
            pt = dk.dlp_leaf_log_prob(d, torch.as_tensor(x), torch.as_tensor(yl), lt)
            pj = dk.dlp_leaf_log_prob(d, jnp.asarray(x), jnp.asarray(yl), lj)
            np.testing.assert_allclose(float(pt), float(pj), rtol=1e-5, atol=1e-5)
