"""Chains and EBM training over several processes (several hosts) with ``torch.distributed``:
one process per group of chains (``torchrun --nnodes ... --nproc-per-node ...``), gloo on CPU
and NCCL where there are GPUs.

:func:`run_chains` runs each process's block of chains (:func:`discrete_kernels.distributed.
chain_block`), each chain in its own ``pyro.infer.MCMC`` from its own seed
(:func:`discrete_kernels.distributed.chain_seeds`): chain ``c`` makes the same draws whatever
the number of processes; the draws and statistics are gathered once at the end into one ArviZ
result. :func:`train` is data-parallel training of an energy: every process takes its share
of the batch and of the chains, the gradients are averaged over the processes in every step
(all-reduce), and the parameters stay the same in every process (CD and PCD: those of the
one-process run).
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pyro
import torch
import torch.distributed as dist
from torch import nn

from discrete_kernels.arviz_export import from_arrays
from discrete_kernels.distributed import chain_block, chain_seeds, merge_chain_blocks
from discrete_kernels.validation import check_int

from . import ebm
from .arviz import chain_arrays

__all__ = ["initialize", "rank_and_size", "run_chains", "shutdown", "train"]


def initialize(backend: str | None = None, *, timeout_s: float = 60.0, **kwargs: Any) -> None:
    """``torch.distributed.init_process_group`` with a bounded wait: call it first in every
    process (``torchrun`` sets ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE``;
    without it pass ``init_method``, ``rank`` and ``world_size``).

    Parameters
    ----------
    backend : str, optional
        ``"nccl"`` when CUDA is available, else ``"gloo"``.
    timeout_s : float
        Seconds a process waits for the others (joining, and in every collective) before it
        fails: a process that died ends the run with an error instead of a hang.
    **kwargs
        Passed to ``init_process_group`` (``init_method``, ``rank``, ``world_size``).
    """
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=float(timeout_s)), **kwargs)
    # gloo's process group destroyed during interpreter exit aborts the process ("terminate
    # called without an active exception"): leave it before then
    atexit.register(shutdown)


def shutdown() -> None:
    """Leave the process group (``torch.distributed.destroy_process_group``); called at exit
    by itself after :func:`initialize`, and harmless without a process group."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        # the process group can live on in reference cycles; collected at interpreter exit,
        # its threads would release their last tensors without an interpreter to run on and
        # abort the process: collect it now, while they can
        gc.collect()


def rank_and_size() -> tuple[int, int]:
    """This process's rank and the number of processes (``(0, 1)`` without a process group)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _all_gather(value: Any) -> list[Any]:
    """Every process's ``value``, in rank order (one collective)."""
    _, size = rank_and_size()
    if size == 1:
        return [value]
    gathered: list[Any] = [None] * size
    dist.all_gather_object(gathered, value)
    return gathered


def run_chains(
    make_mcmc: Callable[[], Any], num_chains: int, seed: int, *args: Any, **kwargs: Any
) -> Any:
    """Run ``num_chains`` chains split over the processes and return them all as ArviZ data
    (the same on every process; call it in every process).

    Parameters
    ----------
    make_mcmc : callable
        Builds a fresh one-chain ``pyro.infer.MCMC`` (its kernel included), e.g.
        ``lambda: MCMC(px.DMALA(model), num_samples=1000, warmup_steps=500)``.
    num_chains : int
        Chains of the whole run.
    seed : int
        The run's seed; chain ``c`` runs from ``chain_seeds(seed, num_chains)[c]``.
    *args, **kwargs
        Passed to each ``mcmc.run``.

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        As :func:`pyro_ext.to_arviz`, chains numbered as in a one-process run.
    """
    num_chains = check_int("run_chains", "num_chains", num_chains, minimum=1)
    rank, size = rank_and_size()
    seeds = chain_seeds(seed, num_chains)
    posteriors, statistics = [], []
    for chain in chain_block(num_chains, size, rank):
        pyro.set_rng_seed(seeds[chain])
        mcmc = make_mcmc()
        if mcmc.num_chains != 1:
            raise ValueError(
                f"run_chains: make_mcmc must build a one-chain MCMC (it has {mcmc.num_chains}); "
                "the chains are spread over the processes by num_chains."
            )
        mcmc.run(*args, **kwargs)
        posterior, stats = chain_arrays(mcmc)
        posteriors.append(posterior)
        statistics.append(stats)
    local_posterior = merge_chain_blocks(posteriors)
    has_stats = all(stats is not None for stats in statistics)
    local_stats = (
        merge_chain_blocks([s for s in statistics if s is not None]) if has_stats else None
    )
    blocks = _all_gather((local_posterior, local_stats))
    posterior = merge_chain_blocks([block[0] for block in blocks])
    with_chains = [block for block in blocks if block[0]]
    sample_stats = None
    if all(block[1] is not None for block in with_chains):
        sample_stats = merge_chain_blocks([block[1] for block in with_chains])
    return from_arrays(posterior, sample_stats)


def _share(total: int, option: str, size: int) -> int:
    if total % size:
        raise ValueError(
            f"train: {option}={total} must be a multiple of the {size} processes (each takes "
            "an equal share)."
        )
    return total // size


def _gather_rows(values: torch.Tensor) -> torch.Tensor:
    """Every process's ``values`` (n, ...) joined along the first axis, in rank order."""
    blocks = [torch.empty_like(values) for _ in range(rank_and_size()[1])]
    dist.all_gather(blocks, values.contiguous())
    return torch.cat(blocks)


def train(
    energy: nn.Module,
    data: Any,
    *,
    optimizer: torch.optim.Optimizer,
    method: Any,
    num_steps: int,
    seed: int,
    batch_size: int = 100,
    **kwargs: Any,
) -> ebm.EBMResult:
    """:func:`pyro_ext.ebm.train` data-parallel over the processes (call it in every
    process with the same arguments).

    Every process starts from process 0's parameters and steps its block of ``batch_size /
    processes`` data points and (PCD) ``num_chains / processes`` chains; each step's gradients
    are averaged over the processes before the optimiser's update, so the parameters stay the
    same everywhere. CD and PCD (any sampler) make the one-process run with the same seed,
    within float tolerance: every process draws the random numbers of all rows from the run's
    stream and keeps its block (:class:`pyro_ext.ebm.Rows`), and ACS's re-tuning takes its
    medians over every process's chains. UCD steps each pair until it meets, so its processes
    draw from streams of their own (``chain_seeds(seed, processes)[rank]``): one step is the
    mean of the processes' own steps, not the one-process step.

    Parameters
    ----------
    energy, data, optimizer, method, num_steps, batch_size, **kwargs
        As for :func:`pyro_ext.ebm.train`; ``batch_size`` and PCD's ``num_chains`` are the
        whole run's and must divide by the number of processes.
    seed : int
        The run's seed (the one-process run: ``torch.manual_seed(chain_seeds(seed, 1)[0])``
        then ``pyro_ext.ebm.train``).

    Returns
    -------
    pyro_ext.ebm.EBMResult
        This process's result: the common parameters, its own chains (``method_state``), and
        the history averaged over the processes (``energy_gap``, ``accept_prob``).
    """
    rank, size = rank_and_size()
    local_batch = _share(batch_size, "batch_size", size)
    if isinstance(method, ebm.PCD) and method.num_chains is not None:
        method = dataclasses.replace(
            method, num_chains=_share(method.num_chains, "num_chains", size)
        )
    if isinstance(method, ebm.UCD):
        torch.manual_seed(chain_seeds(seed, size)[rank])
        rows = ebm.ONE_PROCESS
    else:
        torch.manual_seed(chain_seeds(seed, 1)[0])
        rows = ebm.Rows(rank, size, _gather_rows if size > 1 else None)
    parameters = [p for p in energy.parameters() if p.requires_grad]
    hooks = []
    if size > 1:
        with torch.no_grad():
            for p in parameters:
                dist.broadcast(p, 0)

        def average(grad: torch.Tensor) -> torch.Tensor:
            grad = grad.clone()
            dist.all_reduce(grad)
            return grad / size

        hooks = [p.register_hook(average) for p in parameters]
    try:
        result = ebm.train(
            energy,
            data,
            optimizer=optimizer,
            method=method,
            num_steps=num_steps,
            batch_size=local_batch,
            rows=rows,
            **kwargs,
        )
    finally:
        for hook in hooks:
            hook.remove()
    if size > 1:
        # on the parameters' device: NCCL reduces CUDA tensors only; read back once
        names = sorted(result.history)
        device = parameters[0].device if parameters else None
        stacked = torch.as_tensor(np.stack([result.history[n] for n in names]), device=device)
        dist.all_reduce(stacked)
        result.history.update(zip(names, (stacked / size).cpu().numpy(), strict=True))
    return result
