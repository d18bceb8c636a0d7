"""Programs that run once (a chain's start, a setup probe), compiled without the optimisations
that pay off only in a loop.

XLA's CPU backend spends most of a small model's compilation in LLVM's optimisation passes;
for a program run once (``kernel.init``: the start values, their log density and gradient),
those passes cost more than they save. On the CPU, :func:`run_once` compiles with
``xla_backend_optimization_level=0``: the same operations, computed the same way (XLA does no
fast-math reassociation by default), about half the compile time of the start (1.1-1.5 s
against 2.3-2.4 s for the 20x20 Ising model with 4 chains on a loaded 2-core machine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

__all__ = ["ONCE_OPTIONS", "run_once"]

#: XLA options of a program run once (the CPU backend's optimisation level)
ONCE_OPTIONS: dict[str, str | bool] = {"xla_backend_optimization_level": "0"}


def run_once(fn: Callable, *args: Any) -> Any:
    """``jax.jit(fn)(*args)``, compiled with :data:`ONCE_OPTIONS` on the CPU. Under a trace
    (tracers among ``args``) or on another backend: a plain ``jax.jit`` call."""
    compiled = jax.jit(fn)
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(args))
    if traced or jax.default_backend() != "cpu":
        return compiled(*args)
    return compiled.lower(*args).compile(compiler_options=ONCE_OPTIONS)(*args)
