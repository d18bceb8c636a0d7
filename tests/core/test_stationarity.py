"""Exact stationarity of the core kernels from their full transition matrices."""

import numpy as np
import pytest

import discrete_kernels as dk

from .targets import ALL_TARGETS, binary_target, ordinal_target
from .transition import (
    assert_rows_match,
    empirical_transitions,
    spec_transition_matrix,
    stationary,
    transition_matrix,
)

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


# every sampler through its spec: the proposal it declares and the core's MH rule
SPECS = {
    "DMALA": lambda: dk.dlp.DMALA(step_size=0.7),
    "GWG": lambda: dk.gwg.GWG(),
    "GWG with a distance penalty": lambda: dk.gwg.GWG(step_size=2.0),
    "AB-1st": lambda: dk.ab.AB(step_size=1.3, balance=0.8, adapt=False),
    "ACS": lambda: dk.acs.ACS(
        steps_per_cycle=3, alpha_max=4.0, alpha_min=0.3, beta_schedule=[0.9, 0.7, 0.5]
    ),
}


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("name", list(SPECS))
def test_every_spec_is_exactly_stationary(target, name):
    spec = SPECS[name]()
    sites = dk.Sites(tuple(range(len(target.domains))), target.domains, target.is_table)
    dim = sum(int(np.prod(s)) for s in target.shapes)
    adapt = spec.adapt_init(np.float64(1.0), 0, sites, dim, dk.PYTHON_CONTROL)
    pi = target.exact_pi()
    phases = spec.phases(0, dk.PYTHON_CONTROL)
    for position in range(3 if name == "ACS" else 1):  # each step of ACS's cycle
        params = spec.parameters(adapt)
        p, proposal = spec_transition_matrix(spec, target.states(), target.local_fn, params, sites)
        np.testing.assert_allclose(proposal.sum(axis=1), 1.0, atol=1e-10)
        assert np.max(np.abs(pi @ p - pi)) < 1e-6, (name, position)
        feedback = dk.warmup.Feedback(None, params, None, position)
        adapt = dk.warmup.run_phases(phases, adapt, feedback, dk.PYTHON_CONTROL)


@pytest.mark.parametrize("name", list(SPECS))
def test_every_spec_steps_by_its_transition_matrix(name):
    """The step itself moves by the matrix above (its proposal and MH ratio as declared),
    from every state of a 16-state target, 600 steps each."""
    target = binary_target()
    spec = SPECS[name]()
    sites = dk.Sites((0,), target.domains, target.is_table)
    adapt = spec.adapt_init(np.float64(1.0), 0, sites, 4, dk.PYTHON_CONTROL)
    params = spec.parameters(adapt)
    states = target.states()
    p, _ = spec_transition_matrix(spec, states, target.local_fn, params, sites)
    counts = empirical_transitions(spec, states, target.local_fn, params, adapt, sites, 600, 3)
    assert_rows_match(counts, p)


def test_the_step_test_catches_a_wrong_reverse_proposal(monkeypatch):
    """Power: a DLP step whose reverse proposal is evaluated with the current state's gradient
    instead of the proposal's (a classic DMALA bug) fails the row test above."""
    original = dk.kernel.propose

    def stale_reverse(state, local_fn, logits_at, sample, log_prob):
        proposal, forward, _ = original(state, local_fn, logits_at, sample, log_prob)
        return proposal, forward, log_prob(proposal.x, state.x, logits_at(state, state))

    monkeypatch.setattr(dk.samplers.dlp_proposal, "propose", stale_reverse)
    with pytest.raises(AssertionError):
        test_every_spec_steps_by_its_transition_matrix("DMALA")
