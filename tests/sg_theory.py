"""The PPL-neutral side of the stochastic-gradient DULA tests (NumPyro and Pyro): the data of
a tiny regression and of four independent binary sites, the log density and gradient by hand,
and the exact stationary law of (SG-)DULA on independent sites."""

from __future__ import annotations

import numpy as np
from scipy import special, stats

# ---------------------------------------------------------------- a tiny regression

N_ROWS, BATCH, D = 12, 4, 3
_RNG = np.random.default_rng(0)
FEATURES = _RNG.normal(size=(N_ROWS, D))
TARGETS = _RNG.normal(size=N_ROWS)


def by_hand(w: np.ndarray, rows: tuple) -> tuple[float, np.ndarray]:
    """Log density and its gradient in ``w`` on ``rows``, the likelihood scaled by ``N / b``
    (the Bernoulli(1/2) prior has a constant log density and gradient 0)."""
    x, y = FEATURES[list(rows)], TARGETS[list(rows)]
    r = y - x @ w
    factor = N_ROWS / len(rows)
    f = D * np.log(0.5) + factor * np.sum(stats.norm.logpdf(r))
    return f, factor * x.T @ r


#: the kernels (by class name, with options) that refuse a subsampling plate, and a word of
#: each reason; ids for pytest.mark.parametrize
REFUSALS = [
    ("DMALA", {}, "MH ratio"),
    ("GWG", {}, "MH ratio"),
    ("AB", {}, "MH ratio"),
    ("ACS", {}, "MH ratio"),
    ("PlateGibbs", {}, "MH ratio"),
    ("DULA", {"adapt_step_size": True}, "adapt_step_size=True"),
    ("DULA", {"exact_sites": ["w"]}, "exact_sites=['w']"),
]
REFUSAL_IDS = ["DMALA", "GWG", "AB", "ACS", "PlateGibbs", "DULA-adapt", "DULA-exact_sites"]

# ---------------------------------------------------------------- independent sites

ROWS, SITES, B = 200, 4, 50
STEP = 0.15
_DATA = np.random.default_rng(1)
LOADINGS = _DATA.uniform(0.02, 0.15, size=(ROWS, SITES))
TRUTH = np.array([1, 0, 1, 1])
LABELS = (_DATA.uniform(size=(ROWS, SITES)) < special.expit(LOADINGS * (2 * TRUTH - 1))).astype(
    np.float32
)


def row_gradients(w: float) -> np.ndarray:
    """Per row and site, the gradient in ``w_j`` of the row's log likelihood at ``w_j = w``."""
    logit = LOADINGS * (2 * w - 1)
    return 2 * LOADINGS * (LABELS - special.expit(logit))  # (ROWS, SITES)


def stationary(flip01: np.ndarray, flip10: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A two-state chain per site: ``P(w = 1)`` and the lag-one autocorrelation."""
    return flip01 / (flip01 + flip10), 1.0 - flip01 - flip10


def exact_means() -> np.ndarray:
    """Posterior ``P(w_j = 1)``: the sites are independent a posteriori."""
    log_lik = [
        np.sum(stats.bernoulli.logpmf(LABELS, special.expit(LOADINGS * s)), axis=0) for s in (-1, 1)
    ]
    return special.expit(log_lik[1] - log_lik[0])


def dula_theory(batch: int | None, factor: float | None = None) -> tuple:
    """Stationary ``P(w_j = 1)`` of (SG-)DULA at :data:`STEP` and its lag-one autocorrelation.

    On independent sites each coordinate of DULA is a two-state chain: from ``w`` it flips
    with probability ``sigmoid(g(w) (1 - 2w) / 2 - 1 / (2 alpha))``. With minibatches the
    gradient at the current state comes from a minibatch drawn independently of it (the
    previous step's), so the flip probability is the average over minibatches (here over
    40 000 of them, fixed seed).
    """
    per_row = {w: row_gradients(w) for w in (0, 1)}
    if batch is None:
        grads = {w: per_row[w].sum(0)[None] for w in (0, 1)}
    else:
        rng = np.random.default_rng(2)
        rows = np.argsort(rng.uniform(size=(40_000, ROWS)), axis=1)[:, :batch]
        scale_ = ROWS / batch if factor is None else factor
        grads = {w: scale_ * per_row[w][rows].sum(1) for w in (0, 1)}
    c = 1.0 / (2 * STEP)
    flip01 = special.expit(grads[0] / 2 - c).mean(0)
    flip10 = special.expit(-grads[1] / 2 - c).mean(0)
    return stationary(flip01, flip10)


def z_scores(mean: np.ndarray, theory: tuple, draws: int) -> np.ndarray:
    """``(mean - p) / sd`` with the sd of a two-state chain's average over ``draws`` draws."""
    p, rho = theory
    sd = np.sqrt(p * (1 - p) * (1 + rho) / (1 - rho) / draws)
    return (mean - p) / sd
