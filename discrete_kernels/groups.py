"""A site's coordinates in groups, one per element of its plate axes, each group summed or
drawn over its joint values (a chain of states per animal: the occasions axis of a ``scan`` is
not a plate, but the animals are)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .domains import Domain, as_finite
from .tables import joint_values

__all__ = ["GroupLayout", "group_joint_values", "plate_groups_of"]


@dataclass(frozen=True)
class GroupLayout:
    """A leaf's coordinates in groups: one group per element of the leaf's plate axes, whose
    coordinates run along the other ("inner") axes and interact.

    Where every term that depends on the leaf is indexed by its plates but some axis is not
    a plate (the time axis of a ``scan`` or a Markov chain per animal), the log density
    splits as ``f(x) = C + sum_i g_i(x_i)`` over the groups ``x_i``, and each group can be
    summed or drawn over its ``S^m`` joint values (``m`` coordinates per group), as one
    coordinate with that many values.

    Attributes
    ----------
    shape : the leaf's shape (n...)
    inner_axes : the axes of ``shape`` that are not plates, in order
    """

    shape: tuple[int, ...]
    inner_axes: tuple[int, ...]

    @property
    def group_shape(self) -> tuple[int, ...]:
        """The leaf's shape with its inner axes of size 1: one entry per group."""
        return tuple(1 if a in self.inner_axes else n for a, n in enumerate(self.shape))

    @property
    def inner_shape(self) -> tuple[int, ...]:
        """The shape of one group's coordinates."""
        return tuple(self.shape[a] for a in self.inner_axes)

    @property
    def value_shape(self) -> tuple[int, ...]:
        """The leaf's shape with its plate axes of size 1: a joint value of one group, which
        broadcasts to every group."""
        return tuple(n if a in self.inner_axes else 1 for a, n in enumerate(self.shape))

    def group_index(self) -> np.ndarray:
        """The flat index of each coordinate's group, int array of ``shape``."""
        index = np.arange(int(np.prod(self.group_shape))).reshape(self.group_shape)
        return np.broadcast_to(index, self.shape)

    def inner_index(self) -> np.ndarray:
        """The flat index of each coordinate inside its group, int array of ``shape``."""
        index = np.arange(int(np.prod(self.value_shape))).reshape(self.value_shape)
        return np.broadcast_to(index, self.shape)


def group_joint_values(domain: Domain, layout: GroupLayout, max_count: int) -> np.ndarray | None:
    """Every joint value of one group of a leaf (:class:`GroupLayout`), shape
    (M, *layout.value_shape), int64; None when there are more than ``max_count`` or the
    domain bounds coordinates one by one (an ordinal's per-coordinate bounds differ between
    groups)."""
    finite = as_finite(domain)
    if getattr(finite, "lower", None) is not None or getattr(finite, "upper", None) is not None:
        if len(layout.inner_axes) != len(layout.shape):
            return None
    values = joint_values(finite, layout.inner_shape, max_count)
    if values is None:
        return None
    return values.reshape((-1, *layout.value_shape))


def plate_groups_of(
    shape: Sequence[int], event_shape: Sequence[int], frames: Sequence[tuple[str, int | None, int]]
) -> dict | None:
    """The plates among a leaf's dimensions where not all of them are plates
    (:func:`plate_dims_of` gives a reason): ``{plate name: dim}``, the groups of a
    :class:`GroupLayout`; None where the leaf has an event shape, no plate dimension, or one
    whose size is not its plate's.

    Parameters
    ----------
    shape, event_shape, frames : as for :func:`plate_dims_of`
    """
    if tuple(event_shape):
        return None
    by_dim = {dim: (name, int(size)) for name, dim, size in frames if dim is not None}
    ndim = len(shape)
    dims = {}
    for axis, size in enumerate(shape):
        if axis - ndim in by_dim:
            name, plate_size = by_dim[axis - ndim]
            if plate_size != size:
                return None
            dims[name] = axis - ndim
    return dims or None
