"""``torch.compile`` as the library uses it: one program per call site, the compiler's notes on
the library's own code silenced, and a compiler failure that names the way out.

Eager torch pays a few microseconds per operation, so a small model's step or EBM iteration is
mostly dispatch; compiled, it is one call (``torch_compile=True`` of the Pyro kernels and of
:func:`pyro_ext.ebm.train`).
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["compiled", "quiet_tracing"]

#: what ``torch.compile`` prints while it traces the library's array-API code (harmless: the
#: cached helpers only classify array types) and while it imports its own modules
_TRACE_NOISE = (
    ".*Dynamo detected a call to a `functools.lru_cache`-wrapped function.*",
    ".*`torch.jit.script_method` is deprecated.*",
)


@contextmanager
def quiet_tracing():
    """``torch.compile``'s notes on the library's array-API helpers, silenced."""
    with warnings.catch_warnings():
        for message in _TRACE_NOISE:
            warnings.filterwarnings("ignore", message=message)
        yield


def _with_own_code(fn: Callable) -> Callable:
    """``fn`` with a copy of its code object. Dynamo keeps a function's compiled versions on
    its code object, at most ``torch._dynamo.config.recompile_limit`` (8) of them, and every
    kernel's step is a closure of the same code: the ninth kernel of a process would run
    eagerly (measured: 1,400 µs a step instead of 160)."""
    code = fn.__code__.replace()  # a new code object with the same contents
    own = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    own.__kwdefaults__ = fn.__kwdefaults__
    return own


def compiled(fn: Callable, owner: str) -> Callable:
    """``torch.compile(fn)`` with static shapes, its first call (where it compiles) under
    :func:`quiet_tracing` (entering that context at every call costs about 10 µs, a small
    model's step about 150); a compiler error is raised again as a ``RuntimeError`` that
    starts with ``owner`` and names ``torch_compile=False``."""
    with quiet_tracing():
        program = torch.compile(_with_own_code(fn), dynamic=False)
    traced = False

    def call(*args: Any) -> Any:
        nonlocal traced
        try:
            if traced:
                return program(*args)
            with quiet_tracing():
                out = program(*args)
            traced = True
            return out
        except Exception as error:  # torch's compiler errors are long; name the way out
            first = str(error).strip().splitlines()[0][:300] if str(error) else ""
            raise RuntimeError(
                f"{owner}: torch_compile=True: torch.compile failed "
                f"({type(error).__name__}: {first}); pass torch_compile=False to run eagerly."
            ) from error

    return call
