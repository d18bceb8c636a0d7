"""The variable-selection target of the warmup-check tests, shared by both PPLs (numpy only):
data, exact inclusion probabilities, and a z-test for frequencies of 0/1 draws."""

from __future__ import annotations

import itertools

import numpy as np

from .mc import effective_sample_size

__all__ = [
    "INCLUSION",
    "NOISE_SCALE",
    "SEL_D",
    "SEL_X",
    "SEL_Y",
    "SLAB",
    "binary_z",
    "selection_exact",
]

_RNG = np.random.default_rng(0)
SEL_N, SEL_D = 40, 8
SEL_X = _RNG.normal(size=(SEL_N, SEL_D))
SEL_Y = SEL_X @ np.array([1.2, -0.8, 0.45, 0.25, 0.0, 0.0, 0.0, 0.0]) + _RNG.normal(size=SEL_N)
#: slab sd of the coefficients, prior inclusion probability, scale of the HalfCauchy noise prior
SLAB, INCLUSION, NOISE_SCALE = 2.0, 0.2, 5.0


def selection_exact() -> np.ndarray:
    """Exact inclusion probabilities of ``gamma_j ~ Bernoulli(0.2)``, ``beta_j ~ N(0, 2^2)``,
    ``sigma ~ HalfCauchy(5)``, ``y ~ N(X (gamma * beta), sigma^2 I)``: the 2^8 inclusion
    vectors enumerated, the coefficients integrated analytically
    (``y | gamma, sigma ~ N(0, sigma^2 I + 4 X_g X_g')``) and the noise scale by quadrature on
    4001 points of ``log sigma`` in [-4, 4]."""
    u = np.linspace(-4.0, 4.0, 4001)
    s2 = np.exp(2 * u)
    log_prior = np.log(2 / np.pi * NOISE_SCALE / (NOISE_SCALE**2 + s2)) + u  # d sigma = sigma du
    states = np.array(list(itertools.product([0, 1], repeat=SEL_D)))
    log_post = []
    for g in states:
        xg = SEL_X[:, g == 1]
        lam, vectors = np.linalg.eigh(SLAB**2 * xg @ xg.T)
        r2 = (vectors.T @ SEL_Y) ** 2
        total = s2[:, None] + lam[None, :]
        joint = -0.5 * (np.log(2 * np.pi * total).sum(1) + (r2 / total).sum(1)) + log_prior
        peak = joint.max()
        log_post.append(
            peak
            + np.log(np.exp(joint - peak).sum())
            + np.sum(g * np.log(INCLUSION) + (1 - g) * np.log1p(-INCLUSION))
        )
    log_post = np.array(log_post)
    p = np.exp(log_post - log_post.max())
    return (p / p.sum()) @ states


def binary_z(samples: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|z| of the frequencies of 0/1 draws (chains, draws, k) against exact probabilities.

    The standard error is ``sqrt(p (1 - p) / ESS)`` at the exact ``p`` (a frequency of
    exactly 1 against 0.995 is no error; a frozen coordinate is one); a coordinate with no
    spread (no ESS) takes the median ESS of the others, or the number of draws.
    """
    samples = np.asarray(samples, np.float64)
    mean = samples.mean(axis=(0, 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        ess = np.asarray(effective_sample_size(samples), np.float64)
    finite = ess[np.isfinite(ess)]
    fallback = float(np.median(finite)) if finite.size else float(np.prod(samples.shape[:2]))
    ess = np.where(np.isfinite(ess), ess, fallback)
    se = np.sqrt(np.maximum(exact * (1 - exact), 1e-6) / np.maximum(ess, 1.0))
    return np.abs(mean - exact) / se
