"""The warmup's warnings, issued on the host from inside the compiled run.

NumPyro compiles warmup and sampling as one loop, so what the warmup finds (a chain that made
no move, a site switched to exact differences) reaches the user through host callbacks
(``jax.debug.callback``). JAX writes no program with a host callback to its persistent
compilation cache: the loop of a run with
:data:`~discrete_kernels.diagnosis.MIN_WARMUP_FOR_FROZEN_CHECK` or more warmup steps is
compiled again in every process (the guide's "Chains, resuming, compile").
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from discrete_kernels import diagnosis

__all__ = ["callback_when", "frozen_chain_check"]


def frozen_chain_check(
    new: Any,
    index: Any,
    num_warmup: int,
    owner: str,
    sites: Any,
    vectorized: bool,
    replicated: Any = None,
    causes: str = diagnosis.DISCRETE_NO_MOVE_CAUSES,
) -> Any:
    """``new`` (a state with ``num_moves`` and ``moves_at_half_warmup``) after draw ``index``,
    with the moves at half of the warmup recorded; at the end of warmup a warning for each
    chain that made no move since then (read on the host by a callback)."""
    if num_warmup < diagnosis.MIN_WARMUP_FOR_FROZEN_CHECK:
        return new

    def warn(num_moves):
        frozen = [int(c) for c in np.flatnonzero(np.ravel(np.asarray(num_moves)) == 0)]
        if frozen:
            chains = frozen if vectorized else None
            message = diagnosis.no_move_message(owner, sites, num_warmup, chains, causes)
            warnings.warn(message, stacklevel=1)

    at_half = jnp.where(
        index + 1 == diagnosis.frozen_check_start(num_warmup),
        new.num_moves,
        new.moves_at_half_warmup,
    )
    new = new._replace(moves_at_half_warmup=at_half)
    moves = new.num_moves - at_half  # moves in the second half of warmup
    if replicated is not None:  # the host callback reads it from one device
        moves = jax.lax.with_sharding_constraint(moves, replicated)
    last = index + 1 == num_warmup
    jax.lax.cond(
        last,
        lambda args: callback_when(args[0], warn, args[1]),
        lambda args: None,
        (last, moves),
    )
    return new


def callback_when(fire: Any, fn: Callable, *args: Any) -> None:
    """``jax.debug.callback(fn, *args)``, ``fn`` called only where ``fire`` holds, checked
    again on the host: under a transform of the whole run (``chain_method=jax.vmap``) a
    ``cond`` with a batched predicate runs both branches, and their callbacks, at every draw."""

    def host(fire: Any, *values: Any) -> None:
        if np.all(np.asarray(fire)):
            fn(*values)

    jax.debug.callback(host, fire, *args)
