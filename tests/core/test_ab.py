"""AB samplers: exactness of AB-1st and of the quadratic proposal, the D solvers, the W fit
and the (sigma, alpha) tuner."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import discrete_kernels as dk
from discrete_kernels.samplers import ab, ab_linalg, ab_quadratic, ab_tuner

from .targets import ALL_TARGETS, binary_target, mixed_target, ordinal_target
from .transition import transition_matrix

TARGETS = [make() for make in ALL_TARGETS]
IDS = [t.name for t in TARGETS]


# ----------------------------------------------------------------------------- AB-1st


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@pytest.mark.parametrize("sigma,alpha", [(0.3, 0.6), (2.0, 0.9), (6.0, 1.0)])
def test_ab_first_order_is_exactly_stationary(target, sigma, alpha):
    p, proposal = transition_matrix(target, "dmala", step_size=sigma, balance=alpha)
    pi = target.exact_pi()
    np.testing.assert_allclose(proposal.sum(axis=1), 1.0, atol=1e-10)
    assert np.max(np.abs(pi @ p - pi)) < 1e-6


def test_ab_first_order_step_is_the_dlp_step_with_the_same_balance():
    target = ordinal_target()
    x = (np.array([0, 1, -1]),)
    f, local = target.local_fn(x)
    state = dk.ChainState(x, np.float64(f), local)
    uniforms = (np.array([0.3, 0.8, 0.55]),)
    kwargs = dict(local_fn=target.local_fn, domains=target.domains, is_table=target.is_table)
    new_ab, info_ab = dk.ab.ab_step(state, uniforms, None, 0.4, sigma=1.3, balance=0.7, **kwargs)
    new_dlp, info_dlp = dk.dlp.dlp_step(state, uniforms, 0.4, step_size=1.3, balance=0.7, **kwargs)
    np.testing.assert_array_equal(new_ab.x[0], new_dlp.x[0])
    assert info_ab.accept_prob == pytest.approx(float(info_dlp.accept_prob))


def test_balanced_exponent_limits():
    assert ab.balanced_exponent(1e-8) == pytest.approx(0.5, abs=1e-6)
    assert ab.balanced_exponent(1e8) == pytest.approx(1.0, abs=1e-6)
    assert 0.5 < ab.balanced_exponent(1.0) < 1.0


# ----------------------------------------------------------------------------- quadratic


def _flat_states(target):
    states = target.states()
    flat = np.stack([np.concatenate([leaf.ravel() for leaf in s]) for s in states])
    cache = [target.local_fn(s) for s in states]
    f = np.array([c[0] for c in cache])
    g = np.stack([np.concatenate([np.ravel(leaf) for leaf in c[1]]) for c in cache])
    return flat, f, g


def _quadratic_for(target, variant):
    """W fitted from every pair of states (the burn-in pairs of an ideal burn-in)."""
    flat, _, g = _flat_states(target)
    stats = ab_linalg.quadratic_stats_init(flat.shape[1], np.zeros(()))
    rng = np.random.default_rng(0)
    for _ in range(200):
        a, b = rng.integers(len(flat), size=2)
        stats = ab_linalg.quadratic_stats_update(
            stats, (flat[b] - flat[a]).astype(float), g[b] - g[a], 1.0
        )
    quadratic, _ = ab_linalg.fit_quadratic_proposal(stats, variant)
    return quadratic


def _kernel_for_noise(target, quadratic, sigma, alpha, auxiliary=True):
    """``xi -> (n, n)`` transition matrix of the extended-space MH step for that ``xi``
    (every row uses the same ``xi``, which is N(0, I) whatever the row)."""
    flat, f, g = _flat_states(target)
    shapes = target.shapes
    x_all = jnp.asarray(flat, dtype=jnp.int32)
    f_all, g_all = jnp.asarray(f, jnp.float32), jnp.asarray(g, jnp.float32)
    quad = ab_linalg.QuadraticProposal(
        jnp.asarray(quadratic.root, jnp.float32), jnp.asarray(quadratic.diag, jnp.float32)
    )

    def leaves(v):
        return ab_linalg.split_flat(v, shapes)

    def log_q(x, gx, y, root_noise):
        logits = ab_quadratic.ab_quadratic_logits(
            target.domains, leaves(x), leaves(gx), root_noise, quad, sigma, alpha
        )
        return sum(
            dk.dlp.dlp_leaf_log_prob(d, xl, yl, lg)
            for d, xl, yl, lg in zip(target.domains, leaves(x), leaves(y), logits)
        )

    def entry(a, b, xi):
        x, y = x_all[a], x_all[b]
        log_q_forward = log_q(x, g_all[a], y, quad.root @ xi)
        xi_reverse = ab_quadratic.ab_reverse_noise(xi, leaves(x), leaves(y), quad, alpha)
        log_q_reverse = log_q(y, g_all[b], x, quad.root @ xi_reverse)
        log_ratio = f_all[b] - f_all[a] + log_q_reverse - log_q_forward
        if auxiliary:
            log_ratio = log_ratio + 0.5 * xi @ xi - 0.5 * xi_reverse @ xi_reverse
        return jnp.exp(log_q_forward) * jnp.minimum(1.0, jnp.exp(log_ratio))

    n = len(flat)
    index = jnp.arange(n)

    def matrix(xi):
        k = jax.vmap(lambda a: jax.vmap(lambda b: entry(a, b, xi))(index))(index)
        k = k * (1.0 - jnp.eye(n))
        return k + jnp.diag(1.0 - k.sum(axis=1))

    return jax.jit(jax.vmap(matrix))


def _stationarity_z(target, quadratic, sigma, alpha, auxiliary=True, num=4000):
    """Largest |z| of ``mean_xi(pi K_xi) - pi`` over states, with ``K_xi`` the transition
    matrix for auxiliary noise ``xi``: the exact kernel averages ``K_xi`` over ``xi``."""
    pi = target.exact_pi()
    kernel = _kernel_for_noise(target, quadratic, sigma, alpha, auxiliary)
    dim = quadratic.diag.shape[0]
    rng = np.random.default_rng(11)
    rows = []
    for _ in range(num // 500):
        xis = jnp.asarray(rng.normal(size=(500, dim)), jnp.float32)
        rows.append(np.einsum("a,mab->mb", pi, np.asarray(kernel(xis), np.float64)))
    values = np.concatenate(rows) - pi
    mean = values.mean(axis=0)
    se = values.std(axis=0, ddof=1) / np.sqrt(len(values))
    return np.max(np.abs(mean) / np.maximum(se, 1e-7)), np.max(np.abs(mean))


QUADRATIC_CASES = [
    (binary_target, "trace", 2.0, 0.8),
    (binary_target, "shift", 0.7, 0.6),
    (ordinal_target, "max", 1.5, 0.9),
    (ordinal_target, "trace", 4.0, 1.0),
    (mixed_target, "shift", 1.0, 0.7),
]


@pytest.mark.parametrize(
    "make,variant,sigma,alpha",
    QUADRATIC_CASES,
    ids=[f"{m.__name__}-{v}" for m, v, *_ in QUADRATIC_CASES],
)
def test_quadratic_ab_is_stationary_up_to_the_monte_carlo_error(make, variant, sigma, alpha):
    target = make()
    quadratic = _quadratic_for(target, variant)
    z, _ = _stationarity_z(target, quadratic, sigma, alpha)
    # 5 standard errors over <= 64 states: a false alarm has probability < 1e-4
    assert z < 5.0


def test_the_stationarity_check_detects_a_missing_auxiliary_term():
    """Power of the test above: dropping |xi|^2/2 - |xi'|^2/2 from log A is caught."""
    target = binary_target()
    quadratic = _quadratic_for(target, "trace")
    z, bias = _stationarity_z(target, quadratic, 2.0, 0.8, auxiliary=False)
    assert z > 10.0 and bias > 1e-3


def test_quadratic_step_uses_the_log_densities_of_the_check():
    target = binary_target()
    quadratic = _quadratic_for(target, "trace")
    x = (np.array([1, 0, 0, 1]),)
    f, local = target.local_fn(x)
    state = dk.ChainState(x, np.float64(f), local)
    xi = np.array([0.3, -1.2, 0.5, 0.9])
    proposal, log_q_forward, log_q_reverse = ab_quadratic.ab_quadratic_propose(
        state,
        (np.array([0.1, 0.9, 0.2, 0.6]),),
        xi,
        local_fn=target.local_fn,
        domains=target.domains,
        quadratic=quadratic,
        sigma=2.0,
        balance=0.8,
    )
    logits = ab_quadratic.ab_quadratic_logits(
        target.domains, x, local, quadratic.root @ xi, quadratic, 2.0, 0.8
    )
    expected = float(dk.dlp.dlp_leaf_log_prob(target.domains[0], x[0], proposal.x[0], logits[0]))
    assert float(log_q_forward) == pytest.approx(expected - 0.5 * xi @ xi)
    xi_r = ab_quadratic.ab_reverse_noise(xi, x, proposal.x, quadratic, 0.8)
    logits_r = ab_quadratic.ab_quadratic_logits(
        target.domains, proposal.x, proposal.local, quadratic.root @ xi_r, quadratic, 2.0, 0.8
    )
    expected_r = float(
        dk.dlp.dlp_leaf_log_prob(target.domains[0], proposal.x[0], x[0], logits_r[0])
    )
    assert float(log_q_reverse) == pytest.approx(expected_r - 0.5 * xi_r @ xi_r)


def test_quadratic_with_zero_coupling_is_ab_first_order():
    """W = D = 0 makes the auxiliary variable irrelevant: the proposal is AB-1st."""
    target = ordinal_target()
    x = (np.array([0, 1, -1]),)
    f, local = target.local_fn(x)
    zero = ab_linalg.QuadraticProposal(np.zeros((3, 3)), np.zeros(3))
    logits = ab_quadratic.ab_quadratic_logits(target.domains, x, local, np.zeros(3), zero, 1.3, 0.7)
    first = dk.dlp.dlp_leaf_logits(target.domains[0], x[0], local[0], False, 1.3, 0.7)
    np.testing.assert_allclose(logits[0], first)


# ----------------------------------------------------------------------------- W and D


def test_fit_coupling_recovers_the_coupling_of_a_quadratic_target():
    rng = np.random.default_rng(4)
    d = 6
    j = rng.normal(size=(d, d))
    j = (j + j.T) / 2
    stats = ab_linalg.quadratic_stats_init(d, np.zeros(()))
    for _ in range(100):
        dx = rng.integers(-2, 3, size=d).astype(float)
        stats = ab_linalg.quadratic_stats_update(stats, dx, j @ dx)
    np.testing.assert_allclose(ab_linalg.fit_coupling(stats), j, atol=1e-4)


def _heterogeneous_w(d=12, seed=5):
    rng = np.random.default_rng(seed)
    scales = np.exp(rng.uniform(-2, 2, size=d))
    a = rng.normal(size=(d, d)) / np.sqrt(d)
    w = -np.diag(scales) + 0.5 * np.sqrt(np.outer(scales, scales)) * (a + a.T)
    return w


@pytest.mark.parametrize("seed", [5, 6])
def test_diagonal_solvers_make_w_plus_d_psd(seed):
    w = _heterogeneous_w(seed=seed)
    scale = np.abs(np.linalg.eigvalsh(w)).max()
    for solver in (
        ab_linalg.diagonal_shift,
        ab_linalg.diagonal_min_trace,
        ab_linalg.diagonal_min_max_eigenvalue,
    ):
        diag = solver(w)
        assert np.all(diag >= 0)
        assert np.linalg.eigvalsh(w + np.diag(diag))[0] >= -1e-9 * scale


@pytest.mark.parametrize("seed", [5, 6])
def test_min_trace_is_near_optimal_and_below_the_shift(seed):
    w = _heterogeneous_w(seed=seed)
    trace = ab_linalg.diagonal_min_trace(w).sum()
    assert trace < 0.8 * ab_linalg.diagonal_shift(w).sum()
    # weak duality: -<W, V V^T> for the dual point bounds the optimum from below
    v = ab_linalg.min_trace_dual(w)
    lower = -np.sum(w * (v @ v.T))
    assert lower <= trace + 1e-9
    assert trace <= 1.05 * lower


def test_min_trace_on_the_papers_diagonal_example():
    """W = diag(-100, -1, ..., -1): the shift pays 100 per coordinate, the trace 100 + d - 1."""
    w = -np.diag([100.0] + [1.0] * 9)
    np.testing.assert_allclose(ab_linalg.diagonal_shift(w), 100.0)
    np.testing.assert_allclose(ab_linalg.diagonal_min_trace(w), -np.diag(w), rtol=1e-6, atol=1e-6)


def test_min_max_eigenvalue_does_not_exceed_the_shift():
    w = _heterogeneous_w()
    top = lambda diag: np.linalg.eigvalsh(w + np.diag(diag))[-1]  # noqa: E731
    assert top(ab_linalg.diagonal_min_max_eigenvalue(w)) <= top(ab_linalg.diagonal_shift(w)) + 1e-9


def test_solvers_agree_under_jit_with_fori_loop():
    w = jnp.asarray(_heterogeneous_w(), jnp.float32)
    loop = lambda n, body, carry: jax.lax.fori_loop(0, n, lambda i, c: body(c), carry)  # noqa: E731
    jitted = jax.jit(lambda m: ab_linalg.diagonal_min_trace(m, loop=loop))(w)
    plain = ab_linalg.diagonal_min_trace(np.asarray(w, np.float64))
    np.testing.assert_allclose(jitted, plain, rtol=2e-3, atol=2e-3)


# ----------------------------------------------------------------------------- tuner


def test_tuner_climbs_to_the_known_optimum_of_a_jump_surface():
    """Synthetic expected jumps peaked at sigma* = 3, alpha* = 0.8: coordinate ascent finds
    them (to within the last rate) from the paper's start (0.1, 0.5)."""
    config = ab.AB(block_size=5).config
    state = ab_tuner.ab_tuner_init(config, np.zeros(()))

    def jump(sigma, alpha):
        return 10.0 - (np.log(sigma) - np.log(3.0)) ** 2 - 4 * (alpha - 0.8) ** 2

    for _ in range(6000):
        sigma, alpha = ab_tuner.ab_tuner_parameters(state, config)
        state = ab_tuner.ab_tuner_update(state, np.asarray(jump(sigma, alpha)), config, 5)
    assert float(state.sigma) == pytest.approx(3.0, rel=0.25)
    assert float(state.balance) == pytest.approx(0.8, abs=0.1)
    assert float(state.rate) < config.rate  # it settled and shrank gamma


def test_tuner_probes_are_the_three_scalings():
    config = ab.AB(block_size=2).config
    state = ab_tuner.ab_tuner_init(config, np.zeros(()))
    seen = []
    for _ in range(6):
        seen.append(float(ab_tuner.ab_tuner_parameters(state, config)[0]))
        state = ab_tuner.ab_tuner_update(state, np.asarray(1.0), config, 2)
    np.testing.assert_allclose(seen, [0.1, 0.1, 0.12, 0.12, 0.08, 0.08])
    assert int(state.coordinate) == 1  # on to alpha
    assert float(state.sigma) == pytest.approx(0.12)  # Alg. 4: theta (1 + gamma) wins ties


def test_doubling_leaves_a_far_start_in_few_rounds_and_zero_doublings_is_the_paper():
    """Jumps increasing in sigma up to sigma* = 50: rounds needed from 0.1."""

    def rounds_to_reach(max_doublings):
        config = ab.AB(block_size=1, max_doublings=max_doublings).config
        state = ab_tuner.ab_tuner_init(config, np.zeros(()))
        for step in range(6 * 200):
            sigma, alpha = ab_tuner.ab_tuner_parameters(state, config)
            jump = -abs(np.log(sigma) - np.log(50.0)) - abs(alpha - 1.0)
            state = ab_tuner.ab_tuner_update(state, np.asarray(jump), config, 1)
            if float(state.sigma) > 25.0:
                return step // 6 + 1  # the round this step belongs to
        return None

    paper = rounds_to_reach(0)
    assert paper == 31  # log(250) / log(1.2) rounds, one factor 1.2 each
    assert rounds_to_reach(3) <= 10


def test_quadratic_proposal_is_exact_gibbs_on_a_quadratic_binary_target():
    """With W the exact Hessian of f(x) = x'Wx/2 + b'x on binary x, alpha = 1 and
    sigma = inf, the step is Gibbs on the extended space: log A = 0 for every move."""
    rng = np.random.default_rng(8)
    d = 6
    w = rng.normal(size=(d, d))
    w = (w + w.T) / 2
    b = rng.normal(size=d)

    def local_fn(leaves):
        v = leaves[0].astype(float)
        return 0.5 * v @ w @ v + b @ v, (w @ v + b,)

    domains = (dk.Binary(),)
    for variant in ("trace", "shift", "max"):
        quadratic = ab_linalg.quadratic_from_coupling(w, variant)
        x = (rng.integers(0, 2, size=d),)
        f, local = local_fn(x)
        accept = []
        for _ in range(50):
            _, info = dk.ab.ab_step(
                dk.ChainState(x, f, local),
                (rng.uniform(size=d),),
                rng.normal(size=d),
                0.5,
                local_fn=local_fn,
                domains=domains,
                is_table=(False,),
                sigma=1e12,
                balance=1.0,
                quadratic=quadratic,
            )
            accept.append(float(info.accept_prob))
        np.testing.assert_allclose(accept, 1.0, atol=1e-6)
