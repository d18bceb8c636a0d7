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

from .._xp import Array, array_namespace, logsumexp, nan_to

__all__ = ["laplace_pair_proposal", "pair_proposal_log_prob"]

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
