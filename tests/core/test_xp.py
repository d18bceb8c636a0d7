"""The core's array-namespace look-up (``discrete_kernels._xp.array_namespace``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from array_api_compat import array_namespace as compat_namespace

from discrete_kernels import _xp


def test_namespace_is_array_api_compat_s_for_jax_and_numpy_arrays():
    """The remembered answer (by type) is the library's for JAX arrays and tracers; NumPy
    arrays (JAX's float0 gradients among them) are not remembered."""
    arrays = [jnp.ones(2), np.ones(2), np.ones(2, dtype=jax.dtypes.float0)]
    for x in arrays * 2:  # the second pass reads what the first remembered
        assert _xp.array_namespace(x) is compat_namespace(x)
    assert np.ndarray not in _xp._NAMESPACE_BY_TYPE
    seen = []
    jax.jit(lambda x: seen.append(_xp.array_namespace(x)) or x)(jnp.ones(2))
    jax.vmap(lambda x: seen.append(_xp.array_namespace(x)) or x)(jnp.ones(2))
    assert all(ns is compat_namespace(jnp.ones(1)) for ns in seen) and len(seen) == 2


def test_namespace_is_array_api_compat_s_for_torch_tensors():
    """The same for torch tensors, one or several (the core runs without torch installed)."""
    torch = pytest.importorskip("torch")
    for x in [torch.ones(2)] * 2:
        assert _xp.array_namespace(x) is compat_namespace(x)
    assert _xp.array_namespace(torch.ones(1), torch.ones(1)) is compat_namespace(torch.ones(1))
