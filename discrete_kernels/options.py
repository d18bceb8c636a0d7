"""Checks of the options every kernel takes, shared by the adapters (one message each)."""

from __future__ import annotations

from typing import Any

from .validation import check_number

__all__ = ["check_kernel_options"]


def check_kernel_options(
    name: str,
    model: Any,
    potential_fn: Any,
    domain: Any,
    step_size: Any,
    target_accept_prob: float,
    domain_hint: str,
) -> None:
    """Raise ``ValueError`` naming the argument and what is allowed.

    Parameters
    ----------
    name : str
        The kernel's name, for the messages.
    model, potential_fn, domain, step_size, target_accept_prob
        The constructor's arguments (``step_size=None`` means "no step size").
    domain_hint : str
        How a pytree of domains is given in this adapter.
    """
    if (model is None) == (potential_fn is None):
        raise ValueError(f"{name}: give exactly one of `model` or `potential_fn`.")
    if potential_fn is not None and domain is None:
        raise ValueError(
            f"{name}: `potential_fn` needs `domain=` (Binary(), Ordinal(S), Categorical(K), "
            f"or {domain_hint})."
        )
    if model is not None and domain is not None:
        raise ValueError(
            f"{name}: `domain` is for potential mode; a model's site domains come from its "
            "distributions."
        )
    if step_size is not None:
        check_number(name, "step_size", step_size)
    check_number(name, "target_accept_prob", target_accept_prob, high=1.0)
