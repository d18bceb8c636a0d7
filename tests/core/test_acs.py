"""ACS: schedule formulas, exact stationarity at fixed (alpha, beta), and the tuner."""

import math

import array_api_compat.numpy as xnp
import array_api_compat.torch as xtorch
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import discrete_kernels as dk

from .targets import ALL_TARGETS
from .transition import transition_matrix

TARGETS = [make() for make in ALL_TARGETS]


def test_cyclical_step_size_matches_eq_8():
    s, a_max, a_min = 8, 3.0, 0.2
    for k in range(20):
        expected = max(a_max / 2 * (math.cos(math.pi * (k % s) / s) + 1), a_min)
        got = dk.cyclical_step_size(np.int64(k), s, np.float64(a_max), np.float64(a_min))
        assert np.isclose(float(got), expected)
    beta = np.linspace(0.9, 0.5, s)
    for k in range(20):
        assert float(dk.cyclical_balance(np.int64(k), beta)) == beta[k % s]


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


CONFIG = dk.ACSConfig(steps_per_cycle=6, burnin_steps=10, burnin_mh_steps=10)


def _tune(xp, dtype, uniforms, accepts, jit=False):
    d, local_fn = _quadratic(xp, dtype)
    x0 = xp.zeros(d, dtype=xp.int32)
    f, local = local_fn((x0,))
    chain = dk.ChainState((x0,), f, local)
    tuner = dk.acs_tuner_init(CONFIG, xp.asarray(1.0, dtype=dtype))
    n = dk.tuning_steps(CONFIG)

    def step(carry, inputs):
        chain, tuner, i = carry
        u, a = inputs
        alpha, beta, metropolis = dk.acs_step_parameters(tuner, CONFIG)
        chain, info = dk.dlp_step(
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
        tuner = dk.acs_warmup_update(tuner, info.accept_prob, CONFIG, i, n)
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


def test_tuner_state_machine_on_a_known_target_all_backends_and_jit():
    n = dk.tuning_steps(CONFIG)
    rng = np.random.default_rng(3)
    uniforms = rng.uniform(size=(n, 12)).astype(np.float32)
    accepts = rng.uniform(size=n).astype(np.float32)
    results = {
        "numpy": _as_numpy(_tune(xnp, np.float32, uniforms, accepts)),
        "jax": _as_numpy(_tune(jnp, jnp.float32, uniforms, accepts)),
        "jax-jit": _as_numpy(_tune(jnp, jnp.float32, uniforms, accepts, jit=True)),
        "torch": _as_numpy(_tune(xtorch, torch.float32, uniforms, accepts)),
    }
    ref = results["numpy"]
    assert int(ref["phase"]) == 5  # done
    assert 0 < ref["alpha_min"] <= ref["alpha_max"]
    beta = ref["beta_schedule"]
    assert beta[0] == np.float32(CONFIG.beta_max)
    assert np.all(np.diff(beta) <= 0) and np.all(beta >= 0.5) and np.all(beta <= CONFIG.beta_max)
    assert beta[-1] < beta[0]  # the search did move the balance down the cycle
    for name, got in results.items():
        for key in ref:
            np.testing.assert_allclose(got[key], ref[key], rtol=1e-4, err_msg=f"{name}: {key}")


def test_short_warmup_ends_the_tuning_with_a_valid_cycle():
    n = 30  # shorter than the tuning budget
    rng = np.random.default_rng(4)
    d, local_fn = _quadratic(xnp, np.float64)
    x = np.zeros(d, dtype=np.int64)
    f, local = local_fn((x,))
    chain = dk.ChainState((x,), f, local)
    tuner = dk.acs_tuner_init(CONFIG, np.float64(1.0))
    for i in range(n):
        alpha, beta, metropolis = dk.acs_step_parameters(tuner, CONFIG)
        chain, info = dk.dlp_step(
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
        tuner = dk.acs_warmup_update(tuner, info.accept_prob, CONFIG, np.int64(i), n)
    assert int(tuner.phase) == 5
    assert tuner.alpha_min <= tuner.alpha_max
    assert np.all(np.diff(tuner.beta_schedule) <= 0)


def test_pcd_schedule_explores_one_iteration_per_cycle_and_exploits_the_others():
    """App. B, Alg. 6: iteration 0 of each cycle at (alpha_max, beta_max), its first step
    without MH; the others at (alpha_min, 1/2) with MH; re-tuning every 25 cycles."""
    from discrete_kernels import acs

    config = acs.ACSConfig(steps_per_cycle=4, beta_max=0.9)
    a_max, a_min = np.float64(3.0), np.float64(0.2)
    for iteration in range(9):
        for step in range(3):
            alpha, beta, mh = acs.acs_pcd_step_parameters(
                np.int64(iteration), np.int64(step), a_max, a_min, config
            )
            explore = iteration % 4 == 0
            assert float(alpha) == (3.0 if explore else 0.2)
            assert float(beta) == (0.9 if explore else 0.5)
            assert bool(mh) == (not (explore and step == 0))
    retunes = [i for i in range(250) if acs.acs_pcd_retunes(np.int64(i), config)]
    assert retunes == [0, 100, 200]
