"""Checks of the options every kernel takes, shared by the adapters (one message each)."""

from __future__ import annotations

from typing import Any

__all__ = ["check_kernel_options", "check_bound"]


def check_bound(name: str, model: Any, potential_fn: Any) -> None:
    """A kernel built with neither a model nor a potential (a sampler for the EBM trainers)
    cannot run in ``MCMC``: say so when it is asked to."""
    if model is None and potential_fn is None:
        raise ValueError(
            f"{name}: give exactly one of `model` or `potential_fn` to run it in MCMC (a "
            "kernel built without either only serves as the sampler of an EBM trainer)."
        )


def check_kernel_options(
    name: str,
    model: Any,
    potential_fn: Any,
    domain: Any,
    domain_hint: str,
) -> None:
    """Raise ``ValueError`` naming the argument and what is allowed.

    Parameters
    ----------
    name : str
        The kernel's name, for the messages.
    model, potential_fn, domain
        The constructor's arguments.
    domain_hint : str
        How a pytree of domains is given in this adapter.
    """
    if model is not None and potential_fn is not None:
        raise ValueError(f"{name}: give exactly one of `model` or `potential_fn`.")
    if potential_fn is not None and domain is None:  # (neither: an EBM sampler, see check_bound)
        raise ValueError(
            f"{name}: `potential_fn` needs `domain=` (Binary(), Ordinal(S), Categorical(K), "
            f"or {domain_hint})."
        )
    if model is not None and domain is not None:
        raise ValueError(
            f"{name}: `domain` is for potential mode; a model's site domains come from its "
            "distributions."
        )
