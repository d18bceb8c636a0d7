"""The core on torch: exact stationarity from transition matrices, and parity with JAX."""

import numpy as np
import pytest
import torch

import discrete_kernels as dk

from ..core.targets import ALL_TARGETS
from ..core.transition import stationary, transition_matrix

# the core's transition matrices and JAX parity, computed on the CPU
pytestmark = pytest.mark.cpu_only

TARGETS = [make() for make in ALL_TARGETS]
IDS = [t.name for t in TARGETS]


def _torch_local(target, state):
    f, local = target.local_fn(state)
    return float(f), tuple(torch.as_tensor(np.asarray(loc), dtype=torch.float64) for loc in local)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("kernel", ["dmala", "gwg"])
def test_torch_path_is_exactly_stationary(target, kernel):
    """The core test's transition matrix, with every array a torch tensor."""
    p, q = transition_matrix(target, kernel, 0.6, convert=torch.as_tensor)
    np.testing.assert_allclose(q.sum(1), 1.0, atol=1e-10)
    pi = target.exact_pi()
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    np.testing.assert_allclose(stationary(p), pi, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_torch_and_jax_give_the_same_proposal_probabilities(target):
    jnp = pytest.importorskip("jax.numpy")
    state = target.states()[1]
    _, local = target.local_fn(state)
    for j, (d, x, loc, t) in enumerate(zip(target.domains, state, local, target.is_table)):
        lt = dk.dlp.dlp_leaf_logits(
            d, torch.as_tensor(x), torch.as_tensor(loc, dtype=torch.float32), t, 0.6
        )
        lj = dk.dlp.dlp_leaf_logits(d, jnp.asarray(x), jnp.asarray(loc, dtype=jnp.float32), t, 0.6)
        np.testing.assert_allclose(lt.numpy(), np.asarray(lj), rtol=1e-5, atol=1e-6)
        for y in target.states()[:20]:
            yl = y[j]
            pt = dk.dlp.dlp_leaf_log_prob(d, torch.as_tensor(x), torch.as_tensor(yl), lt)
            pj = dk.dlp.dlp_leaf_log_prob(d, jnp.asarray(x), jnp.asarray(yl), lj)
            np.testing.assert_allclose(float(pt), float(pj), rtol=1e-5, atol=1e-5)
