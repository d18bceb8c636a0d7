"""Programs that run once (a chain's start, a setup probe), compiled without the optimisations
that pay off only in a loop.

XLA's CPU backend spends most of a small model's compilation in LLVM's optimisation passes;
for a program run once (``kernel.init``: the start values, their log density and gradient),
those passes cost more than they save. On the CPU, :func:`run_once` compiles with
``xla_backend_optimization_level=0``: the same operations, computed the same way (XLA does no
fast-math reassociation by default), about half the compile time of the start (1.1-1.5 s
against 2.3-2.4 s for the 20x20 Ising model with 4 chains on a loaded 2-core machine), and
without XLA's fusion emitters where the installed XLA has that option (:data:`ONCE_OPTIONS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

__all__ = ["ONCE_OPTIONS", "SMALL_PROBE_EVALUATIONS", "compile_once", "jit_once", "run_once"]

#: XLA options of a program run once: the CPU backend's optimisation level, and the legacy
#: emitters in place of the fusion emitters (an MLIR pipeline that takes most of the rest of a
#: small program's compile time: ``ising_terms``'s chains' start and prior trace compiled in
#: 0.42 s against 0.91 s, the same operations)
ONCE_OPTIONS: dict[str, str | bool] = {
    "xla_backend_optimization_level": "0",
    "xla_cpu_use_fusion_emitters": False,
}


def compile_once(lowered: Any) -> Any:
    """``lowered.compile`` with :data:`ONCE_OPTIONS`; an XLA that does not know one of them
    (the options change between releases) compiles without it, and later calls do too."""
    while True:
        try:
            return lowered.compile(compiler_options=ONCE_OPTIONS)
        except jax.errors.JaxRuntimeError as error:
            unknown = [name for name in ONCE_OPTIONS if f"'{name}'" in str(error)]
            if "No such compile option" not in str(error) or not unknown:
                raise
            del ONCE_OPTIONS[unknown[0]]


def run_once(fn: Callable, *args: Any) -> Any:
    """``jax.jit(fn)(*args)``, compiled with :data:`ONCE_OPTIONS` on the CPU. Under a trace
    (tracers among ``args``) or on another backend: a plain ``jax.jit`` call."""
    compiled = jax.jit(fn)
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(args))
    if traced or jax.default_backend() != "cpu":
        return compiled(*args)
    return compile_once(compiled.lower(*args))(*args)


#: model evaluations of a setup probe's call up to which :func:`jit_once` compiles it without
#: the optimisations: at 800 (a 20-weight network's tables) the setup took 1 s less; at
#: 180,000 (a 300-step chain's tables) the unoptimised probe ran 2.2x as long
SMALL_PROBE_EVALUATIONS = 2**14


def _dtype_of(x: Any) -> str:
    dtype = getattr(x, "dtype", None)
    return str(dtype) if dtype is not None else str(np.result_type(x))


def jit_once(fn: Callable, evaluations: int = 0) -> Callable:
    """``jax.jit(fn)`` for a setup probe called a few times, of ``evaluations`` model
    evaluations a call: up to :data:`SMALL_PROBE_EVALUATIONS`, compiled with
    :data:`ONCE_OPTIONS` on the CPU at its first call, the program kept for later calls with
    arguments of the same shapes (others compile again). A larger probe, a call under a trace
    or on another backend: a plain ``jax.jit``."""
    compiled = jax.jit(fn)
    if evaluations > SMALL_PROBE_EVALUATIONS:
        return compiled
    kept: dict[Any, Any] = {}

    def call(*args: Any) -> Any:
        traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(args))
        if traced or jax.default_backend() != "cpu":
            return compiled(*args)
        key = (
            jax.tree.structure(args),
            tuple((np.shape(x), _dtype_of(x)) for x in jax.tree.leaves(args)),
        )
        if key not in kept:
            kept[key] = compile_once(compiled.lower(*args))
        return kept[key](*args)

    return call
