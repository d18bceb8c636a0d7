"""Chains and EBM training over several processes (several hosts) with JAX's multi-controller
runtime.

Every process runs the same script: :func:`initialize` (``jax.distributed.initialize`` with
bounded waits) first, then the ordinary code. ``jax.devices()`` then lists every process's
devices, and the kernels' vectorised chains (``chain_method="vectorized"``) and
:func:`numpyro_ext.ebm.train`'s batch and chains are split over that global mesh, each
process stepping the chains on its own devices; the program and its random keys are the same
in every process, so the draws are those of a one-process run with the same key (NumPyro
splits the run's key into one key per chain). The draws stay where they were made until
:func:`gather` or :func:`to_arviz` collects them; the EBM's parameters are replicated.
"""

from __future__ import annotations

import copy
from typing import Any

import jax
import numpy as np

from .arviz import to_arviz as _to_arviz

__all__ = ["gather", "gathered", "initialize", "to_arviz"]


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    timeout_s: int = 60,
    heartbeat_timeout_s: int = 10,
) -> None:
    """``jax.distributed.initialize`` with waits that end: call it first in every process.

    Parameters
    ----------
    coordinator_address : str, optional
        ``"host:port"`` of process 0's coordinator; with ``num_processes`` and ``process_id``
        left out too, JAX reads them from its environment (``JAX_COORDINATOR_ADDRESS``,
        ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``) or a cluster it detects (Slurm, ...).
    num_processes, process_id : int, optional
        The run's process count and this process's index.
    timeout_s : int
        Seconds to wait for every process to join before failing.
    heartbeat_timeout_s : int
        Seconds without news from a process after which the others stop with an error (a
        process that died ends the run instead of leaving the others waiting).

    Notes
    -----
    On CPU the collectives between processes use gloo (JAX's default CPU collectives, set
    explicitly here).
    """
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address,
        num_processes,
        process_id,
        initialization_timeout=int(timeout_s),
        heartbeat_timeout_seconds=int(heartbeat_timeout_s),
        shutdown_timeout_seconds=int(timeout_s),
    )


def gather(tree: Any) -> Any:
    """Every array of ``tree`` whole on this process, as NumPy arrays (call it in every
    process: it communicates).

    An array split over several processes' devices is collected (``process_allgather``); an
    array this process holds whole (a replicated value, or a run that stayed on one device)
    is converted as it is.
    """
    from jax.experimental import multihost_utils

    def whole(x: Any) -> Any:
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
                return jax.random.wrap_key_data(whole(jax.random.key_data(x)), impl=x.dtype)
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)

    return jax.tree.map(whole, tree)


def gathered(mcmc: Any) -> Any:
    """A copy of a finished ``numpyro.infer.MCMC`` whose draws and extra fields are whole on
    this process (:func:`gather`): ``get_samples``, ``get_extra_fields``,
    ``print_summary`` and ``arviz.from_numpyro`` work on it as after a one-process run. Call it
    in every process."""
    if getattr(mcmc, "_states", None) is None:
        raise ValueError("gathered: this MCMC has no draws yet; call mcmc.run(...) first.")
    whole = copy.copy(mcmc)
    whole._states = gather(mcmc._states)
    whole._states_flat = None
    return whole


def to_arviz(mcmc: Any, **kwargs: Any) -> Any:
    """:func:`numpyro_ext.to_arviz` of the whole multi-process run, chains numbered as in one
    process (call it in every process; each gets the same data, write it from process 0).

    Parameters
    ----------
    mcmc : numpyro.infer.MCMC
        After ``run``, in every process.
    **kwargs
        As for :func:`numpyro_ext.to_arviz`.

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        As :func:`numpyro_ext.to_arviz`.
    """
    return _to_arviz(gathered(mcmc), **kwargs)
