"""What runs over several processes share, in both PPLs: which chains a process owns, one
random stream per chain whatever the process count, and the merge of per-process results
into one set of chains numbered as in a one-process run.

The adapters' ``distributed`` modules (:mod:`numpyro_ext.distributed`,
:mod:`pyro_ext.distributed`) start the processes' runtime (``jax.distributed`` or
``torch.distributed``) and move the values; this module holds only the bookkeeping, without a
framework.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .validation import check_int

__all__ = ["chain_block", "chain_seeds", "merge_chain_blocks"]


def chain_block(num_chains: int, num_processes: int, process_id: int) -> range:
    """The chains (global indices, from 0) that process ``process_id`` runs.

    Contiguous blocks in process order, as even as they divide: the first
    ``num_chains % num_processes`` processes run one chain more. Concatenating the blocks in
    process order numbers the chains as a one-process run does.

    Parameters
    ----------
    num_chains : int
        Chains of the whole run, at least 1.
    num_processes : int
        Processes of the run, at least 1.
    process_id : int
        This process, ``0 <= process_id < num_processes``.

    Returns
    -------
    range
        This process's chains (empty when there are more processes than chains).
    """
    num_chains = check_int("chain_block", "num_chains", num_chains, minimum=1)
    num_processes = check_int("chain_block", "num_processes", num_processes, minimum=1)
    process_id = check_int("chain_block", "process_id", process_id, minimum=0)
    if process_id >= num_processes:
        raise ValueError(
            f"chain_block: process_id={process_id} must be below num_processes={num_processes}."
        )
    base, extra = divmod(num_chains, num_processes)
    start = process_id * base + min(process_id, extra)
    return range(start, start + base + (process_id < extra))


def chain_seeds(seed: int, num_chains: int) -> list[int]:
    """One seed per chain, from one run seed: chain ``c`` gets the same seed in every layout
    (one process or many), and no two chains share a random stream.

    The seeds are NumPy ``SeedSequence(seed).spawn(num_chains)`` children, each reduced to a
    32-bit integer (what ``pyro.set_rng_seed`` takes: it seeds NumPy's legacy generator too).

    Parameters
    ----------
    seed : int
        The run's seed, at least 0.
    num_chains : int
        Chains of the whole run, at least 1.

    Returns
    -------
    list of int
        ``num_chains`` seeds, chain order.
    """
    seed = check_int("chain_seeds", "seed", seed, minimum=0)
    num_chains = check_int("chain_seeds", "num_chains", num_chains, minimum=1)
    children = np.random.SeedSequence(seed).spawn(num_chains)
    return [int(child.generate_state(1, np.uint32)[0]) for child in children]


def merge_chain_blocks(blocks: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-process results, each variable shaped ``(chains of that process, draw, ...)``, as
    one mapping of ``(chain, draw, ...)`` arrays, the blocks concatenated in process order.

    Parameters
    ----------
    blocks : sequence of mappings of str to numpy.ndarray
        One per process, in process order; a process without chains gives an empty mapping.

    Returns
    -------
    dict of str to numpy.ndarray
        Every variable with all chains, numbered as in a one-process run.

    Raises
    ------
    ValueError
        When the processes' variables differ in name or in shape after the chain axis.
    """
    filled = [(rank, block) for rank, block in enumerate(blocks) if block]
    if not filled:
        return {}
    first_rank, first = filled[0]
    for rank, block in filled:
        if sorted(block) != sorted(first):
            raise ValueError(
                f"process {rank} has the variables {sorted(block)}, process {first_rank} "
                f"has {sorted(first)}; every process must record the same ones."
            )
        for name, value in block.items():
            if np.shape(value)[1:] != np.shape(first[name])[1:]:
                raise ValueError(
                    f"{name!r} is shaped {np.shape(value)} in process {rank} and "
                    f"{np.shape(first[name])} in process {first_rank}: only the chain axis "
                    "(the first) may differ."
                )
    return {
        name: np.concatenate([np.asarray(block[name]) for _, block in filled]) for name in first
    }
