"""Training energy-based models on binary data with PyTorch: CD-k, PCD and UCD, as
:mod:`numpyro_ext.ebm` (same methods, same core functions).

The energy is an ``nn.Module`` mapping a batch (N, d) of 0/1 floats to (N,) energies; the
optimiser is any ``torch.optim`` optimiser over its parameters. Ready-made energies:
:class:`RBM` (free energy of a Bernoulli RBM), :class:`IsingEnergy`, :class:`MLPEnergy`.
Methods: ``CD(k, sampler)``, ``PCD(sampler, steps, num_chains, reinit_prob)`` with
``BlockGibbs()`` (an RBM's default), ``SiteGibbs()`` (random-scan single-site Gibbs, any
energy) or a kernel of :mod:`pyro_ext` built without a model (``px.DMALA(step_size=0.2)``;
``px.ACS()`` runs the ACS paper's PCD schedule), and ``UCD(k, max_time, max_tries, coupling)``
with coupled
block Gibbs chains of an RBM or coupled DMALA chains of any energy.

Randomness comes from torch's global generator (seed it with ``torch.manual_seed``); its state
is part of the returned :class:`EBMResult`, so ``train(..., resume=result)`` continues bit for
bit. Every random number belongs to one row (a data point or a chain) and is drawn in row order,
which lets :func:`pyro_ext.distributed.train` split the rows over processes and still make the
one-process run (:class:`Rows`).
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
from discrete_kernels import PYTHON_CONTROL, ChainState, Sites
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
from discrete_kernels.warmup import Feedback, run_phases, start_phases

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


class Rows(NamedTuple):
    """Which rows (data points of a batch, chains) of a run this process steps.

    Every process draws the random numbers of *all* rows from the same stream, in row order,
    and keeps those of its own block ``[rank * n / size, (rank + 1) * n / size)``: the rows'
    numbers, and so the run, are those of one process (the draws cost little next to the energy
    evaluations). The default is the whole run in one process.

    - **rank**, **size** - this process's block and the number of blocks;
    - **gather** - joins a (n / size, ...) tensor of every process into (n, ...), in rank
      order (``None``: one process).
    """

    rank: int = 0
    size: int = 1
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None

    def total(self, local: int) -> int:
        """Rows of the whole run for ``local`` rows of this process."""
        return local * self.size

    def keep(self, values: torch.Tensor) -> torch.Tensor:
        """This process's block of ``values`` (n, ...) drawn for every row."""
        if self.size == 1:
            return values
        share = values.shape[0] // self.size
        return values[self.rank * share : (self.rank + 1) * share]

    def join(self, values: torch.Tensor) -> torch.Tensor:
        """Every process's rows of ``values`` (n / size, ...), in rank order."""
        return values if self.gather is None else self.gather(values)


ONE_PROCESS = Rows()


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


def _block_gibbs(energy: RBM, x: torch.Tensor, num_steps: int, rows: Rows) -> torch.Tensor:
    params = energy.rbm_params()
    num_hidden = params.weights.shape[1]
    all_chains, dim = rows.total(x.shape[0]), x.shape[1]
    for _ in range(num_steps):
        u_hidden = rows.keep(torch.rand(all_chains, num_hidden, device=x.device))
        u_visible = rows.keep(torch.rand(all_chains, dim, dtype=x.dtype, device=x.device))
        x = core.rbm_visible_sweep(params, x, u_hidden, u_visible)
    return x


def _site_gibbs(energy: nn.Module, x: torch.Tensor, num_steps: int, rows: Rows) -> torch.Tensor:
    all_chains, dim = rows.total(x.shape[0]), x.shape[1]
    for _ in range(num_steps):
        index = rows.keep(torch.randint(0, dim, (all_chains,), device=x.device))
        log_density_zero = -energy(core.with_coordinate(x, index, 0.0))
        log_density_one = -energy(core.with_coordinate(x, index, 1.0))
        uniform = rows.keep(torch.rand(all_chains, device=x.device))
        x = core.site_gibbs_update(x, index, log_density_zero, log_density_one, uniform)
    return x


def _kernel_steps(
    kernel: DiscreteKernel,
    energy: nn.Module,
    x: torch.Tensor,
    num_steps: int,
    schedule: Callable | None = None,
    num_warmup: int = 0,
    rows: Rows = ONE_PROCESS,
):
    """``num_steps`` steps of ``kernel``'s spec on each chain of ``x`` (C, d), all chains at
    once: the spec's one-chain step (and its adaptation) is vectorised over the chains with
    ``torch.func.vmap`` and the energy's input gradient taken with ``torch.func``. Returns
    ``(x, mean accept_prob, adaptation states)`` (the states batched over the chains).
    ``schedule(i) -> StepParameters`` replaces the spec's parameters (and its adaptation);
    ``num_warmup`` is passed to the spec's adaptation; ``rows``: the chains of ``x`` are this
    process's block of the run's (their noise is drawn for every chain and the block kept)."""
    spec = kernel.spec
    chains, dim = x.shape  # this process's; the noise is drawn for all rows.total(chains)
    sites = Sites(("x",), (dk.Binary(),), (False,))
    spec.check_sites(sites, dim)
    like = torch.ones((), dtype=x.dtype, device=x.device)
    shapes = spec.noise_shapes(sites, [(dim,)])
    if shapes.permutation:
        raise ValueError(f"{type(kernel).__name__}: kernels with permutation noise cannot train.")
    phases = spec.phases(num_warmup, PYTHON_CONTROL)

    closed_form = _closed_form_gradient(energy)

    def log_density(z: torch.Tensor) -> torch.Tensor:
        return -energy(z[None])[0]

    gradient_and_value = torch.func.grad_and_value(log_density)

    def local_fn(leaves: tuple) -> tuple:
        z = leaves[0].to(x.dtype)
        if closed_form is not None:
            e, de = closed_form(z[None])
            return -e[0], (-de[0],)
        g, f = gradient_and_value(z)
        return f, (g,)

    # every step's noise, drawn at once: (C, num_steps, ...) per uniform leaf
    sizes = [math.prod(shape) for shape in shapes.uniforms]
    all_chains = rows.total(chains)
    flat = rows.keep(
        torch.rand(all_chains, num_steps, sum(sizes) + 1, dtype=x.dtype, device=x.device)
    )
    uniforms = tuple(
        u.reshape(chains, num_steps, *shape)
        for u, shape in zip(flat[..., :-1].split(sizes, dim=-1), shapes.uniforms)
    )
    normals = None
    if shapes.num_normals:
        normals = rows.keep(
            torch.randn(all_chains, num_steps, shapes.num_normals, dtype=x.dtype, device=x.device)
        )

    if spec.steps_chains_in_rows and schedule is None and not shapes.num_normals:
        return _steps_in_rows(spec, energy, x, uniforms, flat[..., -1], phases, num_warmup)

    def one_chain(chain_x, chain_uniforms, chain_accept, chain_normals):
        adapt = start_phases(phases, spec.adapt_init(like, num_warmup, sites, dim, PYTHON_CONTROL))
        chain = spec.init((chain_x,), local_fn)
        accept = torch.zeros_like(like)
        for i in range(num_steps):
            noise = dk.StepNoise(
                tuple(u[i] for u in chain_uniforms),
                chain_accept[i],
                None if chain_normals is None else chain_normals[i],
                None,
            )
            params = spec.parameters(adapt) if schedule is None else schedule(i)
            chain, info = spec.step(chain, noise, params, adapt, sites, local_fn)
            if schedule is None:
                control = PYTHON_CONTROL._replace(step=i)
                adapt = run_phases(phases, adapt, Feedback(info, params, chain, i), control)
            accept = accept + info.accept_prob
        # the adaptation states only where a tuning run reads them (some hold None)
        return chain.x[0], accept / num_steps, adapt if num_warmup else accept

    in_dims = (0, 0, 0, None if normals is None else 0)
    with torch.no_grad():  # no graph to the parameters (torch.func.grad still differentiates)
        xs, accept, adapts = torch.func.vmap(one_chain, in_dims=in_dims, randomness="error")(
            x.to(torch.long), uniforms, flat[..., -1], normals
        )
    return xs.to(x.dtype), accept.mean(), adapts


def _steps_in_rows(
    spec: dk.Sampler,
    energy: nn.Module,
    x: torch.Tensor,
    uniforms: tuple,
    accept_uniforms: torch.Tensor,
    phases: tuple,
    num_warmup: int,
):
    """:func:`_kernel_steps` for a spec that steps the chains as the rows of one leaf
    (:attr:`~discrete_kernels.Sites.chains_in_rows`: DMALA, DULA, GWG, AB-1st): every operation on
    the whole (C, d) state at once, one backward pass per step for all chains' input
    gradients. ``uniforms`` per noise entry (C, steps, ...), ``accept_uniforms`` (C, steps):
    the noise :func:`_kernel_steps` draws for ``vmap``, so both paths take the same moves."""
    chains, dim = x.shape
    sites = Sites(("x",), (dk.Binary(),), (False,), chains_in_rows=True)
    spec.check_sites(sites, dim)
    like = torch.ones((chains, 1), dtype=x.dtype, device=x.device)
    local_fn = _rows_local_fn(energy, x.dtype)
    adapt = start_phases(phases, spec.adapt_init(like, num_warmup, sites, dim, PYTHON_CONTROL))
    chain = spec.init((x.to(torch.long),), local_fn)
    accept = torch.zeros_like(like)
    num_steps = accept_uniforms.shape[1]
    with torch.no_grad():
        for i in range(num_steps):
            # a scalar noise entry (GWG's move uniform) is (C, 1) in rows, as the MH uniform
            step_uniforms = tuple(u[:, i] if u.ndim > 2 else u[:, i, None] for u in uniforms)
            noise = dk.StepNoise(step_uniforms, accept_uniforms[:, i, None])
            params = spec.parameters(adapt)
            chain, info = spec.step(chain, noise, params, adapt, sites, local_fn)
            control = PYTHON_CONTROL._replace(step=i)
            adapt = run_phases(phases, adapt, Feedback(info, params, chain, i), control)
            accept = accept + info.accept_prob
    accept = accept[:, 0] / num_steps
    # the adaptation states as vmap's path gives them: shape (C,)
    adapts = _without_row_axis(adapt) if num_warmup else accept
    return chain.x[0].to(x.dtype), accept.mean(), adapts


def _closed_form_gradient(energy: nn.Module) -> Callable | None:
    """The energy's own ``energy_and_input_grad(x) -> (E (N,), dE/dx (N, d))`` where it
    defines one (``RBM`` and ``IsingEnergy`` do), else None (autograd). Eager torch pays per
    operation: the closed form is a few, a backward pass builds and walks a graph (about 1.05
    against 1.3 ms per PCD-DMALA iteration of a 16x16 RBM with 100 chains, ``docs/ebm.md``)."""
    method = getattr(energy, "energy_and_input_grad", None)
    return method if callable(method) else None


def _check_closed_form_gradient(energy: nn.Module, rows: torch.Tensor) -> None:
    """Refuse an ``energy_and_input_grad`` that disagrees with ``energy`` and its autograd
    gradient on ``rows`` (N, d): the samplers would target another distribution."""
    closed_form = _closed_form_gradient(energy)
    if closed_form is None:
        return
    with torch.enable_grad():
        z = rows.detach().clone().requires_grad_(True)
        e = energy(z)
        (de,) = torch.autograd.grad(e.sum(), z)
    with torch.no_grad():
        e_closed, de_closed = closed_form(rows)
    scale = 1.0 + float(de.abs().max())
    if tuple(e_closed.shape) != tuple(e.shape) or tuple(de_closed.shape) != tuple(de.shape):
        problem = (
            f"returns shapes {tuple(e_closed.shape)} and {tuple(de_closed.shape)} where "
            f"energy(x) and its gradient have {tuple(e.shape)} and {tuple(de.shape)}"
        )
    elif not torch.allclose(e_closed, e.detach(), rtol=1e-4, atol=1e-4 * scale):
        problem = "returns energies that differ from energy(x)"
    elif not torch.allclose(de_closed, de, rtol=1e-3, atol=1e-4 * scale):
        problem = "returns a gradient that differs from autograd's gradient of energy(x)"
    else:
        return
    raise ValueError(
        f"train: energy.energy_and_input_grad(x) {problem} on {rows.shape[0]} data rows; it "
        "must return (energy(x), d energy(x).sum() / dx). Fix it or remove the method "
        "(the trainer then takes autograd's gradient)."
    )


def _rows_local_fn(energy: nn.Module, dtype: torch.dtype) -> Callable[[tuple], tuple]:
    """``leaves -> (f, (g,))`` for chains in the rows of one leaf (C, d): ``f = -E`` (C, 1)
    and its input gradient (C, d), every chain's in one backward pass (the rows are
    independent), or from the energy's closed form (:func:`_closed_form_gradient`); no
    gradient reaches the energy's parameters."""
    closed_form = _closed_form_gradient(energy)

    def local_fn(leaves: tuple) -> tuple:
        if closed_form is not None:
            with torch.no_grad():
                e, de = closed_form(leaves[0].to(dtype))
            return -e[:, None], (-de,)
        with torch.enable_grad():
            z = leaves[0].to(dtype).detach().requires_grad_(True)
            f = -energy(z)
            (g,) = torch.autograd.grad(f.sum(), z)
        return f.detach()[:, None], (g,)

    return local_fn


def _without_row_axis(value: Any) -> Any:
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple state
        return type(value)(*(_without_row_axis(v) for v in value))
    if isinstance(value, torch.Tensor) and value.ndim == 2:
        return value[:, 0]
    return value


def _acs_pcd_steps(
    kernel: DiscreteKernel,
    energy: nn.Module,
    state: ACSPCDState,
    num_steps: int,
    rows: Rows,
):
    """PCD's negative phase with ACS (App. B, Alg. 6), as ``numpyro_ext.ebm``: the schedule's
    steps, or on a re-tuning iteration the kernel's tuning run on each chain (medians of its
    estimates over every process's chains set the cycle). Returns ``(samples, mean
    accept_prob, new state)``."""
    schedule = kernel.spec.pcd_schedule()
    alpha_max, alpha_min = state.alpha_max, state.alpha_min
    device = state.buffer.device
    if schedule.tunes and bool(schedule.retunes(state.iteration)):
        tuning = schedule.tuning_steps
        samples, accept, adapts = _kernel_steps(
            kernel, energy, state.buffer, tuning, None, tuning, rows
        )
        alpha_max, alpha_min = schedule.tuned_bounds(
            rows.join(adapts.alpha_max), rows.join(adapts.alpha_min)
        )
    else:

        def step_parameters(i: int):
            return schedule.parameters(state, torch.tensor(i, device=device))

        samples, accept, _ = _kernel_steps(
            kernel, energy, state.buffer, num_steps, step_parameters, rows=rows
        )
    return samples, accept, ACSPCDState(samples, state.iteration + 1, alpha_max, alpha_min)


def _ucd_start_noise(chains: int, m: int, n: int, device: Any = None) -> tuple:
    """Uniforms of UCD's start: ``h_0`` (C, n), the first sweep's visible (C, m) and hidden
    (C, n)."""
    return tuple(
        torch.rand(c, s, device=device) for c, s in ((chains, n), (chains, m), (chains, n))
    )


def _ucd_step_noise(t: int, chains: int, m: int, n: int, tries: int, device: Any = None) -> tuple:
    """Uniforms of coupled step ``t`` in the order of
    :func:`discrete_kernels.ebm.rbm_coupled_gibbs_step`."""
    shapes = ((chains,), (chains, m), (tries, chains, 2), (tries, chains, m), (chains, n))
    return tuple(torch.rand(*s, device=device) for s in shapes)


class _RBMCoupling:
    """Coupled block Gibbs chains of an RBM (Alg. 3): states are :class:`RBMState` batches."""

    def __init__(self, method: UCD, energy: RBM, batch: torch.Tensor) -> None:
        self.method, self.batch = method, batch
        self.params = core.RBMParams(*(p.detach() for p in energy.rbm_params()))

    def start(self):
        params, batch = self.params, self.batch
        chains, m = batch.shape
        n = params.weights.shape[1]
        u_h0, u_v1, u_h1 = _ucd_start_noise(chains, m, n, batch.device)
        eta = core.RBMState(
            batch, core.bernoulli_from_uniform(core.rbm_hidden_logits(params, batch), u_h0)
        )
        return core.rbm_gibbs_step(params, eta, u_v1, u_h1), eta

    def step(self, t: int, xi, eta):
        rows, m = xi.visible.shape  # the working set (compaction)
        n = self.params.weights.shape[1]
        noise = _ucd_step_noise(t, rows, m, n, self.method.max_tries, self.batch.device)
        xi, eta, info = core.rbm_coupled_gibbs_step(self.params, xi, eta, *noise)
        return xi, eta, info.rejections, info.capped

    @staticmethod
    def same(xi, eta) -> torch.Tensor:
        return core.same_state(xi.visible, eta.visible) & core.same_state(xi.hidden, eta.hidden)

    @staticmethod
    def take(state, rows: torch.Tensor):
        return core.RBMState(state.visible[rows], state.hidden[rows])

    @staticmethod
    def visible(state) -> torch.Tensor:
        return state.visible


class _KernelCoupling:
    """Two DMALA chains per data point, coupled per coordinate with a common MH uniform
    (:func:`discrete_kernels.samplers.dlp.coupled_step`); the pairs' chains step at once,
    as the rows of one leaf each (:attr:`~discrete_kernels.Sites.chains_in_rows`)."""

    def __init__(self, kernel: DiscreteKernel, energy: nn.Module, batch: torch.Tensor) -> None:
        spec = kernel.spec  # a DMALA spec (check_ucd_coupling, at the start of train)
        dim = batch.shape[-1]
        self.spec, self.batch = spec, batch
        self.sites = Sites(("x",), (dk.Binary(),), (False,), chains_in_rows=True)
        spec.check_sites(self.sites, dim)
        like = torch.ones((batch.shape[0], 1), dtype=batch.dtype, device=batch.device)
        self.params = spec.parameters(spec.adapt_init(like, 0, self.sites, dim, PYTHON_CONTROL))
        self.local_fn = _rows_local_fn(energy, batch.dtype)

    def _noise(self, rows: int) -> dk.StepNoise:
        dtype, device = self.batch.dtype, self.batch.device
        uniforms = torch.rand(rows, self.batch.shape[-1], dtype=dtype, device=device)
        return dk.StepNoise((uniforms,), torch.rand(rows, 1, dtype=dtype, device=device))

    def _parameters(self, rows: int) -> dk.StepParameters:
        params = self.params
        return params._replace(step_size=params.step_size[:rows], balance=params.balance[:rows])

    def start(self):
        x = self.batch.to(torch.long)
        eta = self.spec.init((x,), self.local_fn)
        rows = x.shape[0]
        xi, _ = self.spec.step(
            eta, self._noise(rows), self._parameters(rows), None, self.sites, self.local_fn
        )
        return xi, eta

    def step(self, t: int, xi, eta):
        rows = xi.x[0].shape[0]  # the working set (compaction)
        xi, eta, _, _ = self.spec.coupled_step(
            xi, eta, self._noise(rows), self._parameters(rows), None, self.sites, self.local_fn
        )
        zeros = torch.zeros(rows, dtype=torch.int32, device=self.batch.device)
        return xi, eta, zeros, zeros.bool()

    def same(self, xi, eta) -> torch.Tensor:
        return core.same_state(self.visible(xi), self.visible(eta))

    @staticmethod
    def take(state: ChainState, rows: torch.Tensor) -> ChainState:
        return ChainState(
            tuple(x[rows] for x in state.x),
            state.log_density[rows],
            tuple(local[rows] for local in state.local),
        )

    def visible(self, state: ChainState) -> torch.Tensor:
        return state.x[0].to(self.batch.dtype)


def _ucd_negative(method: UCD, energy: nn.Module, batch: torch.Tensor):
    """UCD's surrogate for the model term (its gradient estimates ``E_model[grad E]``
    unbiasedly) and the meeting statistics. After step ``k`` only the pairs still apart are
    stepped, in working sets of the sizes :func:`discrete_kernels.ebm.ucd_compaction_capacities`
    gives (as the JAX trainer: same noise shapes)."""
    chains = batch.shape[0]
    coupling: Any
    if method.coupling is None or isinstance(method.coupling, BlockGibbs):
        coupling = _RBMCoupling(method, energy, batch)  # type: ignore[arg-type]
    else:
        coupling = _KernelCoupling(method.coupling, energy, batch)
    xi, eta = coupling.start()  # the RBM coupling works on detached parameters
    k = method.k
    surrogate = torch.zeros((), device=batch.device)
    if k == 0:
        surrogate = surrogate + energy(batch).sum() / chains
    met = coupling.same(xi, eta)
    tau_sum = int(met.sum())
    rejections = torch.zeros((), dtype=torch.int64, device=batch.device)
    tries_capped, t = 0, 1
    capacities = list(core.ucd_compaction_capacities(chains))
    while True:
        w_xi, w_eta = core.ucd_weights(t, k, met)
        if bool((w_xi != 0).any() | (w_eta != 0).any()):
            xi_v, eta_v = coupling.visible(xi), coupling.visible(eta)
            term = w_xi * energy(xi_v) - w_eta * energy(eta_v)
            surrogate = surrogate + term.sum() / chains
        if (t >= k and bool(met.all())) or t >= method.max_time:
            break
        apart = int((~met).sum())
        while t >= k and len(capacities) > 1 and apart <= capacities[1]:
            capacities.pop(0)  # gather the pairs still apart into the next working set
            order = core.ucd_compaction_order(met, capacities[0])
            xi, eta, met = coupling.take(xi, order), coupling.take(eta, order), met[order]
        t += 1
        xi, eta, step_rejections, capped = coupling.step(t, xi, eta)
        newly = ~met & coupling.same(xi, eta)
        tau_sum += t * int(newly.sum())
        rejections = rejections + torch.where(met, 0, step_rejections).sum()
        tries_capped += int((~met & capped).sum())
        met = met | newly
    tau_sum += t * int((~met).sum())  # pairs stopped at max_time count t
    info_out = {
        "meeting_time": tau_sum / chains,
        "time_capped": int((~met).sum()),
        "rejections": float(rejections) / chains,
        "tries_capped": tries_capped,
    }
    return surrogate, info_out


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
        _check_closed_form_gradient(energy, data[:3])


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
) -> EBMResult:
    """Train ``energy`` (in place) on binary ``data`` (N, d) by ``method``; options as
    :func:`numpyro_ext.ebm.train` (``evaluate(energy)`` instead of ``evaluate(params)``).
    ``rows`` is for :func:`pyro_ext.distributed.train`: ``batch_size`` and PCD's ``num_chains``
    are then this process's block of the run's (:class:`Rows`; not with UCD)."""
    from tqdm.auto import trange

    check_method(method)
    if rows.size > 1 and isinstance(method, UCD):
        raise ValueError(
            "train: UCD cannot split one run's rows over processes (each pair's coupled steps "
            "run until it meets); run each process from its own stream (rows left out)."
        )
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
    records: dict[str, list] = {}
    objective = math.nan
    bar = trange(num_steps, disable=not progress_bar, desc="EBM")
    for i in bar:
        picked = torch.randint(0, num_data, (rows.total(batch_size),), device=data.device)
        batch = data[rows.keep(picked)]
        info: dict = {"accept_prob": math.nan}
        if isinstance(method, UCD):
            negative, ucd_info = _ucd_negative(method, energy, batch)
            info.update(ucd_info)
        else:
            if isinstance(method, CD):
                start, steps = batch, method.k
            else:
                all_chains = rows.total(num_chains)
                restart = rows.keep(torch.rand(all_chains, device=data.device))
                restart = restart < method.reinit_prob
                fresh_rows = torch.randint(0, num_data, (all_chains,), device=data.device)
                fresh = data[rows.keep(fresh_rows)]
                chains = buffer.buffer if acs_schedule else buffer
                start, steps = torch.where(restart[:, None], fresh, chains), method.steps
            if acs_schedule:
                assert isinstance(sampler, DiscreteKernel)
                samples, info["accept_prob"], buffer = _acs_pcd_steps(
                    sampler, energy, buffer._replace(buffer=start), steps, rows
                )
            elif isinstance(sampler, BlockGibbs):
                with torch.no_grad():
                    samples = _block_gibbs(energy, start, steps, rows)  # type: ignore[arg-type]
            elif isinstance(sampler, SiteGibbs):
                with torch.no_grad():
                    samples = _site_gibbs(energy, start, steps, rows)
            else:
                assert isinstance(sampler, DiscreteKernel)
                samples, info["accept_prob"], _ = _kernel_steps(
                    sampler, energy, start, steps, rows=rows
                )
            if isinstance(method, PCD) and not acs_schedule:
                buffer = samples
            negative = energy(samples.detach()).mean()
        positive = energy(batch).mean()
        optimizer.zero_grad()
        (positive - negative).backward()
        optimizer.step()
        if resume is None and i == 0:  # read once: NaN parameters are refused, not returned
            finite = all(bool(torch.isfinite(p).all()) for p in energy.parameters())
            check_first_update(finite, 1)
        info["energy_gap"] = (positive - negative).detach()  # read on the host at the end
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
