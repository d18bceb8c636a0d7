"""The samplers draw from the distributions whose log-probabilities the MH ratio uses."""

import numpy as np
import pytest

import discrete_kernels as dk

from .targets import ALL_TARGETS

TARGETS = [make() for make in ALL_TARGETS]
IDS = [t.name for t in TARGETS]
NUM_DRAWS = 20000


def _frequency_check(counts: dict, probs: dict, num_draws: int) -> None:
    """Every outcome's frequency within 5 binomial standard errors of its probability."""
    for key, p in probs.items():
        freq = counts.get(key, 0) / num_draws
        se = np.sqrt(max(p * (1 - p), 1e-12) / num_draws)
        assert abs(freq - p) < 5 * se + 1e-9, (key, freq, p)
    assert set(counts) <= {k for k, p in probs.items() if p > 0}


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_dlp_sampler_matches_its_log_prob(target):
    rng = np.random.default_rng(0)
    x = target.states()[len(target.states()) // 3]
    _, local = target.local_fn(x)
    counts: dict = {}
    ys_per_leaf = []
    for d, xl, loc, t in zip(target.domains, x, local, target.is_table):
        logits = dk.dlp.dlp_leaf_logits(d, xl, loc, t, 0.8)
        shape = dk.dlp.dlp_noise_shapes([d], [xl.shape])[0]
        u = rng.uniform(size=(NUM_DRAWS,) + shape)
        ys_per_leaf.append(dk.dlp.dlp_leaf_sample(d, xl, logits, u))
    for draw in range(NUM_DRAWS):
        key = tuple(tuple(ys[draw].tolist()) for ys in ys_per_leaf)
        counts[key] = counts.get(key, 0) + 1
    probs = {}
    for y in target.states():
        log_q = sum(
            float(dk.dlp.dlp_leaf_log_prob(d, xl, yl, dk.dlp.dlp_leaf_logits(d, xl, loc, t, 0.8)))
            for d, xl, yl, loc, t in zip(target.domains, x, y, local, target.is_table)
        )
        probs[tuple(tuple(yl.tolist()) for yl in y)] = np.exp(log_q)
    _frequency_check(counts, probs, NUM_DRAWS)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_gwg_sampler_matches_its_log_prob(target):
    rng = np.random.default_rng(1)
    x = target.states()[len(target.states()) // 2]
    _, local = target.local_fn(x)
    logits = [
        dk.gwg.gwg_move_logits(d, xl, loc, t)
        for d, xl, loc, t in zip(target.domains, x, local, target.is_table)
    ]
    counts: dict = {}
    num_draws = 5000
    for u in rng.uniform(size=num_draws):
        ys, log_q = dk.gwg.gwg_sample(target.domains, x, logits, np.float64(u))
        assert np.isclose(float(log_q), float(dk.gwg.gwg_log_prob(target.domains, x, ys, logits)))
        key = tuple(tuple(yl.tolist()) for yl in ys)
        counts[key] = counts.get(key, 0) + 1
    probs = {}
    for y in target.states():
        if sum(int(np.sum(a != b)) for a, b in zip(x, y)) != 1:
            continue
        probs[tuple(tuple(yl.tolist()) for yl in y)] = np.exp(
            float(dk.gwg.gwg_log_prob(target.domains, x, y, logits))
        )
    assert np.isclose(sum(probs.values()), 1.0)
    _frequency_check(counts, probs, num_draws)


def test_nan_proposal_is_rejected_and_chain_keeps_its_state():
    target = ALL_TARGETS[0]()
    x = target.states()[3]
    f, local = target.local_fn(x)
    state = dk.ChainState(x, np.float64(f), local)

    def nan_local_fn(leaves):
        return np.float64(np.nan), tuple(np.full(loc.shape, np.nan) for loc in local)

    u = [np.zeros(s) for s in dk.dlp.dlp_noise_shapes(target.domains, target.shapes)]
    for metropolis in (True, False):
        new, info = dk.dlp.dlp_step(
            state,
            u,
            np.float64(0.0),
            local_fn=nan_local_fn,
            domains=target.domains,
            is_table=target.is_table,
            step_size=5.0,
            metropolis=metropolis,
        )
        assert not bool(info.accepted)
        assert float(info.accept_prob) == 0.0
        np.testing.assert_array_equal(new.x[0], x[0])
        assert float(new.log_density) == f
        assert float(info.hamming_distance) > 0  # a move was proposed


def _dual_averaging(accept_prob, draws, num_warmup=100):
    """The step size after ``draws`` draws of a warmup of ``num_warmup`` that each saw
    ``accept_prob``, through the step-size phase every kernel uses."""
    phase = dk.warmup.dual_averaging_phase(
        0, num_warmup, dk.warmup.StepSizeAdaptation(), lambda state, feedback: feedback.info
    )
    state = dk.dlp.StepSizeState(np.float64(1.0), None, None, np.float64(0.5))
    state = dk.warmup.start_phases([phase], state)
    for i in range(draws):
        feedback = dk.warmup.Feedback(np.float64(accept_prob), None, None, np.int32(i))
        state = dk.warmup.run_phases([phase], state, feedback, dk.PYTHON_CONTROL)
    return state


def test_dual_averaging_moves_towards_target():
    assert _dual_averaging(0.1, 50).step_size < 1.0  # acceptance too low: smaller steps
    state = _dual_averaging(0.95, 100)
    assert state.step_size > 1.0
    # frozen at the average after the last warmup draw, and unchanged after it
    assert np.isclose(state.step_size, np.exp(state.dual_averaging.log_step_size_avg))
    assert _dual_averaging(0.95, 101).step_size == state.step_size


def test_inverse_cdf_never_picks_an_impossible_category():
    from discrete_kernels._xp import categorical_from_uniform

    logits = np.array([[-np.inf, 0.0, -np.inf, 1.0, -np.inf]] * 3)
    u = np.array([0.0, 0.5, np.nextafter(1.0, 0.0)])
    index = categorical_from_uniform(logits, u)
    np.testing.assert_array_equal(index, [1, 3, 3])
    # exact frequencies on a fine grid of uniforms
    grid = (np.arange(100000) + 0.5) / 100000
    draws = categorical_from_uniform(np.broadcast_to(logits[0], (grid.size, 5)), grid)
    p1 = 1.0 / (1.0 + np.e)
    assert abs(np.mean(draws == 1) - p1) < 1e-4


@pytest.mark.parametrize("backend", ["numpy", "jax", "torch"])
def test_sigmoid_and_log_sigmoid_are_exact_at_extreme_logits(backend):
    """The binary DLP flips when ``u < sigmoid(l)`` and scores with ``log_sigmoid(l)``: both
    match float64 references to float32 rounding over the whole range, with exact 0 / 1 /
    -inf at the infinities, in every backend the core runs on."""
    from discrete_kernels._xp import log_sigmoid, sigmoid

    values = np.array(
        [-np.inf, -200.0, -88.0, -30.0, -5.0, -1e-3, 0.0, 1e-3, 5.0, 30.0, 200.0, np.inf],
        np.float32,
    )
    if backend == "jax":
        import jax.numpy as xp_module

        logits = xp_module.asarray(values)
    elif backend == "torch":
        torch = pytest.importorskip("torch")
        logits = torch.as_tensor(values)
    else:
        logits = values
    with np.errstate(over="ignore"):
        exact = 1.0 / (1.0 + np.exp(-values.astype(np.float64)))
        exact_log = -np.logaddexp(0.0, -values.astype(np.float64))
    got = np.asarray(sigmoid(logits), np.float64)
    got_log = np.asarray(log_sigmoid(logits), np.float64)
    np.testing.assert_allclose(got, exact, rtol=1e-6, atol=1e-37)  # float32 underflow
    finite = np.isfinite(exact_log)
    np.testing.assert_allclose(got_log[finite], exact_log[finite], rtol=1e-6, atol=1e-30)
    assert got_log[0] == -np.inf and got[0] == 0.0 and got[-1] == 1.0 and got_log[-1] == 0.0
