"""Paired sites: a discrete site (inclusion indicators) and the continuous site whose
elements it gates (their coefficients), updated together, element by element.

Where an indicator multiplies its coefficient (``y ~ X (gamma * beta)``, Kuo and Mallick,
1998) or chooses its prior (``beta_j ~ Normal(0, 1 if gamma_j else 0.01)``, George and
McCulloch, 1993), a kernel that moves the indicator given the coefficient rarely turns it on:
the coefficient, drawn from its prior while the indicator was off, seldom fits the data. The
paired move proposes the element's indicator and coefficient together from an approximation
of their joint conditional given everything else:

- for each value ``v`` of the indicator, ``f_v(c)`` is the model's log density with the
  pair's element set to ``(v, c)``; one Newton step from a fixed ``anchor`` gives a Gaussian
  ``N(m_v, 1 / h_v)`` with ``h_v = -f_v''(anchor)`` and ``m_v = anchor + f_v'(anchor) / h_v``,
  and the Laplace estimate of its mass, ``log w_v = f_v(anchor) + f_v'(anchor)^2 / (2 h_v)
  + log(2 pi / h_v) / 2``;
- the proposal draws ``v' ~ w`` (normalised over the values) and ``c' ~ N(m_v', 1 / h_v')``.

It depends on the other elements and sites only, never on the pair's current value: an
independence proposal for the pair, so Metropolis-Hastings with
``log A = f(v', c') - f(v, c) + log q(v, c) - log q(v', c')`` keeps the conditional exactly
whatever the approximation's quality (a Gaussian conditional, as in a linear regression
given its noise scale, is matched exactly and every move is accepted). A curvature that is
not a finite positive number is replaced by 1: any positive precision keeps the move exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from .._xp import Array, array_namespace, logsumexp, nan_to
from ..metropolis import (
    mh_log_ratio,
)
from ..validation import check_number

__all__ = [
    "check_pair_options",
    "check_pair_sites",
    "frozen_pairs_message",
    "innermost_distribution",
    "innermost_support",
    "laplace_pair_proposal",
    "pair_proposal_log_prob",
    "paired_move",
]

#: the precision used where a value's curvature is not a finite positive number
FALLBACK_PRECISION = 1.0


def laplace_pair_proposal(
    log_density: Array, gradient: Array, curvature: Array, anchor: float | Array
) -> tuple[Array, Array, Array]:
    """The Gaussian of each indicator value's coefficient and the value's log weight.

    Parameters
    ----------
    log_density, gradient, curvature : arrays, shape (S,)
        ``f_v(anchor)``, ``f_v'(anchor)`` and ``-f_v''(anchor)`` for each of the ``S`` values
        ``v`` of the indicator.
    anchor : float or scalar array
        Where the Newton step starts; it must not depend on the pair's current value.

    Returns
    -------
    (mean, precision, log_weight) : arrays, shape (S,)
        ``log_weight`` is ``-inf`` for a value whose log density or gradient is not finite.
    """
    xp = array_namespace(curvature)
    usable = xp.isfinite(curvature) & (curvature > 0.0)
    precision = xp.where(usable, curvature, xp.full_like(curvature, FALLBACK_PRECISION))
    gradient = nan_to(gradient, 0.0)
    mean = anchor + gradient / precision
    log_weight = (
        log_density
        + gradient * gradient / (2.0 * precision)
        + 0.5 * xp.log(2.0 * math.pi / precision)
    )
    finite = xp.isfinite(log_weight)
    return mean, precision, xp.where(finite, log_weight, xp.full_like(log_weight, -xp.inf))


def pair_proposal_log_prob(
    log_weight: Array, mean: Array, precision: Array, index: Array, coefficient: Array
) -> Array:
    """``log q(v, c)`` of the paired proposal: the value's normalised weight times the
    Gaussian density of the coefficient.

    Parameters
    ----------
    log_weight, mean, precision : arrays, shape (S,)
        From :func:`laplace_pair_proposal`.
    index : integer scalar array
        The position of ``v`` among the ``S`` values.
    coefficient : scalar array
        ``c``.

    Returns
    -------
    scalar array
    """
    xp = array_namespace(log_weight)
    log_value = log_weight[index] - logsumexp(log_weight)
    h, m = precision[index], mean[index]
    residual = coefficient - m
    return log_value + 0.5 * xp.log(h / (2.0 * math.pi)) - 0.5 * h * residual * residual


def paired_move(
    expansion: tuple[Array, Array, Array],
    anchor: float | Array,
    density_at: Callable[[Array, Array], Array],
    current: tuple[Array, Array, Array],
    noise: tuple[Array, Array, Array],
) -> tuple[Array, Array, Array, Array, Array]:
    """One paired move of one element: draw ``(v', c')`` from the paired proposal and
    accept or reject it.

    Parameters
    ----------
    expansion : (log_density, gradient, curvature), arrays of shape (S,)
        ``f_v(anchor)``, ``f_v'(anchor)``, ``-f_v''(anchor)`` for each indicator value.
    anchor : float or scalar array
    density_at : callable
        ``(index, coefficient) -> f`` at the value of position ``index`` and ``coefficient``
        (a scalar array).
    current : (index, coefficient, log_density), scalar arrays
        The element's current value's position among the values, its coefficient and the
        model's log density there.
    noise : (gumbel, normal, log_uniform)
        Standard Gumbel noise of shape (S,) (the value's draw: ``argmax(log w + gumbel)``),
        a standard normal (the coefficient's) and ``log u`` for the MH test, scalars.

    Returns
    -------
    (index, coefficient, log_density, log_ratio, accepted) : scalar arrays
        The proposal, its log density, ``log A`` and whether it was accepted (the caller
        keeps the current pair otherwise).
    """
    xp = array_namespace(expansion[2])
    gumbel, normal, log_uniform = noise
    mean, precision, log_weight = laplace_pair_proposal(*expansion, anchor)
    index = xp.argmax(log_weight + gumbel)
    coefficient = mean[index] + normal / xp.sqrt(precision[index])
    log_density = density_at(index, coefficient)
    current_index, current_coefficient, current_density = current
    log_ratio = mh_log_ratio(
        current_density,
        log_density,
        pair_proposal_log_prob(log_weight, mean, precision, index, coefficient),
        pair_proposal_log_prob(log_weight, mean, precision, current_index, current_coefficient),
    )
    return index, coefficient, log_density, log_ratio, log_uniform < log_ratio


def check_pair_options(owner: str, pairs: Any, anchor: Any) -> tuple[dict[str, str], float]:
    """The ``pairs=`` mapping (indicator site to coefficient site) as names and the
    ``anchor`` as a finite float, or an error naming ``owner`` and what is allowed."""
    if not isinstance(pairs, Mapping) or not pairs:
        raise ValueError(
            f"{owner}: pairs= maps each discrete site to the continuous site it gates, "
            f"e.g. {{'gamma': 'beta'}}; got {pairs!r}."
        )
    names = {str(k): str(v) for k, v in pairs.items()}
    return names, check_number(owner, "anchor", anchor, low=-math.inf, high=math.inf)


def check_pair_sites(
    owner: str,
    indicator: str,
    coefficient: str,
    indicator_distribution: str | None,
    coefficient_support: str | None,
    shapes: tuple[tuple[int, ...], tuple[int, ...]],
) -> None:
    """Refuse a pair the move cannot update, naming the site: ``indicator_distribution``
    is None for a discrete site with a finite support (else its distribution's name),
    ``coefficient_support`` None for a coefficient on the real line (else its support),
    ``shapes`` the two sites' shapes."""
    if indicator_distribution is not None:
        raise ValueError(
            f"{owner}: the paired site {indicator!r} must be discrete with a finite "
            f"support (Bernoulli, Categorical...); it is {indicator_distribution}."
        )
    if coefficient_support is not None:
        raise ValueError(
            f"{owner}: the coefficient site {coefficient!r} must have the real line "
            f"as support (Normal, StudentT...); its support is {coefficient_support}."
        )
    if shapes[0] != shapes[1]:
        raise ValueError(
            f"{owner}: {indicator!r} has shape {shapes[0]} and {coefficient!r} has shape "
            f"{shapes[1]}; paired sites pair element by element and need one shape."
        )


def frozen_pairs_message(owner: str, names: Any, num_warmup: int) -> str:
    """The warning of a chain whose paired moves were all rejected in warmup's second
    half."""
    return (
        f"{owner}: no paired move of {sorted(names)} was accepted in the last half of the "
        f"{int(num_warmup)} warmup steps: the chain is frozen. Check the model's log density "
        "at the start (finite?), or try another anchor=."
    )


def innermost_distribution(fn: Any) -> Any:
    """The distribution under NumPyro's, Pyro's and torch's wrappers (``to_event``,
    ``expand``, ``mask``: each keeps it as ``base_dist``), whose support and enumeration an
    element-wise move reads."""
    while hasattr(fn, "base_dist"):
        fn = fn.base_dist
    return fn


def innermost_support(support: Any) -> Any:
    """The constraint under ``independent`` (the support of a ``to_event`` site): each
    PPL's keeps it as ``base_constraint``."""
    while hasattr(support, "base_constraint"):
        support = support.base_constraint
    return support
