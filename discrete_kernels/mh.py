"""Metropolis-Hastings acceptance with non-finite energies treated as rejection."""

from __future__ import annotations

from ._xp import Array, array_namespace

__all__ = ["accept_probability", "metropolis_accept", "mh_log_ratio"]


def mh_log_ratio(
    log_density_x: Array,
    log_density_y: Array,
    log_q_forward: Array,
    log_q_reverse: Array,
) -> Array:
    """``log A = f(y) - f(x) + log q(x | y) - log q(y | x)``, or ``-inf`` when unusable.

    A proposal whose log density is not finite (NaN, ``+inf`` or ``-inf``), whose forward
    probability is zero or NaN (drawn from a table with no usable entry) or whose ratio is
    NaN gets ``-inf``: it is rejected and never enters the chain. (The kernels refuse start
    values of zero probability at setup, so ``f(x)`` is finite.)

    Parameters
    ----------
    log_density_x, log_density_y, log_q_forward, log_q_reverse : scalar arrays

    Returns
    -------
    scalar array
    """
    xp = array_namespace(log_density_y)
    log_ratio = log_density_y - log_density_x + log_q_reverse - log_q_forward
    # v - v is 0 for a finite v and NaN otherwise: adding it for f(y) and log q(y | x) leaves a
    # usable ratio unchanged (+0 is exact) and makes an unusable one NaN, in fewer operations
    # than isfinite (three eager torch operations each, at one chain a GPU launch each)
    log_ratio = log_ratio + (log_density_y - log_density_y) + (log_q_forward - log_q_forward)
    return xp.where(xp.isnan(log_ratio), xp.full_like(log_ratio, -xp.inf), log_ratio)


def accept_probability(log_ratio: Array) -> Array:
    """``min(1, exp(log A))``, elementwise; 0 for ``log A = -inf``."""
    xp = array_namespace(log_ratio)
    return xp.exp(xp.minimum(log_ratio, xp.zeros_like(log_ratio)))


def metropolis_accept(log_ratio: Array, uniform: Array) -> Array:
    """Accept when ``log u < log A`` for ``u`` uniform in [0, 1); never for ``log A = -inf``."""
    xp = array_namespace(log_ratio)
    return (xp.log(uniform) < log_ratio) & (log_ratio > -xp.inf)
