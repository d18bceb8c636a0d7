"""Programs run once (``numpyro_ext._once.run_once``): the same values as ``jax.jit``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numpyro_ext._once import run_once


def _work(x, w):
    """A reduction, a matmul, transcendentals and a gradient: what a kernel's start computes."""
    f = lambda v: jnp.sum(jax.nn.log_sigmoid(v @ w)) + jnp.sum(jnp.tanh(v))  # noqa: E731
    return jax.value_and_grad(f)(x)


def test_run_once_gives_jit_s_values_bit_for_bit_and_runs_under_a_trace():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((4, 300)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((300, 300)) / 10, jnp.float32)
    expected = jax.jit(_work)(x, w)
    once = run_once(_work, x, w)
    for a, b in zip(jax.tree.leaves(once), jax.tree.leaves(expected)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    traced = jax.jit(lambda x: run_once(_work, x, w))(x)  # tracers: a plain nested jit
    np.testing.assert_allclose(np.asarray(traced[0]), np.asarray(expected[0]), rtol=1e-6)


@pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="the CPU's path: elsewhere jit_once is jax.jit"
)
def test_jit_once_keeps_its_program_per_shape_and_leaves_large_probes_to_jit(monkeypatch):
    from numpyro_ext import _once

    compiles = []
    original = jax.stages.Lowered.compile

    def counting(self, *args, **kwargs):
        compiles.append(kwargs.get("compiler_options"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", counting)
    rng = np.random.default_rng(1)
    w = jnp.asarray(rng.standard_normal((30, 30)) / 10, jnp.float32)
    probe = _once.jit_once(lambda x: _work(x, w), 10)
    for rows in (4, 4, 5):
        x = jnp.asarray(rng.standard_normal((rows, 30)), jnp.float32)
        expected = jax.jit(_work)(x, w)
        for a, b in zip(jax.tree.leaves(probe(x)), jax.tree.leaves(expected)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert compiles == [_once.ONCE_OPTIONS] * 2  # (4, 30) once, (5, 30) once
    large = _once.jit_once(lambda x: _work(x, w), _once.SMALL_PROBE_EVALUATIONS + 1)
    large(x)
    assert len(compiles) == 2  # a plain jax.jit: optimised, not through Lowered.compile


def test_an_option_this_xla_does_not_know_is_dropped_and_the_program_compiles(monkeypatch):
    """XLA's options change between releases: one it does not know is left out, once."""
    from numpyro_ext import _once

    kept = set(_once.ONCE_OPTIONS)
    monkeypatch.setattr(_once, "ONCE_OPTIONS", dict(_once.ONCE_OPTIONS, xla_no_such_option=True))
    x = jnp.arange(3.0)
    lowered = jax.jit(jnp.sum).lower(x)
    assert float(_once.compile_once(lowered)(x)) == 3.0
    assert set(_once.ONCE_OPTIONS) == kept

    class Failing:
        def compile(self, compiler_options):
            raise jax.errors.JaxRuntimeError("INTERNAL: something else")

    with pytest.raises(jax.errors.JaxRuntimeError, match="something else"):
        _once.compile_once(Failing())  # another failure is not swallowed
    assert set(_once.ONCE_OPTIONS) == kept
