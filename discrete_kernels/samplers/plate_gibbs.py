"""Exact block Gibbs updates of conditionally independent sites (plates).

In the models users write, the coordinates of a discrete site in a plate (one indicator per
row, one class per item) are conditionally independent given the other sites: every term of
the log density that depends on the site is indexed by the plate, so

    p(x | rest) = prod_i p(x_i | rest),   p(x_i = v | rest) ∝ exp(T[i, v]),

with ``T[i, v] = f(x with x_i = v)`` the site's exact table
(:func:`discrete_kernels.sites.table_from_element_terms`; the drivers compute it from ``S``
evaluations of the per-coordinate terms and verify the independence at setup). A draw of every
coordinate from its row of ``T`` is then an exact Gibbs update of the whole site: no MH
correction, every proposal accepted. :class:`PlateGibbs` updates the leaves in turn (a
systematic scan), each from the table at the current values of the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .._xp import Array, array_namespace, categorical_from_uniform, log_softmax
from ..domains import Domain
from ..kernel import (
    ChainState,
    ControlFlow,
    LocalFn,
    NoiseShapes,
    Sampler,
    Sites,
    StepInfo,
    StepParameters,
    hamming_distance,
)

__all__ = ["PlateGibbs", "plate_gibbs_step"]


def plate_gibbs_step(
    state: ChainState,
    uniforms: Sequence[Array],
    *,
    local_fn: LocalFn,
    domains: Sequence[Domain],
) -> tuple[ChainState, StepInfo]:
    """One systematic scan: each leaf in turn drawn whole from its exact conditional.

    Parameters
    ----------
    state : ChainState
        Its locals are the leaves' exact tables, shape ``(n..., S)`` per leaf.
    uniforms : per leaf, uniforms in [0, 1) of the leaf's shape
    local_fn : ``leaves -> (f, tables)``; evaluated once per leaf
    domains : per leaf

    Returns
    -------
    (ChainState, StepInfo)
        ``accept_prob`` 1 (a Gibbs update), ``accepted`` whether any coordinate changed,
        ``hamming_distance`` how many did.
    """
    chain = state
    for j, (domain, u) in enumerate(zip(domains, uniforms)):
        x = chain.x[j]
        xp = array_namespace(x)
        value = categorical_from_uniform(chain.local[j], u) + domain.low
        leaves = chain.x[:j] + (xp.astype(value, x.dtype),) + chain.x[j + 1 :]
        f, local = local_fn(leaves)
        chain = ChainState(leaves, f, tuple(local))
    distance = hamming_distance(state.x, chain.x, chain.log_density)
    xp = array_namespace(distance)
    return chain, StepInfo(xp.ones_like(distance), distance > 0, distance)


@dataclass(frozen=True, eq=False)
class PlateGibbs(Sampler):
    """Exact Gibbs updates of whole plates: every coordinate of a site whose coordinates are
    conditionally independent given the rest (one indicator per row, one class per item) is
    drawn at once from its exact conditional, the sites in turn.

    A step costs ``S`` vectorised evaluations of the model per site (``S`` values), not
    ``N x S`` as a one-coordinate-at-a-time sweep does. At setup the drivers read each site's
    plates from the model's trace and verify the independence numerically; a site that is not
    conditionally independent in its coordinates (a chain, a lattice, a ``factor`` over the
    whole site) is refused with the reason. Use it alone or as a block of ``Gibbs`` next to
    NUTS for the continuous sites. No options; nothing is adapted.
    """

    name: ClassVar[str] = "PlateGibbs"
    reported: ClassVar[tuple[str, ...]] = ("accepted", "hamming_distance")
    progress: ClassVar[tuple[tuple[str, str, str], ...]] = (("changed", "hamming_distance", ".3g"),)
    site_options: ClassVar[tuple[str, ...]] = ()
    needs_plate_tables: ClassVar[bool] = True

    def check_sites(self, sites: Sites, flat_dim: int) -> None:
        if not all(sites.is_table):
            missing = [n for n, t in zip(sites.names, sites.is_table) if not t]
            raise ValueError(
                f"{self.name}: sites {missing} have no exact conditional table; every site "
                "must be conditionally independent in its coordinates."
            )

    def noise_shapes(self, sites: Sites, leaf_shapes: Sequence[tuple[int, ...]]) -> NoiseShapes:
        return NoiseShapes(tuple(tuple(shape) for shape in leaf_shapes))

    def adapt_init(self, like, num_warmup, sites, flat_dim, control: ControlFlow) -> Any:
        return ()

    def parameters(self, adapt_state: Any) -> StepParameters:
        return StepParameters(1.0, 0.5, False)

    def adapt_final(self, adapt_state: Any) -> dict:
        return {}

    def step(self, chain, noise, params, adapt_state, sites, local_fn):
        return plate_gibbs_step(chain, noise.uniforms, local_fn=local_fn, domains=sites.domains)

    def log_proposal(self, chain: ChainState, ys: tuple, params: StepParameters, sites: Sites):
        """``log q(ys | chain)`` of one scan (for exact tests), the leaves' tables recomputed
        along the scan only through ``chain``: valid for one leaf, where the scan is one draw
        from the table."""
        if len(ys) != 1:
            raise NotImplementedError("log_proposal of PlateGibbs: one leaf only")
        table = chain.local[0]
        xp = array_namespace(table)
        values = xp.arange(table.shape[-1]) + sites.domains[0].low
        chosen = values == xp.astype(ys[0], values.dtype)[..., None]
        log_p = log_softmax(table)
        return xp.sum(xp.where(chosen, log_p, xp.zeros_like(log_p)))
