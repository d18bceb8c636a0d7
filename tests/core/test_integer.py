"""Windowed integer domains (App. C of the DLP paper): exact stationarity of DMALA and ACS on
count targets, the proposal's truncation at the support's ends, and the power of the test
against an MH correction that normalises over the untruncated window."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
from scipy import special

import discrete_kernels as dk

from .transition import assert_rows_match, empirical_transitions

POISSON_RATE = 3.0
POISSON_TOP = 40  # P(X > 40) < 1e-25 for Poisson(3)


def poisson_local_fn(leaves):
    """Poisson(3) on each coordinate plus a coupling of the first two: ``f`` and ``df/dx`` of
    the relaxation ``x log(rate) - lgamma(x + 1) - c x_0 x_1``."""
    x = leaves[0].astype(float)
    f = np.sum(x * np.log(POISSON_RATE) - special.gammaln(x + 1))
    g = np.log(POISSON_RATE) - special.digamma(x + 1)
    if x.size == 2:
        f = f - 0.15 * x[0] * x[1]
        g = g - 0.15 * x[::-1]
    return f, (g,)


def bounded_local_fn(leaves):
    """A rough target on ``0 .. 6`` (both ends of the support bind)."""
    x = leaves[0].astype(float)
    f = np.sum(0.8 * x - 0.09 * x**2 + 0.6 * np.sin(1.7 * x))
    return f, (0.8 - 0.18 * x + 1.02 * np.cos(1.7 * x),)


def two_sided_local_fn(leaves):
    """A discretised Gaussian with wiggles on all integers (no bound on either side)."""
    x = leaves[0].astype(float)
    f = np.sum(-((x - 0.5) ** 2) / 8.0 + 0.4 * np.cos(x))
    return f, (-(x - 0.5) / 4.0 - 0.4 * np.sin(x),)


def enumerate_states(low: int, high: int, size: int) -> list[tuple[np.ndarray]]:
    values = range(low, high + 1)
    return [(np.asarray(c, dtype=np.int64),) for c in itertools.product(values, repeat=size)]


def window_transition_matrix(
    spec,
    states: list,
    local_fn: Callable,
    params: dk.StepParameters,
    sites: dk.Sites,
    window: int,
    log_q_in_ratio: Callable | None = None,
):
    """``P[a, b]`` of a DLP spec over ``states``, visiting only the ``(2 w + 1)^d`` window
    neighbours of each state (every other move has ``log q = -inf``); also the proposal.

    ``log_q_in_ratio(chain, y)``, when given, replaces ``spec.log_proposal`` in the MH ratio
    only (the proposal itself is unchanged): a way to test the test's power.
    """
    index = {tuple(s[0].tolist()): i for i, s in enumerate(states)}
    chains = [spec.init(s, local_fn) for s in states]
    n = len(states)
    size = states[0][0].size
    moves = list(itertools.product(range(-window, window + 1), repeat=size))
    proposal = np.zeros((n, n))
    log_q = {}
    for a, chain in enumerate(chains):
        for move in moves:
            y = tuple((np.asarray(states[a][0]) + np.asarray(move)).tolist())
            b = index.get(y)
            if b is None:  # beyond the enumerated range: the caller bounds that mass
                continue
            value = float(spec.log_proposal(chain, (np.asarray(y, np.int64),), params, sites))
            proposal[a, b] = np.exp(value)
            ratio_q = value if log_q_in_ratio is None else log_q_in_ratio(chain, y)
            log_q[a, b] = ratio_q
    p = np.zeros((n, n))
    f = [np.float64(float(c.log_density)) for c in chains]
    for (a, b), forward in log_q.items():
        if a == b or proposal[a, b] == 0.0:
            continue
        log_ratio = dk.metropolis.mh_log_ratio(f[a], f[b], forward, log_q[b, a])
        accept = float(dk.metropolis.accept_probability(log_ratio)) if params.metropolis else 1.0
        p[a, b] = proposal[a, b] * accept
    p[np.arange(n), np.arange(n)] = 1.0 - p.sum(axis=1)
    return p, proposal


def exact_pi(states, local_fn):
    f = np.array([float(local_fn(s)[0]) for s in states])
    pi = np.exp(f - f.max())
    return pi / pi.sum()


CASES = {
    # name: (domain, local_fn, enumerated range, coordinates)
    "poisson": (dk.Integer(), poisson_local_fn, (0, POISSON_TOP), 1),
    "poisson-window-3": (dk.Integer(window=3), poisson_local_fn, (0, POISSON_TOP), 1),
    "coupled-counts": (dk.Integer(), poisson_local_fn, (0, 22), 2),
    "coupled-counts-window-2": (dk.Integer(window=2), poisson_local_fn, (0, 22), 2),
    "bounded": (dk.Integer(low=0, high=6, window=2), bounded_local_fn, (0, 6), 1),
    "two-sided": (dk.Integer(low=None), two_sided_local_fn, (-30, 30), 1),
}


def _setup(name, spec):
    domain, local_fn, (low, high), size = CASES[name]
    states = enumerate_states(low, high, size)
    sites = dk.Sites(("n",), (domain,), (False,))
    return domain, local_fn, states, sites


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("step_size", [0.4, 3.0])
def test_dmala_with_a_window_is_exactly_stationary(name, step_size):
    spec = dk.dlp.DMALA(step_size=step_size)
    domain, local_fn, states, sites = _setup(name, spec)
    params = spec.parameters(spec.adapt_init(np.float64(1.0), 0, sites, 1, dk.PYTHON_CONTROL))
    p, proposal = window_transition_matrix(spec, states, local_fn, params, sites, domain.window)
    pi = exact_pi(states, local_fn)
    # every proposal row sums to one over its (truncated) window, up to the mass proposed
    # beyond the enumerated range, which the target's tail makes negligible there
    assert np.all(proposal.sum(axis=1) <= 1 + 1e-12)
    tail = pi * (1.0 - proposal.sum(axis=1))
    assert tail.sum() < 1e-12
    assert np.max(np.abs(pi @ p - pi)) < 1e-10
    assert np.all(p >= -1e-12)


def test_the_window_is_truncated_at_the_support_ends():
    """At the support's ends the proposal puts no mass outside it and its row still sums to
    one; the log-probability of a move outside the window is ``-inf``."""
    spec = dk.dlp.DMALA(step_size=5.0)
    domain = dk.Integer(low=0, high=6, window=2)
    sites = dk.Sites(("n",), (domain,), (False,))
    params = spec.parameters(spec.adapt_init(np.float64(1.0), 0, sites, 1, dk.PYTHON_CONTROL))
    for x in (0, 1, 5, 6):
        chain = spec.init((np.asarray([x]),), bounded_local_fn)
        q = {
            y: np.exp(float(spec.log_proposal(chain, (np.asarray([y]),), params, sites)))
            for y in range(x - 3, x + 4)
        }
        assert sum(q.values()) == pytest.approx(1.0, abs=1e-12)
        assert all(q[y] == 0.0 for y in q if y < 0 or y > 6 or abs(y - x) > 2)
        assert all(q[y] > 0.0 for y in q if 0 <= y <= 6 and abs(y - x) <= 2)


def test_acs_with_a_window_is_exactly_stationary():
    """ACS uses the DLP step: at each position of its cycle its step is exact."""
    spec = dk.acs.ACS(
        steps_per_cycle=3, alpha_max=4.0, alpha_min=0.3, beta_schedule=[0.9, 0.7, 0.5]
    )
    domain, local_fn, states, sites = _setup("coupled-counts", spec)
    adapt = spec.adapt_init(np.float64(1.0), 0, sites, 2, dk.PYTHON_CONTROL)
    phases = spec.phases(0, dk.PYTHON_CONTROL)
    pi = exact_pi(states, local_fn)
    for position in range(3):
        params = spec.parameters(adapt)
        p, _ = window_transition_matrix(spec, states, local_fn, params, sites, domain.window)
        assert np.max(np.abs(pi @ p - pi)) < 1e-10, position
        feedback = dk.warmup.Feedback(None, params, None, position)
        adapt = dk.warmup.run_phases(phases, adapt, feedback, dk.PYTHON_CONTROL)


def test_the_step_moves_by_its_transition_matrix():
    """The step itself (sampling from the truncated window, its MH ratio) moves by the matrix
    above, from every state of the bounded target, 600 steps each."""
    spec = dk.dlp.DMALA(step_size=2.0)
    domain, local_fn, states, sites = _setup("bounded", spec)
    adapt = spec.adapt_init(np.float64(1.0), 0, sites, 1, dk.PYTHON_CONTROL)
    params = spec.parameters(adapt)
    p, _ = window_transition_matrix(spec, states, local_fn, params, sites, domain.window)
    counts = empirical_transitions(spec, states, local_fn, params, adapt, sites, 600, 5)
    assert_rows_match(counts, p)


def test_dula_is_biased_on_counts_and_the_bias_shrinks_with_the_step_size():
    spec_of = dk.dlp.DULA
    errors = {}
    for step_size in (3.0, 0.3):
        spec = spec_of(step_size=step_size)
        domain, local_fn, states, sites = _setup("poisson", spec)
        adapt = spec.adapt_init(np.float64(1.0), 0, sites, 1, dk.PYTHON_CONTROL)
        p, _ = window_transition_matrix(
            spec, states, local_fn, spec.parameters(adapt), sites, domain.window
        )
        pi = exact_pi(states, local_fn)
        values, vectors = np.linalg.eig(p.T)
        v = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
        errors[step_size] = 0.5 * np.abs(v / v.sum() - pi).sum()
    assert errors[3.0] > 1e-3
    assert errors[3.0] > errors[0.3]


@pytest.mark.parametrize("name", ["poisson", "bounded"])
def test_an_mh_ratio_that_ignores_the_truncation_fails(name):
    """Power: the same stationarity check fails when the MH correction normalises each side's
    proposal over the whole window, ignoring its truncation at the support's end (the
    proposal itself still truncated)."""
    spec = dk.dlp.DMALA(step_size=3.0)
    domain, local_fn, states, sites = _setup(name, spec)
    untruncated = dk.Integer(low=None, high=None, window=domain.window)
    params = spec.parameters(spec.adapt_init(np.float64(1.0), 0, sites, 1, dk.PYTHON_CONTROL))

    def log_q_untruncated(chain, y):
        x, g = chain.x[0], chain.local[0]
        logits = dk.dlp.dlp_leaf_logits(untruncated, x, g, False, params.step_size)
        return float(dk.dlp.dlp_leaf_log_prob(untruncated, x, np.asarray(y), logits))

    p, _ = window_transition_matrix(
        spec, states, local_fn, params, sites, domain.window, log_q_untruncated
    )
    pi = exact_pi(states, local_fn)
    assert np.max(np.abs(pi @ p - pi)) > 1e-4


def test_integer_domain_checks_its_arguments():
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        dk.Integer(window=0)
    with pytest.raises(ValueError, match="high must exceed low"):
        dk.Integer(low=3, high=3)
    with pytest.raises(ValueError, match="low must be an integer or None"):
        dk.Integer(low=0.5)
    assert dk.Integer() == dk.Integer(low=0, high=None, window=1)
