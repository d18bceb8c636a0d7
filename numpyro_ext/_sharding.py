"""Chains split over all devices with JAX's sharding API.

A vectorised run keeps its chains on one leading axis; placing that axis on a one-dimensional
``'chains'`` mesh of the devices is all it takes: ``jit`` partitions the rest of the
computation to follow the inputs (GSPMD), each device steps its own chains and nothing but
the draw index crosses devices. The mesh holds every device of the run (``jax.devices()``):
the local ones of one process, or, after ``jax.distributed.initialize()`` in every process of
a multi-process run (:mod:`numpyro_ext.distributed`), all processes' devices; each process then
steps the chains on its own devices and the same program runs everywhere.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

__all__ = ["chain_sharding", "shard_chains", "shard_leading_axis"]


def chain_sharding(sizes: Mapping[str, int], owner: str, opt_out: str = "") -> Any:
    """A ``NamedSharding`` splitting a leading axis over all devices of the run, or None.

    None with one device, or (with a warning naming ``owner`` and ``sizes``) when one
    of ``sizes`` (the lengths that would be split: chains, a data batch) is not a multiple
    of the number of devices: the run then stays on one device. ``opt_out`` tells the user
    how to ask for one device without the warning, where there is a way.
    """
    devices = jax.devices()  # every process's devices: the global mesh of a multi-process run
    if len(devices) < 2:
        return None
    if any(size % len(devices) for size in sizes.values()):
        kind = "local devices" if jax.process_count() == 1 else "devices of all processes"
        listed = " and ".join(f"{name}={size}" for name, size in sizes.items())
        warnings.warn(
            f"{owner}: {listed} must be multiples of the {len(devices)} {kind} to be "
            f"split across them; running on one device.{opt_out}",
            stacklevel=3,
        )
        return None
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    return NamedSharding(Mesh(np.array(devices), ("chains",)), PartitionSpec("chains"))


def shard_leading_axis(tree: Any, sharding: Any) -> Any:
    """``tree`` with every array of at least one dimension split along its leading axis and
    every scalar replicated over the mesh of ``sharding``. With several processes every process
    holds the whole value (the same program from the same keys) and places the rows of its
    own devices."""
    from jax.sharding import NamedSharding, PartitionSpec

    replicated = NamedSharding(sharding.mesh, PartitionSpec())
    if jax.process_count() == 1:
        return jax.tree.map(
            lambda x: jax.device_put(x, sharding if np.ndim(x) else replicated), tree
        )

    def place(x: Any) -> Any:
        # every process holds the whole value (the same program, the same keys): each one
        # puts the rows of its own devices
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            return jax.random.wrap_key_data(place(jax.random.key_data(x)), impl=x.dtype)
        host = np.asarray(jax.device_get(x))
        target = sharding if np.ndim(x) else replicated
        return jax.make_array_from_callback(host.shape, target, lambda index: host[index])

    return jax.tree.map(place, tree)


def shard_chains(state: Any, owner: str, enabled: bool = True) -> tuple[Any, Any]:
    """A vectorised kernel state (every array with a leading chain axis, ``state.i`` among
    them) split over all devices of the run, and the sharding that replicates a value over them
    (None when nothing was split: ``enabled`` False, one device, or under a JAX
    transformation, where placement is the caller's)."""
    if not enabled or isinstance(state.i, jax.core.Tracer):
        return state, None
    sharding = chain_sharding(
        {"num_chains": state.i.shape[0]},
        owner,
        " Set shard_chains = False on the kernel to keep the chains on one device quietly.",
    )
    if sharding is None:
        return state, None
    from jax.sharding import NamedSharding, PartitionSpec

    return shard_leading_axis(state, sharding), NamedSharding(sharding.mesh, PartitionSpec())
