"""ESH dynamics: the leapfrog's order, reversibility, overflow safety, reservoir draws and
Jarzynski log Z."""

import math

import numpy as np
import pytest

import discrete_kernels as dk
from discrete_kernels.samplers import esh_dynamics as esh
from discrete_kernels.samplers.esh import ESH, ESHChain, ESHInfo, esh_adapt_init
from discrete_kernels.warmup import Feedback, run_phases


def gaussian(precision, mean):
    def value_and_grad(x):
        c = x - mean
        return -0.5 * np.einsum("...i,ij,...j->...", c, precision, c), -c @ precision

    return value_and_grad


def start_state(value_and_grad, x, u):
    f, g = value_and_grad(x)
    return esh.ESHState(x, esh.unit_vector(u), np.zeros(x.shape[:-1]), f, g)


def integrate(state, step_size, num_steps, value_and_grad):
    drift = 0.0
    h0 = esh.esh_hamiltonian(state)
    for _ in range(num_steps):
        state = esh.esh_leapfrog(state, step_size, value_and_grad)
        drift = max(drift, float(np.max(np.abs(esh.esh_hamiltonian(state) - h0))))
    return state, drift


def _correlated():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 5))
    return a @ a.T / 5 + 0.3 * np.eye(5), rng.normal(size=5)


def test_leapfrog_conserves_the_hamiltonian_to_second_order():
    precision, mean = _correlated()
    vg = gaussian(precision, mean)
    rng = np.random.default_rng(1)
    state = start_state(vg, rng.normal(size=5), rng.normal(size=5))
    drifts = [integrate(state, eps, int(round(4.0 / eps)), vg)[1] for eps in (0.1, 0.05, 0.025)]
    ratios = np.array(drifts[:-1]) / np.array(drifts[1:])
    assert drifts[0] < 0.05
    np.testing.assert_allclose(ratios, 4.0, rtol=0.2)  # halving eps quarters the drift


def test_leapfrog_is_time_reversible_to_round_off():
    precision, mean = _correlated()
    vg = gaussian(precision, mean)
    rng = np.random.default_rng(2)
    state = start_state(vg, rng.normal(size=5), rng.normal(size=5))
    forward, _ = integrate(state, 0.1, 200, vg)
    back, _ = integrate(forward._replace(u=-forward.u), 0.1, 200, vg)
    np.testing.assert_allclose(back.x, state.x, atol=1e-10)
    np.testing.assert_allclose(back.u, -state.u, atol=1e-10)
    np.testing.assert_allclose(back.r, 0.0, atol=1e-10)


def test_huge_gradients_and_the_special_cases_do_not_overflow():
    d = 3
    u = esh.unit_vector(np.array([1.0, 2.0, -0.5]))
    for scale in (1e3, 1e30, 1e300):
        new_u, dr = esh.esh_half_step(u, scale * np.array([0.3, -1.0, 0.2]), 0.05)
        assert np.all(np.isfinite(new_u)) and np.isfinite(dr)
        assert np.linalg.norm(new_u) == pytest.approx(1.0)
    # u exactly against the gradient: stays, dr = -delta
    g = np.array([0.0, 2.0, 0.0])
    new_u, dr = esh.esh_half_step(np.array([0.0, -1.0, 0.0]), g, 0.3)
    np.testing.assert_array_equal(new_u, [0.0, -1.0, 0.0])
    assert dr == pytest.approx(-0.3 * 2.0 / d)
    # zero gradient: nothing changes
    new_u, dr = esh.esh_half_step(u, np.zeros(3), 0.3)
    np.testing.assert_array_equal(new_u, u)
    assert dr == 0.0


def test_half_step_matches_the_papers_hyperbolic_form():
    rng = np.random.default_rng(3)
    for _ in range(10):
        u = esh.unit_vector(rng.normal(size=4))
        g = rng.normal(size=4)
        step = 0.7
        new_u, dr = esh.esh_half_step(u, g, step)
        e = g / np.linalg.norm(g)
        a = step * np.linalg.norm(g) / 4
        ue = u @ e
        denominator = np.cosh(a) + ue * np.sinh(a)
        expected = (u + e * (np.sinh(a) + ue * np.cosh(a) - ue)) / denominator
        np.testing.assert_allclose(new_u, expected, atol=1e-12)
        assert dr == pytest.approx(np.log(denominator))


def test_batched_chains_match_single_chains():
    precision, mean = _correlated()
    vg = gaussian(precision, mean)
    rng = np.random.default_rng(4)
    x, u = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    batch, _ = integrate(start_state(vg, x, u), 0.1, 20, vg)
    for c in range(3):
        single, _ = integrate(start_state(vg, x[c], u[c]), 0.1, 20, vg)
        np.testing.assert_allclose(batch.x[c], single.x, atol=1e-12)


def test_torch_chains_match_numpy():
    torch = pytest.importorskip("torch")  # the newest-stack CI job installs no torch
    precision, mean = _correlated()
    vg = gaussian(precision, mean)
    rng = np.random.default_rng(4)
    x, u = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    batch, _ = integrate(start_state(vg, x, u), 0.1, 20, vg)
    p, m = torch.tensor(precision), torch.tensor(mean)

    def vg_torch(x):
        c = x - m
        return -0.5 * torch.einsum("...i,ij,...j->...", c, p, c), -c @ p

    xt, ut = torch.tensor(x), torch.tensor(u)
    f, g = vg_torch(xt)
    state = esh.ESHState(xt, esh.unit_vector(ut), torch.zeros(3, dtype=xt.dtype), f, g)
    for _ in range(20):
        state = esh.esh_leapfrog(state, 0.1, vg_torch)
    np.testing.assert_allclose(state.x.numpy(), batch.x, atol=1e-10)


def test_papers_reservoir_draw_follows_the_speed_weights():
    """Over many trajectories from one start, the index drawn has law exp(r_i) / sum."""
    precision, mean = _correlated()
    vg = gaussian(precision, mean)
    rng = np.random.default_rng(5)
    x = np.tile(rng.normal(size=5), (4000, 1))
    u = np.tile(rng.normal(size=5), (4000, 1))
    start = start_state(vg, x, u)
    sample, info = esh.esh_trajectory(start, 0.2, 6, vg, rng.uniform(size=(6, 4000)), exact=False)
    # the deterministic trajectory's log speeds
    state, rs = start_state(vg, x[:1], u[:1]), []
    for _ in range(6):
        state = esh.esh_leapfrog(state, 0.2, vg)
        rs.append(float(state.r[0]))
    weights = np.exp(rs) / np.sum(np.exp(rs))
    counts = np.bincount(info.selected_step - 1, minlength=6) / 4000
    se = np.sqrt(weights * (1 - weights) / 4000)
    assert np.all(np.abs(counts - weights) < 5 * se)
    assert np.all(info.selected_step >= 1)


def test_jarzynski_log_z_of_a_gaussian_within_three_standard_errors():
    precision, mean = _correlated()
    d = 5
    vg = gaussian(precision, mean)
    exact = 0.5 * d * math.log(2 * math.pi) - 0.5 * np.linalg.slogdet(precision)[1]
    rng = np.random.default_rng(6)
    n = 20000
    # a base wider than the target (variances <= 1 / 0.3) keeps the weights light-tailed
    x0 = 2.0 * rng.normal(size=(n, d))
    base = -0.5 * np.sum(x0**2, axis=-1) / 4.0  # f_0 of N(0, 4 I)
    start = start_state(vg, x0, rng.normal(size=(n, d)))
    end, _ = integrate(start, 0.05, 60, vg)
    log_w = esh.jarzynski_log_weights(start.log_density, base, end.r)
    estimate, se = esh.log_mean_exp_with_error(log_w)
    log_z = estimate + 0.5 * d * math.log(8 * math.pi)
    assert abs(log_z - exact) < 3 * se
    assert se < 0.05  # the test has power


def _one_kernel_step(x, rng, step_size, num_steps, exact, vg):
    n, d = x.shape
    f, g = vg(x)
    start = esh.ESHState(x, esh.unit_vector(rng.normal(size=(n, d))), np.zeros(n), f, g)
    back = rng.integers(0, num_steps + 1, size=n)
    uniforms = rng.uniform(size=(num_steps, n))
    sample, info = esh.esh_trajectory(start, step_size, num_steps, vg, uniforms, back, exact)
    return sample.x, info


def _invariance_z(exact, step_size=0.6, num_steps=6):
    """One kernel step from exact draws of a correlated 2-D Gaussian: |z| of the change in
    the second moments (4 statistics) with n = 200,000."""
    cov = np.array([[1.0, 0.8], [0.8, 1.0]])
    vg = gaussian(np.linalg.inv(cov), np.zeros(2))
    rng = np.random.default_rng(7)
    n = 200_000
    x0 = rng.multivariate_normal(np.zeros(2), cov, size=n)
    x1, info = _one_kernel_step(x0, rng, step_size, num_steps, exact, vg)
    stats0 = np.stack([x0[:, 0] ** 2, x0[:, 1] ** 2, x0[:, 0] * x0[:, 1], x0[:, 0]], -1)
    stats1 = np.stack([x1[:, 0] ** 2, x1[:, 1] ** 2, x1[:, 0] * x1[:, 1], x1[:, 0]], -1)
    truth = np.array([1.0, 1.0, 0.8, 0.0])
    se = stats1.std(axis=0) / np.sqrt(n)
    return np.abs(stats1.mean(axis=0) - truth) / se, np.abs(stats0.mean(axis=0) - truth) / se


def test_exact_orbit_kernel_leaves_the_target_invariant_at_a_coarse_step():
    z, z_before = _invariance_z(exact=True)
    assert np.all(z_before < 5)
    assert np.all(z < 5), z


def test_papers_restarted_reservoir_is_detectably_biased():
    """The paper's forward-only |v| reservoir, restarted at every draw, is not invariant:
    the same check as above catches it (why the kernels default to the exact orbit)."""
    z, _ = _invariance_z(exact=False)
    assert np.max(z) > 10


@pytest.mark.parametrize("exact", [True, False])
def test_scalar_offset_path_matches_the_per_chain_path(exact):
    """One offset for all chains runs two plain loops; per-chain offsets select per step."""
    precision, mean = _correlated()
    vg = gaussian(precision, mean)
    rng = np.random.default_rng(9)
    x, u = rng.normal(size=5), rng.normal(size=5)
    uniforms = rng.uniform(size=8)
    for back in (0, 3, 8):
        single, info = esh.esh_trajectory(start_state(vg, x, u), 0.3, 8, vg, uniforms, back, exact)
        batch, info_b = esh.esh_trajectory(
            start_state(vg, x[None], u[None]),
            0.3,
            8,
            vg,
            uniforms[:, None],
            np.array([back]),
            exact,
        )
        np.testing.assert_allclose(single.x, batch.x[0], atol=1e-12)
        assert int(info.selected_step) == int(info_b.selected_step[0])


def _adapt(spec, state, drift, x, index, num_warmup):
    """The ESH adaptation after a draw of this drift that ended at ``x``."""
    feedback = Feedback(
        ESHInfo(np.float64(drift), None, None, None, np.float64(0.05)),
        None,
        ESHChain(x, None, None),
        index,
    )
    return run_phases(spec.phases(num_warmup), state, feedback, dk.PYTHON_CONTROL)


def test_adaptation_moves_the_step_size_towards_the_energy_error_target():
    # a stream of draws whose drift is a known function of the step size: xi = (eps/e0)^4
    # with xi* at eps = e0, so dual averaging must settle near e0 from either side
    spec = ESH(num_steps=20)  # the step size adapts, the orbit length stays
    target = spec.adaptation.target_energy_error
    for e0, start in ((0.5, 0.05), (0.02, 1.0)):
        state = esh_adapt_init(np.float64(start), 20, np.zeros(3))
        num_warmup = 200
        for i in range(num_warmup):
            eps = float(state.step_size)
            xi = target * (eps / e0) ** 4
            drift = math.sqrt(xi * 3 * int(state.num_steps))
            state = _adapt(spec, state, drift, np.zeros(3), np.int64(i), num_warmup)
        assert e0 / 1.5 < float(state.step_size) < e0 * 1.5, (e0, float(state.step_size))


def test_orbit_length_follows_the_spread_of_the_warmup_draws():
    spec = ESH(step_size=0.1)  # the orbit length adapts, the step size stays
    config = spec.adaptation
    rng = np.random.default_rng(0)
    num_warmup = 400
    scales = np.array([10.0, 10.0])  # sqrt(sum Var) = sqrt(200) = 14.1
    state = esh_adapt_init(np.float64(0.1), 20, np.zeros(2))
    for i in range(num_warmup):
        x = rng.normal(size=2) * scales
        state = _adapt(spec, state, 0.0, x, np.int64(i), num_warmup)
    expected = math.sqrt(200.0) / 0.1  # 141, capped at max_num_steps
    assert int(state.num_steps) == min(round(expected), config.max_num_steps)
    # a small spread: never below initial_num_steps
    spec = ESH(step_size=1.0)
    state = esh_adapt_init(np.float64(1.0), 20, np.zeros(2))
    for i in range(num_warmup):
        state = _adapt(spec, state, 0.0, rng.normal(size=2), np.int64(i), num_warmup)
    assert int(state.num_steps) == config.initial_num_steps


def _truncated(wall_value):
    """The correlated 2-D Gaussian of :func:`_invariance_z` cut at ``x_0 <= 0.5``: beyond,
    the log density is ``wall_value`` (-inf: zero density; NaN: a model that breaks there)
    and the gradient is that of the Gaussian (what autodiff of a ``where`` gives)."""
    cov = np.array([[1.0, 0.8], [0.8, 1.0]])
    inner = gaussian(np.linalg.inv(cov), np.zeros(2))

    def value_and_grad(x):
        f, g = inner(x)
        return np.where(x[..., 0] > 0.5, wall_value, f), g

    return cov, value_and_grad


@pytest.mark.parametrize("wall_value", [-np.inf, np.nan])
def test_exact_orbit_kernel_is_invariant_on_a_truncated_target(wall_value):
    """Orbit points past the wall end their leg and are never drawn: one kernel step from
    exact draws of the truncated target keeps its moments, and no draw crosses the wall."""
    cov, vg = _truncated(wall_value)
    rng = np.random.default_rng(11)
    n = 200_000
    draws = rng.multivariate_normal(np.zeros(2), cov, size=3 * n)
    x0 = draws[draws[:, 0] <= 0.5][:n]
    n = x0.shape[0]
    x1, info = _one_kernel_step(x0, rng, 0.6, 6, True, vg)
    assert np.all(x1[:, 0] <= 0.5)
    assert np.mean(info.selected_step != 0) > 0.5  # it moves
    # exact moments of the truncated target from a large independent sample
    truth = np.stack([x0[:, 0], x0[:, 1], x0[:, 0] ** 2, x0[:, 1] ** 2, x0[:, 0] * x0[:, 1]], -1)
    stats1 = np.stack([x1[:, 0], x1[:, 1], x1[:, 0] ** 2, x1[:, 1] ** 2, x1[:, 0] * x1[:, 1]], -1)
    # both are draws of the same distribution if the kernel is invariant; x1 and x0 are
    # correlated, so the se of the difference is at most that of independent samples
    se = np.sqrt(2) * stats1.std(axis=0) / np.sqrt(n)
    z = np.abs(stats1.mean(axis=0) - truth.mean(axis=0)) / se
    assert np.all(z < 5), z
    assert np.all(info.max_weight_fraction <= 1.0)


def test_papers_reservoir_never_draws_past_a_wall():
    """exact=False drew 1,731 of 2,000 points in a zero-density region (their weight exp(r)
    does not see f = -inf); now a point with a non-finite log density is never drawn."""
    _, vg = _truncated(-np.inf)
    rng = np.random.default_rng(12)
    x0 = np.column_stack([np.full(2000, 0.3), rng.normal(size=2000)])
    x1, _ = _one_kernel_step(x0, rng, 0.6, 10, False, vg)
    assert np.all(x1[:, 0] <= 0.5)
