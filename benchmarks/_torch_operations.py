"""Counting what eager torch dispatches (no JAX: the Pyro side's tests use it too)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["aten_operations_per_step"]


def aten_operations_per_step(advance: Callable[[Any], Any], state: Any, steps: int = 10) -> float:
    """Operations torch dispatches per call of ``state = advance(state)``, forward and
    backward, views included: a count that needs no GPU of what a GPU launches one by one
    (eager torch), averaged over ``steps`` calls."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    with Count():
        for _ in range(steps):
            state = advance(state)
    return Count.calls / steps
