"""Single-site exact tables from the other values only: the ``N (S - 1)`` substitutions and the
table put together with ``f`` at every current value equal the ``N x S`` table, in both array
libraries and every finite domain."""

import jax.numpy as jnp
import numpy as np
import pytest

import discrete_kernels as dk
from discrete_kernels.tables import (
    other_value_substitutions,
    single_site_evaluations,
    single_site_substitutions,
    table_from_other_values,
)

DOMAINS = [dk.Binary(), dk.Categorical(4), dk.Ordinal(5, low=-2)]


def log_density(weights: np.ndarray, low: int):
    """A log density with a term per coordinate and one that couples them all."""

    def f(z: np.ndarray) -> float:
        k = np.asarray(z).reshape(-1).astype(int) - low
        return float(weights[np.arange(k.size), k].sum() + 0.3 * np.prod(np.cos(k)))

    return f


@pytest.mark.parametrize("library", ["jax", "torch"])
@pytest.mark.parametrize("domain", DOMAINS, ids=lambda d: type(d).__name__)
def test_the_table_from_the_other_values_is_the_whole_table(domain, library):
    rng = np.random.default_rng(0)
    num_values = domain.num_values
    x_np = rng.integers(domain.low, domain.low + num_values, size=(3, 2))
    f = log_density(rng.normal(size=(6, num_values)), domain.low)
    to = jnp.asarray if library == "jax" else pytest.importorskip("torch").as_tensor
    x = to(x_np)
    whole = np.array([f(s) for s in np.asarray(single_site_substitutions(domain, x))])

    others = np.asarray(other_value_substitutions(domain, x))
    assert len(others) == single_site_evaluations(6, num_values) == 6 * (num_values - 1)
    # no substitution is the current state, and each changes exactly one coordinate
    changed = (others.reshape(len(others), -1) != x_np.reshape(1, -1)).sum(-1)
    np.testing.assert_array_equal(changed, 1)
    values = to(np.array([f(s) for s in others]))
    table = table_from_other_values(to(np.array(f(x_np))), values, x, domain)
    assert tuple(table.shape) == (3, 2, num_values)
    np.testing.assert_allclose(np.asarray(table), whole.reshape(3, 2, num_values), rtol=1e-6)
