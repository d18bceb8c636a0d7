"""Setup probes of a NumPyro block: the model traced again with one site changed, to learn
what a single trace cannot (which supports move with another site's value, which continuous
sites of other ``Gibbs`` blocks a discrete site gates). Setup only, eager; the decisions and
the messages are the core's (:mod:`discrete_kernels.validation`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.handlers import seed, trace
from numpyro.infer.gibbs import GIBBS_SITES_KWARG, conditioned, with_conditioning

from discrete_kernels import diagnosis

from ._target import LeafSpec, integer_bounds

__all__ = ["check_fixed_supports", "warn_gated_sites"]


def _interval_ends(site: dict) -> list:
    """The two ends of a site's integer interval (every coordinate set to one end), or an
    empty list where its support is not one."""
    bounds = integer_bounds(site)
    if bounds is None:
        return []
    value = jnp.asarray(site["value"])
    return [jnp.broadcast_to(b, value.shape).astype(value.dtype) for b in bounds]


def _fresh_draws(site: dict) -> list:
    """Two draws from the site's distribution (fixed keys), those that have its shape."""
    fn, value = site["fn"], jnp.asarray(site["value"])
    out = []
    for k in (1, 2):
        try:
            out.append(fn.sample(random.key(k)).reshape(value.shape))
        except Exception:  # no sample method, or another shape
            continue
    return out


def _sampled_values(model_trace: dict, conditioning: dict) -> dict:
    """The values of the trace's latent sample sites and of those another ``Gibbs`` block
    conditions on: what a probe sets before changing one of them."""
    return {
        name: site["value"]
        for name, site in model_trace.items()
        if site["type"] == "sample" and (not site["is_observed"] or name in conditioning)
    }


def _probe_traces(
    model: Callable,
    model_args: tuple,
    model_kwargs: dict,
    values: dict,
    changes: dict[str, list],
) -> Iterator[tuple[str, dict]]:
    """``(name, trace)`` of the model at ``values`` with the site ``name`` set to each of its
    alternatives in ``changes``; an alternative the model cannot take is skipped (nothing
    learned from it)."""
    seeded = seed(conditioned(model), random.key(0))
    for name, alternatives in changes.items():
        for alternative in alternatives:
            kwargs = with_conditioning(model_kwargs, {**values, name: alternative})
            try:
                yield name, trace(seeded).get_trace(*model_args, **kwargs)
            except Exception:
                continue


def check_fixed_supports(
    model: Callable, leaves: tuple[LeafSpec, ...], model_trace: dict, model_args, model_kwargs
) -> None:
    """Refuse sites whose integer support moves with another site's value (traced once per
    other site and alternative value: its interval's ends and two fresh draws)."""
    base = diagnosis.movable_supports(
        [(s.name, s.domain) for s in leaves], lambda name: integer_bounds(model_trace[name])
    )
    if not base or any(isinstance(b, jax.core.Tracer) for pair in base.values() for b in pair):
        return  # nothing to check, or traced (parallel chains: _static refuses it)
    conditioning = dict(model_kwargs.get(GIBBS_SITES_KWARG, {}))
    values = _sampled_values(model_trace, conditioning)
    changes = {n: _fresh_draws(model_trace[n]) + _interval_ends(model_trace[n]) for n in values}
    perturbed = []
    for changed, other in _probe_traces(model, model_args, model_kwargs, values, changes):
        try:
            bounds = {name: integer_bounds(other[name]) for name in base}
        except Exception:  # a site the changed value removes: nothing learned
            continue
        perturbed.append((changed, bounds))
    diagnosis.check_fixed_supports(base, perturbed)


def warn_gated_sites(
    owner: str,
    model: Callable,
    leaves: tuple[LeafSpec, ...],
    model_trace: dict,
    model_args: tuple,
    model_kwargs: dict,
) -> dict:
    """Warn when a discrete site of this block sets the distribution of a continuous site
    that another ``Gibbs`` block updates (an SSVS spike and slab), naming the joint moves;
    the model is traced twice per discrete site (setup only). Returns the gates found."""
    conditioning = dict(model_kwargs.get(GIBBS_SITES_KWARG, {}))
    continuous = [
        name
        for name in conditioning
        if name in model_trace
        and model_trace[name]["type"] == "sample"
        and not model_trace[name]["fn"].support.is_discrete
    ]
    if not continuous or any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves(conditioning)):
        return {}  # nothing another block updates, or traced (parallel chains)

    def densities(tr: dict) -> dict:
        return {c: np.asarray(tr[c]["fn"].log_prob(tr[c]["value"])) for c in continuous}

    values = _sampled_values(model_trace, conditioning)
    # the two ends of an integer interval (every coordinate changes under one of them), else
    # two fresh draws
    changes = {
        s.name: _interval_ends(model_trace[s.name]) or _fresh_draws(model_trace[s.name])
        for s in leaves
    }
    perturbed = [
        (name, densities(other))
        for name, other in _probe_traces(model, model_args, model_kwargs, values, changes)
    ]
    gates = diagnosis.gated_sites(densities(model_trace), perturbed)
    if gates:
        moves = (
            "Gibbs([(nx.PairedGibbs(model, pairs={pairs}), {sites}), (NUTS(model), None)]) "
            "or nx.PairedNUTS(model, pairs={pairs})"
        )
        otherwise = "Or sum the discrete site out with nx.MarginalNUTS."
        warnings.warn(diagnosis.gated_sites_message(owner, gates, moves, otherwise), stacklevel=2)
    return gates
