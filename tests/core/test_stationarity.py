"""Exact stationarity of the core kernels from their full transition matrices."""

import numpy as np
import pytest

from .targets import ALL_TARGETS, binary_target, ordinal_target
from .transition import stationary, transition_matrix

TARGETS = [make() for make in ALL_TARGETS]
IDS = [t.name for t in TARGETS]


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("kernel", ["dmala", "dula", "gwg"])
def test_proposal_rows_sum_to_one(target, kernel):
    _, proposal = transition_matrix(target, kernel, step_size=0.7)
    np.testing.assert_allclose(proposal.sum(axis=1), 1.0, atol=1e-10)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("step_size", [0.2, 0.7, 3.0])
def test_dmala_is_exactly_stationary(target, step_size):
    p, _ = transition_matrix(target, "dmala", step_size=step_size)
    pi = target.exact_pi()
    assert np.max(np.abs(pi @ p - pi)) < 1e-6
    assert np.all(p >= -1e-12)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_gwg_is_exactly_stationary(target):
    p, _ = transition_matrix(target, "gwg")
    pi = target.exact_pi()
    assert np.max(np.abs(pi @ p - pi)) < 1e-6


def test_balance_other_than_half_is_still_exact_with_mh():
    target = ordinal_target()
    p, _ = transition_matrix(target, "dmala", step_size=0.7, balance=0.8)
    pi = target.exact_pi()
    assert np.max(np.abs(pi @ p - pi)) < 1e-6


def test_dula_is_biased_and_the_bias_shrinks_with_the_step_size():
    """DULA (no MH) has a stationary law that is not the target; smaller steps help."""
    target = binary_target()
    pi = target.exact_pi()
    errors = {}
    for step_size in [2.0, 0.5, 0.2]:
        p, _ = transition_matrix(target, "dula", step_size=step_size)
        errors[step_size] = 0.5 * np.abs(stationary(p) - pi).sum()
    assert errors[2.0] > 1e-2  # visibly biased at a large step
    assert errors[2.0] > errors[0.5] > errors[0.2]
