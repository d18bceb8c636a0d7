"""The warmup's gradient check in the core (:mod:`discrete_kernels.gradient_check`): the same
numbers as the setup's check (:func:`discrete_kernels.gradient_check.first_order_error_at`) on
numpy,
jax (under jit) and torch; a binary table in gradient form gives the table's local
differences; the criteria and the schedule."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import discrete_kernels as dk
from discrete_kernels import gradient_check as gc
from discrete_kernels.local import local_delta

RNG = np.random.default_rng(0)
BOUNDED = dk.Ordinal(4, low=0, lower=np.array([0, 1, 0, 0, 1]), upper=np.array([3, 3, 2, 3, 3]))
CASES = {
    "binary": (dk.Binary(), RNG.integers(0, 2, 7), RNG.normal(size=7), RNG.normal(size=(7, 2))),
    "ordinal": (dk.Ordinal(4, low=-1), RNG.integers(-1, 3, 6), RNG.normal(size=6), None),
    "bounded": (BOUNDED, np.array([0, 2, 1, 3, 1]), RNG.normal(size=5), None),
}


def _case(name):
    domain, x, gradient, table = CASES[name]
    if table is None:
        table = RNG.normal(scale=3.0, size=(x.size, domain.num_values))
    delta = table - np.take_along_axis(table, (x - domain.low)[:, None], 1)
    valid = None
    if isinstance(domain, dk.Ordinal) and domain.valid_candidates(delta) is not None:
        valid = np.array(np.broadcast_to(domain.valid_candidates(delta), delta.shape))
        delta = np.where(valid, delta, -np.inf)
    return domain, x, gradient, delta, valid


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("backend", ["numpy", "jax", "torch"])
def test_the_check_gives_the_setup_check_numbers_on_every_backend(name, backend):
    domain, x, gradient, delta, valid = _case(name)
    tv, median = gc.first_order_error_at(domain, x, gradient, range(x.size), delta)
    if backend == "numpy":
        found = gc.first_order_check(domain, x, gradient, delta, valid)
    elif backend == "jax":
        as_jax = None if valid is None else jnp.asarray(valid)
        check = jax.jit(lambda *a: gc.first_order_check(domain, *a, as_jax))
        found = check(jnp.asarray(x), jnp.asarray(gradient), jnp.asarray(delta))
    else:
        torch = pytest.importorskip("torch")
        as_torch = None if valid is None else torch.as_tensor(valid)
        found = gc.first_order_check(
            domain,
            torch.as_tensor(x),
            torch.as_tensor(gradient),
            torch.as_tensor(delta),
            as_torch,
        )
    assert float(found.total_variation) == pytest.approx(tv, rel=1e-5)
    assert float(found.median_error) == pytest.approx(median, rel=1e-5)
    estimate = local_delta(domain, x, gradient, False)
    inside = np.isfinite(delta) & ((estimate != 0) | (delta != 0))
    assert float(found.max_error) == pytest.approx(np.abs(estimate - delta)[inside].max(), 1e-5)


def test_a_binary_table_in_gradient_form_has_the_table_differences():
    x = np.array([0, 1, 1, 0])
    table = RNG.normal(size=(4, 2))
    gradient = gc.binary_gradient_from_table(table)
    from_table = table - np.take_along_axis(table, x[:, None], 1)
    np.testing.assert_allclose(local_delta(dk.Binary(), x, gradient, False), from_table)


def test_an_underestimated_gain_is_badly_wrong():
    """One coordinate out of 16 whose change gains 20 nats that a flat gradient misses (an
    observed animal marked absent): median and mean total variation stay small, the uphill
    criterion calls it."""
    x = np.zeros(16, int)
    delta = np.zeros((16, 2))
    delta[:, 1] = -0.5
    delta[3, 1] = 20.0
    found = gc.first_order_check(dk.Binary(), x, np.full(16, -0.5), delta)
    assert found.median_error < gc.NATS_LIMIT and found.total_variation < gc.TV_LIMIT
    assert found.uphill == pytest.approx(20.0) and bool(gc.badly_wrong(found))
    # the same gain seen by the gradient is fine
    exact = gc.first_order_check(dk.Binary(), x, delta[:, 1], delta)
    assert not bool(gc.badly_wrong(exact)) and exact.max_error == 0


def test_the_schedule_and_the_checked_coordinates():
    schedule = gc.check_schedule(500)
    draws = [i for i in range(500) if gc.is_check_draw(schedule, i)]
    assert draws == list(range(0, 250, 25)) and schedule.window == 50
    rows = gc.checked_coordinates(100, 10)
    assert rows.shape == (10, gc.CHECKED_COORDINATES)
    assert set(rows.ravel()) == set(range(100))  # ten checks of 16 cover all 100
    np.testing.assert_array_equal(gc.checked_coordinates(5, 3), np.tile(np.arange(5), (3, 1)))
