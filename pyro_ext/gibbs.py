"""``Gibbs``: a composite Pyro kernel that updates a model's latent sites block by block."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from pyro import poutine
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from discrete_kernels.stats import block_labels

from ._target import as_tensor, discrete_sites, latent_sites, trace_model
from .driver import DiscreteKernel

__all__ = ["Gibbs", "discrete_sites"]

SitesSpec = Sequence[str] | Callable | None


class _ConditionedModel:
    """The model with the sites in ``store.values`` that a block does not own conditioned.

    A picklable callable whose conditioning values change between calls: the composite
    writes the other blocks' current values into the shared store before each block step.
    """

    def __init__(self, model: Callable, store: _Store, own: frozenset[str]) -> None:
        self.model = model
        self.store = store
        self.own = own

    def conditioning(self) -> dict:
        """The current values of the sites this block does not own."""
        return {k: v for k, v in self.store.values.items() if k not in self.own}

    def __call__(self, *args, **kwargs):
        return poutine.condition(self.model, data=self.conditioning())(*args, **kwargs)


class _Store:
    def __init__(self) -> None:
        self.values: dict[str, torch.Tensor] = {}


class Gibbs(MCMCKernel):
    """Alternate blocks of a model's latent sites, each with its own kernel.

    Each block ``(kernel, sites)`` is run on the model conditioned on the current values of
    every site it does not own. A block kernel is either a kernel of this library (DMALA,
    GWG, DiscreteGibbs, ...) or one of Pyro's (``HMC``, ``NUTS``); every block kernel must be
    built on the same model.

    Parameters
    ----------
    blocks : sequence of (kernel, sites)
        ``sites``: a list of site names, a callable mapping a model trace to names (e.g.
        :func:`pyro_ext.discrete_sites`), or None for every latent site no other block owns
        (at most one block).

    Example
    -------
    >>> kernel = Gibbs([(px.DMALA(model), px.discrete_sites), (NUTS(model), None)])
    >>> mcmc = pyro.infer.MCMC(kernel, num_samples=1000, warmup_steps=500)  # doctest: +SKIP
    """

    def __init__(self, blocks: Sequence[tuple[MCMCKernel, SitesSpec]]) -> None:
        blocks = list(blocks)
        if not blocks:
            raise ValueError("Gibbs requires at least one block.")
        models = []
        for block in blocks:
            if not (isinstance(block, tuple) and len(block) == 2):
                raise ValueError("Each block must be a `(kernel, sites)` pair.")
            kernel, _ = block
            if not isinstance(kernel, MCMCKernel):
                raise ValueError(f"{kernel!r} is not a pyro MCMCKernel.")
            if getattr(kernel, "model", None) is None:
                raise ValueError(
                    f"{type(kernel).__name__} built from a potential function cannot be a "
                    "block of Gibbs."
                )
            models.append(getattr(kernel, "model"))  # noqa: B009 (MCMCKernel declares none)
        if any(m is not models[0] for m in models[1:]):
            raise ValueError("All blocks of Gibbs must be built on the same model.")
        if sum(spec is None for _, spec in blocks) > 1:
            raise ValueError("At most one block can use `None` for its sites.")
        self.model = models[0]
        self._store = _Store()
        self._blocks = [(kernel, spec) for kernel, spec in blocks]
        self._sites: list[tuple[str, ...]] = []
        self.transforms: dict = {}
        self._initial_params: dict | None = None

    @property
    def initial_params(self) -> dict | None:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: dict | None) -> None:
        self._initial_params = params

    def _resolve_sites(self, model_trace) -> list[tuple[str, ...]]:
        latent = latent_sites(model_trace)
        resolved: list[tuple[str, ...] | None] = []
        for _, spec in self._blocks:
            if spec is None:
                resolved.append(None)
                continue
            names = tuple(spec(model_trace)) if callable(spec) else tuple(spec)
            unknown = [n for n in names if n not in latent]
            if unknown:
                raise ValueError(f"Sites {unknown} are not latent sample sites of the model.")
            resolved.append(names)
        owned = [n for names in resolved if names for n in names]
        duplicates = sorted({n for n in owned if owned.count(n) > 1})
        if duplicates:
            raise ValueError(f"Sites {duplicates} are owned by more than one block.")
        remainder = tuple(n for n in latent if n not in owned)
        if None in resolved:
            resolved[resolved.index(None)] = remainder
        elif remainder:
            raise ValueError(
                f"Latent sites {list(remainder)} are not owned by any block; add a block or "
                "use `None` as the sites of one block."
            )
        out: list[tuple[str, ...]] = []
        for (kernel, _), block_sites in zip(self._blocks, resolved):
            if not block_sites:
                raise ValueError(f"Block {type(kernel).__name__} owns no sites.")
            out.append(tuple(block_sites))
        return out

    def setup(self, warmup_steps: int, *args, **kwargs) -> None:
        for kernel, _ in self._blocks:
            if not isinstance(kernel, DiscreteKernel) and getattr(kernel, "_jit_compile", False):
                # Pyro's trace of its potential reads the other blocks' values as constants
                raise ValueError(
                    f"Gibbs: {type(kernel).__name__}(jit_compile=True) would keep the other "
                    "blocks' values of the first sweep in its trace (its potential is traced "
                    "with its own sites as the only inputs). Pass jit_compile=False to it; this "
                    "library's kernels take jit_compile=True inside Gibbs."
                )
        model_trace = trace_model(self.model, args, kwargs)
        self._sites = self._resolve_sites(model_trace)
        init = dict(self._initial_params or {})
        self._store.values = {
            name: as_tensor(init.get(name, model_trace.nodes[name]["value"])).detach()
            for names in self._sites
            for name in names
        }
        self.transforms = {}
        params = {}
        for i, (kernel, _) in enumerate(self._blocks):
            own = self._sites[i]
            conditioned = _ConditionedModel(self.model, self._store, frozenset(own))
            kernel.model = conditioned  # type: ignore[attr-defined]
            if getattr(kernel, "transforms", None) == {}:
                # a kernel on constrained values (this library's): start from the store
                kernel.initial_params = {k: self._store.values[k] for k in own}
            else:
                # HMC/NUTS initialise in their unconstrained space with their own strategy
                kernel.initial_params = None
            kernel.setup(warmup_steps, *args, **kwargs)
            transforms = getattr(kernel, "transforms", None) or {}
            self.transforms.update(transforms)
            for name in own:
                value = kernel.initial_params[name]
                params[name] = value
                self._store.values[name] = (
                    transforms[name].inv(value) if name in transforms else value
                ).detach()
        self._initial_params = params

    def sample(self, params: dict) -> dict:
        params = dict(params)
        for (kernel, _), names in zip(self._blocks, self._sites):
            transforms = getattr(kernel, "transforms", None) or {}
            block_params = {name: params[name] for name in names}
            if hasattr(kernel, "clear_cache"):
                kernel.clear_cache()  # cached potential and gradient: stale under new conditioning
            new = kernel.sample(block_params)
            for name in names:
                params[name] = new[name]
                value = new[name]
                self._store.values[name] = (
                    transforms[name].inv(value) if name in transforms else value
                ).detach()
        return params

    def logging(self) -> OrderedDict:
        out = OrderedDict()
        for kernel, _ in self._blocks:
            for key, value in (kernel.logging() or {}).items():
                out[f"{type(kernel).__name__}: {key}"] = value
        return out

    def diagnostics(self) -> dict:
        """Each block's diagnostics, and under ``sample_stats`` every block's per-draw
        statistics, prefixed by the block's label (``dmala_accept_prob``, ``esh_lp``, ...)."""
        out: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        for label, (kernel, _) in zip(self.block_labels(), self._blocks):
            for key, value in (kernel.diagnostics() or {}).items():
                if key == "sample_stats":
                    merged.update({f"{label}_{name}": v for name, v in value.items()})
                else:
                    out[f"{label}: {key}"] = value
        if merged:
            out["sample_stats"] = merged
        return out

    def block_labels(self) -> list[str]:
        """One label per block (see :func:`discrete_kernels.stats.block_labels`)."""
        return block_labels([type(kernel).__name__ for kernel, _ in self._blocks])

    def cleanup(self) -> None:
        for kernel, _ in self._blocks:
            kernel.cleanup()
