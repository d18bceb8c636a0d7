"""A log density evaluated after one element of a pair of sites changes, at the cost of what
that element reaches: where the program contracts a constant matrix with a value computed
element by element from the pair (``X @ (gamma * beta)`` of a regression, ``X @ beta`` of a
mixture prior), the contraction is not recomputed but moved by one column,
``X[:, j] (w'_j - w_j)``, from its value at the last state.

A paired sweep (:mod:`numpyro_ext.paired`) evaluates the model's log density about ``3 S + 2``
times per element, one element after another; with a dense design of ``N`` rows and ``P``
predictors each evaluation costs ``N P``, so a sweep ``N P^2``. Moved contractions make an
evaluation cost ``N + P`` (the element-wise terms and what follows the contraction), and a
sweep ``P (N + P)``.

The reading is formal and exact: a value is *aligned* with the pair when its element ``i``
along one axis is computed from element ``i`` of the pair's values and from values the pair
does not reach (element-wise operations, broadcasts, type conversions, nested ``jit`` and
custom-derivative calls of these). A contraction is moved only where one operand is a 1-D
aligned value contracted on its only axis and the other operand is not computed from the pair;
any other operation is evaluated as the program has it. Then a change of element ``j`` changes
the aligned operand at ``j`` only, and the moved contraction equals the recomputed one up to
floating-point rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Literal

from ._dependence import _CALLED, _CALLS, _ELEMENTWISE

__all__ = ["OneElementEvaluator", "one_element_evaluator"]

#: a value computed from the pair that is not aligned with it
_MIXED = -1

#: calls whose program this module evaluates operation by operation where it moves a
#: contraction inside them (a custom derivative is kept whole: its rule would be lost)
_INLINED = frozenset({"pjit", "jit", "closed_call", "core_call"})

#: path of equation indices through nested programs -> (contraction, aligned operand)
Cache = dict[tuple[int, ...], tuple[jax.Array, jax.Array]]


class _Moved(NamedTuple):
    """A contraction to move: which operand is the constant matrix and its contracted axis."""

    matrix_position: int
    matrix_axis: int


def _inner_program(params: dict) -> Any:
    return next((params[k] for k in _CALLED if k in params), None)


def _analyse(jaxpr: Any, in_states: Sequence[int | None]) -> tuple[list[int | None], dict]:
    """The alignment of each output of ``jaxpr`` (None: not computed from the pair; an axis;
    :data:`_MIXED`) and the plan of its equations: index -> :class:`_Moved`, or (index ->
    the plan of a called program evaluated in place)."""
    env: dict[Any, int | None] = dict(zip(jaxpr.invars, in_states))

    def read(v: Any) -> int | None:
        return None if isinstance(v, Literal) else env.get(v)

    plan: dict[int, Any] = {}
    for index, equation in enumerate(jaxpr.eqns):
        states = [read(v) for v in equation.invars]
        outs: list[int | None]
        if all(s is None for s in states):
            outs = [None] * len(equation.outvars)
        else:
            outs, step = _rule(equation, states)
            if step:
                plan[index] = step
        for v, s in zip(equation.outvars, outs):
            env[v] = s
    return [read(v) for v in jaxpr.outvars], plan


def _rule(equation: Any, states: list[int | None]) -> tuple[list[int | None], Any]:
    name = equation.primitive.name
    params = equation.params
    n_out = len(equation.outvars)
    called = _inner_program(params)
    if name in _CALLS and called is not None:
        inner = getattr(called, "jaxpr", called)
        if len(inner.invars) != len(states):
            return [_MIXED] * n_out, None
        outs, inner_plan = _analyse(inner, states)
        return outs, (inner_plan if inner_plan and name in _INLINED else None)
    if name in _ELEMENTWISE:
        shape = tuple(equation.outvars[0].aval.shape)
        axes = {
            s if s != _MIXED and tuple(v.aval.shape) == shape else _MIXED
            for v, s in zip(equation.invars, states)
            if s is not None
        }
        return [axes.pop() if len(axes) == 1 else _MIXED] * n_out, None
    if name == "broadcast_in_dim" and states[0] not in (None, _MIXED) and len(states) == 1:
        return [params["broadcast_dimensions"][states[0]]], None
    if name in ("reshape", "copy", "copy_p") and len(states) == 1 and states[0] != _MIXED:
        same = tuple(equation.invars[0].aval.shape) == tuple(equation.outvars[0].aval.shape)
        return [states[0] if same else _MIXED], None
    if name == "dot_general":
        return [_MIXED], _moved_contraction(equation, states)
    return [_MIXED] * n_out, None


def _moved_contraction(equation: Any, states: list[int | None]) -> _Moved | None:
    """A :class:`_Moved` where the contraction is a constant matrix against a 1-D aligned
    value on its only axis."""
    (contracting, batch) = equation.params["dimension_numbers"]
    if any(batch) or len(states) != 2:
        return None
    for position in (0, 1):
        vector, matrix = states[1 - position], states[position]
        vector_var = equation.invars[1 - position]
        if (
            matrix is None
            and vector == 0
            and len(vector_var.aval.shape) == 1
            and tuple(contracting[1 - position]) == (0,)
            and len(contracting[position]) == 1
        ):
            return _Moved(position, int(contracting[position][0]))
    return None


def _bind(equation: Any, values: list) -> list:
    """The equation's outputs as the program computes them."""
    params = equation.primitive.get_bind_params(equation.params)
    if isinstance(params, tuple):  # older JAX: (functions, parameters)
        functions, params = params
        values = [*functions, *values]
    out = equation.primitive.bind(*values, **params)
    return list(out) if equation.primitive.multiple_results else [out]


def _evaluate(
    jaxpr: Any,
    consts: Sequence,
    args: Sequence,
    plan: dict,
    cache: Cache | None,
    element: jax.Array | None,
    path: tuple[int, ...],
    record: Cache,
) -> list:
    """``jaxpr`` at ``args``; with a cache, every planned contraction moved from its cached
    value by the change of its aligned operand at ``element``. Each planned contraction's
    value and aligned operand go into ``record``."""
    env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))

    def read(v: Any) -> Any:
        return v.val if isinstance(v, Literal) else env[v]

    for index, equation in enumerate(jaxpr.eqns):
        values = [read(v) for v in equation.invars]
        step = plan.get(index)
        key = (*path, index)
        if step is None:
            outs = _bind(equation, values)
        elif isinstance(step, _Moved):
            vector = values[1 - step.matrix_position]
            if cache is None:
                outs = _bind(equation, values)
            else:
                assert element is not None
                previous, previous_vector = cache[key]
                column = lax.dynamic_index_in_dim(
                    values[step.matrix_position], element, step.matrix_axis, keepdims=False
                )
                change = vector[element] - previous_vector[element]
                moved = column * change.astype(column.dtype)
                outs = [previous + moved.astype(previous.dtype)]
            record[key] = (outs[0], vector)
        else:
            called = _inner_program(equation.params)
            inner = getattr(called, "jaxpr", called)
            inner_consts = getattr(called, "consts", ())
            outs = _evaluate(inner, inner_consts, values, step, cache, element, key, record)
        for v, value in zip(equation.outvars, outs):
            env[v] = value
    return [read(v) for v in jaxpr.outvars]


class OneElementEvaluator:
    """A scalar function of two flat vectors ``(d, c)`` of one length, evaluated at a state
    that differs from the last one in one element only, with its contractions moved (module
    docstring). Build with :func:`one_element_evaluator`."""

    def __init__(self, closed: Any, plan: dict) -> None:
        self._closed = closed
        self._plan = plan

    def full(self, d: jax.Array, c: jax.Array) -> tuple[jax.Array, Cache]:
        """The function at ``(d, c)``, every operation as the program has it, and the cache
        of its contractions."""
        return self._run(d, c, None, None)

    def moved(
        self, cache: Cache, element: jax.Array, d: jax.Array, c: jax.Array
    ) -> tuple[jax.Array, Cache]:
        """The function at ``(d, c)``, which differ from the cache's state at ``element``
        only, and the cache at ``(d, c)``."""
        return self._run(d, c, cache, element)

    def _run(
        self, d: jax.Array, c: jax.Array, cache: Cache | None, element: jax.Array | None
    ) -> tuple[jax.Array, Cache]:
        record: Cache = {}
        closed = self._closed
        (value,) = _evaluate(
            closed.jaxpr, closed.consts, [d, c], self._plan, cache, element, (), record
        )
        return value, record


def one_element_evaluator(
    fn: Callable[[jax.Array, jax.Array], jax.Array], d: jax.Array, c: jax.Array
) -> OneElementEvaluator | None:
    """An evaluator of the scalar ``fn(d, c)`` (``d`` and ``c`` flat, one length) that moves
    its contractions by one element, or None where the program has no contraction it can move
    (then an evaluation costs what ``fn`` costs)."""
    if jnp.ndim(d) != 1 or np.shape(d) != np.shape(c):
        return None
    closed = jax.make_jaxpr(fn)(d, c)
    if len(closed.jaxpr.outvars) != 1:
        return None
    _, plan = _analyse(closed.jaxpr, [0, 0])
    return OneElementEvaluator(closed, plan) if plan else None
