"""How a kernel class of either PPL is made from a sampler's spec: the spec's options (its
dataclass fields) against the site options every kernel takes, the class's keyword signature
and docstring (:func:`bind_sampler`, called once per kernel class by each driver)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .kernel import Sampler

__all__ = ["bind_sampler", "kernel_signature", "option_names", "split_options"]


def option_names(sampler: Any) -> tuple[str, ...]:
    """The sampler's own options: its dataclass fields set by the user."""
    return tuple(f.name for f in dataclasses.fields(sampler) if f.init)


def split_options(sampler: Any, options: dict) -> tuple[dict, dict]:
    """``(sampler options, site options)`` from a kernel's keyword arguments, refusing names
    the kernel does not take (``TypeError`` listing the ones it does)."""
    own = option_names(sampler)
    site_options = getattr(sampler, "site_options", ())
    site = {k: v for k, v in options.items() if k in site_options}
    unknown = sorted(set(options) - set(own) - set(site))
    if unknown:
        allowed = ", ".join([*own, *site_options])
        raise TypeError(f"{sampler.name}: unknown option(s) {unknown}; its options are {allowed}.")
    return {k: v for k, v in options.items() if k in own}, site


def kernel_signature(sampler: Any, domain: bool = True) -> inspect.Signature:
    """The keyword signature of a kernel class: ``model``, then ``potential_fn`` (and
    ``domain``), the sampler's options and its site options, with their defaults (for
    ``help`` and ``inspect``)."""
    from .sites import SiteOptions  # sites.py imports this module

    site_defaults = {f.name: f.default for f in dataclasses.fields(SiteOptions)}
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
        inspect.Parameter("potential_fn", keyword, default=None),
    ]
    if domain:
        params.append(inspect.Parameter("domain", keyword, default=None))
    for f in dataclasses.fields(sampler):
        if f.init:
            params.append(inspect.Parameter(f.name, keyword, default=f.default))
    for name in getattr(sampler, "site_options", ()):
        params.append(inspect.Parameter(name, keyword, default=site_defaults[name]))
    return inspect.Signature(params)


def bind_sampler(kernel_class: type, sampler: type[Sampler]) -> None:
    """Make ``kernel_class`` (a PPL driver's subclass) the kernel of ``sampler``: it records
    the sampler, takes its keyword signature and appends its docstring."""
    kernel_class.sampler = sampler  # type: ignore[attr-defined]
    kernel_class.__signature__ = kernel_signature(sampler)  # type: ignore[attr-defined]
    if sampler.__doc__:
        kernel_class.__doc__ = (kernel_class.__doc__ or "").rstrip() + "\n\n" + sampler.__doc__
