"""A model's trace at a prior draw of its sites, computed by one compiled program.

NumPyro's :func:`~numpyro.infer.gibbs.prototype_trace` runs the model eagerly, and each of its
operations is compiled on its own the first time it runs: on a small model (the 8x8 Ising
model, a 20-weight binary network) the first trace took 1.2-1.4 s on this project's 2-core
machine, against 0.25-0.3 s for the same trace in one program compiled with the run-once
options (:mod:`numpyro_ext._once`). A kernel's setup draws several such traces (its start,
the probes' points, the prior draws of the ``exact_sites="auto"`` check), so the program is
kept and run again for each key.

The trace's arrays (site values, distributions' parameters, masks, scales) come out of the
program; the rest (site names and types, plate frames, ``infer`` dicts) is read once while it
is traced. Any model the program cannot hold (a Python condition on an argument's values, a
distribution whose parameters do not survive NumPyro's pytree flattening, a non-hashable
argument that is not an array) gets :func:`~numpyro.infer.gibbs.prototype_trace` as before,
and so do calls under a JAX transformation (a traced key).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from numpyro.infer.gibbs import conditioned, prototype_trace

from ._once import compile_once

__all__ = ["prior_trace"]

#: compiled traces kept (per model, static arguments and argument shapes), least recent out
_MAX_KEPT = 16


class _Compiled:
    """One model's compiled trace: the executable, the site fields that hold no traced value
    (read while the program was traced), and the model's distributions as traced (checked
    against the program's output once)."""

    def __init__(self, executable: Any, static_sites: dict, traced_fns: dict | None) -> None:
        self.executable = executable
        self.static_sites = static_sites
        self.traced_fns = traced_fns


_KEPT: OrderedDict[tuple, _Compiled | None] = OrderedDict()
_MISSING: Any = object()


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray))


def _has_tracer(tree: Any) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree))


def _aval(x: Any) -> tuple:
    return np.shape(x), str(x.dtype), bool(getattr(x, "weak_type", False))


def _split_arguments(model_args: tuple, model_kwargs: dict) -> tuple[Any, tuple, list]:
    """``(treedef, static leaves, arrays)``: the arguments' arrays go into the program (as
    ``None`` among the static leaves), everything else is part of the cache key."""
    leaves, treedef = jax.tree.flatten((model_args, model_kwargs))
    static = tuple(None if _is_array(x) else x for x in leaves)
    return treedef, static, [x for x in leaves if _is_array(x)]


def _compile(model: Callable, rng_key: Any, treedef: Any, static: tuple, arrays: list) -> _Compiled:
    captured: dict[str, Any] = {}

    def program(key: Any, array_args: list) -> dict:
        it = iter(array_args)
        leaves = [next(it) if s is None else s for s in static]
        args, kwargs = jax.tree.unflatten(treedef, leaves)
        model_trace = prototype_trace(conditioned(model), key, args, kwargs)
        out: dict[str, dict] = {}
        statics: dict[str, dict] = {}
        for name, site in model_trace.items():
            out[name] = {k: v for k, v in site.items() if _has_tracer(v)}
            statics[name] = {k: v for k, v in site.items() if k not in out[name]}
        captured["statics"] = statics
        captured["fns"] = {n: s["fn"] for n, s in model_trace.items() if "fn" in out[n]}
        return out

    lowered = jax.jit(program).lower(rng_key, arrays)
    executable = compile_once(lowered)
    return _Compiled(executable, captured["statics"], captured["fns"])


def _survives(traced_fns: dict, model_trace: dict) -> bool:
    """Whether every distribution rebuilt from the program's output has the attributes of
    the model's (a user's distribution may keep parameters outside its declared fields)."""
    for name, fn in traced_fns.items():
        again = model_trace[name]["fn"]
        before, after = getattr(fn, "__dict__", {}), getattr(again, "__dict__", {})
        if type(again) is not type(fn) or not set(before) <= set(after):
            return False
    return True


def prior_trace(
    model: Callable, rng_key: Any, model_args: tuple, model_kwargs: dict | None
) -> dict:
    """The trace of ``conditioned(model)`` at a draw from the prior (NumPyro's
    ``init_to_sample``) with ``rng_key``: what ``prototype_trace(conditioned(model), ...)``
    returns, computed by one compiled program kept for the next key."""
    model_kwargs = {} if model_kwargs is None else model_kwargs
    if _has_tracer((rng_key, model_args, model_kwargs)) or jax.default_backend() != "cpu":
        return prototype_trace(conditioned(model), rng_key, model_args, model_kwargs)
    try:
        treedef, static, arrays = _split_arguments(model_args, model_kwargs)
        key_avals = tuple(_aval(x) for x in [rng_key, *arrays])
        cache_key = (model, treedef, static, key_avals)
        hash(cache_key)
    except TypeError:  # an argument that is neither an array nor hashable
        return prototype_trace(conditioned(model), rng_key, model_args, model_kwargs)
    compiled = _KEPT.get(cache_key, _MISSING)
    if compiled is _MISSING:
        try:
            compiled = _compile(model, rng_key, treedef, static, arrays)
        except Exception:  # the model needs concrete values: the eager trace decides
            compiled = None
        _KEPT[cache_key] = compiled
        if len(_KEPT) > _MAX_KEPT:
            _KEPT.popitem(last=False)
    _KEPT.move_to_end(cache_key)
    if compiled is None:
        return prototype_trace(conditioned(model), rng_key, model_args, model_kwargs)
    try:
        out = compiled.executable(rng_key, arrays)
    except TypeError:  # arguments the program was not compiled for (a committed device)
        return prototype_trace(conditioned(model), rng_key, model_args, model_kwargs)
    model_trace = OrderedDict(
        (name, {**rest, **out[name]}) for name, rest in compiled.static_sites.items()
    )
    if compiled.traced_fns is not None:  # the first run: check the distributions once
        if not _survives(compiled.traced_fns, model_trace):
            _KEPT[cache_key] = None
            return prototype_trace(conditioned(model), rng_key, model_args, model_kwargs)
        compiled.traced_fns = None
    return model_trace
