"""Full transition matrices of the core's kernels on an enumerable target."""

from __future__ import annotations

import numpy as np

import discrete_kernels as dk


def _log_q_dlp(target, x, local, y, step_size, balance):
    total = 0.0
    for d, xl, loc, t, yl in zip(target.domains, x, local, target.is_table, y):
        logits = dk.dlp_leaf_logits(d, xl, loc, t, step_size, balance)
        total += float(dk.dlp_leaf_log_prob(d, xl, yl, logits))
    return total


def _log_q_gwg(target, x, local, y, balance):
    changed = sum(int((a != b).sum()) for a, b in zip(x, y))
    if changed != 1:
        return -np.inf
    logits = [
        dk.gwg_move_logits(d, xl, loc, t, balance)
        for d, xl, loc, t in zip(target.domains, x, local, target.is_table)
    ]
    return float(dk.gwg_log_prob(target.domains, x, y, logits))


def _same(value):
    return value


def transition_matrix(
    target, kernel: str, step_size: float = 0.5, balance: float = 0.5, convert=_same
):
    """``P[a, b]`` for kernel in {"dmala", "dula", "gwg"}; also returns the proposal matrix.

    ``convert`` maps every array (states, locals, log densities) to the backend under test
    (identity: numpy; ``torch.as_tensor``: the torch path of the same core functions).
    """
    states = [tuple(convert(np.asarray(a)) for a in s) for s in target.states()]
    n = len(states)
    cache = [target.local_fn(s) for s in target.states()]
    cache = [
        (convert(np.float64(f)), tuple(convert(np.asarray(loc)) for loc in local))
        for f, local in cache
    ]
    log_q = np.full((n, n), -np.inf)
    for a, x in enumerate(states):
        for b, y in enumerate(states):
            if kernel == "gwg":
                log_q[a, b] = _log_q_gwg(target, x, cache[a][1], y, balance)
            else:
                log_q[a, b] = _log_q_dlp(target, x, cache[a][1], y, step_size, balance)
    proposal = np.exp(log_q)
    if kernel == "dula":
        return proposal, proposal
    f = [c[0] for c in cache]
    p = np.zeros((n, n))
    for a in range(n):
        for b in range(n):
            if a == b or proposal[a, b] == 0.0:
                continue
            log_ratio = dk.mh_log_ratio(
                f[a], f[b], convert(np.float64(log_q[a, b])), convert(np.float64(log_q[b, a]))
            )
            p[a, b] = proposal[a, b] * float(dk.accept_probability(log_ratio))
        p[a, a] = 1.0 - p[a].sum()
    return p, proposal


def stationary(p: np.ndarray) -> np.ndarray:
    values, vectors = np.linalg.eig(p.T)
    v = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
    return v / v.sum()
