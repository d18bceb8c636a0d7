"""EBM core (numpy): exact RBM quantities, maximal couplings and the UCD estimator.

Each Monte Carlo check is a z-test on a mean with a known standard error; its power is shown
on a deliberately wrong variant in the same test."""

import itertools

import numpy as np
import pytest

import discrete_kernels as dk
from discrete_kernels import ebm

RNG_PARAMS = np.random.default_rng(3)
M, N = 4, 3
PARAMS = ebm.RBMParams(
    RNG_PARAMS.normal(scale=0.8, size=(M, N)),
    RNG_PARAMS.normal(scale=0.5, size=M),
    RNG_PARAMS.normal(scale=0.5, size=N),
)


def brute_force_log_joint(params):
    """All (v, h) with ``-E(v, h)``."""
    states, values = [], []
    for v in itertools.product((0, 1), repeat=params.weights.shape[0]):
        for h in itertools.product((0, 1), repeat=params.weights.shape[1]):
            v_, h_ = np.array(v, float), np.array(h, float)
            values.append(
                v_ @ params.visible_bias + v_ @ params.weights @ h_ + h_ @ params.hidden_bias
            )
            states.append((v_, h_))
    return states, np.array(values)


def model_visible_mean(params):
    states, values = brute_force_log_joint(params)
    w = np.exp(values - values.max())
    w /= w.sum()
    return sum(wi * v for wi, (v, _) in zip(w, states))


@pytest.mark.parametrize("transpose", [False, True])
def test_log_partition_and_likelihood_equal_brute_force(transpose):
    params = PARAMS
    if transpose:  # enumerate the other layer
        params = ebm.RBMParams(PARAMS.weights.T, PARAMS.hidden_bias, PARAMS.visible_bias)
    _, values = brute_force_log_joint(params)
    log_z = np.log(np.sum(np.exp(values)))
    np.testing.assert_allclose(ebm.rbm_log_partition(params), log_z, rtol=1e-12)
    data = np.array([[1, 0, 1, 1][: params.weights.shape[0]], [0] * params.weights.shape[0]], float)
    # log p(v) = log sum_h exp(-E(v, h)) - log Z
    states, _ = brute_force_log_joint(params)
    expected = []
    for v in data:
        rows = [val for (sv, _), val in zip(states, values) if np.array_equal(sv, v)]
        expected.append(np.log(np.sum(np.exp(rows))) - log_z)
    np.testing.assert_allclose(ebm.rbm_log_likelihood(params, data), np.mean(expected), rtol=1e-12)


def _coupling_draws(log_p, log_q, num, tries, rng):
    k = log_p.shape[-1]
    return ebm.maximal_coupling(
        np.broadcast_to(log_p, (num, k)),
        np.broadcast_to(log_q, (num, k)),
        rng.uniform(size=num),
        rng.uniform(size=(tries + 1, num)),
        rng.uniform(size=(tries, num)),
    )


def test_maximal_coupling_has_the_marginals_and_meets_with_probability_one_minus_tv():
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.3, 0.15, 0.05])
    q = np.array([0.2, 0.3, 0.2, 0.3])
    num = 200_000
    x, y, info = _coupling_draws(np.log(p), np.log(q), num, 30, rng)
    assert not info.capped.any()  # 30 tries: P(cap) < 0.6^30
    for draws, probs in ((x, p), (y, q)):
        freq = np.bincount(draws, minlength=4) / num
        se = np.sqrt(probs * (1 - probs) / num)
        assert np.all(np.abs(freq - probs) < 5 * se), (freq, probs)
    meet = 1 - 0.5 * np.abs(p - q).sum()
    se = np.sqrt(meet * (1 - meet) / num)
    assert abs(np.mean(x == y) - meet) < 5 * se
    assert np.array_equal(info.met, x == y)
    # power: independent draws have the marginals but meet far less often
    independent = (x == rng.permutation(y)).mean()
    assert abs(independent - meet) > 20 * se


def rbm_kernel_visible(params, hidden):
    """p(v | h) over all 2^M visible vectors, rows in itertools order."""
    logits = ebm.rbm_visible_logits(params, hidden)
    vs = np.array(list(itertools.product((0, 1), repeat=M)), float)
    return vs, np.exp(ebm.bernoulli_log_prob(logits, vs))


def test_coupled_rbm_step_has_the_gibbs_marginals_and_maximal_meeting():
    rng = np.random.default_rng(1)
    num, tries = 100_000, 40
    xi = ebm.RBMState(np.tile([1.0, 0, 1, 0], (num, 1)), np.tile([1.0, 0, 1], (num, 1)))
    eta = ebm.RBMState(np.tile([0.0, 0, 1, 1], (num, 1)), np.tile([0.0, 1, 1], (num, 1)))
    new_xi, new_eta, info = ebm.rbm_coupled_gibbs_step(
        PARAMS,
        xi,
        eta,
        rng.uniform(size=num),
        rng.uniform(size=(num, M)),
        rng.uniform(size=(tries, num, 2)),
        rng.uniform(size=(tries, num, M)),
        rng.uniform(size=(num, N)),
    )
    assert info.capped.mean() < 1e-3
    vs, p = rbm_kernel_visible(PARAMS, xi.hidden[0])
    _, q = rbm_kernel_visible(PARAMS, eta.hidden[0])
    codes = 2 ** np.arange(M)[::-1]
    index = {int(v @ codes): i for i, v in enumerate(vs)}
    for state, probs in ((new_xi, p), (new_eta, q)):
        counts = np.bincount([index[int(c)] for c in state.visible @ codes], minlength=len(vs))
        se = np.sqrt(probs * (1 - probs) / num) + 1e-12
        assert np.all(np.abs(counts / num - probs) < 5 * se + 1e-4)
    meet = 1 - 0.5 * np.abs(p - q).sum()
    se = np.sqrt(meet * (1 - meet) / num)
    met = np.all(new_xi.visible == new_eta.visible, axis=1)
    assert abs(met.mean() - meet) < 5 * se
    # common hidden uniforms: met visibles give equal hiddens
    assert np.all(new_xi.hidden[met] == new_eta.hidden[met])
    # hidden given visible is p(h | v)
    on = new_xi.visible @ codes == int(vs[3] @ codes)
    expected_h = 1 / (1 + np.exp(-ebm.rbm_hidden_logits(PARAMS, vs[3])))
    se_h = np.sqrt(expected_h * (1 - expected_h) / on.sum())
    assert np.all(np.abs(new_xi.hidden[on].mean(axis=0) - expected_h) < 5 * se_h)


def ucd_estimates(params, start, k, rng, max_time=200, tries=10, correct=True, m=None):
    """UCD estimates of E_model[v], one per row of ``start`` (C, M), with numpy noise
    (``m``: the time-averaged estimator's last step)."""
    chains = start.shape[0]
    visible, n = params.weights.shape
    h0 = ebm.bernoulli_from_uniform(
        ebm.rbm_hidden_logits(params, start), rng.uniform(size=(chains, n))
    )
    eta = ebm.RBMState(start, h0)
    xi = ebm.rbm_gibbs_step(
        params, eta, rng.uniform(size=(chains, visible)), rng.uniform(size=(chains, n))
    )
    last = ebm.ucd_horizon(k, m)
    total = np.zeros((chains, visible))
    if k == 0:
        total += ebm.ucd_weights(0, k, np.zeros(chains, bool), m)[0][:, None] * start
    met = np.all(xi.visible == eta.visible, 1) & np.all(xi.hidden == eta.hidden, 1)
    t = 1
    while True:
        w_xi, w_eta = ebm.ucd_weights(t, k, met, m)
        if not correct:  # the average of the chain ahead alone (CD-k for m = k)
            w_xi = np.full(chains, float(k <= t <= last) / (last - k + 1))
            w_eta = np.zeros(chains)
        total += w_xi[:, None] * xi.visible - w_eta[:, None] * eta.visible
        if (t >= last and met.all()) or t >= max_time:
            break
        t += 1
        xi, eta, _ = ebm.rbm_coupled_gibbs_step(
            params,
            xi,
            eta,
            rng.uniform(size=chains),
            rng.uniform(size=(chains, visible)),
            rng.uniform(size=(tries, chains, 2)),
            rng.uniform(size=(tries, chains, visible)),
            rng.uniform(size=(chains, n)),
        )
        met = met | (np.all(xi.visible == eta.visible, 1) & np.all(xi.hidden == eta.hidden, 1))
    assert met.all()
    return total


@pytest.mark.parametrize("k, m", [(0, None), (1, None), (3, None), (0, 2), (1, 4)])
def test_ucd_estimator_is_unbiased_for_the_model_expectation(k, m):
    """Started at a data point far from the model, the UCD estimates of E_model[v] (the
    time-averaged ones for m > k) average to the exact value; the same run without the
    correction terms (CD-k, or the average of steps k..m) is biased and fails."""
    rng = np.random.default_rng(10 + k + 7 * (m or 0))
    params = ebm.RBMParams(PARAMS.weights * 2.0, PARAMS.visible_bias, PARAMS.hidden_bias)
    exact = model_visible_mean(params)
    start = np.tile([0.0, 1, 0, 1], (12_000, 1))
    estimates = ucd_estimates(params, start, k, rng, m=m)
    z = (estimates.mean(0) - exact) / (estimates.std(0) / np.sqrt(len(estimates)))
    assert np.all(np.abs(z) < 5), z
    k_biased = max(k, 1) if m is None else k
    rng_biased = np.random.default_rng(99)
    biased = ucd_estimates(params, start, k_biased, rng_biased, correct=False, m=m)
    z_biased = (biased.mean(0) - exact) / (biased.std(0) / np.sqrt(len(biased)))
    assert np.max(np.abs(z_biased)) > 8, z_biased


def test_ucd_weights():
    met = np.array([False, True])
    w_xi, w_eta = ebm.ucd_weights(1, 1, met)  # f(xi_k) for every chain, no correction yet
    np.testing.assert_array_equal(w_xi, [1, 1])
    np.testing.assert_array_equal(w_eta, [0, 0])
    w_xi, w_eta = ebm.ucd_weights(2, 1, met)
    np.testing.assert_array_equal(w_xi, [1, 0])
    np.testing.assert_array_equal(w_eta, [1, 0])


def test_time_averaged_ucd_weights():
    """k = 1, m = 3: f(xi_t) averaged over t = 1..3 (1/3 each), the corrections ramped by
    min(1, (t - 1) / 3) while the pair is apart, nothing after m once met."""
    apart, met = np.array([False]), np.array([True])
    expected = {1: (1 / 3, 0), 2: (1 / 3 + 1 / 3, 1 / 3), 3: (1 / 3 + 2 / 3, 2 / 3), 4: (1, 1)}
    expected |= {5: (1, 1)}
    for t, (w_xi, w_eta) in expected.items():
        got = ebm.ucd_weights(t, 1, apart, 3)
        np.testing.assert_allclose([got[0][0], got[1][0]], [w_xi, w_eta], rtol=1e-6)
    for t in (2, 3):  # met: the average part only
        got = ebm.ucd_weights(t, 1, met, 3)
        np.testing.assert_allclose([got[0][0], got[1][0]], [1 / 3, 0], rtol=1e-6)
    for t in (0, 4):
        assert ebm.ucd_weights(t, 1, met, 3)[0][0] == 0
    assert ebm.ucd_horizon(1, None) == 1 and ebm.ucd_horizon(1, 3) == 3


# ------------------------------------------------------------------------------------------
# coupled DLP chains (UCD with gradient proposals)


def _coupled_dmala_draws(target, x, y, num, step_size, seed, break_it=False):
    """``num`` coupled DMALA steps from the fixed pair (x, y) on common noise, numpy."""
    spec = dk.dlp.DMALA(step_size=step_size, adapt_step_size=False)
    sites = dk.Sites(("x",), target.domains, target.is_table)
    params = spec.parameters(spec.adapt_init(np.float64(0.0), 0, sites, 4, dk.PYTHON_CONTROL))
    chain = lambda s: dk.ChainState((s,), *target.local_fn((s,)))  # noqa: E731
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(num):
        noise = dk.StepNoise((rng.uniform(size=x.shape),), rng.uniform())
        if break_it:  # the same uniforms without the mirroring: still valid, rarely meets
            a, _ = spec.step(chain(x), noise, params, None, sites, target.local_fn)
            b, _ = spec.step(chain(y), noise, params, None, sites, target.local_fn)
        else:
            a, b, _, _ = spec.coupled_step(
                chain(x), chain(y), noise, params, None, sites, target.local_fn
            )
        out.append((a.x[0], b.x[0]))
    return out


def test_coupled_dmala_chains_have_the_dmala_marginals_and_stay_together():
    from .targets import binary_target
    from .transition import transition_matrix

    target = binary_target()
    states = [s[0] for s in target.states()]
    codes = 2 ** np.arange(4)[::-1]
    p, _ = transition_matrix(target, "dmala", step_size=1.5)
    x, y = states[3], states[12]
    num = 6000
    draws = _coupled_dmala_draws(target, x, y, num, 1.5, seed=0)
    for which, start in ((0, x), (1, y)):
        counts = np.bincount([int(d[which] @ codes) for d in draws], minlength=16) / num
        row = p[int(start @ codes)]
        se = np.sqrt(row * (1 - row) / num) + 1e-12
        assert np.all(np.abs(counts - row) < 5 * se + 1e-4), (which, counts, row)
    met = np.mean([np.array_equal(a, b) for a, b in draws])
    # the mirrored uniforms couple each coordinate maximally: without them the pair
    # (same uniforms on the flip events) meets far less often
    unmirrored = _coupled_dmala_draws(target, x, y, 1500, 1.5, seed=1, break_it=True)
    met_plain = np.mean([np.array_equal(a, b) for a, b in unmirrored])
    assert met > 0.05 and met > 3 * met_plain, (met, met_plain)
    together = _coupled_dmala_draws(target, x, x, 300, 1.5, seed=2)
    assert all(np.array_equal(a, b) for a, b in together)


def site_gibbs_transition(log_density, dim, update=ebm.site_gibbs_update, grid=4000):
    """Transition matrix (2^dim, 2^dim) of one random-scan single-site step, integrating the
    uniform over a midpoint grid (exact to about 1/grid)."""
    states = np.array(list(itertools.product((0.0, 1.0), repeat=dim)))
    index_of = {tuple(s): k for k, s in enumerate(states)}
    u = (np.arange(grid) + 0.5) / grid
    t = np.zeros((len(states), len(states)))
    for a, x in enumerate(states):
        for i in range(dim):
            xs = np.repeat(x[None], grid, axis=0)
            idx = np.full(grid, i)
            f0 = log_density(ebm.with_coordinate(xs, idx, 0.0))
            f1 = log_density(ebm.with_coordinate(xs, idx, 1.0))
            new = update(xs, idx, f0, f1, u)
            for row in new:
                t[a, index_of[tuple(row)]] += 1.0 / (grid * dim)
    return states, t


def test_site_gibbs_update_leaves_the_target_invariant():
    rng = np.random.default_rng(5)
    dim = 3
    coupling = rng.normal(scale=1.0, size=(dim, dim))
    coupling = (coupling + coupling.T) / 2
    field = rng.normal(size=dim)

    def log_density(x):
        return np.einsum("...i,ij,...j->...", x, coupling, x) + x @ field

    states, t = site_gibbs_transition(log_density, dim)
    pi = np.exp(log_density(states))
    pi /= pi.sum()
    np.testing.assert_allclose(pi @ t, pi, atol=2e-3)
    np.testing.assert_allclose(t.sum(1), 1.0, atol=1e-9)

    def swapped(x, index, f0, f1, u):  # a sign error: targets pi^-1 per coordinate
        return ebm.site_gibbs_update(x, index, f1, f0, u)

    _, t_broken = site_gibbs_transition(log_density, dim, update=swapped)
    assert np.abs(pi @ t_broken - pi).max() > 0.05


def test_ucd_compaction_keeps_the_pairs_still_apart_first():
    assert ebm.ucd_compaction_capacities(1000) == (1000, 125, 15)
    assert ebm.ucd_compaction_capacities(20) == (20,)
    met = np.array([True, False, True, False, False, True])
    order = ebm.ucd_compaction_order(met, 4)
    np.testing.assert_array_equal(order[:3], [1, 3, 4])  # apart, in their order
    assert met[order[3]]  # then met rows as padding


def test_energy_colouring_from_the_probe_tables():
    """The trainers' PlateGibbs colouring of an energy: a chain's even/odd colours, one colour
    per coordinate for a dense quadratic energy, refusals past MAX_COLOURS and of a given
    colouring that puts neighbours together."""
    from discrete_kernels.ebm import plate

    rng = np.random.default_rng(0)

    def log_densities(couplings, dim):
        x = (rng.uniform(size=dim) < 0.5).astype(np.int64)
        batch = plate.interaction_probe_batch(x).astype(np.float64)
        s = 2 * batch - 1
        return np.einsum("bi,ij,bj->b", s, couplings, s) / 2

    dim = 6
    chain = np.diag(rng.normal(size=dim - 1), 1)
    chain = chain + chain.T
    eps = float(np.finfo(np.float64).eps)
    colours = plate.energy_colouring([log_densities(chain, dim)], eps)
    np.testing.assert_array_equal(colours, [0, 1, 0, 1, 0, 1])
    dense = rng.normal(size=(dim, dim))
    dense = dense + dense.T
    np.testing.assert_array_equal(
        plate.energy_colouring([log_densities(dense, dim)], eps), range(6)
    )
    # the union over parameter points: a chain at one point, dense at the other
    both = [log_densities(chain, dim), log_densities(dense, dim)]
    np.testing.assert_array_equal(plate.energy_colouring(both, eps), range(6))
    with pytest.raises(ValueError, match="not a valid colouring: coordinates 0 and 1 share"):
        plate.energy_colouring([log_densities(chain, dim)], eps, given=[0, 0, 1, 1, 0, 0])
    wide = rng.normal(size=(17, 17))
    with pytest.raises(ValueError, match="17 coordinates need 17 colours"):
        plate.energy_colouring([log_densities(wide + wide.T, 17)], eps)
    with pytest.raises(ValueError, match="blocks names \\['y'\\]"):
        plate.given_blocks("PlateGibbs", {"y": colours})
