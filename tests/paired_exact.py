"""Exact answers of the paired kernels' test models (numpy only: both PPLs' tests use them).

Two-predictor Kuo-Mallick regressions, ``y ~ X (gamma * beta)``, ``gamma_j ~ Bernoulli(0.4)``,
``beta_j ~ Normal(0, 1)``:

- a Student-t likelihood with a fixed scale (the paired proposal is not exact there, so the
  MH step matters): the four subsets, each integrated over its coefficients on a grid;
- a Gaussian likelihood with ``sigma ~ HalfNormal(1)``: the four subsets, each with its
  coefficients integrated in closed form given ``sigma``, and ``sigma`` on a grid.
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.stats

SCALE, DF, INCLUSION = 0.8, 4.0, 0.4


def selection_data() -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: 30 rows, two correlated predictors, float32."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((30, 2))
    x[:, 1] = 0.5 * x[:, 0] + 0.9 * x[:, 1]
    y = x @ np.array([0.6, 0.25]) + SCALE * rng.standard_t(DF, 30)
    return np.asarray(x, np.float32), np.asarray(y, np.float32)


SUBSETS = ((0, 0), (0, 1), (1, 0), (1, 1))


def _log_prior_subset(g0: int, g1: int) -> float:
    return (g0 + g1) * np.log(INCLUSION) + (2 - g0 - g1) * np.log1p(-INCLUSION)


def _mix(log_mass: list, moments: list) -> np.ndarray:
    weight = np.exp(np.array(log_mass) - max(log_mass))
    return (weight[:, None] * np.array(moments)).sum(0) / weight.sum()


@functools.lru_cache(maxsize=4)
def exact_moments(points: int = 401) -> np.ndarray:
    """Student-t model: P(gamma_0), P(gamma_1), E[beta_0], E[beta_1], E[beta_0^2] (an
    excluded coefficient keeps its prior: mean 0, second moment 1)."""
    x, y = selection_data()
    grid = np.linspace(-2.5, 3.0, points)
    step = grid[1] - grid[0]
    b0, b1 = np.meshgrid(grid, grid, indexing="ij")
    log_prior_b = scipy.stats.norm.logpdf(b0) + scipy.stats.norm.logpdf(b1)
    log_mass, moments = [], []
    for g0, g1 in SUBSETS:
        mean = (g0 * b0)[..., None] * x[:, 0] + (g1 * b1)[..., None] * x[:, 1]
        # Student-t log density without its constant (the same in every subset)
        log_lik = -0.5 * (DF + 1) * np.log1p(((y - mean) / SCALE) ** 2 / DF).sum(-1)
        log_w = log_lik + log_prior_b
        top = log_w.max()
        w = np.exp(log_w - top) * step * step
        z = w.sum()
        log_mass.append(np.log(z) + top + _log_prior_subset(g0, g1))
        moments.append([g0, g1, (w * b0).sum() / z, (w * b1).sum() / z, (w * b0 * b0).sum() / z])
    return _mix(log_mass, moments)


def statistics(gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """The Student-t model's statistics per draw, shape (..., 5), from draws of shape
    (..., 2)."""
    gamma, beta = np.asarray(gamma, float), np.asarray(beta, float)
    return np.concatenate([gamma, beta, beta[..., :1] ** 2], -1)


@functools.lru_cache(maxsize=4)
def exact_moments_with_scale(points: int = 1500) -> np.ndarray:
    """Gaussian model with ``sigma ~ HalfNormal(1)``: P(gamma_0), P(gamma_1), E[beta_0],
    E[beta_1], E[sigma]."""
    x, y = selection_data()
    x, y = x.astype(float), y.astype(float)
    sigmas = np.linspace(1e-3, 4.0, points)
    log_prior_sigma = scipy.stats.halfnorm.logpdf(sigmas)
    log_mass, moments = [], []
    for g0, g1 in SUBSETS:
        columns = [j for j, g in enumerate((g0, g1)) if g]
        xs = x[:, columns]
        log_lik = np.empty(points)
        beta_means = np.zeros((points, 2))
        for i, sigma in enumerate(sigmas):
            cov = sigma**2 * np.eye(len(y)) + xs @ xs.T
            log_lik[i] = scipy.stats.multivariate_normal.logpdf(y, cov=cov)
            if columns:
                precision = xs.T @ xs / sigma**2 + np.eye(len(columns))
                beta_means[i, columns] = np.linalg.solve(precision, xs.T @ y / sigma**2)
        log_w = log_lik + log_prior_sigma
        top = log_w.max()
        w = np.exp(log_w - top)
        z = w.sum()
        log_mass.append(np.log(z) + top + _log_prior_subset(g0, g1))
        moments.append([g0, g1, *(w @ beta_means / z), (w * sigmas).sum() / z])
    return _mix(log_mass, moments)
