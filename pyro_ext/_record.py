"""Per-step statistics of the Pyro kernels, kept where the chain lives.

Reading a statistic of a CUDA chain as a Python number (``float(t)``, ``t.item()``) waits for
the device to finish the step: doing it for every statistic of every step serialises the host
and the GPU. :class:`StepRecord` instead keeps each step's statistics on the chain's device
and moves whole blocks of steps to the host, so a chain pays one transfer per
:attr:`StepRecord.block` steps; Pyro's per-step ``logging()`` reads the record only every
:data:`LOG_EVERY` steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["LOG_EVERY", "StepRecord"]

LOG_EVERY = 50  # steps between two refreshes of the progress-bar text (one host read each)


def _scalar(value: Any, like: torch.Tensor) -> torch.Tensor:
    """``value`` as a 0-dim tensor of ``like``'s dtype (a 0-dim tensor stays where it is: the
    statistics of a step live on the chain's device; anything else is put on ``like``'s)."""
    if isinstance(value, torch.Tensor) and value.ndim == 0:
        return value if value.dtype == like.dtype else value.to(like.dtype)
    return torch.as_tensor(value, device=like.device).to(like.dtype).reshape(())


def _column(values: list, like: torch.Tensor) -> torch.Tensor:
    """One statistic of a block of steps as a vector in ``like``'s dtype on its device: one
    stack for a column of 0-dim tensors of one dtype (the usual case), else value by value."""
    first = values[0]
    if isinstance(first, torch.Tensor) and all(
        isinstance(v, torch.Tensor) and v.ndim == 0 and v.dtype == first.dtype for v in values
    ):
        return torch.stack(values).to(like.dtype)
    return torch.stack([_scalar(v, like) for v in values])


class StepRecord:
    """Statistics of each step, one row per step with a fixed set of names.

    A step's values are kept as they come (references, no device operation: on eager torch
    each operation is a launch, and a step of a small model is a few dozen of them); a block
    of steps is stacked column by column and moved to the host together.

    Parameters
    ----------
    block : int
        Rows kept on the device before they move to the host together.
    """

    def __init__(self, block: int = 256) -> None:
        self.block = block
        self.names: tuple[str, ...] = ()
        self._device_rows: list[tuple] = []
        self._like: torch.Tensor | None = None
        self._host_blocks: list[torch.Tensor] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, values: Mapping[str, Any], like: torch.Tensor) -> None:
        """Record one step: ``values`` by name (0-dim tensors or Python numbers), stored in
        ``like``'s floating dtype on its device, without reading them on the host."""
        names = tuple(values)
        if not self.names:
            self.names = names
        elif names != self.names:
            raise ValueError(f"statistics {names} differ from {self.names}")
        self._device_rows.append(tuple(values.values()))
        self._like = like
        self._count += 1
        if len(self._device_rows) >= self.block:
            self._flush()

    def _flush(self) -> None:
        if self._device_rows:
            assert self._like is not None
            like = self._like
            rows = torch.stack([_column(list(c), like) for c in zip(*self._device_rows)], 1)
            self._host_blocks.append(rows.to(device="cpu", dtype=torch.float64))
            self._device_rows = []

    def columns(self, start: int = 0, stop: int | None = None) -> dict[str, torch.Tensor]:
        """Every statistic of steps ``start:stop`` on the host as float64 tensors."""
        self._flush()
        if len(self._host_blocks) > 1:  # one block from now on
            self._host_blocks = [torch.cat(self._host_blocks)]
        if self._host_blocks:
            rows = self._host_blocks[0][start:stop]
        else:
            rows = torch.zeros((0, len(self.names)), dtype=torch.float64)
        return {name: rows[:, j] for j, name in enumerate(self.names)}

    def recent(self, name: str, num: int) -> torch.Tensor:
        """The last ``num`` values of ``name`` (fewer at the start), float64 on the host; reads
        only the last blocks."""
        if name not in self.names:
            return torch.zeros((0,), dtype=torch.float64)
        self._flush()
        j = self.names.index(name)
        tail: list[torch.Tensor] = []
        have = 0
        for rows in reversed(self._host_blocks):
            if have >= num:
                break
            tail.insert(0, rows[:, j])
            have += rows.shape[0]
        values = torch.cat(tail) if tail else torch.zeros((0,), dtype=torch.float64)
        return values[max(values.shape[0] - num, 0) :]
