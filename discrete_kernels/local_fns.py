"""The local functions the adapters hand to a step: ``leaves -> (f, locals)``
(:data:`LocalFn`), and the wrappers that let a sampler evaluate less than every leaf's local
information where it reads less (one leaf, one colour's rows, one coordinate's row, the
per-coordinate terms)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = [
    "LOG_DENSITY_ONLY",
    "ElementTermsFn",
    "LocalFn",
    "LocalFnByLeaf",
    "LocalFnWithRows",
    "LocalFnWithTerms",
]

LocalFn = Callable[[tuple], tuple]
"""``leaves -> (f, locals)``: the log density of a tuple of leaves and, per leaf, its local
information (a gradient of the leaf's shape, or a table with a trailing axis of candidates)."""

ElementTermsFn = Callable[[tuple], tuple]
"""``leaves -> terms``: per leaf, an array ``g`` of the leaf's shape whose element ``g_i``
depends on coordinate ``i`` of that leaf only, such that the log density is ``sum_j sum_i
g_j,i`` plus terms that no discrete coordinate changes (the adapter verifies it at setup)."""


@dataclasses.dataclass(frozen=True)
class LocalFnWithTerms:
    """A :data:`LocalFn` that can also evaluate each leaf's per-coordinate terms
    (:data:`ElementTermsFn`); the adapters pass one where :attr:`Sites.per_coordinate_mh`."""

    local_fn: LocalFn
    element_terms: ElementTermsFn

    def __call__(self, leaves: tuple) -> tuple:
        return self.local_fn(leaves)


@dataclasses.dataclass(frozen=True)
class LocalFnWithRows:
    """A :data:`LocalFn` that can also evaluate one coordinate's row of a leaf's exact table:
    ``row(leaves, j, i)``, shape (S,), the log density with flat coordinate ``i`` (an integer
    array) of leaf ``j`` set to each of its ``S`` values, ``S`` evaluations instead of the
    table's ``N (S - 1)``. The adapters pass one for a sampler that sweeps a site one coordinate
    at a time (:class:`~discrete_kernels.samplers.plate_gibbs.PlateGibbs`'s last resort)."""

    local_fn: LocalFn
    row: Callable[[tuple, int, Any], Any]

    def __call__(self, leaves: tuple) -> tuple:
        return self.local_fn(leaves)


@dataclasses.dataclass(frozen=True)
class LocalFnByLeaf:
    """A :data:`LocalFn` that can also evaluate one leaf's local information alone:
    ``leaf_local(leaves, j) -> (f, locals)`` with entry ``j`` of ``locals`` computed and the
    others None (:data:`LOG_DENSITY_ONLY`: every one None). An eager adapter (Pyro) passes one
    where a site has tables or several leaves: a sampler that updates them in turn
    (:class:`~discrete_kernels.samplers.plate_gibbs.PlateGibbs`) reads only the next leaf's
    table between two draws, and computing every leaf's after each draw costs ``L`` times as
    much for ``L`` leaves. Under ``jit`` the compiler drops unread tables itself, so the
    NumPyro adapter passes one only for a coloured site (below), its ``leaf_local`` the whole
    ``local_fn``.

    ``colour_local(leaves, j, c) -> (f, locals)``, where given, computes only the rows of
    colour ``c`` of a coloured leaf ``j``'s table (entry ``j``; its other rows uniform): the
    draw of colour ``c`` reads those rows alone, and the whole table costs ``C`` evaluations
    per value where one colour's costs one. The compiler cannot drop the other colours' rows
    (one sum collects every colour's terms), so NumPyro passes one too, with
    ``complete_at_end``: the state a step returns keeps every table (a compiled loop's carry
    keeps its structure), so after a sweep's last draw every table is computed, not the log
    density alone. A sweep then costs ``(2C - 1) x S`` evaluations (``C x S`` without
    ``complete_at_end``) instead of ``C^2 x S``; the other entries of ``locals`` may then be
    computed too (the compiler drops what is not read)."""

    local_fn: LocalFn
    leaf_local: Callable[[tuple, int], tuple]
    colour_local: Callable[[tuple, int, int], tuple] | None = None
    complete_at_end: bool = False

    def __call__(self, leaves: tuple) -> tuple:
        return self.local_fn(leaves)


#: ``leaf_local``'s index for the log density alone (every local None): the end of a
#: :class:`~discrete_kernels.samplers.plate_gibbs.PlateGibbs` sweep, whose tables the next
#: step computes where it reads them (a ``Gibbs`` block's next step starts from new
#: conditioning and recomputes them anyway)
LOG_DENSITY_ONLY = -1
