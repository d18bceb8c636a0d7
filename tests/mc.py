"""Monte Carlo checks shared by the tests of every adapter (numpy arrays in, the ESS from
whichever PPL is installed: the Pyro tests run without JAX or NumPyro)."""

from __future__ import annotations

import numpy as np


def effective_sample_size(x: np.ndarray) -> np.ndarray:
    """ESS of (chains, draws, ...) per statistic, by the PPL present: NumPyro's
    ``numpyro.diagnostics.effective_sample_size`` (numpy), else Pyro's
    ``pyro.ops.stats.effective_sample_size`` (the Pyro tests run without JAX installed)."""
    x = np.asarray(x, dtype=np.float64)
    try:
        from numpyro.diagnostics import effective_sample_size as numpyro_ess
    except ImportError:
        import torch
        from pyro.ops.stats import effective_sample_size as pyro_ess

        return pyro_ess(torch.as_tensor(x), chain_dim=0, sample_dim=1).numpy()
    return np.asarray(numpyro_ess(x))


def assert_mc_close(
    samples: np.ndarray,
    expected: np.ndarray,
    num_se: float = 5.0,
    expected_se: float | np.ndarray = 0.0,
):
    """``samples`` (chains, draws, k): chain-pooled means within ``num_se`` MC standard errors.

    The standard error uses the effective sample size of each statistic, floored at 1e-3 so
    that statistics with no spread (sd 0) still need to match closely. ``expected_se`` (per
    statistic or one number): the Monte Carlo error of ``expected`` where it comes from a
    reference run, added in quadrature.
    """
    samples = np.asarray(samples, dtype=np.float64)
    mean = samples.mean(axis=(0, 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        ess = np.asarray(effective_sample_size(samples))
    ess = np.where(np.isfinite(ess), ess, 1.0)  # a constant statistic has no ESS
    sd = samples.std(axis=(0, 1))
    se = np.maximum(sd / np.sqrt(np.maximum(ess, 1.0)), 1e-3)
    se = np.sqrt(se**2 + np.asarray(expected_se, dtype=np.float64) ** 2)
    z = np.abs(mean - expected) / se
    assert np.all(z < num_se), f"max z {z.max():.2f} at {np.argmax(z)}: {mean} vs {expected}"
    return z


def broken_mh(monkeypatch) -> None:
    """An MH ratio with its forward and reverse proposal terms swapped (a sign error in the
    correction): a wrong kernel the checks must catch.

    Dropping only the reverse term, the break used in ``test_peer_models_more.py``, is too mild
    for the compositions: with exact local differences the locally balanced proposal of a
    categorical site is close to an independence proposal from ``sqrt(pi)``, and without its
    reverse term the chain is biased by less than these runs' standard errors (measured: the
    NumPyro mixture and the Pyro change point passed the check). With the terms swapped the
    kernel targets ``pi^2`` on such sites."""
    from discrete_kernels import metropolis

    original = metropolis.mh_log_ratio

    def swapped(log_x, log_y, log_q_forward, log_q_reverse):
        return original(log_x, log_y, log_q_reverse, log_q_forward)

    monkeypatch.setattr(metropolis, "mh_log_ratio", swapped)


def ising_weights(side: int) -> np.ndarray:
    """Adjacency of a ``side x side`` lattice with open boundaries, shape (d, d)."""
    d = side * side
    w = np.zeros((d, d))
    for r in range(side):
        for c in range(side):
            i = r * side + c
            if c + 1 < side:
                w[i, i + 1] = w[i + 1, i] = 1.0
            if r + 1 < side:
                w[i, i + side] = w[i + side, i] = 1.0
    return w


def mixed_model_exact(y) -> tuple[np.ndarray, float, float]:
    """Exact ``E z``, ``E mu`` and ``E mu^2`` of the mixed test model: ``z_j ~ Bernoulli(0.4)``
    (3,), ``mu ~ N(0, 1)``, ``y_k ~ N(mu + (1, -2, 1.5) . z, 1)`` (conjugate in ``mu``)."""
    import itertools

    weights = np.array([1.0, -2.0, 1.5])
    ys = np.asarray(y, dtype=np.float64)
    n = ys.shape[0]
    post = []
    for bits in itertools.product((0, 1), repeat=3):
        z = np.array(bits, dtype=float)
        shift = weights @ z
        prec = 1.0 + n
        mean = np.sum(ys - shift) / prec
        log_marg = (
            -0.5 * np.sum((ys - shift) ** 2)
            + 0.5 * mean**2 * prec
            - 0.5 * np.log(prec)
            + np.sum(z * np.log(0.4) + (1 - z) * np.log(0.6))
        )
        post.append((z, mean, 1.0 / prec, log_marg))
    lm = np.array([p[3] for p in post])
    w = np.exp(lm - lm.max())
    w /= w.sum()
    mean_z = sum(wi * p[0] for wi, p in zip(w, post))
    mean_mu = sum(wi * p[1] for wi, p in zip(w, post))
    second_mu = sum(wi * (p[2] + p[1] ** 2) for wi, p in zip(w, post))
    return mean_z, float(mean_mu), float(second_mu)


def plate_model_exact(y, weights, prior: float) -> tuple[np.ndarray, float, float]:
    """Exact ``E z``, ``E mu`` and ``E mu^2`` of the plate test model: ``mu ~ N(0, 1)``, per
    row ``z_i ~ Bernoulli(prior)`` and ``y_i ~ N(mu + w_i z_i, 1)`` (3 rows; enumerating ``z``,
    conjugate in ``mu``)."""
    import itertools

    ys, weights = np.asarray(y, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    post = []
    for z in itertools.product((0, 1), repeat=len(ys)):
        z = np.array(z, dtype=float)
        resid = ys - weights * z
        prec = 1.0 + len(ys)
        mean = resid.sum() / prec
        log_marg = (
            -0.5 * np.sum(resid**2)
            + 0.5 * mean**2 * prec
            + np.sum(z * np.log(prior) + (1 - z) * np.log(1 - prior))
        )
        post.append((z, mean, 1.0 / prec, log_marg))
    lm = np.array([p[3] for p in post])
    w = np.exp(lm - lm.max())
    w /= w.sum()
    mean_z = sum(wi * p[0] for wi, p in zip(w, post))
    mean_mu = sum(wi * p[1] for wi, p in zip(w, post))
    second_mu = sum(wi * (p[2] + p[1] ** 2) for wi, p in zip(w, post))
    return mean_z, float(mean_mu), float(second_mu)
