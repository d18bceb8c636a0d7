"""Unbiased contrastive divergence (Qiu, Zhang and Wang, ICLR 2020) for the torch EBM trainer,
as :mod:`numpyro_ext._ucd` (same couplings, same noise shapes): two coupled chains per data
point, run until they meet, on working sets that shrink as pairs meet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

import discrete_kernels as dk
from discrete_kernels import PYTHON_CONTROL, ChainState, Sites
from discrete_kernels import ebm as core
from discrete_kernels.ebm import UCD, BlockGibbs

from ._ebm_chains import rows_local_fn
from .driver import DiscreteKernel

if TYPE_CHECKING:
    from .ebm import RBM


def ucd_start_noise(chains: int, m: int, n: int, device: Any = None) -> tuple:
    """Uniforms of UCD's start: ``h_0`` (C, n), the first sweep's visible (C, m) and hidden
    (C, n)."""
    return tuple(
        torch.rand(c, s, device=device) for c, s in ((chains, n), (chains, m), (chains, n))
    )


def ucd_step_noise(t: int, chains: int, m: int, n: int, tries: int, device: Any = None) -> tuple:
    """Uniforms of coupled step ``t`` in the order of
    :func:`discrete_kernels.ebm.rbm_coupled_gibbs_step`."""
    shapes = ((chains,), (chains, m), (tries, chains, 2), (tries, chains, m), (chains, n))
    return tuple(torch.rand(*s, device=device) for s in shapes)


class RBMCoupling:
    """Coupled block Gibbs chains of an RBM (Alg. 3): states are :class:`RBMState` batches."""

    def __init__(self, method: UCD, energy: RBM, batch: torch.Tensor) -> None:
        self.method, self.batch = method, batch
        self.params = core.RBMParams(*(p.detach() for p in energy.rbm_params()))

    def start(self):
        params, batch = self.params, self.batch
        chains, m = batch.shape
        n = params.weights.shape[1]
        u_h0, u_v1, u_h1 = ucd_start_noise(chains, m, n, batch.device)
        eta = core.RBMState(
            batch, core.bernoulli_from_uniform(core.rbm_hidden_logits(params, batch), u_h0)
        )
        return core.rbm_gibbs_step(params, eta, u_v1, u_h1), eta

    def step(self, t: int, xi, eta):
        rows, m = xi.visible.shape  # the working set (compaction)
        n = self.params.weights.shape[1]
        noise = ucd_step_noise(t, rows, m, n, self.method.max_tries, self.batch.device)
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


class KernelCoupling:
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
        self.local_fn = rows_local_fn(energy, batch.dtype)

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


def ucd_negative(method: UCD, energy: nn.Module, batch: torch.Tensor):
    """UCD's surrogate for the model term (its gradient estimates ``E_model[grad E]``
    unbiasedly) and the meeting statistics. After step ``m`` (default ``k``) only the pairs
    still apart are stepped, in working sets of the sizes
    :func:`discrete_kernels.ebm.ucd_compaction_capacities` gives (as the JAX trainer: same
    noise shapes)."""
    chains = batch.shape[0]
    coupling: Any
    if method.coupling is None or isinstance(method.coupling, BlockGibbs):
        coupling = RBMCoupling(method, energy, batch)  # type: ignore[arg-type]
    else:
        coupling = KernelCoupling(method.coupling, energy, batch)
    xi, eta = coupling.start()  # the RBM coupling works on detached parameters
    k, m = method.k, method.m
    last = core.ucd_horizon(k, m)
    surrogate = torch.zeros((), device=batch.device)
    if k == 0:  # the estimator's f(xi_0): the batch itself
        w_start, _ = core.ucd_weights(
            0, k, torch.zeros(chains, dtype=torch.bool, device=batch.device), m
        )
        surrogate = surrogate + (w_start * energy(batch)).sum() / chains
    met = coupling.same(xi, eta)
    tau_sum = int(met.sum())
    rejections = torch.zeros((), dtype=torch.int64, device=batch.device)
    tries_capped, t = 0, 1
    capacities = list(core.ucd_compaction_capacities(chains))
    while True:
        w_xi, w_eta = core.ucd_weights(t, k, met, m)
        if bool((w_xi != 0).any() | (w_eta != 0).any()):
            xi_v, eta_v = coupling.visible(xi), coupling.visible(eta)
            term = w_xi * energy(xi_v) - w_eta * energy(eta_v)
            surrogate = surrogate + term.sum() / chains
        if (t >= last and bool(met.all())) or t >= method.max_time:
            break
        apart = int((~met).sum())
        while t >= last and len(capacities) > 1 and apart <= capacities[1]:
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
