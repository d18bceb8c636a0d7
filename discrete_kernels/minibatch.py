"""What a kernel refuses on a minibatch estimate of the log density (a plate with
``subsample_size``: DLP paper, Sec. 6): the subsampling plates the adapters read from the
model's trace, and the checks at setup that name the kernel, the plate and the fix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .sites import LeafSpec

__all__ = ["SubsamplePlate", "check_minibatch"]


@dataclass(frozen=True)
class SubsamplePlate:
    """A plate of the model that draws a minibatch: its **name**, its **size** ``N`` and its
    **subsample_size** ``b < N`` (the PPL scales the terms inside it by ``N / b``)."""

    name: str
    size: int
    subsample_size: int

    def __str__(self) -> str:
        return f"plate {self.name!r} subsamples {self.subsample_size} of {self.size}"


def check_minibatch(
    owner: str,
    refusal: str | None,
    plates: Sequence[SubsamplePlate],
    leaves: Sequence[LeafSpec],
    exact_names: Sequence[str],
    latent_in_plates: Mapping[str, str],
    remove_hint: str,
) -> None:
    """Refuse what cannot run on a minibatch estimate of the log density.

    Parameters
    ----------
    owner : str
        The kernel's name.
    refusal : str or None
        The sampler's :meth:`~discrete_kernels.Sampler.minibatch_refusal`.
    plates : the model's subsampling plates (not empty)
    leaves : the kernel's leaves (a table leaf compares log densities)
    exact_names : the sites the user listed in ``exact_sites``
    latent_in_plates : ``{site: plate}`` for latent sites inside a subsampling plate
    remove_hint : how the PPL spells the fix, e.g. ``"remove subsample_size="``

    Raises
    ------
    ValueError
        Naming the kernel, the plate and the reason.
    """
    where = "; ".join(str(p) for p in plates)
    if refusal is not None:
        raise ValueError(
            f"{owner}: {where} (a new minibatch at every step): {refusal}. Use DULA with a "
            f"fixed step size (stochastic-gradient DLP), or {remove_hint}."
        )
    for name, plate in latent_in_plates.items():
        raise ValueError(
            f"{owner}: latent site {name!r} is inside subsampling plate {plate!r}: its "
            "coordinates would be other rows at every step. Keep latent sites outside the "
            f"subsampling plate, or {remove_hint}."
        )
    if exact_names:
        raise ValueError(
            f"{owner}: {where}: exact_sites={list(exact_names)} compares log densities, and "
            "on a minibatch log density the differences are not exact. Pass exact_sites=[] "
            f"(stochastic gradients), or {remove_hint}."
        )
    tables = [s.name for s in leaves if s.is_table]
    if tables:
        raise ValueError(
            f"{owner}: {where}: sites {tables} need exact differences (categorical values "
            "used as indices), which compare log densities on a minibatch. Give them "
            f"another Gibbs block, or {remove_hint}."
        )
