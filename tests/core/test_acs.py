"""ACS: schedule formulas, exact stationarity at fixed (alpha, beta), and the tuner."""

import math

import array_api_compat.numpy as xnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import discrete_kernels as dk
from discrete_kernels.samplers import acs, acs_schedule, acs_tuner

from .targets import ALL_TARGETS
from .transition import transition_matrix

TARGETS = [make() for make in ALL_TARGETS]


def test_cyclical_step_size_matches_eq_8():
    s, a_max, a_min = 8, 3.0, 0.2
    for k in range(20):
        expected = max(a_max / 2 * (math.cos(math.pi * (k % s) / s) + 1), a_min)
        got = acs_schedule.cyclical_step_size(np.int64(k), s, np.float64(a_max), np.float64(a_min))
        assert np.isclose(float(got), expected)
    beta = np.linspace(0.9, 0.5, s)
    for k in range(20):
        assert float(acs_schedule.cyclical_balance(np.int64(k), beta)) == beta[k % s]


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
@pytest.mark.parametrize(("alpha", "beta"), [(3.0, 0.95), (0.8, 0.7), (0.1, 0.5)])
def test_acs_step_is_exactly_stationary_at_fixed_parameters(target, alpha, beta):
    p, _ = transition_matrix(target, "dmala", step_size=alpha, balance=beta)
    pi = target.exact_pi()
    assert np.max(np.abs(pi @ p - pi)) < 1e-6


def _quadratic(xp, dtype):
    rng = np.random.default_rng(0)
    d = 12
    w = rng.normal(scale=0.4, size=(d, d))
    w = (w + w.T) / 2
    b = rng.normal(scale=0.5, size=d)
    w, b = xp.asarray(w, dtype=dtype), xp.asarray(b, dtype=dtype)

    def local_fn(leaves):
        x = xp.astype(leaves[0], dtype)
        return xp.sum(x * (w @ x)) / 2 + xp.sum(b * x), (w @ x + b,)

    return d, local_fn


CONFIG = acs.ACS(steps_per_cycle=6, tuning={"burnin_steps": 10, "burnin_mh_steps": 10}).config


def _tune(xp, dtype, uniforms, accepts, jit=False):
    d, local_fn = _quadratic(xp, dtype)
    x0 = xp.zeros(d, dtype=xp.int32)
    f, local = local_fn((x0,))
    chain = dk.ChainState((x0,), f, local)
    tuner = acs_schedule.acs_tuner_init(CONFIG, xp.asarray(1.0, dtype=dtype))
    n = acs_schedule.tuning_steps(CONFIG)

    def step(carry, inputs):
        chain, tuner, i = carry
        u, a = inputs
        alpha, beta, metropolis = acs_tuner.acs_step_parameters(tuner, CONFIG)
        chain, info = dk.dlp.dlp_step(
            chain,
            [u],
            a,
            local_fn=local_fn,
            domains=[dk.Binary()],
            is_table=[False],
            step_size=alpha,
            balance=beta,
            metropolis=metropolis,
        )
        tuner = acs_tuner.acs_warmup_update(tuner, info.accept_prob, CONFIG, i, n)
        return (chain, tuner, i + 1), None

    if jit:
        carry, _ = jax.jit(lambda c, xs: jax.lax.scan(step, c, xs))(
            (chain, tuner, jnp.asarray(0)), (jnp.asarray(uniforms), jnp.asarray(accepts))
        )
    else:
        carry = (chain, tuner, 0)
        for u, a in zip(uniforms, accepts):
            carry, _ = step(carry, (xp.asarray(u), xp.asarray(a)))
    return carry[1]


def _as_numpy(tuner):
    return {
        name: np.asarray(getattr(tuner, name))
        for name in ("phase", "alpha_min", "alpha_max", "beta_schedule")
    }


def _namespace(backend):
    """Array namespace and float32 of ``backend``; skips where torch is not installed (the
    newest-stack CI job installs none)."""
    if backend == "torch":
        torch = pytest.importorskip("torch")
        import array_api_compat.torch as xtorch

        return xtorch, torch.float32
    return jnp, jnp.float32


@pytest.mark.parametrize("backend", ["jax", "jax-jit", "torch"])
def test_tuner_state_machine_on_a_known_target_all_backends_and_jit(backend):
    n = acs_schedule.tuning_steps(CONFIG)
    rng = np.random.default_rng(3)
    uniforms = rng.uniform(size=(n, 12)).astype(np.float32)
    accepts = rng.uniform(size=n).astype(np.float32)
    ref = _as_numpy(_tune(xnp, np.float32, uniforms, accepts))
    assert int(ref["phase"]) == 5  # done
    assert 0 < ref["alpha_min"] <= ref["alpha_max"]
    beta = ref["beta_schedule"]
    assert beta[0] == np.float32(CONFIG.beta_max)
    assert np.all(np.diff(beta) <= 0) and np.all(beta >= 0.5) and np.all(beta <= CONFIG.beta_max)
    assert beta[-1] < beta[0]  # the search did move the balance down the cycle
    xp, dtype = _namespace(backend.removesuffix("-jit"))
    got = _as_numpy(_tune(xp, dtype, uniforms, accepts, jit=backend.endswith("-jit")))
    for key in ref:
        np.testing.assert_allclose(got[key], ref[key], rtol=1e-4, err_msg=f"{backend}: {key}")


def test_short_warmup_ends_the_tuning_with_a_valid_cycle():
    n = 30  # shorter than the tuning budget
    rng = np.random.default_rng(4)
    d, local_fn = _quadratic(xnp, np.float64)
    x = np.zeros(d, dtype=np.int64)
    f, local = local_fn((x,))
    chain = dk.ChainState((x,), f, local)
    tuner = acs_schedule.acs_tuner_init(CONFIG, np.float64(1.0))
    for i in range(n):
        alpha, beta, metropolis = acs_tuner.acs_step_parameters(tuner, CONFIG)
        chain, info = dk.dlp.dlp_step(
            chain,
            [rng.uniform(size=d)],
            rng.uniform(),
            local_fn=local_fn,
            domains=[dk.Binary()],
            is_table=[False],
            step_size=alpha,
            balance=beta,
            metropolis=metropolis,
        )
        tuner = acs_tuner.acs_warmup_update(tuner, info.accept_prob, CONFIG, np.int64(i), n)
    assert int(tuner.phase) == 5
    assert tuner.alpha_min <= tuner.alpha_max
    assert np.all(np.diff(tuner.beta_schedule) <= 0)
    # after warmup the whole tuner update and the cycle's advance (what the Pyro driver runs
    # once it knows warmup has ended) give the same state, step after step
    full = advanced = tuner
    for i in range(n, n + 3 * CONFIG.steps_per_cycle):
        accept_prob = np.float64(rng.uniform())
        full = acs_tuner.acs_warmup_update(full, accept_prob, CONFIG, np.int64(i), n)
        advanced = acs_schedule.acs_cycle_advance(advanced)
        for name, a, b in zip(full._fields, full, advanced):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


def test_pcd_schedule_explores_one_iteration_per_cycle_and_exploits_the_others():
    """App. B, Alg. 6: iteration 0 of each cycle at (alpha_max, beta_max), its first step
    without MH; the others at (alpha_min, 1/2) with MH; re-tuning every 25 cycles."""
    schedule = acs.ACS(steps_per_cycle=4, beta_max=0.9).pcd_schedule()
    a_max, a_min = np.float64(3.0), np.float64(0.2)
    for iteration in range(9):
        for step in range(3):
            state = acs.ACSPCDState(None, np.int64(iteration), a_max, a_min)
            alpha, beta, mh = schedule.parameters(state, np.int64(step))
            explore = iteration % 4 == 0
            assert float(alpha) == (3.0 if explore else 0.2)
            assert float(beta) == (0.9 if explore else 0.5)
            assert bool(mh) == (not (explore and step == 0))
    retunes = [i for i in range(250) if schedule.retunes(np.int64(i))]
    assert retunes == [0, 100, 200]


def _tune_on_acceptance_curve(config, accept_of_alpha, domain_scale=0.0):
    """Drive the tuner with the acceptance a known curve gives each candidate step size."""
    tuner = acs_schedule.acs_tuner_init(config, np.float64(1.0), domain_scale=domain_scale)
    n = acs_schedule.tuning_steps(config)
    for i in range(n):
        alpha, _, _ = acs_tuner.acs_step_parameters(tuner, config)
        accept = np.float64(accept_of_alpha(float(alpha)))
        tuner = acs_tuner.acs_warmup_update(tuner, accept, config, np.int64(i), n)
    return tuner


@pytest.mark.parametrize("alpha_star", [0.01, 3.0, 300.0, 3e5])
def test_range_search_finds_the_target_step_size_far_from_its_start(alpha_star):
    # acceptance 1 / (1 + alpha / alpha_star): exactly the target 1/2 at alpha_star
    def curve(alpha):
        return 1.0 / (1.0 + alpha / alpha_star)

    config = acs.ACS(tuning={"burnin_steps": 0, "burnin_mh_steps": 0}).config
    # binary sites (the search starts at alpha_ceil = 5, limit 1e3), or for the largest target
    # an ordinal site with 1001 values (start 1000^2, limit 1e3 * 1000^2)
    scale = 1000.0**2 if alpha_star > 1e3 else 0.0
    tuner = _tune_on_acceptance_curve(config, curve, domain_scale=scale)
    for name in ("alpha_min", "alpha_max"):
        found = float(getattr(tuner, name))
        assert alpha_star / 1.5 < found < alpha_star * 1.5, (name, found)
    # Alg. 4 as written moves at most a factor 1.25 a round from alpha_floor / alpha_ceil
    paper = _tune_on_acceptance_curve(config._replace(search="paper"), curve)
    if alpha_star >= 300.0:
        assert float(paper.alpha_max) <= config.alpha_ceil
        assert float(paper.alpha_min) <= config.alpha_floor * 1.25**5


def test_range_search_breaks_ties_towards_the_target():
    # every proposal accepted (a flat target): both searches keep growing instead of
    # staying at alpha_floor (the first candidate of a tie) and alpha_ceil
    config = acs.ACS(tuning={"burnin_steps": 0, "burnin_mh_steps": 0}).config
    tuner = _tune_on_acceptance_curve(config, lambda alpha: 1.0, domain_scale=1e9)
    rounds = config.alpha_rounds
    growth = config.expansion ** (rounds * (rounds + 1) / 2)
    assert float(tuner.alpha_min) == pytest.approx(config.alpha_floor * growth, rel=1e-9)
    # alpha_max starts at the domain's scale (1e9) and grows to the limit 1e3 * 1e9
    assert float(tuner.alpha_max) == pytest.approx(1e12)
    # on binary sites both stop where larger steps no longer change the proposal
    tuner = _tune_on_acceptance_curve(config, lambda alpha: 1.0)
    limit = dk.warmup.dlp_step_size_bounds(0.0)[1]
    assert float(tuner.alpha_min) == float(tuner.alpha_max) == pytest.approx(limit)
    # nothing accepted: the alpha_max search shrinks down to the lower bound
    tuner = _tune_on_acceptance_curve(config, lambda alpha: 0.0)
    low = dk.warmup.dlp_step_size_bounds(0.0)[0]
    assert float(tuner.alpha_max) == pytest.approx(max(config.alpha_ceil / growth, low))


def test_domain_step_scale_and_the_search_start():
    assert dk.domains.domain_step_scale([dk.Binary(), dk.Categorical(5)]) == 0.0
    assert dk.domains.domain_step_scale([dk.Binary(), dk.Ordinal(451)]) == 450.0**2
    config = acs.ACS().config
    tuner = acs_schedule.acs_tuner_init(config, np.float64(1.0), domain_scale=450.0**2)
    assert float(tuner.alpha_max) == 450.0**2
    paper = acs_schedule.acs_tuner_init(
        config._replace(search="paper"), np.float64(1.0), domain_scale=1e4
    )
    assert float(paper.alpha_max) == config.alpha_ceil


def test_tuning_search_option_is_checked():
    with pytest.raises(ValueError, match=r"tuning\['search'\] must be one of"):
        acs.ACS(tuning={"search": "grid"})
    with pytest.raises(ValueError, match="expansion"):
        acs.ACS(tuning={"expansion": 0.5})
    config = acs.ACS(tuning={"search": "paper"}).config
    assert config.search == "paper"


def _tune_on_log_density(config, log_density_at, num_warmup, accept_of_alpha=None):
    """Drive the tuner through a warmup of ``num_warmup`` steps with the chain's log density
    ``log_density_at(i)`` after step ``i``; returns the final tuner and the phase before each
    step."""
    tuner = acs_schedule.acs_tuner_init(config, np.float64(1.0))
    phases = []
    for i in range(num_warmup):
        phases.append(int(tuner.phase))
        alpha, beta, _ = acs_tuner.acs_step_parameters(tuner, config)
        accept = 0.5 if accept_of_alpha is None else accept_of_alpha(float(alpha), float(beta))
        tuner = acs_tuner.acs_warmup_update(
            tuner,
            np.float64(accept),
            config,
            np.int64(i),
            num_warmup,
            log_density=np.float64(log_density_at(i)),
        )
    return tuner, np.asarray(phases)


def _first(phases, phase):
    return int(np.argmax(phases == phase))


def _searches_start(phases):
    """The first step after the burn-in (the alpha_min search is skipped by default)."""
    return int(np.argmax(phases > acs_schedule.BURNIN_MH))


NOISE = np.random.default_rng(7).normal(size=2000)  # stationary fluctuations of f, sd 1


def test_burnin_lasts_while_the_log_density_rises():
    config = acs.ACS().config  # windows of 25 steps; an MH burn-in of at least 50 steps
    searches = acs_schedule.search_steps(config)
    # flat from the start: the burn-in ends after its 50 steps (the second window, the first
    # has none before it)
    tuner, phases = _tune_on_log_density(config, lambda i: -100.0 + NOISE[i], 400)
    assert _searches_start(phases) == 50
    assert int(tuner.phase) == acs_schedule.DONE and int(tuner.restarts) == 0

    # climbing 5 nats a step until step 150: the window ending at 175 still rose against the
    # one before (a climbing window), the one ending at 200 did not
    def climb(i):
        return -1000.0 + 5.0 * min(i, 150) + NOISE[i]

    tuner, phases = _tune_on_log_density(config, climb, 400)
    assert _searches_start(phases) == 200
    assert _first(phases, acs_schedule.DONE) == 200 + searches
    assert int(tuner.restarts) == 0
    # climbing throughout: the burn-in gives way when only the searches fit in the warmup
    tuner, phases = _tune_on_log_density(config, lambda i: 5.0 * i, 300)
    assert _searches_start(phases) == 300 - searches
    assert int(tuner.phase) == acs_schedule.DONE and int(tuner.restarts) == 0
    # a frozen chain (f never changes) has not settled either
    tuner, phases = _tune_on_log_density(config, lambda i: -100.0, 300)
    assert _searches_start(phases) == 300 - searches


def test_a_climb_during_the_searches_restarts_the_tuning_where_the_warmup_has_room():
    config = acs.ACS().config
    searches = acs_schedule.search_steps(config)

    def climb_late(i):  # flat, then 10 nats a step during the searches (60-130), then flat
        return -1000.0 + 10.0 * min(max(i - 60, 0), 70) + NOISE[i]

    tuner, phases = _tune_on_log_density(config, climb_late, 600)
    end_first = 50 + searches
    assert _searches_start(phases) == 50
    assert phases[end_first] == acs_schedule.BURNIN_MH  # back to the burn-in
    assert int(tuner.restarts) == 1
    # the new burn-in ends at the first window after the climb that did not rise: the window
    # 150-175 still rose against 125-150 (which has the climb's last steps), 175-200 did not
    assert _searches_start(phases[end_first:]) + end_first == 200
    assert int(tuner.phase) == acs_schedule.DONE
    # the same climb with no room for another burn-in and the searches: the cycle stands
    tuner, phases = _tune_on_log_density(config, climb_late, end_first + 100)
    assert int(tuner.restarts) == 0
    assert _first(phases, acs_schedule.DONE) == end_first


def test_burnin_step_size_settles_at_the_target_acceptance():
    config = acs.ACS().config
    alpha_star = 0.02  # acceptance 1/2 there, far below the burn-in's start (0.5)

    def curve(alpha, beta):
        return 1.0 / (1.0 + alpha / alpha_star)

    # a climb keeps the burn-in going for 200 steps
    tuner, phases = _tune_on_log_density(config, lambda i: 5.0 * min(i, 200), 500, curve)
    assert int(tuner.phase) == acs_schedule.DONE
    assert float(tuner.burnin_alpha) == pytest.approx(alpha_star, rel=0.05)
    # alpha_min is the burn-in's averaged step size (no search of its own by default)
    assert acs_schedule.alpha_min_from_burnin(config)
    assert float(tuner.alpha_min) == pytest.approx(alpha_star, rel=0.05)
    assert acs_schedule.search_steps(config) == 25 + 35  # the alpha_max and balance searches


def test_an_alpha_max_search_ending_below_alpha_min_raises_alpha_max():
    # at beta_max only tiny steps are accepted (acceptance 1/2 at alpha_star / 10): the cycle
    # keeps the burn-in's alpha_min and lifts alpha_max to it
    config = acs.ACS().config
    alpha_star = 0.2

    def curve(alpha, beta):
        scale = alpha_star if beta == 0.5 else alpha_star / 10
        return 1.0 / (1.0 + alpha / scale)

    tuner, _ = _tune_on_log_density(config, lambda i: NOISE[i], 300, curve)
    assert float(tuner.alpha_min) == pytest.approx(alpha_star, rel=0.05)
    assert float(tuner.alpha_max) == float(tuner.alpha_min)


def test_trend_window_option():
    assert acs.ACS(tuning={"trend_window": 10}).config.trend_window == 10
    with pytest.raises(ValueError, match="trend_window"):
        acs.ACS(tuning={"trend_window": 1})
