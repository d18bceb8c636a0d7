"""Full transition matrices of the core's kernels on an enumerable target."""

from __future__ import annotations

import numpy as np

import discrete_kernels as dk


def _log_q_dlp(target, x, local, y, step_size, balance):
    total = 0.0
    for d, xl, loc, t, yl in zip(target.domains, x, local, target.is_table, y):
        logits = dk.dlp.dlp_leaf_logits(d, xl, loc, t, step_size, balance)
        total += float(dk.dlp.dlp_leaf_log_prob(d, xl, yl, logits))
    return total


def _log_q_gwg(target, x, local, y, balance):
    changed = sum(int((a != b).sum()) for a, b in zip(x, y))
    if changed != 1:
        return -np.inf
    logits = [
        dk.gwg.gwg_move_logits(d, xl, loc, t, balance)
        for d, xl, loc, t in zip(target.domains, x, local, target.is_table)
    ]
    return float(dk.gwg.gwg_log_prob(target.domains, x, y, logits))


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
            log_ratio = dk.metropolis.mh_log_ratio(
                f[a], f[b], convert(np.float64(log_q[a, b])), convert(np.float64(log_q[b, a]))
            )
            p[a, b] = proposal[a, b] * float(dk.metropolis.accept_probability(log_ratio))
        p[a, a] = 1.0 - p[a].sum()
    return p, proposal


def stationary(p: np.ndarray) -> np.ndarray:
    values, vectors = np.linalg.eig(p.T)
    v = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
    return v / v.sum()


def spec_transition_matrix(spec, states, local_fn, params, sites):
    """``P[a, b]`` of a sampler spec on enumerable ``states`` (tuples of leaves of one
    backend), from its proposal (``spec.log_proposal``) and the MH rule of the core, at fixed
    ``params``; also the proposal matrix. Works for any spec whose proposal has a density on
    the states (the DLP family, GWG, AB-1st) and any PPL's ``local_fn``."""
    chains = [spec.init(s, local_fn) for s in states]
    n = len(states)
    log_q = np.full((n, n), -np.inf)
    for a, chain in enumerate(chains):
        for b, y in enumerate(states):
            log_q[a, b] = float(spec.log_proposal(chain, y, params, sites))
    proposal = np.exp(log_q)
    p = np.zeros((n, n))
    f = [np.float64(float(c.log_density)) for c in chains]
    for a in range(n):
        for b in range(n):
            if a == b or proposal[a, b] == 0.0:
                continue
            log_ratio = dk.metropolis.mh_log_ratio(
                f[a], f[b], np.float64(log_q[a, b]), np.float64(log_q[b, a])
            )
            accept = (
                float(dk.metropolis.accept_probability(log_ratio)) if params.metropolis else 1.0
            )
            p[a, b] = proposal[a, b] * accept
        p[a, a] = 1.0 - p[a].sum()
    return p, proposal


def draw_numpy_noise(shapes, rng):
    """One step's noise in a spec's shapes, numpy float64 (the adapters' role in the core
    tests)."""
    uniforms = tuple(rng.uniform(size=s) for s in shapes.uniforms)
    normals = rng.standard_normal(shapes.num_normals) if shapes.num_normals else None
    permutation = rng.permutation(shapes.permutation) if shapes.permutation else None
    return dk.StepNoise(uniforms, np.float64(rng.uniform()), normals, permutation)


def empirical_transitions(spec, states, local_fn, params, adapt, sites, num, seed, step=None):
    """Counts ``C[a, b]`` of ``num`` steps of ``spec.step`` from each state ``a`` (the step
    itself, not its declared proposal); ``step(chain, noise)`` replaces it (a jitted one)."""
    if step is None:

        def step(chain, noise):
            return spec.step(chain, noise, params, adapt, sites, local_fn)

    rng = np.random.default_rng(seed)
    index = {
        tuple(np.concatenate([np.ravel(v) for v in s]).tolist()): i for i, s in enumerate(states)
    }
    counts = np.zeros((len(states), len(states)))
    for a, state in enumerate(states):
        chain = spec.init(state, local_fn)
        shapes = spec.noise_shapes(sites, [np.shape(v) for v in state])
        for _ in range(num):
            new, _ = step(chain, draw_numpy_noise(shapes, rng))
            key = tuple(np.concatenate([np.ravel(np.asarray(v)) for v in new.x]).tolist())
            counts[a, index[key]] += 1
    return counts


def assert_rows_match(counts, p, min_p_value=1e-4):
    """Each row of counts is a multinomial draw from the row of ``p`` (chi-square test, cells
    of small expectation pooled)."""
    from scipy import stats

    for a in range(p.shape[0]):
        n = counts[a].sum()
        expected = p[a] * n
        big = expected >= 5
        observed = np.append(counts[a][big], counts[a][~big].sum())
        wanted = np.append(expected[big], expected[~big].sum())
        keep = wanted > 0
        assert np.all(counts[a][p[a] == 0] == 0), f"row {a}: a move of probability zero"
        if keep.sum() < 2:
            continue
        p_value = stats.chisquare(observed[keep], wanted[keep]).pvalue
        assert p_value > min_p_value, (a, p_value, counts[a], expected)


def colour_sweep_matrix(states: np.ndarray, tables: np.ndarray, colours: np.ndarray) -> np.ndarray:
    """``P = P_0 P_1 ...`` of an exact colour sweep over one leaf's enumerated states.

    ``states``: (n, N) integer values (from 0); ``tables``: (n, N, S), each state's single-site
    table as the sweep reads it on arriving there; ``colours``: (N,). ``P_c[a, b] = prod_{i
    in c} softmax(T(a))[i, b_i]`` where ``b`` equals ``a`` off colour ``c`` (0 otherwise),
    so this is the sweep's exact transition matrix.
    """
    states = np.asarray(states)
    log_p = tables - np.logaddexp.reduce(tables, axis=-1, keepdims=True)
    chosen = np.take_along_axis(log_p[:, None], states[None, :, :, None], axis=-1)[..., 0]
    p = np.eye(len(states))
    for colour in range(int(colours.max()) + 1):
        mask = colours == colour
        log_step = np.sum(np.where(mask, chosen, 0.0), axis=-1)  # (a, b)
        same_off = np.all((states[:, None] == states[None, :]) | mask, axis=-1)
        p = p @ np.where(same_off, np.exp(log_step), 0.0)
    return p
