"""Estimators of the EBM trainers: the UCD estimator's per-step weights (Qiu, Zhang and
Wang, ICLR 2020, Sec. 3.3), the compaction schedule of its coupled chains, and annealed
importance sampling increments for ``log Z`` (Neal, 2001)."""

from __future__ import annotations

from array_api_compat import device as _device

from .._xp import Array, array_namespace

__all__ = [
    "ais_log_weight_increment",
    "ucd_compaction_capacities",
    "ucd_compaction_order",
    "ucd_horizon",
    "ucd_weights",
]


def ucd_weights(t: int | Array, k: int, met: Array, m: int | None = None) -> tuple[Array, Array]:
    """Weights of ``f(xi_t)`` and ``f(eta_{t-1})`` in the UCD estimator at step ``t``, (...).

    ``H_{k:m} = (1 / (m - k + 1)) sum_{t=k}^{m} f(xi_t)
    + sum_{t=k+1}^{tau-1} min(1, (t - k) / (m - k + 1)) [f(xi_t) - f(eta_{t-1})]``, the
    time-averaged estimator of Jacob, O'Leary and Atchade (2020, Eq. 2.3), with ``tau`` the
    first ``t >= 1`` with ``xi_t = eta_{t-1}``; ``met`` (...) says whether ``tau <= t``.
    ``m = k`` (the default, ``m=None``) is the estimator of Qiu et al. (2020, Sec. 3.3),
    ``f(xi_k) + sum_{t=k+1}^{tau-1} [f(xi_t) - f(eta_{t-1})]``. Each is an unbiased estimate
    of ``E_model[f]`` for any ``m >= k >= 0`` when the chains meet in finite time; a larger
    ``m`` averages over more steps of the chain ahead and lowers the variance, at the cost of
    running every pair at least ``m`` steps. ``t`` may be an integer array (a traced loop
    counter).
    """
    xp = array_namespace(met)
    last = k if m is None else m
    span = float(last - k + 1)
    step = xp.asarray(t, device=_device(met))
    ramp = xp.clip(xp.astype(step - k, xp.float32) / span, 0.0, 1.0)
    correcting = xp.astype(~met & (step > k), xp.float32) * ramp
    averaged = xp.astype((step >= k) & (step <= last), xp.float32) / span
    return correcting + averaged, correcting


def ucd_horizon(k: int, m: int | None) -> int:
    """The last step of the chain ahead the UCD estimator averages (``m``, default ``k``):
    every pair runs at least this many steps, and a pair that has met stops adding to the
    estimate only after it (:func:`ucd_weights`)."""
    return k if m is None else m


def ucd_compaction_capacities(num_pairs: int, shrink: int = 8, smallest: int = 8) -> tuple:
    """Working-set sizes of UCD's coupled loop: ``num_pairs``, then ``num_pairs // shrink``,
    ... while at least ``smallest``.

    A pair that has met (after step ``k``) adds nothing more to the estimator (its weights are
    0), so the trainers step only a working set of pairs: once no more than the next capacity
    pairs are still apart, those pairs are gathered (:func:`ucd_compaction_order`) into a
    working set of that size and the others dropped. The estimate is unchanged in law (each
    pair still runs until it meets, on fresh noise), and the work is about the sum of the
    pairs' meeting times instead of ``num_pairs`` times the largest (a fixed cost per step
    remains, times the largest meeting time). Static sizes, so a jitted loop compiles once per
    size (few sizes: the compile time grows with their number); both trainers use the same
    sizes (same noise shapes).
    """
    capacities = [int(num_pairs)]
    while capacities[-1] // shrink >= smallest:
        capacities.append(capacities[-1] // shrink)
    return tuple(capacities)


def ucd_compaction_order(met: Array, capacity: int) -> Array:
    """Rows of a working set to keep, (capacity,): those not yet ``met`` (...) first, in
    their order, then met rows as padding (they stay met and carry weight 0)."""
    xp = array_namespace(met)
    return xp.argsort(xp.astype(met, xp.int32), stable=True)[:capacity]


def ais_log_weight_increment(
    log_density: Array, base_log_density: Array, beta_prev: float, beta: float
) -> Array:
    """AIS increment ``(beta - beta_prev) (f(x) - f_0(x))`` for the intermediate densities
    ``f_beta = (1 - beta) f_0 + beta f`` at the current state, (...). Summed over the
    schedule (with a transition leaving ``f_beta`` invariant after each increment), ``exp`` of
    the total has mean ``Z / Z_0``."""
    return (beta - beta_prev) * (log_density - base_log_density)
