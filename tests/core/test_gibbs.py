"""Exact stationarity of the single-site updates, sweeping coordinates one at a time."""

import itertools

import numpy as np
import pytest

import discrete_kernels as dk

FORMS = [(False, False), (False, True), (True, False), (True, True)]
IDS = ["gibbs", "modified-gibbs", "random-walk", "modified-random-walk"]


def _proposal_probs(w, current, random_walk, modified):
    """The proposal law each form defines (the reference the sampler is checked against)."""
    allowed = np.ones(w.size, bool)
    if modified:
        allowed[current] = False
    logits = np.where(allowed, 0.0 if random_walk else w, -np.inf)
    q = np.exp(logits - logits[allowed].max())
    return q / q.sum()


def _site_transition(f, states, site, num_values, random_walk, modified):
    """Transition matrix of one site update: reference proposal law x the kernel's log ratio;
    also checks that the sampler draws from that law (uniforms on a grid)."""
    index = {s: k for k, s in enumerate(states)}
    p = np.zeros((len(states), len(states)))
    grid = (np.arange(2000) + 0.5) / 2000
    for a, x in enumerate(states):
        w = np.array([f(x[:site] + (v,) + x[site + 1 :]) for v in range(num_values)])
        q = _proposal_probs(w, x[site], random_walk, modified)
        drawn = [
            int(
                dk.gibbs.gibbs_site_proposal(
                    w, np.int64(x[site]), np.float64(u), random_walk=random_walk, modified=modified
                )[0]
            )
            for u in grid
        ]
        np.testing.assert_allclose(
            np.bincount(drawn, minlength=num_values) / grid.size, q, atol=1e-3
        )
        for v in range(num_values):
            if q[v] == 0:
                continue
            # the log ratio depends on (current, proposal) only; find a uniform that picks v
            u = np.cumsum(q)[v] - q[v] / 2
            picked, log_ratio = dk.gibbs.gibbs_site_proposal(
                w, np.int64(x[site]), np.float64(u), random_walk=random_walk, modified=modified
            )
            assert int(picked) == v
            accept = min(1.0, float(np.exp(log_ratio)))
            y = x[:site] + (v,) + x[site + 1 :]
            p[a, index[y]] += q[v] * accept
            p[a, a] += q[v] * (1 - accept)
    return p


@pytest.mark.parametrize(("random_walk", "modified"), FORMS, ids=IDS)
def test_single_site_updates_are_stationary(random_walk, modified):
    rng = np.random.default_rng(0)
    num_values, d = 3, 2
    table = rng.normal(size=(num_values,) * d) * 1.5
    f = lambda x: table[x]  # noqa: E731
    states = list(itertools.product(range(num_values), repeat=d))
    pi = np.exp([f(s) for s in states])
    pi /= pi.sum()
    for site in range(d):
        p = _site_transition(f, states, site, num_values, random_walk, modified)
        np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-9)
        assert np.max(np.abs(pi @ p - pi)) < 1e-9


def test_invalid_candidates_are_never_proposed_and_nan_is_rejected():
    w = np.array([0.0, np.nan, 1.0, 5.0])
    valid = np.array([True, True, True, False])
    for u in np.linspace(0, 0.999, 50):
        for random_walk, modified in FORMS:
            v, log_ratio = dk.gibbs.gibbs_site_proposal(
                w,
                np.int64(0),
                np.float64(u),
                valid=valid,
                random_walk=random_walk,
                modified=modified,
            )
            assert int(v) != 3
            if int(v) == 1:
                assert log_ratio == -np.inf or not random_walk
