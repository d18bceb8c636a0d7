"""Data and reports for the binary Bayesian neural network examples, shared by the NumPyro and
the Pyro script (NumPy, pandas and ArviZ; no PPL): two data sets that ship with scikit-learn, so
the examples run offline, and the summaries and table both scripts print.

``load("breast_cancer")``: 569 tumours, 30 features, a binary label (classification).
``load("diabetes")``: 442 patients, 10 features, disease progression after a year
(regression). ``load("digits")``: 1,797 8x8 images of handwritten digits, 64 pixel features,
labelled odd or even (classification). ``load("synthetic")``: 12,500 rows of
``sklearn.datasets.make_classification`` (20 features, 10 of them informative, 5% of the labels
flipped; generated, not downloaded: scikit-learn bundles no real data set with 10,000 rows), for
minibatches; ``load("synthetic", rows=62_500)`` draws more rows of the same kind. Features are
standardised with the training rows' mean and standard deviation,
regression targets too (``target_scale`` converts an error back to the data's units). The rows
are split 80 / 20 into training and test sets, as in App. I.5 of Zhang et al. (2022).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

#: hidden units of the paper-width run per data set (thousands of sign weights)
PAPER_WIDTH = {"breast_cancer": 100, "diabetes": 300}
# arviz.summary's columns by name: ArviZ 0.2x and 1.x order them differently (0.2x: mean, sd,
# hdi_3%, hdi_97%, mcse_mean, mcse_sd, ess_bulk, ess_tail, r_hat; 1.x: mean, sd, eti89_lb,
# eti89_ub, ess_bulk, ess_tail, r_hat, mcse_mean, mcse_sd), so a position picks other columns
SUMMARY_COLUMNS = ["mean", "sd", "mcse_mean", "ess_bulk", "r_hat"]
STATS_COLUMNS = ["mean", "sd"]  # a sampler statistic's mean and spread


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


def load(name: str, seed: int = 0, rows: int = 12_500) -> Data:
    """Load ``name`` ("breast_cancer", "diabetes", "digits" or "synthetic"), split 80 / 20 with
    ``seed``; ``rows``: how many rows "synthetic" generates (the others ignore it)."""
    from sklearn.datasets import (
        load_breast_cancer,
        load_diabetes,
        load_digits,
        make_classification,
    )
    from sklearn.utils import Bunch

    def synthetic() -> Bunch:
        x, y = make_classification(
            n_samples=rows, n_features=20, n_informative=10, flip_y=0.05, random_state=0
        )
        return Bunch(data=x, target=y)

    loaders = {
        "breast_cancer": (load_breast_cancer, "classification"),
        "diabetes": (load_diabetes, "regression"),
        "digits": (load_digits, "classification"),
        "synthetic": (synthetic, "classification"),
    }
    if name not in loaders:
        raise ValueError(f"unknown data set {name!r}; choose one of {sorted(loaders)}")
    loader, task = loaders[name]
    raw = loader()
    x, y = raw.data.astype(np.float64), raw.target.astype(np.float64)
    if name == "digits":
        y = y % 2  # odd or even
    order = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.8 * len(y))
    train, test = order[:cut], order[cut:]
    mean, std = x[train].mean(0), x[train].std(0)
    std = np.where(std > 0, std, 1.0)  # digits: border pixels that are always blank
    x = (x - mean) / std
    scale = 1.0
    if task == "regression":
        y_mean, scale = y[train].mean(), float(y[train].std())
        y = (y - y_mean) / scale
    as32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
    return Data(name, task, as32(x[train]), as32(y[train]), as32(x[test]), as32(y[test]), scale)


SAMPLERS = ("DMALA", "DULA", "GWG", "AB", "ACS", "DiscreteGibbs")


def add_arguments(parser: argparse.ArgumentParser, seconds: float, chains: int) -> None:
    """The command line both scripts share."""
    parser.add_argument("--quick", action="store_true", help="reduced mode (the test suite's)")
    parser.add_argument(
        "--dataset", choices=["breast_cancer", "diabetes", "both"], default="breast_cancer"
    )
    parser.add_argument("--hidden", type=int, default=32, help="hidden units")
    parser.add_argument(
        "--paper-width", action="store_true", help=f"hidden units per data set {PAPER_WIDTH}"
    )
    parser.add_argument("--seconds", type=float, default=seconds, help="wall time per sampler")
    parser.add_argument("--num-chains", type=int, default=chains)
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    parser.add_argument("--write-doc", action="store_true", help="tables into docs/benchmarks.md")


def error_name(data: Data) -> str:
    return "test error rate" if data.task == "classification" else "test RMSE"


def print_summaries(results: dict) -> None:
    """ArviZ summaries: the training log-likelihood per sampler, DMALA's statistics.

    ``results[name]`` holds ``posterior`` (an ``xarray.Dataset`` with ``train_log_lik``,
    ``(chain, draw)``) and ``sample_stats`` (an ``xarray.Dataset`` or ``None``). Datasets, not
    ArviZ's InferenceData (0.2x) or DataTree (1.x): ``arviz.summary`` and ``arviz.ess`` read
    them the same way on both lines, and the columns are picked by names both lines use.
    """
    import arviz as az
    import pandas as pd

    print(
        "\nArviZ summary of the training log-likelihood per row. The weights themselves are not\n"
        "identifiable (flipping every sign into and out of a hidden unit leaves the network\n"
        "unchanged, tanh being odd), so judge mixing by functions of the network like this one."
    )
    summaries = [
        az.summary(r["posterior"], var_names=["train_log_lik"])[SUMMARY_COLUMNS].rename(
            index={"train_log_lik": name}
        )
        for name, r in results.items()
    ]
    print(pd.concat(summaries).to_string())
    if "DMALA" in results and results["DMALA"]["sample_stats"] is not None:
        print("\nArviZ summary of DMALA's sampler statistics")
        stats = ["acceptance_rate", "step_size", "hamming_distance"]
        summary = az.summary(results["DMALA"]["sample_stats"], var_names=stats, kind="stats")
        print(summary[STATS_COLUMNS].to_string())


#: samplers without an MH correction: their ESS measures a biased chain, so they are shown
#: with their bias against the exact samplers' answer, never as an ESS/s multiple
BIASED = ("DULA",)
#: an ESS/s ratio is printed only where both samplers reached this ESS
MIN_ESS = 400


def results_table(results: dict, data: Data, reference: str = "DiscreteGibbs") -> list[str]:
    """Markdown rows: seconds, steps, training log-likelihood (second half of the draws), final
    test error, R-hat and ESS of the training log-likelihood, ESS/s and its ratio to the
    ``reference`` sampler's.

    A ratio is shown only where both samplers' ESS is at least :data:`MIN_ESS` (an ESS of a
    few dozen is too noisy for a ratio). A biased sampler (:data:`BIASED`: no MH correction)
    gets no ratio: its row shows how far its mean training log-likelihood per row is from the
    exact samplers' (the median of their means), the bias an ESS does not see.

    ``results[name]`` holds ``posterior``, ``seconds``, ``steps``, ``train_ll`` (chains, draws) and
    ``error`` (the test error after each draw, in time order).
    """
    import arviz as az

    table = [
        f"| sampler | seconds | steps per chain | train log-lik per row | {error_name(data)} "
        f"| R-hat | ESS train log-lik | ESS/s | ESS/s vs {reference} |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    ess = {
        name: float(az.ess(r["posterior"], var_names=["train_log_lik"])["train_log_lik"])
        for name, r in results.items()
    }
    rhat = {
        name: float(az.rhat(r["posterior"], var_names=["train_log_lik"])["train_log_lik"])
        for name, r in results.items()
    }
    rate = {name: ess[name] / r["seconds"] for name, r in results.items()}
    later = {
        name: float(r["train_ll"][:, r["train_ll"].shape[1] // 2 :].mean())
        for name, r in results.items()
    }
    exact = [later[name] for name in results if name not in BIASED]
    exact_answer = float(np.median(exact)) if exact else float("nan")
    for name, r in results.items():
        if name in BIASED:
            versus = f"biased (no MH): {later[name] - exact_answer:+.3f} per row vs exact"
        elif name == reference:
            versus = "1x"
        elif reference not in results or rate[reference] <= 0:
            versus = "-"
        elif min(ess[name], ess[reference]) < MIN_ESS:
            versus = f"- (ESS < {MIN_ESS})"
        else:
            versus = f"{rate[name] / rate[reference]:.1f}x"
        table.append(
            f"| {name} | {r['seconds']:.1f} | {r['steps']} | {later[name]:.3f} "
            f"| {r['error'][-1]:.3f} | {rhat[name]:.2f} | {ess[name]:.0f} | {rate[name]:.1f} "
            f"| {versus} |"
        )
    return table
