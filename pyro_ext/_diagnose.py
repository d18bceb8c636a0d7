"""Why a Pyro model's log density is not finite at a point: its terms, one by one.

Used only when a start is refused (:func:`discrete_kernels.validation.check_initial_log_density`),
so that the message names the site or factor whose term is NaN or ``-inf`` and, where torch is
the cause, says so: a distribution given infinite logits has a NaN ``log_prob`` in torch, even at
the value of probability 1 (``Bernoulli(logits=inf).log_prob(1)`` is NaN).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from discrete_kernels.sites import unwrap_distribution

from ._target import trace_model

__all__ = ["nonfinite_terms"]


def _infinite_logits(fn: Any) -> bool:
    """Whether the distribution (under its wrappers) has infinite logits."""
    logits = getattr(unwrap_distribution(fn), "logits", None)
    return isinstance(logits, torch.Tensor) and bool(torch.isinf(logits).any())


def nonfinite_terms(model: Callable, args: tuple, kwargs: dict, values: dict) -> list[str]:
    """Sentences naming each term of ``model`` that is NaN or ``-inf`` with ``values``
    conditioned (sites and factors, in the model's order); empty when the model cannot be
    traced there or every term is finite."""
    try:
        with torch.no_grad():
            model_trace = trace_model(model, args, kwargs, values)
            model_trace.compute_log_prob()
    except Exception:  # the message without a diagnosis is still right
        return []
    out = []
    for name, site in model_trace.nodes.items():
        if site["type"] != "sample" or "log_prob" not in site:
            continue
        log_prob = site["log_prob"].detach()
        bad = ~torch.isfinite(log_prob)
        if not bool(bad.any()):
            continue
        fn = site["fn"]
        found = sorted({str(v) for v in log_prob[bad].flatten().tolist()})
        kind = type(unwrap_distribution(fn)).__name__
        if kind == "Unit":  # pyro.factor
            out.append(f"The factor {name!r} is {' and '.join(found)} there.")
            continue
        where = f"at {int(bad.sum())} of its {log_prob.numel()} entries" if log_prob.ndim else ""
        sentence = f"Site {name!r} ({kind}) has log_prob {' and '.join(found)} {where}".rstrip()
        if _infinite_logits(fn):
            sentence += (
                ": its logits are infinite, and torch's log_prob is NaN at infinite logits (even "
                "at the value of probability 1). Use finite logits (e.g. clamped to [-30, 30]) "
                "or probs."
            )
        else:
            sentence += "."
        out.append(sentence)
    return out
