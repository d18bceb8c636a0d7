"""Chains split over all local devices with JAX's sharding API.

A vectorised run keeps its chains on one leading axis; placing that axis on a one-dimensional
``'chains'`` mesh of the local devices is all it takes: ``jit`` partitions the rest of the
computation to follow the inputs (GSPMD), each device steps its own chains and nothing but
the draw index crosses devices. Several hosts: start every process with
``jax.distributed.initialize()`` and each one shards its own chains over its local devices
(see the guide, "Chains across devices").
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

__all__ = ["chain_sharding", "shard_chains", "shard_leading_axis"]


def chain_sharding(sizes: Mapping[str, int], owner: str, opt_out: str = "") -> Any:
    """A ``NamedSharding`` splitting a leading axis over all local devices, or None.

    None with one local device, or (with a warning naming ``owner`` and ``sizes``) when one
    of ``sizes`` (the lengths that would be split: chains, a data batch) is not a multiple
    of the number of devices: the run then stays on one device. ``opt_out`` tells the user
    how to ask for one device without the warning, where there is a way.
    """
    devices = jax.local_devices()
    if len(devices) < 2:
        return None
    if any(size % len(devices) for size in sizes.values()):
        listed = " and ".join(f"{name}={size}" for name, size in sizes.items())
        warnings.warn(
            f"{owner}: {listed} must be multiples of the {len(devices)} local devices to be "
            f"split across them; running on one device.{opt_out}",
            stacklevel=3,
        )
        return None
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    return NamedSharding(Mesh(np.array(devices), ("chains",)), PartitionSpec("chains"))


def shard_leading_axis(tree: Any, sharding: Any) -> Any:
    """``tree`` with every array of at least one dimension split along its leading axis and
    every scalar replicated over the mesh of ``sharding``."""
    from jax.sharding import NamedSharding, PartitionSpec

    replicated = NamedSharding(sharding.mesh, PartitionSpec())
    return jax.tree.map(lambda x: jax.device_put(x, sharding if np.ndim(x) else replicated), tree)


def shard_chains(state: Any, owner: str, enabled: bool = True) -> tuple[Any, Any]:
    """A vectorised kernel state (every array with a leading chain axis, ``state.i`` among
    them) split over all local devices, and the sharding that replicates a value over them
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
