"""``train(..., torch_compile=True)``: one CD or PCD iteration of the torch EBM trainer (the
negative phase's chains, both phases' energies and the gradient of their gap with respect to
the parameters) as one ``torch.compile`` program.

Eager torch pays a few microseconds per operation, and a PCD iteration of a small model is a
few hundred small operations (``docs/ebm.md``); compiled, it is one call. The gradient is taken
with ``torch.func.grad_and_value`` of ``torch.func.functional_call`` instead of ``backward()``,
because a backward pass splits a compiled program in two; the optimiser's step stays eager, as
the user's optimiser (and learning-rate scheduler) may change its state between iterations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from discrete_kernels.ebm import UCD

from ._ebm_chains import Rows, negative_samples
from ._torch_compile import compiled


def check_compilable(method: Any, acs_schedule: bool, plate_gibbs: bool = False) -> None:
    """Refuse ``torch_compile=True`` for UCD (an iteration's steps depend on its random numbers),
    for ACS's PCD schedule (its parameters and re-tunings change with the iteration) and for
    ``PlateGibbs`` (its sweep is a Python loop over colours and coordinates)."""
    if isinstance(method, UCD):
        raise ValueError(
            "train: torch_compile=True does not apply to UCD (its coupled chains run until they "
            "meet, a different number of steps each iteration); pass torch_compile=False."
        )
    if acs_schedule:
        raise ValueError(
            "train: torch_compile=True does not apply to PCD with ACS (its schedule changes the "
            "step's parameters from one iteration to the next, and every 25 cycles an "
            "iteration is a re-tuning run of its own length); pass torch_compile=False."
        )
    if plate_gibbs:
        raise ValueError(
            "train: torch_compile=True does not apply to PlateGibbs (its sweep loops over the "
            "colours and coordinates in Python); pass torch_compile=False."
        )


def compiled_iteration(
    energy: nn.Module, sampler: Any, steps: int, rows: Rows
) -> Callable[[torch.Tensor, torch.Tensor], tuple]:
    """``(start (C, d), batch (B, d)) -> (samples (C, d), accept probability, energy gap,
    gradients)`` as one compiled program, the gradients (one per parameter that requires it,
    in ``named_parameters`` order) of ``mean E(batch) - mean E(samples)``, the gap itself a
    scalar; the parameters are read from ``energy`` at every call."""

    def energy_gap(params: dict, batch: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
        # one forward pass for both phases (energies are per row)
        energies = torch.func.functional_call(energy, params, (torch.cat([batch, samples]),))
        return energies[: batch.shape[0]].mean() - energies[batch.shape[0] :].mean()

    gradient_and_gap = torch.func.grad_and_value(energy_gap)

    def iteration(params: dict, start: torch.Tensor, batch: torch.Tensor) -> tuple:
        samples, accept_prob = negative_samples(sampler, energy, start, steps, rows)
        gradients, gap = gradient_and_gap(params, batch, samples.detach())
        return samples, accept_prob, gap, gradients

    program = compiled(iteration, "train")
    trainable = [(name, p) for name, p in energy.named_parameters() if p.requires_grad]

    def run(start: torch.Tensor, batch: torch.Tensor) -> tuple:
        params = {name: p.detach() for name, p in energy.named_parameters()}
        samples, accept_prob, gap, gradients = program(params, start, batch)
        return samples, accept_prob, gap, [gradients[name] for name, _ in trainable]

    return run


def set_gradients(energy: nn.Module, gradients: list[torch.Tensor]) -> None:
    """The gradients of :func:`compiled_iteration` as the parameters' ``.grad`` (for the
    optimiser's step)."""
    trainable = [p for p in energy.parameters() if p.requires_grad]
    for param, gradient in zip(trainable, gradients, strict=True):
        param.grad = gradient
