"""Estimators of the EBM trainers: the UCD estimator's per-step weights (Qiu, Zhang and
Wang, ICLR 2020, Sec. 3.3) and annealed importance sampling increments for ``log Z`` (Neal,
2001)."""

from __future__ import annotations

from array_api_compat import device as _device

from .._xp import Array, array_namespace

__all__ = ["ais_log_weight_increment", "ucd_weights"]


def ucd_weights(t: int | Array, k: int, met: Array) -> tuple[Array, Array]:
    """Weights of ``f(xi_t)`` and ``f(eta_{t-1})`` in the UCD estimator at step ``t``, (...).

    ``H = f(xi_k) + sum_{t=k+1}^{tau-1} [f(xi_t) - f(eta_{t-1})]`` with ``tau`` the first
    ``t >= 1`` with ``xi_t = eta_{t-1}``; ``met`` (...) says whether ``tau <= t``. ``H`` is an
    unbiased estimate of ``E_model[f]`` for any ``k >= 0`` (Jacob et al., 2017; Qiu et al.,
    2020, Sec. 3.3) when the chains meet in finite time. ``t`` may be an integer array (a
    traced loop counter).
    """
    xp = array_namespace(met)
    step = xp.asarray(t, device=_device(met))
    correcting = xp.astype(~met & (step > k), xp.float32)
    return correcting + xp.astype(step == k, xp.float32), correcting


def ais_log_weight_increment(
    log_density: Array, base_log_density: Array, beta_prev: float, beta: float
) -> Array:
    """AIS increment ``(beta - beta_prev) (f(x) - f_0(x))`` for the intermediate densities
    ``f_beta = (1 - beta) f_0 + beta f`` at the current state, (...). Summed over the
    schedule (with a transition leaving ``f_beta`` invariant after each increment), ``exp`` of
    the total has mean ``Z / Z_0``."""
    return (beta - beta_prev) * (log_density - base_log_density)
