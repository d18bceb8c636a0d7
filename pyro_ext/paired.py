"""A Pyro kernel that updates paired sites together: each element of a discrete site (an
inclusion indicator) with the same element of a continuous site (the coefficient it gates),
from the paired proposal of :mod:`discrete_kernels.samplers.paired` with a Metropolis-Hastings
step. Its derivatives in the coefficient come from torch's autograd of the model's log density
(through Pyro's trace)."""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, NamedTuple

import torch
from pyro.distributions import constraints
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from discrete_kernels import diagnosis
from discrete_kernels import validation as checks
from discrete_kernels.metropolis import (
    accept_probability,
)
from discrete_kernels.samplers.paired import (
    check_pair_options,
    check_pair_sites,
    frozen_pairs_message,
    innermost_distribution,
    innermost_support,
    paired_move,
)

from ._record import LOG_EVERY, StepRecord
from ._target import as_tensor, latent_sites, model_log_density, trace_model

__all__ = ["PairedGibbs"]


class _Pair(NamedTuple):
    indicator: str
    coefficient: str
    shape: tuple[int, ...]
    values: torch.Tensor  # the indicator's support, sorted, shape (S,)


class PairedGibbs(MCMCKernel):
    """Each inclusion indicator drawn together with the coefficient it gates (Pyro).

    The move and its options are those of :class:`numpyro_ext.PairedGibbs`: for element
    ``j`` of a pair, one Newton step from ``anchor`` per indicator value gives a Gaussian for
    the coefficient and a Laplace weight for the value; the pair is drawn from them and
    accepted or rejected by Metropolis-Hastings (an independence proposal given the rest, so
    the step is exact whatever the approximation's quality). Elements are moved one after
    another; each costs ``S`` evaluations of the model with a first and second derivative in
    the coefficient, and one more for the proposal.

    A model with other latent sites takes it as a block of :class:`pyro_ext.Gibbs`, e.g.
    ``px.Gibbs([(px.PairedGibbs(model, pairs={"gamma": "beta"}), ["gamma", "beta"]),
    (NUTS(model), None)])``. Per-draw statistics ``accept_prob`` (the mean over the elements),
    ``moves`` (accepted moves) and ``lp`` are in ``diagnostics()["sample_stats"]``.

    Parameters
    ----------
    model : callable
        The Pyro model.
    pairs : mapping
        Discrete site name to continuous site name: the indicator (finite support) and the
        coefficient (support the real line) of one shape, paired element by element.
    anchor : float
        Where each Newton step starts (0, for a coefficient that can be excluded).
    """

    def __init__(self, model: Callable, pairs: Mapping[str, str], *, anchor: float = 0.0) -> None:
        self.model = model
        self._pair_names, self._anchor = check_pair_options("PairedGibbs", pairs, anchor)
        self.transforms: dict = {}  # values in the model's space (a real coefficient)
        self._initial_params: dict | None = None
        self._pairs: tuple[_Pair, ...] = ()
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._warmup_steps = 0
        self._step_record = StepRecord()
        self._log: OrderedDict = OrderedDict()

    @property
    def initial_params(self) -> dict | None:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: dict | None) -> None:
        self._initial_params = params

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        """Read and check the pairs from a prior draw, and the start values (the prior
        draw's where ``initial_params`` does not give them)."""
        self._warmup_steps = int(warmup_steps)
        self._args, self._kwargs = args, kwargs
        self._step_record = StepRecord()
        self._log = OrderedDict()
        model_trace = trace_model(self.model, args, kwargs)
        self._pairs = read_pairs("PairedGibbs", self._pair_names, model_trace)
        paired = self._names()
        others = [n for n in latent_sites(model_trace) if n not in paired]
        if others:
            raise ValueError(
                f"PairedGibbs samples only its pairs; the model also has latent sites {others}: "
                f"use it as a block of pyro_ext.Gibbs, e.g. px.Gibbs([(px.PairedGibbs(model, "
                f"pairs=...), {sorted(paired)}), (NUTS(model), None)])."
            )
        given = dict(self._initial_params or {})
        start = {n: as_tensor(given.get(n, model_trace.nodes[n]["value"])).detach() for n in paired}
        log_density = model_log_density(self.model, args, kwargs)(start)
        checks.check_initial_log_density(
            "PairedGibbs", log_density.detach(), sorted(start), {n: start[n] for n in start}
        )
        self._initial_params = start

    def _names(self) -> set[str]:
        return {n for p in self._pairs for n in (p.indicator, p.coefficient)}

    def sample(self, params: dict) -> dict:
        if not self._pairs:
            raise RuntimeError("PairedGibbs: call `setup` before `sample`.")
        log_joint = model_log_density(self.model, self._args, self._kwargs)
        z = {n: as_tensor(params[n]).detach() for n in self._names()}
        with torch.no_grad():
            current = log_joint(z)
        total_accept = torch.zeros((), dtype=current.dtype, device=current.device)
        moves, count = torch.zeros((), dtype=torch.int64, device=current.device), 0
        for pair in self._pairs:
            z, current, accept, accepted = _pair_sweep(log_joint, z, current, pair, self._anchor)
            total_accept, moves = total_accept + accept, moves + accepted
            count += math.prod(pair.shape)
        index = len(self._step_record)
        stats = {"accept_prob": total_accept / count, "moves": moves, "lp": current}
        self._step_record.append(stats, current)
        if index + 1 == self._warmup_steps >= diagnosis.MIN_WARMUP_FOR_FROZEN_CHECK:
            start = diagnosis.frozen_check_start(self._warmup_steps)
            warmup_moves = self._step_record.columns(start, self._warmup_steps)["moves"]
            if not bool(warmup_moves.any()):  # read once, at the end of warmup
                message = frozen_pairs_message("PairedGibbs", self._names(), self._warmup_steps)
                warnings.warn(message, stacklevel=2)
        return {**params, **z}

    def logging(self) -> OrderedDict:
        """The progress bar's text, refreshed every ``LOG_EVERY`` draws."""
        count = len(self._step_record)
        if count <= 1 or count % LOG_EVERY == 0 or not self._log:
            recent = self._step_record.recent("accept_prob", LOG_EVERY)
            value = float(recent.mean()) if recent.numel() else float("nan")
            self._log = OrderedDict([("paired acc. prob", f"{value:.2f}")])
        return self._log

    def diagnostics(self) -> dict:
        """Mean acceptance over the sampling draws and every statistic per sampling draw."""
        sample_stats = self._step_record.columns(self._warmup_steps)
        accept = sample_stats.get("accept_prob")
        rate = float(accept.mean()) if accept is not None and accept.numel() else float("nan")
        return {"acceptance rate": rate, "sample_stats": sample_stats}


def read_pairs(owner: str, pair_names: Mapping[str, str], model_trace: Any) -> tuple[_Pair, ...]:
    """The pairs of ``pair_names`` (indicator to coefficient) read from a prior draw, each
    checked (:func:`discrete_kernels.samplers.paired.check_pair_sites`)."""
    latent = set(latent_sites(model_trace))
    pairs = []
    for indicator, coefficient in pair_names.items():
        for name in (indicator, coefficient):
            if name not in latent:
                raise ValueError(f"{owner}: {name!r} is not a latent sample site of the model.")
        sites = model_trace.nodes
        base = innermost_distribution(sites[indicator]["fn"])
        finite = base.has_enumerate_support and base.support.is_discrete
        support = sites[coefficient]["fn"].support
        shape = tuple(as_tensor(sites[indicator]["value"]).shape)
        check_pair_sites(
            owner,
            indicator,
            coefficient,
            None if finite else type(base).__name__,
            None if innermost_support(support) is constraints.real else str(support),
            (shape, tuple(as_tensor(sites[coefficient]["value"]).shape)),
        )
        values = torch.unique(base.enumerate_support(expand=False).reshape(-1))
        pairs.append(_Pair(indicator, coefficient, shape, values))
    return tuple(pairs)


def _expansion(f: Callable[[torch.Tensor], torch.Tensor], anchor: torch.Tensor) -> tuple:
    """``(f(anchor), f'(anchor), -f''(anchor))`` by autograd twice (0 where ``f`` does not
    depend on its argument)."""
    x = anchor.clone().requires_grad_()
    value = f(x)
    (first,) = torch.autograd.grad(value, x, create_graph=True, allow_unused=True)
    if first is None:
        zero = torch.zeros_like(anchor)
        return value.detach(), zero, zero
    second = None
    if first.requires_grad:
        (second,) = torch.autograd.grad(first, x, allow_unused=True)
    second = torch.zeros_like(anchor) if second is None else second
    return value.detach(), first.detach(), -second.detach()


def _pair_sweep(
    log_joint: Callable[[dict], torch.Tensor],
    z: dict,
    current: torch.Tensor,
    pair: _Pair,
    anchor: float,
) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One pass over a pair's elements in order: the paired move of each. Returns the new
    values, their log density, the summed acceptance probabilities and the accepted moves."""
    d = z[pair.indicator].reshape(-1).clone()
    c = z[pair.coefficient].reshape(-1).clone()
    values = pair.values.to(device=c.device, dtype=c.dtype)
    size, num_values = d.shape[0], values.shape[0]
    # on the coefficient's device and in its dtype, as the model's values are
    like = {"dtype": c.dtype, "device": c.device}
    a = torch.as_tensor(anchor, **like)
    positions = torch.arange(size, device=c.device)
    # every element's noise drawn at once
    gumbel = -torch.log(-torch.log(torch.rand(size, num_values, **like)))
    normal = torch.randn(size, **like)
    log_uniform = torch.log(torch.rand(size, **like))
    total = torch.zeros((), **like)
    accepted = torch.zeros((), dtype=torch.int64, device=c.device)
    for j in range(size):
        at_j = positions == j

        def f(v: torch.Tensor, x: torch.Tensor, at_j: torch.Tensor = at_j) -> torch.Tensor:
            indicator = torch.where(at_j, v.to(d.dtype), d)
            coefficient = torch.where(at_j, x, c)
            return log_joint(
                {
                    **z,
                    pair.indicator: indicator.reshape(pair.shape),
                    pair.coefficient: coefficient.reshape(pair.shape),
                }
            )

        expansions = [_expansion(partial(f, v), a) for v in values]
        expansion = tuple(torch.stack(column) for column in zip(*expansions))

        def density_at(index: torch.Tensor, coefficient: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return f(values[index], coefficient)

        current_index = torch.argmax((values == d[j].to(values.dtype)).to(torch.int8))
        index, proposed, proposed_density, log_ratio, accept = paired_move(
            expansion,  # type: ignore[arg-type]
            a,
            density_at,
            (current_index, c[j], current),
            (gumbel[j], normal[j], log_uniform[j]),
        )
        total = total + accept_probability(log_ratio)
        if bool(accept):
            d[j] = values[index].to(d.dtype)
            c[j] = proposed
            current = proposed_density
            accepted = accepted + 1
    z = {**z, pair.indicator: d.reshape(pair.shape), pair.coefficient: c.reshape(pair.shape)}
    return z, current, total, accepted
