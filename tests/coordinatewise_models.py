"""Exact answers shared by both PPLs' tests of ``DMALA(per_coordinate_mh=True)``: abundance
counts at 6 sites under zero inflation, each surveyed 3 times (numpy and scipy only)."""

from __future__ import annotations

import numpy as np
from scipy import special, stats

# detections of 6 sites over 3 surveys (two sites with none: there the count may be 0)
DETECTIONS = np.array([[3, 5, 2], [0, 0, 0], [6, 4, 7], [1, 0, 2], [0, 0, 0], [4, 4, 3]])
GATE, RATE, DETECTION = 0.3, 8.0, 0.45
BOUND = 400  # the exact sums run over n = 0 .. 400 (the tail beyond is below 1e-100)


def _count_log_prior() -> np.ndarray:
    values = np.arange(BOUND + 1)
    log_prior = np.log1p(-GATE) + stats.poisson.logpmf(values, RATE)
    log_prior[0] = np.logaddexp(np.log(GATE), log_prior[0])
    return log_prior


def _site_log_posterior(row: np.ndarray, detection: float | np.ndarray) -> np.ndarray:
    """Unnormalised log posterior of one site's count over ``0 .. BOUND`` (for each detection
    probability along a leading axis when ``detection`` is an array)."""
    values = np.arange(BOUND + 1)
    p = np.asarray(detection)[..., None]
    return _count_log_prior() + sum(stats.binom.logpmf(k, values, p) for k in row)


def counts_exact() -> np.ndarray:
    """Posterior mean of each site's count, detection known."""
    means = []
    for row in DETECTIONS:
        log_post = _site_log_posterior(row, DETECTION)
        means.append(np.exp(log_post - special.logsumexp(log_post)) @ np.arange(BOUND + 1))
    return np.asarray(means)


def counts_with_detection_exact() -> tuple[float, np.ndarray]:
    """Posterior mean of ``p`` and of each count, by quadrature over ``p`` (2,000 points)
    with the counts summed out."""
    grid = (np.arange(2000) + 0.5) / 2000
    per_site = [_site_log_posterior(row, grid) for row in DETECTIONS]  # (G, BOUND + 1) each
    log_marginal = stats.beta.logpdf(grid, 2.0, 2.0) + sum(
        special.logsumexp(lp, axis=-1) for lp in per_site
    )
    weight = np.exp(log_marginal - special.logsumexp(log_marginal))
    values = np.arange(BOUND + 1)
    means = [
        weight @ (np.exp(lp - special.logsumexp(lp, axis=-1, keepdims=True)) @ values)
        for lp in per_site
    ]
    return float(weight @ grid), np.asarray(means)


def indicator_exact(y: np.ndarray) -> np.ndarray:
    """Posterior inclusion of ``z_i ~ Bernoulli(0.3)``, ``y_i ~ Normal(2 z_i, 1)``."""
    log_on = np.log(0.3) + stats.norm.logpdf(y, 2.0, 1.0)
    log_off = np.log(0.7) + stats.norm.logpdf(y, 0.0, 1.0)
    return 1.0 / (1.0 + np.exp(log_off - log_on))


INDICATOR_DATA = np.array([0.1, 2.5, 1.0, -0.7, 1.8, 3.1, 0.4, 1.2])
