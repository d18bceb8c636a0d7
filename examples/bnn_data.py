"""Data for the binary Bayesian neural network examples (NumPy only, shared by the NumPyro and
the Pyro script): two data sets that ship with scikit-learn, so the examples run offline.

``load("breast_cancer")``: 569 tumours, 30 features, a binary label (classification).
``load("diabetes")``: 442 patients, 10 features, disease progression after a year
(regression). Features are standardised with the training rows' mean and standard deviation,
regression targets too (``target_scale`` converts an error back to the data's units). The rows
are split 80 / 20 into training and test sets, as in App. I.5 of Zhang et al. (2022).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: hidden units of the paper-width run per data set (thousands of sign weights)
PAPER_WIDTH = {"breast_cancer": 100, "diabetes": 300}


@dataclass(frozen=True)
class Data:
    """Training and test rows (float32) and what the targets are.

    ``x_train`` (n, D), ``y_train`` (n,), ``x_test`` (m, D), ``y_test`` (m,).
    """

    name: str
    task: str  # "classification" or "regression"
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    target_scale: float  # standard deviation of the raw regression targets (1 for labels)

    def num_weights(self, hidden: int) -> int:
        """Sign weights of the network ``D -> hidden -> 1``."""
        return self.x_train.shape[1] * hidden + hidden


def load(name: str, seed: int = 0) -> Data:
    """Load ``name`` ("breast_cancer" or "diabetes"), split 80 / 20 with ``seed``."""
    from sklearn.datasets import load_breast_cancer, load_diabetes

    loaders = {
        "breast_cancer": (load_breast_cancer, "classification"),
        "diabetes": (load_diabetes, "regression"),
    }
    if name not in loaders:
        raise ValueError(f"unknown data set {name!r}; choose one of {sorted(loaders)}")
    loader, task = loaders[name]
    raw = loader()
    x, y = raw.data.astype(np.float64), raw.target.astype(np.float64)
    order = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.8 * len(y))
    train, test = order[:cut], order[cut:]
    mean, std = x[train].mean(0), x[train].std(0)
    x = (x - mean) / std
    scale = 1.0
    if task == "regression":
        y_mean, scale = y[train].mean(), float(y[train].std())
        y = (y - y_mean) / scale
    as32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
    return Data(name, task, as32(x[train]), as32(y[train]), as32(x[test]), as32(y[test]), scale)
