"""The setup's check that a model's discrete coordinates are all conditionally independent, as
one MH decision per coordinate needs (``DMALA(per_coordinate_mh=True)``,
:func:`discrete_kernels.metropolis.mh_finish_per_coordinate`); numpy only, the adapters evaluate
the model.

At a point ``x`` of the model, a state ``y`` with a random half of the coordinates moved to a
neighbouring value and a state ``m`` with a random half of those: coordinate by coordinate,
``m``'s own terms and gradient must be ``x``'s or ``y``'s (each depends on its own coordinate
only), and the changes of the own terms from ``x`` to ``y`` and to ``m`` must add up to the log
density's (no other term depends on a coordinate).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .domains import Binary, Domain, Integer, coordinate_bounds

__all__ = [
    "Evaluation",
    "ProbeStates",
    "per_coordinate_error",
    "per_coordinate_mismatch",
    "per_coordinate_refusal",
    "probe_states",
]

#: relative tolerance of the terms' and gradients' equality (float32 models)
TERMS_RTOL, GRADIENT_RTOL, ABSOLUTE = 1e-4, 1e-3, 1e-4


class Evaluation(NamedTuple):
    """The model at one state, as numpy: the log density **f**, per leaf its **gradient**
    and its own **terms** (both of the leaf's shape)."""

    f: float
    gradient: tuple
    terms: tuple


class ProbeStates(NamedTuple):
    """The states of one probe (tuples of numpy leaves): **x**, **moved** (``y``), **mixed**
    (``m``), and per leaf the mask of the coordinates ``m`` takes from ``y``."""

    x: tuple
    moved: tuple
    mixed: tuple
    mixed_masks: tuple


def _neighbour(domain: Domain, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``x`` with the coordinates under ``mask`` at a neighbouring value: flipped, or ``x + 1``
    (``x - 1`` at the top of the support)."""
    if isinstance(domain, Binary):
        return np.where(mask, 1 - x, x).astype(x.dtype)
    high = domain.high if isinstance(domain, Integer) else coordinate_bounds(domain, x.shape)[1]
    up = x + 1 if high is None else np.where(x + 1 <= high, x + 1, x - 1)
    return np.where(mask, up, x).astype(x.dtype)


def probe_states(domains: Sequence[Domain], x: Sequence[Any], seed: int = 0) -> ProbeStates:
    """The probe's states around the point ``x`` (numpy leaves), from numpy's RNG ``seed``."""
    rng = np.random.default_rng(seed)
    xs = tuple(np.asarray(v) for v in x)
    moved_masks = [rng.random(v.shape) < 0.5 for v in xs]
    mixed_masks = tuple(m & (rng.random(m.shape) < 0.5) for m in moved_masks)
    moved = tuple(_neighbour(d, v, m) for d, v, m in zip(domains, xs, moved_masks))
    mixed = tuple(np.where(m, b, a) for a, b, m in zip(xs, moved, mixed_masks))
    return ProbeStates(xs, moved, mixed, mixed_masks)


def _additivity_error(at_x: Evaluation, at_z: Evaluation) -> str | None:
    with np.errstate(invalid="ignore"):
        changes = [
            np.asarray(b, np.float64) - np.asarray(a, np.float64)
            for a, b in zip(at_x.terms, at_z.terms)
        ]
        change = sum(float(np.sum(c)) for c in changes)
        total = float(at_z.f) - float(at_x.f)
    if not (np.isfinite(total) and np.isfinite(change)):
        return None if np.isfinite(total) == np.isfinite(change) else "impossible values"
    magnitude = sum(float(np.sum(np.abs(c))) for c in changes)
    # float32 rounding of the two log densities and of the summed changes
    tolerance = 1e-5 * (abs(float(at_x.f)) + abs(float(at_z.f))) + 1e-4 * magnitude + 1e-4
    return None if abs(total - change) <= tolerance else f"{total:.6g} against {change:.6g}"


def per_coordinate_mismatch(
    names: Sequence[Any],
    probe: ProbeStates,
    at_x: Evaluation,
    at_moved: Evaluation,
    at_mixed: Evaluation,
) -> str | None:
    """None when the evaluations at the probe's states show every coordinate conditionally
    independent of the others, else the reason in words (naming the site)."""
    for part, rtol, verb in (
        ("terms", TERMS_RTOL, "change"),
        ("gradient", GRADIENT_RTOL, "changes"),
    ):
        for name, a, b, got, mask in zip(
            names,
            getattr(at_x, part),
            getattr(at_moved, part),
            getattr(at_mixed, part),
            probe.mixed_masks,
        ):
            expected = np.where(mask, np.asarray(b), np.asarray(a))
            if not np.allclose(np.asarray(got), expected, rtol=rtol, atol=ABSOLUTE, equal_nan=True):
                return (
                    f"the {part} of site '{name}' at a coordinate {verb} with other "
                    "coordinates (a term across coordinates or sites)"
                )
    for at_z in (at_moved, at_mixed):
        error = _additivity_error(at_x, at_z)
        if error is not None:
            return (
                "a term outside the sites' plates depends on them (the log density changes "
                f"by other than the sum of the coordinates' own terms: {error})"
            )
    return None


def per_coordinate_refusal(leaves: Sequence[Any], structural: dict) -> str | None:
    """Why the leaves cannot take one MH decision per coordinate before any evaluation, or None.

    Parameters
    ----------
    leaves : :class:`~discrete_kernels.sites.LeafSpec` per leaf
    structural : ``{site name: (plate dims, reason)}`` from the trace's plate frames
        (:func:`discrete_kernels.tables.plate_dims_of`; ``reason`` None where every dimension
        of the site is a plate)
    """
    for spec in leaves:
        if spec.is_table:
            kind = type(spec.domain).__name__
            return (
                f"site '{spec.name}' takes a table of exact differences ({kind} or "
                "exact_sites), not a gradient; PlateGibbs draws a plate of such coordinates "
                "exactly"
            )
        reason = structural.get(spec.name, ({}, "it is not in the model's trace"))[1]
        if reason is not None:
            return f"site '{spec.name}': {reason}"
    return None


def per_coordinate_error(owner: str, reason: str) -> ValueError:
    """The refusal of ``per_coordinate_mh=True`` with its reason."""
    return ValueError(
        f"{owner}(per_coordinate_mh=True): {reason}. One MH decision per coordinate is exact "
        "only where every coordinate is conditionally independent of the others; leave "
        "per_coordinate_mh=False."
    )
