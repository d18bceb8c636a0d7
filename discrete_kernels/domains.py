"""Variable domains: the set of values each coordinate of a leaf may take.

A *leaf* is one array of discrete coordinates (one model site, or one leaf of a pytree in
potential mode). Every coordinate of a leaf shares its domain. Values are stored as numbers:
``Binary`` as 0/1, ``Ordinal`` and ``Integer`` as integers, ``Categorical`` as the index of the
category (the one-hot form is a view the adapters may present to a potential).

``Binary``, ``Ordinal`` and ``Categorical`` are finite: a proposal builds a table over every
value of a coordinate. ``Integer`` (counts: Poisson, negative binomial, ...; or an interval too
wide for a table) is *windowed*: a proposal's table holds the ``2 w + 1`` values
``x_i - w .. x_i + w`` around each coordinate's current value (App. C of the DLP paper), those
outside the support masked.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from array_api_compat import device as _device

from ._xp import Array, array_namespace

__all__ = [
    "MAX_NUM_VALUES",
    "Binary",
    "Categorical",
    "Domain",
    "Integer",
    "Ordinal",
    "as_domain",
    "domain_step_scale",
    "as_finite",
    "coordinate_bounds",
    "is_windowed",
]

MAX_NUM_VALUES = 2**20
"""Most values one coordinate may take: a step builds a table over all of them."""


@dataclass(frozen=True)
class Binary:
    """Coordinates in {0, 1}; one flip moves a squared distance of 1."""

    @property
    def num_values(self) -> int:
        return 2

    @property
    def low(self) -> int:
        return 0


@dataclass(frozen=True, eq=False)
class Ordinal:
    """Integer coordinates ``low, low + 1, ..., low + num_values - 1`` with their order.

    Parameters
    ----------
    num_values : int
        Number of values ``S`` (at least 2).
    low : int
        Smallest value.
    lower, upper : array_like, optional
        Per-coordinate bounds (inclusive) inside ``[low, low + S - 1]``, broadcastable to the
        leaf's shape, for sites whose support differs between coordinates (e.g. ``Binomial``
        with an array ``total_count``). Values outside a coordinate's bounds are never
        proposed.
    """

    num_values: int
    low: int = 0
    lower: Any = field(default=None, repr=False)
    upper: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not _is_integer(self.num_values) or self.num_values < 2:
            raise ValueError(
                f"Ordinal(num_values={self.num_values!r}): num_values must be an integer >= 2."
            )
        if not _is_integer(self.low):
            raise ValueError(f"Ordinal(low={self.low!r}): low must be an integer.")
        if self.num_values > MAX_NUM_VALUES:
            raise ValueError(
                f"Ordinal(num_values={self.num_values}): at most {MAX_NUM_VALUES} values per "
                "coordinate (a step builds a table over all of them)."
            )
        if self.lower is not None or self.upper is not None:
            lower = np.asarray(self.low if self.lower is None else self.lower)
            upper = np.asarray(self.high if self.upper is None else self.upper)
            if np.any(lower > upper) or np.any(lower < self.low) or np.any(upper > self.high):
                raise ValueError(
                    f"Ordinal: per-coordinate bounds must satisfy low <= lower <= upper <= "
                    f"high = {self.high}; got lower {lower.tolist()}, upper {upper.tolist()}."
                )

    @property
    def high(self) -> int:
        return self.low + self.num_values - 1

    def valid_candidates(self, like: Array) -> Array | None:
        """Which candidates lie inside each coordinate's bounds, or None when all do.

        Returns
        -------
        bool array of shape ``bounds_shape + (S,)``, broadcastable against a leaf's
        candidate table of shape ``leaf_shape + (S,)``.
        """
        if self.lower is None and self.upper is None:
            return None
        xp = array_namespace(like)
        values = np.arange(self.low, self.low + self.num_values)
        lower = np.asarray(self.low if self.lower is None else self.lower)
        upper = np.asarray(self.high if self.upper is None else self.upper)
        lower, upper = np.broadcast_arrays(lower, upper)
        valid = (values >= lower[..., None]) & (values <= upper[..., None])
        return xp.asarray(valid, device=_device(like))


@dataclass(frozen=True)
class Categorical:
    """Nominal coordinates with ``num_values`` unordered categories (indices 0..K-1).

    The DLP geometry is that of one-hot vectors: any change of category moves a squared
    distance of 2.
    """

    num_values: int

    def __post_init__(self) -> None:
        if not _is_integer(self.num_values) or self.num_values < 2:
            raise ValueError(
                f"Categorical(num_values={self.num_values!r}): num_values must be an integer >= 2."
            )

    @property
    def low(self) -> int:
        return 0


@dataclass(frozen=True)
class Integer:
    """Integer coordinates without a value table: ``low <= x <= high``, either end open.

    The DLP proposes each coordinate inside the window ``x_i - window .. x_i + window``
    intersected with the support (App. C of the DLP paper), so the support may be infinite
    (counts) or too wide for :class:`Ordinal`'s table over all values. The table positions
    ``0 .. 2 window`` stand for the moves ``-window .. window``; the current value sits at
    position ``window``.

    Parameters
    ----------
    low : int or None
        Smallest value (0 for counts); None: unbounded below.
    high : int or None
        Largest value; None: unbounded above.
    window : int
        Half-width ``w >= 1`` of the proposal window.
    """

    low: int | None = 0
    high: int | None = None
    window: int = 1

    def __post_init__(self) -> None:
        for what, bound in (("low", self.low), ("high", self.high)):
            if bound is not None and not _is_integer(bound):
                raise ValueError(f"Integer({what}={bound!r}): {what} must be an integer or None.")
        if not _is_integer(self.window) or self.window < 1:
            raise ValueError(f"Integer(window={self.window!r}): window must be an integer >= 1.")
        if self.window > MAX_NUM_VALUES // 2:
            raise ValueError(
                f"Integer(window={self.window}): at most {MAX_NUM_VALUES // 2} (a step builds a "
                "table over the window)."
            )
        if self.low is not None and self.high is not None and int(self.high) <= int(self.low):
            raise ValueError(
                f"Integer(low={self.low}, high={self.high}): high must exceed low (a single "
                "value leaves nothing to sample)."
            )
        for what in ("low", "high", "window"):
            value = getattr(self, what)
            object.__setattr__(self, what, None if value is None else int(value))

    @property
    def table_size(self) -> int:
        """Positions of a proposal's table: ``2 window + 1``."""
        return 2 * self.window + 1

    @property
    def num_values(self) -> int:
        """Not defined: an ``Integer`` domain has no table of all its values. Raises the
        error a code path that enumerates values meets (the setup refuses those first)."""
        raise ValueError(
            f"{self!r} has no table of all its values; only DMALA, DULA and ACS (window "
            "proposals) sample it."
        )


Domain = Binary | Ordinal | Categorical | Integer


FiniteDomain = Binary | Ordinal | Categorical


def as_finite(domain: Domain) -> FiniteDomain:
    """``domain`` for a code path that enumerates every value of a coordinate; a windowed
    domain raises (:attr:`Integer.num_values`)."""
    if isinstance(domain, Integer):
        domain.num_values  # noqa: B018 (raises, naming the domain)
    assert not isinstance(domain, Integer)
    return domain


def coordinate_bounds(domain: Domain, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each coordinate's smallest and largest value in a finite domain (an ordinal's
    per-coordinate ``lower``/``upper`` where given), as integer arrays of ``shape``."""
    finite = as_finite(domain)
    top = finite.low + finite.num_values - 1
    lower = getattr(finite, "lower", None)
    upper = getattr(finite, "upper", None)
    low = np.broadcast_to(np.asarray(finite.low if lower is None else lower), shape)
    high = np.broadcast_to(np.asarray(top if upper is None else upper), shape)
    return low, high


def is_windowed(domain: Domain) -> bool:
    """Whether a domain's proposal table is a window around the current value
    (:class:`Integer`) rather than every value of the domain."""
    return isinstance(domain, Integer)


def _is_integer(value: Any) -> bool:
    """An integral real number (not a bool; NaN and infinities are not integers); a 0-d array
    counts as the number it holds."""
    if getattr(value, "shape", None) == () and hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    number = float(value)
    return math.isfinite(number) and number == int(number)


def as_domain(domain: Any, where: str = "domain") -> Domain:
    """Validate a domain description, naming ``where`` in the error."""
    if isinstance(domain, (Binary, Ordinal, Categorical, Integer)):
        return domain
    raise TypeError(
        f"{where}: expected Binary(), Ordinal(num_values, low=0), Categorical(num_values) or "
        f"Integer(low=0, high=None, window=1), got {domain!r}."
    )


def domain_step_scale(domains) -> float:
    """Largest useful DLP step size the domains suggest: ``(S - 1)^2`` for an ordinal leaf
    with ``S`` values (a move across the whole range is then one standard deviation of the
    proposal's quadratic term), ``window^2`` for an :class:`Integer` leaf (the same for its
    window), 0 for binary and categorical leaves (every move has squared length 1 or 2, so
    ``alpha`` beyond a few units changes nothing)."""
    scale = 0.0
    for domain in domains:
        if isinstance(domain, Ordinal):
            scale = max(scale, float(domain.num_values - 1) ** 2)
        elif isinstance(domain, Integer):
            scale = max(scale, float(domain.window) ** 2)
    return scale
