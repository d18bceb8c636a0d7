"""The negative phase's chains of the torch EBM trainer (:mod:`pyro_ext.ebm`): block Gibbs of
an RBM, random-scan site Gibbs, a library kernel's steps on every chain at once (the chains as
the rows of one leaf where the spec allows, else ``torch.func.vmap``), the energies'
closed-form input gradients, and ACS's PCD schedule (App. B, Alg. 6). Every random number
belongs to one row and is drawn in row order (:class:`Rows`). The mathematics is in
:mod:`discrete_kernels.ebm` and the specs."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import nn

import discrete_kernels as dk
from discrete_kernels import PYTHON_CONTROL, Sites
from discrete_kernels import ebm as core
from discrete_kernels.ebm import plate as core_plate
from discrete_kernels.samplers.acs import ACSPCDState
from discrete_kernels.warmup import Feedback, run_phases, start_phases

from .driver import DiscreteKernel

if TYPE_CHECKING:
    from .ebm import RBM


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


def block_gibbs(energy: RBM, x: torch.Tensor, num_steps: int, rows: Rows) -> torch.Tensor:
    params = energy.rbm_params()
    num_hidden = params.weights.shape[1]
    all_chains, dim = rows.total(x.shape[0]), x.shape[1]
    for _ in range(num_steps):
        u_hidden = rows.keep(torch.rand(all_chains, num_hidden, device=x.device))
        u_visible = rows.keep(torch.rand(all_chains, dim, dtype=x.dtype, device=x.device))
        x = core.rbm_visible_sweep(params, x, u_hidden, u_visible)
    return x


def site_gibbs(energy: nn.Module, x: torch.Tensor, num_steps: int, rows: Rows) -> torch.Tensor:
    all_chains, dim = rows.total(x.shape[0]), x.shape[1]
    for _ in range(num_steps):
        index = rows.keep(torch.randint(0, dim, (all_chains,), device=x.device))
        log_density_zero = -energy(core.with_coordinate(x, index, 0.0))
        log_density_one = -energy(core.with_coordinate(x, index, 1.0))
        uniform = rows.keep(torch.rand(all_chains, device=x.device))
        x = core.site_gibbs_update(x, index, log_density_zero, log_density_one, uniform)
    return x


def plate_colouring(kernel: Any, energy: nn.Module, data: torch.Tensor) -> tuple[int, ...] | None:
    """``PlateGibbs``'s colouring of the energy's coordinates
    (:func:`discrete_kernels.ebm.plate.energy_colouring`): the interactions probed at a
    uniform random state, at the module's parameters and at random perturbations of them (a
    copy of the module); None for another sampler. The random numbers come from a generator of
    their own with a fixed seed: the run's stream is untouched and a resumed run finds the same
    colouring."""
    if not isinstance(kernel, DiscreteKernel) or not kernel.spec.needs_plate_tables:
        return None
    owner, dim = kernel.spec.name, data.shape[1]
    given = core_plate.given_blocks(owner, getattr(kernel.spec, "blocks", None))
    perturbations = core_plate.PROBE_PERTURBATIONS
    core_plate.check_probe_size(dim, 1 + perturbations, owner)
    # once, at the start of training: drawn on the CPU from a generator of its own, moved to
    # the data's device, and the probe's log densities read back to the host for the colouring
    generator = torch.Generator().manual_seed(0)
    state = (torch.rand(dim, generator=generator) < 0.5).to(torch.long)
    batch = core_plate.interaction_probe_batch(state).to(dtype=data.dtype, device=data.device)
    with torch.no_grad():
        values = [(-energy(batch)).cpu().numpy()]
        for _ in range(perturbations):
            noisy = copy.deepcopy(energy)
            for parameter in noisy.parameters():
                noise = torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype)
                parameter.copy_(core_plate.perturbed(parameter, noise.to(parameter.device)))
            values.append((-noisy(batch)).cpu().numpy())
    eps = float(torch.finfo(data.dtype).eps)
    colours = core_plate.energy_colouring(values, eps, given, owner)
    return tuple(int(c) for c in colours)


def kernel_steps(
    kernel: DiscreteKernel,
    energy: nn.Module,
    x: torch.Tensor,
    num_steps: int,
    schedule: Callable | None = None,
    num_warmup: int = 0,
    rows: Rows = ONE_PROCESS,
    colours: tuple | None = None,
):
    """``num_steps`` steps of ``kernel``'s spec on each chain of ``x`` (C, d), all chains at
    once: as the rows of one leaf (:func:`steps_in_rows`) where the spec can, else the spec's
    one-chain step (and its adaptation) vectorised over the chains with ``torch.func.vmap``
    and the energy's input gradient taken with ``torch.func``. Returns
    ``(x, mean accept_prob, adaptation states)`` (the states batched over the chains).
    ``schedule(i) -> StepParameters`` replaces the spec's parameters (and its adaptation);
    ``num_warmup`` is passed to the spec's adaptation; ``rows``: the chains of ``x`` are this
    process's block of the run's (their noise is drawn for every chain and the block kept);
    ``colours``: ``PlateGibbs``'s colouring (:func:`plate_colouring`), whose local information
    is the leaf's single-site table."""
    spec = kernel.spec
    chains, dim = x.shape  # this process's; the noise is drawn for all rows.total(chains)
    sites = core_plate.training_sites(spec.needs_plate_tables, colours, spec.name)
    spec.check_sites(sites, dim)
    like = torch.ones((), dtype=x.dtype, device=x.device)
    shapes = spec.noise_shapes(sites, [(dim,)])
    if shapes.permutation:
        raise ValueError(f"{type(kernel).__name__}: kernels with permutation noise cannot train.")
    phases = spec.phases(num_warmup, PYTHON_CONTROL)

    closed_form = closed_form_gradient(energy)

    def log_density(z: torch.Tensor) -> torch.Tensor:
        return -energy(z[None])[0]

    gradient_and_value = torch.func.grad_and_value(log_density)

    def gradient_local_fn(leaves: tuple) -> tuple:
        z = leaves[0].to(x.dtype)
        if closed_form is not None:
            e, de = closed_form(z[None])
            return -e[0], (-de[0],)
        g, f = gradient_and_value(z)
        return f, (g,)

    local_fn: Callable = gradient_local_fn
    if spec.needs_plate_tables:
        local_fn = core_plate.table_local_fn(
            lambda zs: -energy(zs.to(x.dtype)), colours, complete_at_end=False
        )

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

    if spec.steps_chains_in_rows and not shapes.num_normals:
        return steps_in_rows(spec, energy, x, uniforms, flat[..., -1], phases, num_warmup, schedule)

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


def negative_samples(
    sampler: Any,
    energy: nn.Module,
    start: torch.Tensor,
    steps: int,
    rows: Rows,
    colours: tuple | None = None,
) -> tuple[torch.Tensor, Any]:
    """``steps`` steps of ``sampler`` from ``start`` (C, d): ``(samples (C, d), mean accept
    probability or NaN for the Gibbs samplers)``; ACS's PCD schedule is not here;
    ``colours``: ``PlateGibbs``'s colouring (:func:`plate_colouring`)."""
    if isinstance(sampler, core.BlockGibbs):
        with torch.no_grad():
            return block_gibbs(energy, start, steps, rows), math.nan  # type: ignore[arg-type]
    if isinstance(sampler, core.SiteGibbs):
        with torch.no_grad():
            return site_gibbs(energy, start, steps, rows), math.nan
    assert isinstance(sampler, DiscreteKernel)
    samples, accept_prob, _ = kernel_steps(
        sampler, energy, start, steps, rows=rows, colours=colours
    )
    return samples, accept_prob


def steps_in_rows(
    spec: dk.Sampler,
    energy: nn.Module,
    x: torch.Tensor,
    uniforms: tuple,
    accept_uniforms: torch.Tensor,
    phases: tuple,
    num_warmup: int,
    schedule: Callable | None = None,
):
    """:func:`kernel_steps` for a spec that steps the chains as the rows of one leaf
    (:attr:`~discrete_kernels.Sites.chains_in_rows`: DMALA, DULA, GWG, AB-1st, ACS): every
    operation on the whole (C, d) state at once, one backward pass per step for all chains'
    input gradients. ``uniforms`` per noise entry (C, steps, ...), ``accept_uniforms`` (C,
    steps): the noise :func:`kernel_steps` draws for ``vmap``, so both paths take the same
    moves. ``schedule(i)`` (ACS's PCD schedule) gives every chain the same parameters in place
    of the spec's adaptation."""
    chains, dim = x.shape
    sites = Sites(("x",), (dk.Binary(),), (False,), chains_in_rows=True)
    spec.check_sites(sites, dim)
    like = torch.ones((chains, 1), dtype=x.dtype, device=x.device)
    local_fn = rows_local_fn(energy, x.dtype)
    adapt = start_phases(phases, spec.adapt_init(like, num_warmup, sites, dim, PYTHON_CONTROL))
    chain = spec.init((x.to(torch.long),), local_fn)
    accept = torch.zeros_like(like)
    num_steps = accept_uniforms.shape[1]
    with torch.no_grad():
        for i in range(num_steps):
            # a scalar noise entry (GWG's move uniform) is (C, 1) in rows, as the MH uniform
            step_uniforms = tuple(u[:, i] if u.ndim > 2 else u[:, i, None] for u in uniforms)
            noise = dk.StepNoise(step_uniforms, accept_uniforms[:, i, None])
            params = spec.parameters(adapt) if schedule is None else schedule(i)
            chain, info = spec.step(chain, noise, params, adapt, sites, local_fn)
            if schedule is None:
                control = PYTHON_CONTROL._replace(step=i)
                adapt = run_phases(phases, adapt, Feedback(info, params, chain, i), control)
            accept = accept + info.accept_prob
    accept = accept[:, 0] / num_steps
    # the adaptation states as vmap's path gives them: shape (C,)
    adapts = without_row_axis(adapt) if num_warmup else accept
    return chain.x[0].to(x.dtype), accept.mean(), adapts


def closed_form_gradient(energy: nn.Module) -> Callable | None:
    """The energy's own ``energy_and_input_grad(x) -> (E (N,), dE/dx (N, d))`` where it
    defines one (``RBM`` and ``IsingEnergy`` do), else None (autograd). Eager torch pays per
    operation: the closed form is a few, a backward pass builds and walks a graph (about 1.05
    against 1.3 ms per PCD-DMALA iteration of a 16x16 RBM with 100 chains, ``docs/ebm.md``)."""
    method = getattr(energy, "energy_and_input_grad", None)
    return method if callable(method) else None


def check_closed_form_gradient(energy: nn.Module, rows: torch.Tensor) -> None:
    """Refuse an ``energy_and_input_grad`` that disagrees with ``energy`` and its autograd
    gradient on ``rows`` (N, d): the samplers would target another distribution."""
    closed_form = closed_form_gradient(energy)
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


def rows_local_fn(energy: nn.Module, dtype: torch.dtype) -> Callable[[tuple], tuple]:
    """``leaves -> (f, (g,))`` for chains in the rows of one leaf (C, d): ``f = -E`` (C, 1)
    and its input gradient (C, d), every chain's in one backward pass (the rows are
    independent), or from the energy's closed form (:func:`closed_form_gradient`); no
    gradient reaches the energy's parameters."""
    closed_form = closed_form_gradient(energy)

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


def without_row_axis(value: Any) -> Any:
    """An adaptation state of chains in rows, its fields (C, 1, ...) as ``vmap`` gives them:
    (C, ...)."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple state
        return type(value)(*(without_row_axis(v) for v in value))
    if isinstance(value, torch.Tensor) and value.ndim >= 2 and value.shape[1] == 1:
        return value[:, 0]
    return value


def acs_pcd_steps(
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
        samples, accept, adapts = kernel_steps(
            kernel, energy, state.buffer, tuning, None, tuning, rows
        )
        alpha_max, alpha_min = schedule.tuned_bounds(
            rows.join(adapts.alpha_max), rows.join(adapts.alpha_min)
        )
    else:

        def step_parameters(i: int):
            return schedule.parameters(state, torch.tensor(i, device=device))

        samples, accept, _ = kernel_steps(
            kernel, energy, state.buffer, num_steps, step_parameters, rows=rows
        )
    return samples, accept, ACSPCDState(samples, state.iteration + 1, alpha_max, alpha_min)
