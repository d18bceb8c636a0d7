"""What every benchmark shares: the targets, one ESS, one timing method, one writer of
``docs/benchmarks.md``.

- **Targets** (:func:`ising_log_density`, :func:`ising_coupling_matrix`,
  :func:`rbm_log_density`): written once here, used by every script that needs them.
- **ESS**: NumPyro's multi-chain :func:`numpyro.diagnostics.effective_sample_size` (the
  estimator ArviZ's ``ess`` also implements), on draws grouped by chain.
- **The ratio rule** (:func:`run_until_ess`, :func:`ratio_under_rule`): an ESS-per-second
  ratio is printed only from runs in which every sampler reached an ESS of at least
  :data:`MIN_ESS`, or as the median and range over at least :data:`MIN_SEEDS` seeds; otherwise
  the table says why no ratio is given.
- **Timing**: :func:`time_compiled` runs a jitted function twice; the first call's time
  includes compilation, the second is the steady state. Ratios are always taken in one
  process, side by side.
- **Writer**: :func:`write_section` replaces a benchmark's block between its markers in
  ``docs/benchmarks.md``, headed by the exact command and :func:`machine`.
"""

from __future__ import annotations

import os
import platform
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
FIGURES = ROOT / "docs" / "figures"

#: the critical coupling of the 2-D Ising model on the square lattice
CRITICAL_COUPLING = 0.4407


# -------------------------------------------------------------------------------- targets


def ising_log_density(x: Any, coupling: float = CRITICAL_COUPLING) -> Any:
    """Log density (up to a constant) of spins ``s = 2x - 1`` on a periodic square lattice,
    written with shifted copies of the lattice (cost linear in d). ``x`` has shape (side**2,)."""
    import jax.numpy as jnp

    side = int(round(x.shape[-1] ** 0.5))
    s = jnp.reshape(2.0 * x - 1.0, (side, side))
    return coupling * jnp.sum(s * (jnp.roll(s, 1, axis=0) + jnp.roll(s, 1, axis=1)))


def ising_coupling_matrix(side: int, coupling: float = CRITICAL_COUPLING) -> np.ndarray:
    """The same lattice as a dense symmetric coupling matrix ``A`` (d x d, float32), as a user
    writes the model: ``log p(x) = s' A s / 2`` with ``s = 2x - 1``."""
    d = side * side
    a = np.zeros((d, d), np.float32)
    for i in range(side):
        for j in range(side):
            k = i * side + j
            for right, down in ((0, 1), (1, 0)):
                neighbour = ((i + right) % side) * side + (j + down) % side
                a[k, neighbour] += coupling
                a[neighbour, k] += coupling
    return a


def dense_ising_log_density(a: Any) -> Callable:
    """``x -> s' A s / 2`` for a coupling matrix ``A`` (see :func:`ising_coupling_matrix`)."""

    def log_density(x: Any) -> Any:
        s = 2.0 * x - 1.0
        return 0.5 * s @ a @ s

    return log_density


def rbm_parameters(visible: int, hidden: int, seed: int = 0, scale: float = 0.05) -> tuple:
    """Random RBM parameters ``(W (visible, hidden), b (visible,), c (hidden,))``, float32."""
    rng = np.random.default_rng(seed)
    w = (scale * rng.standard_normal((visible, hidden))).astype(np.float32)
    b = (scale * rng.standard_normal(visible)).astype(np.float32)
    c = (scale * rng.standard_normal(hidden)).astype(np.float32)
    return w, b, c


def rbm_log_density(params: tuple) -> Callable:
    """Visible marginal of a Bernoulli RBM, ``x -> b'x + sum_j softplus(c_j + (x W)_j)``."""
    import jax

    w, b, c = params

    def log_density(x: Any) -> Any:
        return x @ b + jax.nn.softplus(x @ w + c).sum()

    return log_density


# -------------------------------------------------------------------------------- statistics


def ess(values: Any) -> float:
    """Multi-chain effective sample size of draws of shape (chains, draws); of draws of
    several statistics, shape (chains, draws, k), the smallest (a statistic without spread,
    whose ESS is undefined, is left out)."""
    from numpyro.diagnostics import effective_sample_size

    values = np.asarray(values, np.float64)
    if values.ndim == 1:
        values = values[None]
    with np.errstate(invalid="ignore", divide="ignore"):
        each = np.atleast_1d(np.asarray(effective_sample_size(values), np.float64))
    finite = each[np.isfinite(each)]
    return float(finite.min()) if finite.size else float("nan")


#: an ESS below this makes a single run's ESS (and any ratio of two) uncertain by factors
MIN_ESS = 400
#: with some ESS below :data:`MIN_ESS`, a ratio needs at least this many seeds (median, range)
MIN_SEEDS = 5


def run_until_ess(
    run: Callable[[int, int], tuple[Any, float]],
    first_draws: int,
    seed: int,
    target: float = MIN_ESS,
    budget_seconds: float = 120.0,
) -> dict[str, Any]:
    """Run a sampler with more draws until the ESS of its statistic reaches ``target``, or
    until the next run would exceed ``budget_seconds``.

    Each try is a complete run from scratch (``run(num_draws, seed)`` returns the statistic's
    draws of shape (chains, num_draws) and the run's seconds, compilation included); the draw
    count grows by the factor the last ESS predicts (1.3 times the shortfall, between 1.5 and 8),
    at most what fits 90% of the budget at the last run's pace; where that is below 1.5 the
    search stops.
    The record of the last run is returned: ``draws``, ``seconds``, ``ess``,
    ``ess_per_second``, ``reached`` (ESS >= target) and ``tries``.
    """
    draws, tries = first_draws, 0
    while True:
        values, seconds = run(draws, seed)
        tries += 1
        value = ess(values)
        record = {
            "draws": draws,
            "seconds": seconds,
            "ess": value,
            "ess_per_second": value / seconds,
            "reached": bool(value >= target),
            "tries": tries,
        }
        if value >= target:
            return record
        wanted = min(8.0, max(1.5, 1.3 * target / max(value, 1.0)))
        factor = min(wanted, 0.9 * budget_seconds / seconds)
        if factor < 1.5:  # the next run would not fit the budget
            return record
        draws = int(draws * factor)


def ratio_under_rule(
    numerator: list[dict[str, Any]],
    denominator: list[dict[str, Any]],
    key: str = "ess_per_second",
    min_ess: float = MIN_ESS,
    min_seeds: int = MIN_SEEDS,
) -> dict[str, Any]:
    """The ratio ``numerator[key] / denominator[key]`` per seed (records paired by seed, each
    with an ``ess``), summarised as the rule allows.

    Returns ``median``, ``low``, ``high``, ``seeds``, ``all_reached`` (every run of both
    samplers had ESS >= ``min_ess``), ``valid`` (all reached, or at least ``min_seeds``
    seeds) and ``text``: ``"3.1x"`` (one seed, all reached), ``"3.1x (2.8x-3.4x, 3 seeds)"``,
    ``"3.1x (1.2x-5.0x, 5 seeds, min ESS 120)"``, or, when the rule is not met,
    ``"none: min ESS 27 < 400 in 3 seeds"`` (no number)."""
    if len(numerator) != len(denominator) or not numerator:
        raise ValueError("ratio_under_rule needs one record per seed for both samplers")
    ratios = np.array([a[key] / b[key] for a, b in zip(numerator, denominator)], float)
    lowest = min(r["ess"] for r in [*numerator, *denominator])
    seeds = len(ratios)
    all_reached = bool(lowest >= min_ess)
    valid = all_reached or seeds >= min_seeds
    median, low, high = (float(np.median(ratios)), float(ratios.min()), float(ratios.max()))
    if not valid:
        text = f"none: min ESS {lowest:.0f} < {min_ess:.0f} in {seeds} seed(s)"
    elif seeds == 1:
        text = f"{median:.2g}x"
    else:
        spread = f"{low:.2g}x-{high:.2g}x, {seeds} seeds"
        text = f"{median:.2g}x ({spread}{'' if all_reached else f', min ESS {lowest:.0f}'})"
    return {
        "median": median,
        "low": low,
        "high": high,
        "seeds": seeds,
        "all_reached": all_reached,
        "valid": valid,
        "text": text,
    }


# -------------------------------------------------------------------------------- timing


def time_compiled(fn: Callable, *args: Any) -> tuple[float, float]:
    """``(first, steady)`` seconds of two calls of the jitted ``fn(*args)``: the first
    includes tracing and compilation, the second is the steady state."""
    import jax

    compiled = jax.jit(fn)
    start = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    first = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    return first, time.perf_counter() - start


def timed(fn: Callable, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``(fn(*args, **kwargs), seconds)``, waiting for JAX's asynchronous results."""
    import jax

    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args, **kwargs))
    return out, time.perf_counter() - start


# -------------------------------------------------------------------------------- writing


def machine() -> str:
    """One line naming the machine and the stack the numbers were measured on."""
    parts = [
        f"{platform.machine()}, {os.cpu_count()} CPU cores",
        f"Python {platform.python_version()}",
    ]
    try:
        import jax

        devices = jax.devices()
        kind = devices[0].device_kind if devices[0].platform != "cpu" else ""
        where = f"{len(devices)} {devices[0].platform} device(s)" + (f" ({kind})" if kind else "")
        parts.append(f"jax {jax.__version__} on {where}")
    except ImportError:
        pass
    for name in ("numpyro", "torch", "pyro"):
        try:
            module = __import__(name)
            parts.append(f"{name} {module.__version__}")
            if name == "torch" and module.cuda.is_available():
                parts.append(f"torch on {module.cuda.get_device_name(0)}")
        except ImportError:
            pass
    return "; ".join(parts)


def command() -> str:
    """The command that is running, as a user would type it from the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(ROOT)
    except ValueError:
        pass
    return " ".join(["python", str(script), *map(shlex.quote, sys.argv[1:])])


def accelerator() -> str | None:
    """The accelerator JAX runs on by default (``"gpu: NVIDIA H100 ..."``), None on a CPU."""
    try:
        import jax
    except ImportError:
        return None
    device = jax.devices()[0]
    return None if device.platform == "cpu" else f"{device.platform}: {device.device_kind}"


def write_section(name: str, text: str, path: Path = DOC, header: bool = True) -> None:
    """Replace (or append) the block between ``<!-- name:start -->`` and ``<!-- name:end
    -->`` of ``path``; with ``header`` the block's first line after its title names the
    command and the machine (scripts that write their own command line pass False).

    On an accelerator the block is a separate one, ``name-gpu``, its title marked with the
    device, so a GPU run adds its rows next to the CPU ones instead of replacing them."""
    lines = text.split("\n")
    device = accelerator()
    if device is not None:
        name = f"{name}-{device.split(':')[0]}"
        if lines and lines[0].startswith("#"):
            lines[0] = f"{lines[0]} ({device})"
    if header:
        line = f"Command: `{command()}`; {machine()}."
        lines.insert(2 if lines and lines[0].startswith("#") else 0, line + "\n")
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{start}\n" + "\n".join(lines) + f"\n{end}"
    if start in old:
        before, rest = old.split(start, 1)
        new = before + block + rest.split(end, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(new)
