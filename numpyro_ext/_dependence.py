"""Which coordinates of a site each element of a value computed from it depends on, read from
the program (a jaxpr: traced, not compiled).

A value's dependence is a boolean array of the value's shape plus one axis of the site's
coordinates: ``dependence[..., i]`` whether that element is computed from coordinate ``i``.
The dependence is *formal*: ``0 * x[i]`` depends on ``x[i]``. Rules are exact for the
operations models are written with (element-wise arithmetic, broadcasting, reshapes,
reductions, contractions, static slices, nested ``jit`` and custom-derivative calls); an
operation without an exact rule that any dependent value reaches (``gather``, ``scan``,
``while``, a dynamic slice) makes the whole reading unknown (None), so a caller never mistakes
an over-approximation for the program's structure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend.core import Literal, Var

__all__ = ["MAX_DEPENDENCE_CELLS", "interaction_graph_of", "output_dependence"]

#: the largest dependence array (elements of a value times coordinates) followed before the
#: reading gives up: the reading is meant for small sites, where a probe costs a compilation
MAX_DEPENDENCE_CELLS = 2**22

_ELEMENTWISE = frozenset(
    """abs acos acosh add and asin asinh atan atan2 atanh bessel_i0e bessel_i1e cbrt ceil clamp
    convert_element_type copy copy_p cos cosh digamma div eq erf erf_inv erfc exp exp2 expm1
    floor ge gt igamma igammac imag integer_pow is_finite le lgamma log log1p logistic lt max
    min mul ne neg nextafter not or polygamma pow real reduce_precision rem round rsqrt
    select_n shift_left shift_right_arithmetic shift_right_logical sign sin sinh sqrt square
    stop_gradient sub tan tanh xor zeta""".split()
)

_REDUCTIONS = frozenset(
    "reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or argmax argmin".split()
)

#: primitives that call a program with their operands as its inputs (nested ``jit``, a
#: custom derivative, remat), and the parameter names under which they keep it
_CALLS = frozenset(
    """pjit jit closed_call core_call custom_jvp_call custom_vjp_call custom_vjp_call_jaxpr
    checkpoint remat""".split()
)
_CALLED = ("jaxpr", "call_jaxpr", "fun_jaxpr")


#: element-wise operations that add or relabel their operands' dependences without combining
#: them (no coordinate's effect on the value depends on another's)
_ADDITIVE = frozenset("add sub neg copy copy_p real imag reduce_precision stop_gradient".split())

#: operations that move, select or sum elements: an output element is a sum of operand
#: elements (or one of them), so they combine no coordinates
_STRUCTURAL = frozenset(
    """broadcast_in_dim reshape squeeze expand_dims transpose rev slice concatenate stack
    split reduce_sum""".split()
)


class _Unknown(Exception):
    """An operation without an exact rule reached by a dependent value."""


def output_dependence(
    fn: Callable[[jax.Array], Sequence[jax.Array]], x: jax.Array
) -> list[np.ndarray | None] | None:
    """The dependence of each of ``fn(x)``'s outputs on the coordinates of ``x``: an array of
    the output's shape plus ``(x.size,)`` (None for an output not computed from ``x``), or
    None where the program holds an operation this reading has no exact rule for, or a value
    past :data:`MAX_DEPENDENCE_CELLS`."""
    closed = jax.make_jaxpr(fn)(x)
    size = int(np.prod(np.shape(x)))
    start = np.eye(size, dtype=bool).reshape((*np.shape(x), size))
    try:
        return _run(closed.jaxpr, [start], size)
    except _Unknown:
        return None


def interaction_graph_of(fn: Callable[[jax.Array], jax.Array], x: jax.Array) -> np.ndarray | None:
    """Which pairs of coordinates of ``x`` the program of the scalar ``fn(x)`` combines other
    than by addition, read from the program: shape (N, N), symmetric; None where the reading is
    unknown (as :func:`output_dependence`) or the (N, N) array would pass
    :data:`MAX_DEPENDENCE_CELLS`.

    A pair not listed does not interact: every value the program computes is a sum of pieces,
    each a function of coordinates that are pairwise listed (sums, slices, reshapes and products
    with constants keep that form; a product of two values computed from the site lists every
    pair of their coordinates, any other operation on a value every pair of its own), so ``fn``
    is a sum of functions of listed cliques, and changing a coordinate leaves the exact
    conditional of every coordinate not listed with it unchanged, whatever the values. Formal:
    a listed pair may not interact in value (``0 * x[i] * x[k]``)."""
    closed = jax.make_jaxpr(fn)(x)
    size = int(np.prod(np.shape(x)))
    if size * size > MAX_DEPENDENCE_CELLS:
        return None
    start = np.eye(size, dtype=bool).reshape((*np.shape(x), size))
    graph = np.zeros((size, size), bool)
    try:
        _run(closed.jaxpr, [start], size, graph)
    except _Unknown:
        return None
    return graph | graph.T


def _run(
    jaxpr: Any,
    inputs: Sequence[np.ndarray | None],
    size: int,
    graph: np.ndarray | None = None,
) -> list[np.ndarray | None]:
    """The dependence of ``jaxpr``'s outputs on the coordinates; with ``graph`` (N, N), the
    pairs its operations combine are added to it as they are met."""
    env: dict[Any, np.ndarray | None] = dict(zip(jaxpr.invars, inputs))

    def read(v: Any) -> np.ndarray | None:
        return None if isinstance(v, Literal) else env.get(v)

    for equation in jaxpr.eqns:
        deps = [read(v) for v in equation.invars]
        if all(d is None for d in deps):
            continue  # not computed from the site
        outs = _rule(equation, deps, size, graph)
        if graph is not None:
            _combine(equation, deps, outs, size, graph)
        for v, d in zip(equation.outvars, outs):
            if isinstance(v, Var):
                if d is not None and d.size > MAX_DEPENDENCE_CELLS:
                    raise _Unknown(equation.primitive.name)
                env[v] = d
    return [read(v) for v in jaxpr.outvars]


def _shape(v: Any) -> tuple[int, ...]:
    return tuple(v.aval.shape)


def _rule(
    equation: Any, deps: list[np.ndarray | None], size: int, graph: np.ndarray | None = None
) -> list[np.ndarray | None]:
    name = equation.primitive.name
    params = equation.params
    out_shapes = [_shape(v) for v in equation.outvars]
    called = next((params[k] for k in _CALLED if k in params), None)
    if (
        name in _CALLS and called is not None
    ):  # jit, a custom derivative, remat: the called program's own rules
        inner = getattr(called, "jaxpr", called)
        if len(inner.invars) != len(deps):
            raise _Unknown(name)
        return _run(inner, deps, size, graph)
    if name in _ELEMENTWISE:
        (shape,) = out_shapes
        total = np.zeros((*shape, size), bool)
        for v, d in zip(equation.invars, deps):
            if d is None:
                continue
            operand = _shape(v)
            if operand and (
                len(operand) != len(shape) or any(a not in (1, b) for a, b in zip(operand, shape))
            ):
                raise _Unknown(name)
            total = total | np.broadcast_to(d, total.shape)  # a scalar or size-1 axes broadcast
        return [total]
    d = deps[0] if len(deps) == 1 else None  # the structural rules below take one operand
    if name == "broadcast_in_dim" and d is not None:
        (shape,) = out_shapes
        kept = params["broadcast_dimensions"]
        # size-1 axes where the output has new ones, then broadcast (size-1 axes stretch)
        view = np.expand_dims(d, [a for a in range(len(shape)) if a not in kept])
        return [np.broadcast_to(view, (*shape, size))]
    if name in ("reshape", "squeeze", "expand_dims") and d is not None:
        return [d.reshape((*out_shapes[0], size))]
    if name == "transpose" and d is not None:
        return [np.transpose(d, (*params["permutation"], d.ndim - 1))]
    if name == "rev" and d is not None:
        return [np.flip(d, axis=tuple(params["dimensions"]))]
    if name in _REDUCTIONS and d is not None:
        return [np.any(d, axis=tuple(params["axes"]))]
    if name == "slice" and d is not None:
        strides = params["strides"] or (1,) * len(params["start_indices"])
        index = tuple(
            slice(a, b, s)
            for a, b, s in zip(params["start_indices"], params["limit_indices"], strides)
        )
        return [d[index]]
    if name == "concatenate":
        pieces = [
            np.zeros((*_shape(v), size), bool) if dv is None else dv
            for v, dv in zip(equation.invars, deps)
        ]
        return [np.concatenate(pieces, axis=params["dimension"])]
    if name == "stack":
        pieces = [
            np.zeros((*_shape(v), size), bool) if dv is None else dv
            for v, dv in zip(equation.invars, deps)
        ]
        return [np.stack(pieces, axis=params["axis"])]
    if name == "split" and d is not None:
        edges = np.cumsum(params["sizes"])[:-1]
        return list(np.split(d, edges, axis=params["axis"]))
    if name == "dot_general":
        return [_dot_general(equation, deps, size)]
    raise _Unknown(name)


def _dot_general(equation: Any, deps: list[np.ndarray | None], size: int) -> np.ndarray:
    """An output element of a contraction depends on the operands' elements it sums: the
    operand's dependence reduced over its contracting axes, placed at its batch and free axes
    of the output (batch axes first, then the left operand's free axes, then the right's)."""
    (contract_l, contract_r), (batch_l, batch_r) = equation.params["dimension_numbers"]
    shapes = [_shape(v) for v in equation.invars]
    (out_shape,) = [_shape(v) for v in equation.outvars]
    free = [
        [
            a
            for a in range(len(shapes[k]))
            if a not in (contract_l, contract_r)[k] and a not in (batch_l, batch_r)[k]
        ]
        for k in (0, 1)
    ]
    total = np.zeros((*out_shape, size), bool)
    nb = len(batch_l)
    for k, (d, batch, contract) in enumerate(
        zip(deps, (batch_l, batch_r), (contract_l, contract_r))
    ):
        if d is None:
            continue
        reduced = np.any(d, axis=tuple(contract)) if contract else d
        # the remaining axes in their order: batch and free axes of the operand, then coordinates
        remaining = [a for a in range(len(shapes[k])) if a not in contract]
        order = [remaining.index(a) for a in (*batch, *free[k])]
        reduced = np.transpose(reduced, (*order, reduced.ndim - 1))
        # place: output axes are (batch, free left, free right)
        n_left, n_right = len(free[0]), len(free[1])
        if k == 0:
            view = reduced.reshape((*reduced.shape[: nb + n_left], *(1,) * n_right, size))
        else:
            view = reduced.reshape((*reduced.shape[:nb], *(1,) * n_left, *reduced.shape[nb:]))
        total = total | np.broadcast_to(view, total.shape)
    return total


def _pairs(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """(N, N): the pairs ``(i, k)`` with ``i`` in ``left[e]`` and ``k`` in ``right[e]`` for some
    element ``e`` (both (E, N) bool)."""
    return (left.astype(np.float32).T @ right.astype(np.float32)) > 0


def _combine(
    equation: Any,
    deps: list[np.ndarray | None],
    outs: list[np.ndarray | None],
    size: int,
    graph: np.ndarray,
) -> None:
    """Add to ``graph`` the pairs of coordinates ``equation`` combines other than by addition
    (:func:`interaction_graph_of`)."""
    name = equation.primitive.name
    dependent = [d is not None for d in deps]
    if name in _CALLS or name in _ADDITIVE or name in _STRUCTURAL:
        return  # a called program's operations were read on their own
    if name == "convert_element_type":
        # exact between integers and floats one way; rounding a float to an integer is not
        source = equation.invars[0].aval.dtype
        target = equation.params["new_dtype"]
        if not (np.issubdtype(source, np.floating) and not np.issubdtype(target, np.floating)):
            return
    if name == "mul" and sum(dependent) == 1:
        return  # a constant scale
    if name == "div" and not dependent[1]:
        return
    if name == "select_n" and not dependent[0]:
        return  # a constant choice between values
    if name == "mul":
        (shape,) = [_shape(v) for v in equation.outvars]
        left, right = (
            np.broadcast_to(d, (*shape, size)).reshape(-1, size) for d in deps if d is not None
        )
        graph |= _pairs(left, right)
        return
    if name == "dot_general":
        if all(dependent):
            graph |= _pairs(*_contracted_pairs(equation, deps, size))
        return
    # any other operation on a value (exp, a division by a value of the site, a max, a
    # comparison): every pair of each output element's coordinates
    for out in outs:
        if out is not None:
            flat = out.reshape(-1, size)
            graph |= _pairs(flat, flat)


def _contracted_pairs(
    equation: Any, deps: list[np.ndarray | None], size: int
) -> tuple[np.ndarray, np.ndarray]:
    """For a contraction of two operands computed from the site: per (batch, contracted)
    index, each operand's coordinates over its free axes, (B K, N) each; the product pairs
    them index by index."""
    (contract_l, contract_r), (batch_l, batch_r) = equation.params["dimension_numbers"]
    flats = []
    for d, batch, contract in zip(deps, (batch_l, batch_r), (contract_l, contract_r)):
        assert d is not None
        kept = (*batch, *contract)
        free = tuple(a for a in range(d.ndim - 1) if a not in kept)
        reduced = np.any(d, axis=free) if free else d
        # the remaining axes are the kept ones in increasing order: put them in (batch, contract)
        order = [sorted(kept).index(a) for a in kept]
        flats.append(np.transpose(reduced, (*order, reduced.ndim - 1)).reshape(-1, size))
    return flats[0], flats[1]
