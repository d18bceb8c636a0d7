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


def test_namespace_for_torch_tensors_is_array_api_compat_s_with_direct_where_and_sum():
    """For torch tensors the remembered namespace is array_api_compat's, except ``where`` and
    ``sum``, which call torch directly where the wrappers only add Python work: the results
    equal the wrappers' (values and dtypes) over the cases the core meets, and the cases the
    direct path does not take (mixed dtypes, Python scalars, integer sums, tuples of axes) go
    to the wrappers. Several arrays get array_api_compat's namespace."""
    torch = pytest.importorskip("torch")
    compat = compat_namespace(torch.ones(1))
    xp = _xp.array_namespace(torch.ones(2))
    assert xp is _xp.array_namespace(torch.ones(3))  # remembered
    assert xp.exp is compat.exp and xp.float32 is compat.float32
    assert _xp.array_namespace(torch.ones(1), torch.ones(1)) is compat
    a, b = torch.arange(6.0).reshape(2, 3), -torch.arange(6.0).reshape(2, 3)
    cases = [
        (a > 2, a, b),
        (torch.tensor(True), torch.tensor(1.0), torch.tensor(2.0)),  # 0-d: the wrapper's .to
        (a > 2, a, torch.tensor(0.5, dtype=torch.float64)),  # mixed dtypes: the wrapper
        (a > 2, a, 0.0),  # a Python scalar: the wrapper
        (a > 2, a.int(), b.int()),
    ]
    for condition, x1, x2 in cases:
        got, want = xp.where(condition, x1, x2), compat.where(condition, x1, x2)
        assert got.dtype == want.dtype and torch.equal(got, want)
    for x in [a, a > 2, a.int(), torch.tensor(3.0)]:
        for kwargs in [
            {},
            {"axis": -1},
            {"axis": 0, "keepdims": True},
            {"keepdims": True},
            {"axis": (0, 1)},
            {"dtype": torch.float64},
        ]:
            if x.ndim == 0 and "axis" in kwargs:
                continue
            got, want = xp.sum(x, **kwargs), compat.sum(x, **kwargs)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got, want)


def test_python_floats_get_a_namespace_with_ieee_semantics():
    """A Python float (a one-chain CPU torch step's scalar, read by ``host_number``) gets
    ``PythonFloats``: ``log(0) = -inf``, ``log`` of a negative number NaN, NaN kept by ``clip``
    and ``exp``, ``where`` picking a side; what the core's MH formulas need and no more."""
    xp = _xp.array_namespace(0.5)
    assert xp is _xp.PythonFloats
    assert xp.log(0.0) == -np.inf and np.isnan(xp.log(-1.0)) and xp.log(np.e) == 1.0
    assert np.isnan(xp.clip(float("nan"), max=0.0)) and xp.clip(2.0, max=0.0) == 0.0
    assert xp.clip(-2.0, max=0.0) == -2.0 and xp.clip(-2.0, min=-1.0) == -1.0
    assert xp.exp(-np.inf) == 0.0 and np.isnan(xp.exp(float("nan")))
    assert xp.exp(1000.0) == np.inf and xp.exp(np.inf) == np.inf
    assert xp.where(True, 1.0, 2.0) == 1.0 and xp.where(False, 1.0, 2.0) == 2.0
    assert xp.isnan(float("nan")) and xp.full_like(1.0, -np.inf) == -np.inf
    assert _xp.nan_to(float("nan"), -np.inf) == -np.inf
    with pytest.raises(AttributeError):
        xp.matmul  # noqa: B018


def test_host_number_reads_only_cpu_scalars_outside_autograd_and_transforms():
    """``host_number`` reads a 0-dim floating CPU tensor as a Python float; JAX and NumPy
    values, tensors of other shapes, integer tensors, tensors in autograd and the batched
    tensors of ``torch.vmap`` come back unchanged."""
    torch = pytest.importorskip("torch")
    assert _xp.host_number(torch.tensor(0.25)) == 0.25
    assert isinstance(_xp.host_number(torch.tensor(0.25)), float)
    for value in [
        torch.ones(2),
        torch.tensor(3),
        torch.tensor(1.0, requires_grad=True),
        jnp.float32(1.0),
        np.float32(1.0),
    ]:
        assert _xp.host_number(value) is value
    seen = []
    torch.vmap(lambda t: seen.append(_xp.host_number(t)) or t)(torch.ones(3))
    assert isinstance(seen[0], torch.Tensor)


def test_is_torch_array_agrees_with_array_api_compat():
    """The core's own tensor test (no import, no ``typing.cast`` per call) answers as
    ``array_api_compat.is_torch_array`` on tensors (a subclass and a parameter among them), JAX
    and NumPy arrays and Python numbers."""
    from array_api_compat import is_torch_array as compat_is_torch_array

    torch = pytest.importorskip("torch")
    values = [
        torch.ones(2),
        torch.tensor(1.0, requires_grad=True),
        torch.nn.Parameter(torch.ones(1)),
        jnp.ones(2),
        np.ones(2),
        1.0,
        None,
    ]
    for value in values:
        assert _xp.is_torch_array(value) == compat_is_torch_array(value), value
    assert _xp.is_torch_array(torch.ones(1)) and not _xp.is_torch_array(np.ones(1))
