"""A log density after a one-element change, with the contractions moved by one column
(``numpyro_ext._incremental``): equal to the program's own value and derivatives along a
sequence of changes, refused where the program's structure does not allow it, and a paired
sweep that uses it takes the steps a sweep without it takes."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import log_density

from benchmarks import user_models as um
from numpyro_ext import _incremental, paired
from numpyro_ext._incremental import one_element_evaluator

ROWS, PREDICTORS = 30, 12


def _data() -> tuple[jax.Array, jax.Array, jax.Array]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((ROWS, PREDICTORS))
    z = rng.standard_normal((ROWS // 2, PREDICTORS))
    y = x[:, :3] @ np.array([1.0, -0.5, 0.3]) + rng.standard_normal(ROWS)
    return jnp.asarray(x, jnp.float32), jnp.asarray(z, jnp.float32), jnp.asarray(y, jnp.float32)


X, Z, Y = _data()


def _density(model: Callable) -> Callable:
    def fn(d: jax.Array, c: jax.Array) -> jax.Array:
        values = {"gamma": d, "beta": c, "sigma": jnp.float32(0.8)}
        return log_density(model, (X, Y), {}, values)[0]

    return fn


def _regression(mean_of: Callable) -> Callable:
    def model(x, y):
        sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
        with numpyro.plate("predictors", x.shape[1]):
            gamma = numpyro.sample("gamma", dist.Bernoulli(0.3))
            beta = numpyro.sample("beta", dist.Normal(0.0, 1.0))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.StudentT(4.0, mean_of(x, gamma, beta), sigma), obs=y)

    return model


def _ssvs(x, y):
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("predictors", x.shape[1]):
        gamma = numpyro.sample("gamma", dist.Bernoulli(0.3))
        beta = numpyro.sample("beta", dist.Normal(0.0, jnp.where(gamma == 1, 1.0, 0.05)))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ beta, sigma), obs=y)


_nested_product = jax.jit(lambda a, w: a @ w)

#: models whose every contraction of the pair can be moved
MOVABLE = {
    "indicator times coefficient": _regression(lambda x, g, b: x @ (g * b)),
    "mixture prior": _ssvs,
    "contraction inside a nested jit": _regression(lambda x, g, b: _nested_product(x, g * b)),
    "vector on the left": _regression(lambda x, g, b: (g * b) @ x.T),
    "two designs": _regression(
        lambda x, g, b: x @ (g * b) + jnp.tile(Z @ jnp.exp(0.1 * b), 2) * 0.1
    ),
    "an element-wise transform first": _regression(lambda x, g, b: x @ jnp.tanh(g * b + 0.2)),
}


def _moves(size: int, count: int, seed: int) -> list[tuple[int, int, float]]:
    rng = np.random.default_rng(seed)
    return [
        (int(rng.integers(size)), int(rng.integers(2)), float(rng.normal())) for _ in range(count)
    ]


def _start(fn: Callable, seed: int) -> tuple:
    """A random state of the pair and the evaluator of ``fn`` (which must move something)."""
    rng = np.random.default_rng(seed)
    d = jnp.asarray(rng.integers(0, 2, PREDICTORS), jnp.int32)
    c = jnp.asarray(rng.normal(size=PREDICTORS), jnp.float32)
    evaluator = one_element_evaluator(fn, d, c)
    assert evaluator is not None
    return d, c, evaluator


@pytest.mark.parametrize("name", sorted(MOVABLE))
def test_moved_contractions_give_the_program_s_value_and_derivatives(name):
    fn = _density(MOVABLE[name])
    d, c, evaluator = _start(fn, seed=0)
    value, cache = evaluator.full(d, c)
    np.testing.assert_allclose(value, fn(d, c), rtol=1e-6)
    moved = jax.jit(evaluator.moved)

    def along(x, cache, j, d, c):
        return evaluator.moved(cache, j, d, c.at[j].set(x))[0]

    def program(x, cache, j, d, c):
        return fn(d, c.at[j].set(x))

    # each function compiled once: value, first and second derivative in the coefficient
    checks = [
        (jax.jit(f(along)), jax.jit(f(program)))
        for f in (lambda g: g, jax.grad, lambda g: jax.grad(jax.grad(g)))
    ]
    # a chain of changes, the cache carried from each state to the next as a sweep does
    for j, v, x in _moves(PREDICTORS, 25, seed=1):
        d, c = d.at[j].set(v), c.at[j].set(x)
        value, cache = moved(cache, j, d, c)
        np.testing.assert_allclose(value, checks[0][1](x, cache, j, d, c), rtol=2e-5)
        for (moved_f, program_f), rtol in zip(checks, (2e-5, 1e-4, 1e-4)):
            np.testing.assert_allclose(
                moved_f(x + 0.1, cache, j, d, c),
                program_f(x + 0.1, cache, j, d, c),
                rtol=rtol,
                atol=1e-3,
            )


def test_a_contraction_is_moved_once_per_design_and_the_cache_holds_its_values():
    fn = _density(MOVABLE["two designs"])
    d, c = jnp.ones(PREDICTORS, jnp.int32), jnp.linspace(-1, 1, PREDICTORS)
    evaluator = one_element_evaluator(fn, d, c)
    assert evaluator is not None
    _, cache = evaluator.full(d, c)
    assert sorted(v[0].shape for v in cache.values()) == [(ROWS // 2,), (ROWS,)]
    product = next(v for v in cache.values() if v[0].shape == (ROWS,))
    np.testing.assert_allclose(product[0], X @ (d * c), rtol=1e-6)


#: programs whose contraction of the pair cannot be moved by one column: an operand that
#: mixes elements, or a matrix computed from the pair
NOT_MOVABLE = {
    "reversed": lambda x, g, b: x @ jnp.flip(g * b),
    "scaled by a sum over the pair": lambda x, g, b: x @ (b * jnp.sum(g)),
    "cumulative sum": lambda x, g, b: x @ jnp.cumsum(g * b),
    "a product of the pair with itself": lambda x, g, b: x[:, 0] * jnp.dot(g * b, b),
    "a matrix from the pair": lambda x, g, b: x @ (jnp.outer(b, b) @ g.astype(b.dtype)),
    "no contraction": lambda x, g, b: x[:, 0] * jnp.sum(g * b),
}


@pytest.mark.parametrize("name", sorted(NOT_MOVABLE))
def test_a_contraction_that_cannot_be_moved_is_left_to_the_program(name):
    fn = _density(_regression(NOT_MOVABLE[name]))
    d, c = jnp.ones(PREDICTORS, jnp.int32), jnp.linspace(-1, 1, PREDICTORS)
    assert one_element_evaluator(fn, d, c) is None


def test_only_the_movable_contraction_is_moved_and_the_other_recomputed():
    fn = _density(_regression(lambda x, g, b: x @ (g * b) + x @ jnp.flip(b)))
    d, c, evaluator = _start(fn, seed=4)
    value, cache = evaluator.full(d, c)
    assert len(cache) == 1
    for j, v, x in _moves(PREDICTORS, 10, seed=5):
        d, c = d.at[j].set(v), c.at[j].set(x)
        value, cache = evaluator.moved(cache, j, d, c)
        np.testing.assert_allclose(value, fn(d, c), rtol=2e-5)


def test_a_site_that_is_not_a_vector_is_left_to_the_program():
    def fn(d, c):
        return jnp.sum(X[:4, :3] @ (d * c))

    d, c = jnp.ones((3, 2)), jnp.ones((3, 2))
    assert one_element_evaluator(fn, d, c) is None


def _sweeps(model, data, sweeps: int = 3) -> tuple:
    model_trace = paired.setup_trace(model, jax.random.key(0), data, {})[1]
    pairs = paired.read_pairs("test", {"gamma": "beta"}, model_trace)
    z = {"gamma": jnp.zeros(data[0].shape[1], jnp.int32), "beta": jnp.zeros(data[0].shape[1])}

    def log_joint(values: dict) -> jax.Array:
        return log_density(model, data, {}, {**values, "sigma": jnp.float32(0.8)})[0]

    @jax.jit
    def run(key):
        out, moves = z, []
        for key_sweep in jax.random.split(key, sweeps):
            out, _, accepted = paired.paired_sweep(log_joint, out, pairs, 0.0, key_sweep)
            moves.append(accepted)
        return out, jnp.stack(moves)

    return run(jax.random.key(7))


def test_a_sweep_with_moved_contractions_takes_the_steps_of_one_without(monkeypatch):
    # the same noise, the same decisions: a sweep whose cache were not carried to the kept
    # state (or carried from a rejected proposal) takes other steps from the first accepted
    # move on
    model = _regression(lambda x, g, b: x @ (g * b))
    with_cache, moves = _sweeps(model, (X, Y))
    monkeypatch.setattr(paired, "one_element_evaluator", lambda *args: None)
    without, moves_without = _sweeps(model, (X, Y))
    assert int(moves.sum()) > PREDICTORS  # the sweeps moved
    np.testing.assert_array_equal(moves, moves_without)
    np.testing.assert_array_equal(with_cache["gamma"], without["gamma"])
    np.testing.assert_allclose(with_cache["beta"], without["beta"], rtol=1e-4, atol=1e-5)


def test_the_suite_s_regressions_move_their_contraction():
    for data, model in (
        (um.spike_slab_data(20), um.spike_slab_model),
        (um.spike_slab_data(20), um.ssvs_model),
    ):
        size = data[0].shape[1]

        def fn(d, c, model=model, data=data):
            values = {"gamma": d, "beta": c, "sigma": jnp.float32(1.0)}
            return log_density(model, data, {}, values)[0]

        evaluator = one_element_evaluator(fn, jnp.ones(size, jnp.int32), jnp.zeros(size))
        assert evaluator is not None and isinstance(evaluator, _incremental.OneElementEvaluator)
