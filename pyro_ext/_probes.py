"""Setup probes of a Pyro block: the model traced again with one site changed, to learn what
a single trace cannot (which supports move with another site's value, which continuous sites
of other ``px.Gibbs`` blocks a discrete site gates). Setup only, eager, the user's random
stream left as it was; the decisions and the messages are the core's
(:mod:`discrete_kernels.validation`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from pyro.poutine.util import site_is_subsample

from discrete_kernels import diagnosis

from ._target import LeafSpec, fork_rng, integer_bounds, trace_model

__all__ = ["check_fixed_supports", "warn_gated_sites"]


def _interval_ends(site: dict) -> list:
    """The two ends of a site's integer interval (every coordinate set to one end, on the
    value's device), or an empty list where its support is not one."""
    bounds = integer_bounds(site)
    if bounds is None:
        return []
    value = site["value"]
    return [
        torch.as_tensor(b, dtype=value.dtype, device=value.device).expand(value.shape)
        for b in bounds
    ]


def _fresh_draws(site: dict) -> list:
    """Two draws from the site's distribution, those that have its shape."""
    out = []
    for _ in range(2):
        try:
            out.append(site["fn"].sample().reshape(site["value"].shape))
        except Exception:  # no sample method, or another shape
            continue
    return out


def _sampled_values(model_trace: Any, conditioned: frozenset) -> dict:
    """The values of the trace's latent sample sites and of those another ``px.Gibbs`` block
    conditions on (subsample indices left out): what a probe sets before changing one of
    them."""
    return {
        name: site["value"]
        for name, site in model_trace.nodes.items()
        if site["type"] == "sample"
        and (not site["is_observed"] or name in conditioned)
        and not site_is_subsample(site)
    }


def _probe_traces(
    model: Callable, args: tuple, kwargs: dict, values: dict, changes: dict[str, list]
) -> Iterator[tuple[str, Any]]:
    """``(name, trace)`` of the model at ``values`` with the site ``name`` set to each of its
    alternatives in ``changes``; an alternative the model cannot take is skipped (nothing
    learned from it). Call it inside :func:`fork_rng`."""
    for name, alternatives in changes.items():
        for alternative in alternatives:
            try:
                yield name, trace_model(model, args, kwargs, {**values, name: alternative})
            except Exception:
                continue


def check_fixed_supports(
    model: Callable,
    leaves: tuple[LeafSpec, ...],
    model_trace: Any,
    args: tuple,
    kwargs: dict,
    conditioned: frozenset,
) -> None:
    """Refuse sites whose integer support moves with another site's value (the model is
    traced once per other site and alternative value: two fresh draws and its interval's
    ends)."""
    base = diagnosis.movable_supports(
        [(s.name, s.domain) for s in leaves],
        lambda name: integer_bounds(model_trace.nodes[name]),
    )
    if not base:
        return
    values = _sampled_values(model_trace, conditioned)
    perturbed = []
    with fork_rng():
        nodes = model_trace.nodes
        changes = {n: _fresh_draws(nodes[n]) + _interval_ends(nodes[n]) for n in values}
        for changed, other in _probe_traces(model, args, kwargs, values, changes):
            try:
                bounds = {name: integer_bounds(other.nodes[name]) for name in base}
            except Exception:  # a site the changed value removes: nothing learned
                continue
            perturbed.append((changed, bounds))
    diagnosis.check_fixed_supports(base, perturbed)


def warn_gated_sites(
    owner: str,
    model: Callable,
    leaves: tuple[LeafSpec, ...],
    model_trace: Any,
    args: tuple,
    kwargs: dict,
    conditioned: frozenset,
) -> None:
    """Warn when a discrete site of this block sets the distribution of a continuous site
    that another ``px.Gibbs`` block updates (an SSVS spike and slab), naming the joint move;
    the model is traced twice per discrete site."""
    nodes = model_trace.nodes
    continuous = [
        name
        for name in conditioned
        if name in nodes
        and nodes[name]["type"] == "sample"
        and not nodes[name]["fn"].support.is_discrete
    ]
    if not continuous:
        return

    def densities(tr: Any) -> dict:
        # read on the host once per probe trace, at setup only
        return {
            c: tr.nodes[c]["fn"].log_prob(tr.nodes[c]["value"]).detach().cpu().numpy()
            for c in continuous
        }

    values = _sampled_values(model_trace, conditioned)
    with fork_rng(), torch.no_grad():
        # the two ends of an integer interval (every coordinate changes under one of them),
        # else two fresh draws
        changes = {
            s.name: _interval_ends(nodes[s.name]) or _fresh_draws(nodes[s.name]) for s in leaves
        }
        perturbed = [
            (name, densities(other))
            for name, other in _probe_traces(model, args, kwargs, values, changes)
        ]
        base = densities(model_trace)
    gates = diagnosis.gated_sites(base, perturbed)
    if gates:
        moves = "px.Gibbs([(px.PairedGibbs(model, pairs={pairs}), {sites}), (NUTS(model), None)])"
        warnings.warn(diagnosis.gated_sites_message(owner, gates, moves), stacklevel=2)
