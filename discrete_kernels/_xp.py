"""Small array-API helpers shared by the core (numpy, jax.numpy and torch alike)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from array_api_compat import array_namespace as _compat_namespace
from array_api_compat import device as _device
from array_api_compat import is_jax_array

Array = Any


def is_torch_array(x: Any) -> bool:
    """Whether ``x`` is a torch tensor (without importing torch).

    ``array_api_compat.is_torch_array`` answers the same with an import statement and a
    ``typing.cast`` per call; the core asks a dozen times per step, and on eager torch a small
    model's step is mostly such Python work."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


#: the namespace of a lone array by its type (see :func:`array_namespace`)
_NAMESPACE_BY_TYPE: dict[type, Any] = {}


def array_namespace(x: Any, /, *more: Any) -> Any:
    """``array_api_compat.array_namespace``, with the answer for one array remembered by its
    type (tensors, JAX arrays and tracers): the core asks for the namespace of every array it
    touches, and on eager torch each look-up is a chain of type checks per call (about 20 per
    DMALA step, a tenth of a small model's step). A NumPy array is not remembered: JAX's
    zero-gradient arrays are NumPy arrays of dtype ``float0``. A Python float gets
    :class:`PythonFloats` (the one-chain torch step's MH decision, :func:`host_number`)."""
    if not more:
        kind = type(x)
        namespace = _NAMESPACE_BY_TYPE.get(kind)
        if namespace is None:
            namespace = _compat_namespace(x)
            if is_torch_array(x):
                namespace = _TorchNamespace(namespace)
            remember = is_torch_array(x) or is_jax_array(x)
            if remember and not isinstance(x, np.ndarray):
                _NAMESPACE_BY_TYPE[kind] = namespace
        return namespace
    return _compat_namespace(x, *more)


class _TorchNamespace:
    """``array_api_compat``'s torch namespace with direct calls where its wrappers only add
    Python work: ``where`` of two tensors of one dtype (the wrapper's promotion fix compares
    result types twice per call, and the core's 0-d selections take that path every step) and
    ``sum`` of a float tensor or into a given dtype. Everything else is the wrapped
    namespace's (looked up once)."""

    def __init__(self, base: Any) -> None:
        import torch

        self._base = base
        self._torch = torch

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._base, name)
        setattr(self, name, value)  # the next look-up skips __getattr__
        return value

    def where(self, condition: Any, x1: Any, x2: Any, /) -> Any:
        tensor = self._torch.Tensor
        if isinstance(x1, tensor) and isinstance(x2, tensor) and x1.dtype == x2.dtype:
            return self._torch.where(condition, x1, x2)
        return self._base.where(condition, x1, x2)

    def sum(self, x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        # a float tensor, or any tensor summed into a given dtype (a count of a boolean
        # mask): torch's own sum gives what the wrapper would
        if dtype is not None or x.is_floating_point():
            if axis is None and not keepdims:
                return self._torch.sum(x, dtype=dtype)
            if isinstance(axis, int):
                return self._torch.sum(x, axis, keepdim=keepdims, dtype=dtype)
        return self._base.sum(x, axis=axis, dtype=dtype, keepdims=keepdims)


__all__ = [
    "Array",
    "array_namespace",
    "categorical_from_uniform",
    "PythonFloats",
    "host_number",
    "is_torch_array",
    "log_sigmoid",
    "log_softmax",
    "logsumexp",
    "masked_sum",
    "nan_to",
    "precise_matmul",
    "python_loop",
    "scalar_like",
    "sigmoid",
    "sum_of",
]


def log_sigmoid(x: Array) -> Array:
    """``log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))``, without overflow, elementwise.

    Written with the ``exp(-|x|)`` that :func:`sigmoid` uses, so a compiler that sees both
    computes it once (the binary DLP's flip and ``log q`` share it). Torch runs eagerly, one
    device operation per call: there torch's own fused function (one operation instead of
    seven; the same value to rounding).
    """
    if is_torch_array(x):
        import torch

        return torch.nn.functional.logsigmoid(x)
    xp = array_namespace(x)
    return xp.minimum(x, xp.zeros_like(x)) - xp.log1p(xp.exp(-xp.abs(x)))


def sum_of(arrays: Sequence[Array]) -> Array:
    """``arrays[0] + arrays[1] + ...`` of a non-empty sequence: Python's ``sum`` starts at
    ``0``, one more operation per call on eager torch."""
    total = arrays[0]
    for array in arrays[1:]:
        total = total + array
    return total


def nan_to(x: Array, value: float) -> Array:
    """``x`` with its NaN entries replaced by ``value`` (infinities kept), elementwise.

    On torch, its one fused operation instead of three (eager torch launches each operation
    separately)."""
    if is_torch_array(x):
        return x.nan_to_num(nan=value, posinf=float("inf"), neginf=float("-inf"))
    xp = array_namespace(x)
    return xp.where(xp.isnan(x), xp.full_like(x, value), x)


def sigmoid(x: Array) -> Array:
    """``1 / (1 + exp(-x))`` without overflow, elementwise (exact 0 and 1 at -inf and inf).

    On torch, its one fused operation (eager torch launches each operation separately)."""
    if is_torch_array(x):
        return x.sigmoid()
    xp = array_namespace(x)
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, xp.ones_like(x), e) / (1.0 + e)


def log_softmax(logits: Array) -> Array:
    """Log-softmax over the last axis; rows that are all ``-inf`` stay ``-inf``.

    Parameters
    ----------
    logits : array, shape (..., S)

    Returns
    -------
    array, shape (..., S)
    """
    xp = array_namespace(logits)
    total = logsumexp(logits, axis=-1)[..., None]
    # an all -inf row has total -inf: subtracting would give NaN
    return xp.where(total > -xp.inf, logits - total, logits)


def masked_sum(mask: Array, values: Array, axis: int = -1) -> Array:
    """Sum of ``values`` where ``mask`` holds, without touching ``inf`` elsewhere."""
    xp = array_namespace(values)
    return xp.sum(xp.where(mask, values, xp.zeros_like(values)), axis=axis)


def logsumexp(x: Array, axis: int = -1) -> Array:
    """``log sum exp`` over ``axis``, stable; a slice of all ``-inf`` gives ``-inf``.

    Parameters
    ----------
    x : array, shape (..., n, ...)
    axis : int

    Returns
    -------
    array, ``x``'s shape without ``axis``
    """
    xp = array_namespace(x)
    top = xp.max(x, axis=axis, keepdims=True)
    top = xp.where(xp.isfinite(top), top, xp.zeros_like(top))
    out = xp.log(xp.sum(xp.exp(x - top), axis=axis, keepdims=True)) + top
    return xp.squeeze(out, axis=axis)


def categorical_from_uniform(logits: Array, uniform: Array) -> Array:
    """Draw an index from ``softmax(logits)`` along the last axis by inverting its CDF.

    One uniform per draw instead of one per category (as the Gumbel-max trick needs): the
    PRNG is a large part of a step's cost on CPU.

    Parameters
    ----------
    logits : array, shape (..., S)
        ``-inf`` marks impossible categories; each row needs one finite entry.
    uniform : array, shape (...)
        Uniforms in [0, 1).

    Returns
    -------
    integer array, shape (...)
        The first index whose cumulative probability exceeds ``uniform``; never an index of
        probability zero.
    """
    xp = array_namespace(logits)
    probs = xp.exp(log_softmax(logits))
    cdf = xp.cumulative_sum(probs, axis=-1)
    threshold = uniform[..., None] * cdf[..., -1:]
    count = xp.sum(xp.astype(cdf <= threshold, xp.int32), axis=-1)
    # rounding can put the threshold on the total when uniform is within 2**-24 of 1
    return xp.where(count >= logits.shape[-1], xp.argmax(logits, axis=-1), count)


def precise_matmul(a: Array, b: Array) -> Array:
    """``a @ b`` at the full precision of its dtype, whatever the accelerator's default.

    On GPUs, float32 matrix products default to reduced precision in JAX (TF32, about 10
    mantissa bits) and in torch once ``torch.backends.cuda.matmul.allow_tf32`` or
    ``torch.set_float32_matmul_precision("high")`` is set. Products that define an energy
    entering an MH ratio, or AB's ``W`` and ``(W + D)^{1/2}``, use this instead of ``@``: JAX
    asks for ``Precision.HIGHEST``; torch computes a float32 CUDA product in float64 when
    reduced precision is enabled. Elsewhere it is ``a @ b``.
    """
    if is_jax_array(a) or is_jax_array(b):  # a NumPy operand joins the JAX one, as with @
        return array_namespace(a if is_jax_array(a) else b).matmul(a, b, precision="highest")
    if is_torch_array(a) and a.is_cuda and a.dtype == b.dtype and _torch_reduced(a.dtype):
        return (a.double() @ b.double()).to(a.dtype)
    return a @ b


def _torch_reduced(dtype: Any) -> bool:
    """Whether torch may compute a CUDA matrix product of ``dtype`` at reduced precision."""
    import torch

    if dtype != torch.float32:
        return False
    return bool(
        torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
    )


def python_loop(num: int, body: Callable[[Any], Any], carry: Any) -> Any:
    """``carry = body(carry)`` ``num`` times: the default ``loop`` of the core's iterative
    functions (adapters pass ``lax.fori_loop`` instead)."""
    for _ in range(num):
        carry = body(carry)
    return carry


def host_number(x: Any) -> Any:
    """``x`` as a Python float where it is a 0-dim floating CPU tensor outside autograd,
    else ``x`` unchanged.

    Eager torch dispatches every operation on a 0-dim tensor (1-3 µs each on a CPU), where
    Python's float arithmetic costs a few tens of nanoseconds, and reading such a tensor waits
    for no device; the core's scalar formulas run on Python floats through
    :class:`PythonFloats`. JAX arrays and tracers, NumPy arrays and tensors on an
    accelerator come back as they are (reading a CUDA tensor would wait for the device), and
    so do the batched tensors of ``torch.vmap``."""
    if (
        is_torch_array(x)
        and x.ndim == 0
        and x.is_cpu
        and not x.requires_grad
        and x.is_floating_point()
        and not _in_torch_transform(x)
    ):
        return float(x)
    return x


def _in_torch_transform(x: Any) -> bool:
    """Whether ``x`` is a tensor inside a ``torch.func`` transform (``vmap``, ``grad``) or
    traced by ``torch.compile`` (a read would split the compiled program), which cannot be read
    as a number."""
    torch = sys.modules["torch"]
    if torch.compiler.is_compiling():
        return True
    return bool(torch._C._functorch.is_functorch_wrapped_tensor(x))


class PythonFloats:
    """The array-API functions the core's scalar formulas use (the MH decision of
    :mod:`discrete_kernels.metropolis`, :func:`nan_to`), on Python floats with IEEE semantics:
    ``log(0) = -inf``, ``exp`` of a large number ``inf``, NaN kept by ``exp`` and ``clip``.
    :func:`array_namespace` gives it for a float; any other function is missing on purpose (an
    ``AttributeError`` names it)."""

    inf = math.inf
    nan = math.nan

    @staticmethod
    def where(condition: Any, x1: float, x2: float, /) -> float:
        return x1 if condition else x2

    @staticmethod
    def isnan(x: float, /) -> bool:
        return math.isnan(x)

    @staticmethod
    def full_like(x: float, /, fill_value: float, **_: Any) -> float:
        return float(fill_value)

    @staticmethod
    def exp(x: float, /) -> float:
        try:
            return math.exp(x)
        except OverflowError:  # IEEE: inf, as NumPy and torch give
            return math.inf

    @staticmethod
    def log(x: float, /) -> float:
        if x > 0.0:
            return math.log(x)
        return -math.inf if x == 0.0 else math.nan

    @staticmethod
    def clip(x: float, /, min: float | None = None, max: float | None = None) -> float:
        # written so that a NaN x stays NaN, as in NumPy (every comparison with NaN is false)
        if max is not None and x > max:
            x = max
        if min is not None and x < min:
            x = min
        return x


_NAMESPACE_BY_TYPE[float] = PythonFloats


def scalar_like(value: Any, like: Array, dtype: Any = None) -> Array:
    """A 0-dim array of ``value`` in ``like``'s array library, on its device, in ``dtype``
    (by default ``like``'s): on torch one factory call (``torch.scalar_tensor``)."""
    if is_torch_array(like):
        import torch

        return torch.scalar_tensor(
            value, dtype=like.dtype if dtype is None else dtype, device=like.device
        )
    xp = array_namespace(like)
    return xp.asarray(value, dtype=like.dtype if dtype is None else dtype, device=_device(like))
