"""Names of the per-draw statistics in ArviZ, shared by both adapters' exports."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["arviz_name", "block_labels"]

# kernel field -> ArviZ's name for it (ArviZ reads these names with a meaning)
_ARVIZ_NAMES = {"accept_prob": "acceptance_rate", "potential_energy": "lp"}


def arviz_name(field: str) -> str:
    """ArviZ's name of a statistic, also behind a block prefix (``dmala_accept_prob`` ->
    ``dmala_acceptance_rate``). ``potential_energy`` becomes ``lp``: negate its values."""
    for name, renamed in _ARVIZ_NAMES.items():
        if field == name:
            return renamed
        if field.endswith("_" + name):
            return field[: -len(name)] + renamed
    return field


def block_labels(kernel_names: Sequence[str]) -> list[str]:
    """One label per block of a Gibbs composite: the kernel's class name in lower case,
    numbered when two blocks use the same class (``dmala``, ``nuts``; ``dmala_0``,
    ``dmala_1``)."""
    names = [n.lower() for n in kernel_names]
    return [f"{n}_{i}" if names.count(n) > 1 else n for i, n in enumerate(names)]
