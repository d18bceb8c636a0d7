"""Training energy-based models on binary data with PyTorch: CD-k, PCD and UCD, as
:mod:`numpyro_ext.ebm` (same methods, same core functions).

The energy is an ``nn.Module`` mapping a batch (N, d) of 0/1 floats to (N,) energies; the
optimiser is any ``torch.optim`` optimiser over its parameters. Ready-made energies:
:class:`RBM` (free energy of a Bernoulli RBM), :class:`IsingEnergy`, :class:`MLPEnergy`.
Methods: ``CD(k, sampler)``, ``PCD(sampler, steps, num_chains, reinit_prob)`` with
``BlockGibbs()`` (an RBM's default), ``SiteGibbs()`` (random-scan single-site Gibbs, any
energy) or a kernel of :mod:`pyro_ext` built without a model (``px.DMALA(step_size=0.2)``;
``px.ACS()`` runs the ACS paper's PCD schedule; ``px.PlateGibbs()`` sweeps the coordinates
colour by colour, a checkerboard for a lattice, :mod:`discrete_kernels.ebm.plate`), and
``UCD(k, max_time, max_tries, coupling, m)`` with coupled block Gibbs chains of an RBM or
coupled DMALA chains of any energy (``m > k``: the time-averaged estimator).

Randomness comes from torch's global generator (seed it with ``torch.manual_seed``); its state
is part of the returned :class:`EBMResult`, so ``train(..., resume=result)`` continues bit for
bit. Every random number belongs to one row (a data point or a chain) and is drawn in row order,
which lets :func:`pyro_ext.distributed.train` split the rows over processes and still make the
one-process run (:class:`Rows`).

This module has the ready-made energies and the training loop; the negative phase's chains
are in ``pyro_ext._ebm_chains``, UCD's coupled chains in ``pyro_ext._ucd``, and
``train(..., torch_compile=True)``'s compiled iteration in ``pyro_ext._ebm_compiled``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

import discrete_kernels as dk
from discrete_kernels import ebm as core
from discrete_kernels.ebm import (
    CD,
    PCD,
    UCD,
    BlockGibbs,
    SiteGibbs,
    check_first_update,
    check_method,
    check_training_inputs,
    check_ucd_coupling,
)
from discrete_kernels.samplers.acs import ACSPCDState
from discrete_kernels.validation import check_int

from ._ebm_chains import (
    ONE_PROCESS,
    Rows,
    acs_pcd_steps,
    check_closed_form_gradient,
    negative_samples,
    plate_colouring,
)
from ._ebm_compiled import check_compilable, compiled_iteration, set_gradients
from ._ucd import ucd_negative
from .driver import DiscreteKernel

__all__ = [
    "CD",
    "PCD",
    "RBM",
    "UCD",
    "ACSPCDState",
    "BlockGibbs",
    "SiteGibbs",
    "EBMResult",
    "IsingEnergy",
    "MLPEnergy",
    "Rows",
    "train",
]


class RBM(nn.Module):
    """Bernoulli RBM; ``forward(v)`` is the free energy of the visible units."""

    def __init__(self, num_visible: int, num_hidden: int, scale: float = 0.01) -> None:
        super().__init__()
        self.weights = nn.Parameter(scale * torch.randn(num_visible, num_hidden))
        self.visible_bias = nn.Parameter(torch.zeros(num_visible))
        self.hidden_bias = nn.Parameter(torch.zeros(num_hidden))

    def rbm_params(self) -> core.RBMParams:
        return core.RBMParams(self.weights, self.visible_bias, self.hidden_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return core.rbm_free_energy(self.rbm_params(), x)

    def energy_and_input_grad(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(forward(x), d forward / dx)`` in closed form
        (``core.rbm_free_energy_and_input_grad``): the samplers' gradients without an autograd
        pass, (N, m) -> ((N,), (N, m))."""
        return core.rbm_free_energy_and_input_grad(self.rbm_params(), x)

    @torch.no_grad()
    def log_likelihood(self, data: torch.Tensor) -> torch.Tensor:
        """Exact average log-likelihood (enumerates the smaller layer)."""
        return core.rbm_log_likelihood(self.rbm_params(), data)


class IsingEnergy(nn.Module):
    """Lattice Ising model on ``side x side`` spins with learnable edge couplings and fields
    (as :class:`numpyro_ext.ebm.IsingEnergy`)."""

    def __init__(self, side: int, scale: float = 0.01) -> None:
        super().__init__()
        d = side * side
        self.mask: torch.Tensor
        self.register_buffer("mask", torch.as_tensor(core.lattice_mask(side)))
        raw = scale * torch.randn(d, d)
        self.couplings = nn.Parameter((raw + raw.T) / 2 * self.mask)
        self.field = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return core.lattice_ising_energy(self.couplings, self.field, self.mask, x)

    def energy_and_input_grad(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(forward(x), d forward / dx)`` in closed form
        (``core.lattice_ising_energy_and_input_grad``), (N, d) -> ((N,), (N, d))."""
        return core.lattice_ising_energy_and_input_grad(self.couplings, self.field, self.mask, x)


class MLPEnergy(nn.Module):
    """A small MLP energy on binary inputs (tanh layers, a linear read-out)."""

    def __init__(self, num_inputs: int, hidden: tuple[int, ...] = (64,)) -> None:
        super().__init__()
        sizes = (num_inputs, *hidden)
        layers: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.Tanh()]
        layers.append(nn.Linear(sizes[-1], 1, bias=False))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for layer in self.net:  # full-precision products: energies enter MH ratios
            if isinstance(layer, nn.Linear):
                h = dk.precise_matmul(h, layer.weight.T)
                h = h if layer.bias is None else h + layer.bias
            else:
                h = layer(h)
        return h.squeeze(-1)


class EBMResult(NamedTuple):
    """What :func:`train` returns (the energy module is trained in place).

    - **history** - dict of numpy arrays per iteration, as :class:`numpyro_ext.ebm.EBMResult`;
    - **method_state** - the PCD buffer (None otherwise);
    - **checkpoint** - the module's and optimiser's state dicts and the generator states
      (the CPU's, and CUDA's for data there), for ``resume=``; **step** - iterations done.
    """

    history: dict
    method_state: Any
    checkpoint: dict
    step: int


def _sampler_of(method: Any, energy: nn.Module) -> Any:
    sampler = getattr(method, "sampler", None)
    if sampler is None or isinstance(sampler, BlockGibbs):
        if not isinstance(energy, RBM):
            raise ValueError(
                f"{type(method).__name__}: give sampler= (a pyro_ext kernel such as "
                "px.DMALA(step_size=0.2)); block Gibbs needs the RBM energy."
            )
        return BlockGibbs()
    if isinstance(sampler, SiteGibbs):
        return sampler
    if not isinstance(sampler, DiscreteKernel):
        raise ValueError(
            f"{type(method).__name__}: sampler must be a pyro_ext kernel, SiteGibbs() or "
            f"BlockGibbs(), got {sampler!r}."
        )
    return sampler


def _generator_states(device: torch.device) -> dict[str, torch.Tensor]:
    """The states of the generators a run draws from: the CPU's always, and the accelerator's
    when the data live on one (``torch.rand(..., device="cuda")`` draws from CUDA's own
    generator, so restoring the CPU's alone would not make a resumed run repeat)."""
    states = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def _set_generator_states(states: dict[str, torch.Tensor], device: torch.device) -> None:
    """Restore what :func:`_generator_states` saved."""
    torch.set_rng_state(states["cpu"])
    if device.type == "cuda" and "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"], device)


def _check_inputs(energy: nn.Module, data: torch.Tensor, method: Any) -> None:
    """The trainer's start checks (:func:`discrete_kernels.ebm.check_training_inputs`)."""
    num_visible = energy.weights.shape[0] if isinstance(energy, RBM) else None
    shapes = {}
    if data.shape[0] >= 1 and data.shape[1] >= 1 and num_visible in (None, data.shape[1]):
        for n in (2, 3):
            rows = data.new_zeros((n, data.shape[1]))
            try:
                with torch.no_grad():
                    shapes[n] = tuple(energy(rows).shape)
            except Exception as error:
                raise ValueError(
                    f"train: evaluating the energy on a batch of {n} data rows of shape "
                    f"{tuple(rows.shape)} failed ({type(error).__name__}: "
                    f"{str(error).splitlines()[0]}); check that it fits the data's "
                    f"{data.shape[1]} columns."
                ) from error
    sampler = getattr(method, "sampler", None)
    bound = getattr(sampler, "_model", None) is not None or (
        getattr(sampler, "_potential_fn", None) is not None
    )
    check_training_inputs(
        tuple(data.shape), shapes, num_visible=num_visible, sampler_is_bound=bound
    )
    if data.shape[0] >= 1 and data.shape[1] >= 1:
        check_closed_form_gradient(energy, data[:3])


def restarted(
    chains: torch.Tensor, data: torch.Tensor, reinit_prob: float, rows: Rows
) -> torch.Tensor:
    """PCD's buffer ``chains`` (C, d) with each chain replaced by a random data row with
    probability ``reinit_prob`` (nothing drawn at 0, the default)."""
    if reinit_prob == 0:
        return chains
    all_chains = rows.total(chains.shape[0])
    restart = rows.keep(torch.rand(all_chains, device=data.device)) < reinit_prob
    fresh_rows = torch.randint(0, data.shape[0], (all_chains,), device=data.device)
    return torch.where(restart[:, None], data[rows.keep(fresh_rows)], chains)


def train(
    energy: nn.Module,
    data: Any,
    *,
    optimizer: torch.optim.Optimizer,
    method: Any,
    num_steps: int,
    batch_size: int = 100,
    evaluate: Callable[[nn.Module], float] | None = None,
    eval_every: int = 100,
    progress_bar: bool = True,
    resume: EBMResult | None = None,
    rows: Rows = ONE_PROCESS,
    torch_compile: bool = False,
) -> EBMResult:
    """Train ``energy`` (in place) on binary ``data`` (N, d) by ``method``; options as
    :func:`numpyro_ext.ebm.train` (``evaluate(energy)`` instead of ``evaluate(params)``).
    ``rows`` is for :func:`pyro_ext.distributed.train`: ``batch_size`` and PCD's ``num_chains``
    are then this process's block of the run's (:class:`Rows`; not with UCD). ``torch_compile=True``
    runs each CD or PCD iteration (the negative phase's chains, both phases' energies and the
    parameters' gradient) as one ``torch.compile`` program (:mod:`pyro_ext._ebm_compiled`):
    it compiles at the first iteration (seconds) and needs a C++ compiler; not with UCD or
    ACS's PCD schedule."""
    from tqdm.auto import trange

    check_method(method)
    if rows.size > 1 and isinstance(method, UCD):
        raise ValueError(
            "train: UCD cannot split one run's rows over processes (each pair's coupled steps "
            "run until it meets); run each process from its own stream (rows left out)."
        )
    if not isinstance(torch_compile, bool):
        raise ValueError(f"train: torch_compile must be True or False, got {torch_compile!r}.")
    num_steps = check_int("train", "num_steps", num_steps, minimum=0)
    batch_size = check_int("train", "batch_size", batch_size, minimum=1)
    # the data go where the energy's parameters are, in their floating dtype
    param = next(iter(energy.parameters()), None)
    floating = param is not None and param.is_floating_point()
    dtype = param.dtype if floating else torch.get_default_dtype()  # type: ignore[union-attr]
    device = None if param is None else param.device
    data = data if isinstance(data, torch.Tensor) else torch.as_tensor(np.asarray(data))
    data = data.to(device=device, dtype=dtype)
    if data.ndim != 2 or not bool(((data == 0) | (data == 1)).all()):
        raise ValueError("train: data must be a (N, d) array of 0/1 values.")
    if resume is None:
        _check_inputs(energy, data, method)
    if isinstance(method, UCD):
        coupling = method.coupling
        spec = coupling.spec if isinstance(coupling, DiscreteKernel) else None
        check_ucd_coupling(method, isinstance(energy, RBM), spec, "px.DMALA")
    sampler = None if isinstance(method, UCD) else _sampler_of(method, energy)
    # PCD with ACS runs the App. B schedule (CD restarts at data: the kernel's own cycle)
    acs_schedule = (
        isinstance(method, PCD)
        and isinstance(sampler, DiscreteKernel)
        and sampler.spec.pcd_schedule() is not None
    )
    num_data = data.shape[0]
    num_chains = batch_size
    if isinstance(method, PCD) and method.num_chains is not None:
        num_chains = method.num_chains
    if resume is not None:
        energy.load_state_dict(resume.checkpoint["energy"])
        optimizer.load_state_dict(resume.checkpoint["optimizer"])
        _set_generator_states(resume.checkpoint["rng_state"], data.device)
        buffer, done, history = resume.method_state, resume.step, dict(resume.history)
    else:
        buffer = None
        if isinstance(method, PCD):
            start_rows = torch.randint(0, num_data, (rows.total(num_chains),), device=data.device)
            buffer = data[rows.keep(start_rows)]
            if acs_schedule:
                buffer = sampler.spec.pcd_schedule().init(buffer)  # type: ignore[union-attr]
        done, history = 0, {}
    # found from the module's parameters (a resumed run's too): the same colours
    colours = plate_colouring(sampler, energy, data)
    compiled = None
    if torch_compile:
        check_compilable(method, acs_schedule, colours is not None)
        steps = method.k if isinstance(method, CD) else method.steps
        compiled = compiled_iteration(energy, sampler, steps, rows)
    records: dict[str, list] = {}
    objective = math.nan
    bar = trange(num_steps, disable=not progress_bar, desc="EBM")
    for i in bar:
        picked = torch.randint(0, num_data, (rows.total(batch_size),), device=data.device)
        batch = data[rows.keep(picked)]
        info: dict = {"accept_prob": math.nan}
        if isinstance(method, UCD):
            negative, ucd_info = ucd_negative(method, energy, batch)
            info.update(ucd_info)
        else:
            if isinstance(method, CD):
                start, steps = batch, method.k
            else:
                chains = buffer.buffer if acs_schedule else buffer
                start, steps = restarted(chains, data, method.reinit_prob, rows), method.steps
            if acs_schedule:
                assert isinstance(sampler, DiscreteKernel)
                samples, info["accept_prob"], buffer = acs_pcd_steps(
                    sampler, energy, buffer._replace(buffer=start), steps, rows
                )
            elif compiled is not None:
                samples, info["accept_prob"], gap, gradients = compiled(start, batch)
            else:
                samples, info["accept_prob"] = negative_samples(
                    sampler, energy, start, steps, rows, colours
                )
            if isinstance(method, PCD) and not acs_schedule:
                buffer = samples
            negative = None
        optimizer.zero_grad()
        if compiled is not None:
            set_gradients(energy, gradients)
        else:
            if negative is None:  # one forward pass for both phases (eager torch pays per op)
                energies = energy(torch.cat([batch, samples.detach()]))
                positive = energies[: batch.shape[0]].mean()
                negative = energies[batch.shape[0] :].mean()
            else:
                positive = energy(batch).mean()
            gap = positive - negative
            gap.backward()
        optimizer.step()
        if resume is None and i == 0:  # read once: NaN parameters are refused, not returned
            finite = all(bool(torch.isfinite(p).all()) for p in energy.parameters())
            check_first_update(finite, 1)
        info["energy_gap"] = gap.detach()  # read on the host at the end
        step = done + i + 1
        value = math.nan
        if evaluate is not None and (step % eval_every == 0 or i == num_steps - 1):
            value = objective = float(evaluate(energy))
        for name, x in {**info, "objective": value}.items():
            records.setdefault(name, []).append(x)
        if progress_bar and (i % 10 == 0 or i == num_steps - 1):
            bar.set_postfix(objective=f"{objective:.4g}", gap=f"{float(info['energy_gap']):.3g}")
    for name, values in records.items():
        column = np.asarray([float(v) for v in values], dtype=np.float64)
        history[name] = np.concatenate([history.get(name, np.zeros(0)), column])
    checkpoint = {
        "energy": {k: v.clone() for k, v in energy.state_dict().items()},
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "rng_state": _generator_states(data.device),
    }
    return EBMResult(history, buffer, checkpoint, done + num_steps)
