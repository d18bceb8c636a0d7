"""The training methods of the EBM trainers (options only; :mod:`numpyro_ext.ebm` and
:mod:`pyro_ext.ebm` run them): CD-k, PCD, UCD and the negative-phase samplers of their own
(block Gibbs for an RBM, random-scan single-site Gibbs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..validation import check_int, check_number

__all__ = ["CD", "PCD", "UCD", "BlockGibbs", "SiteGibbs", "check_method", "check_ucd_coupling"]


@dataclass(frozen=True)
class BlockGibbs:
    """Block Gibbs sampling of an RBM (``v -> h -> v``), the classic CD/PCD sampler; needs the
    :class:`RBM` energy."""


@dataclass(frozen=True)
class SiteGibbs:
    """Random-scan single-site Gibbs for any energy on binary inputs: each step resamples one
    coordinate per chain, picked uniformly at random, from its exact conditional (two energy
    evaluations per chain and step; ``PCD(SiteGibbs(), steps=d)`` is about one sweep of ``d``
    coordinates). The Gibbs baseline of the DLP paper's Ising learning experiment (Zhang et
    al., 2022, Sec. 7.3.1, after Grathwohl et al., 2021). Update: :func:`site_gibbs_update`."""


@dataclass(frozen=True)
class CD:
    """Contrastive divergence: ``k`` sampler steps from the data batch (CD-k)."""

    k: int = 1
    sampler: Any = None


@dataclass(frozen=True)
class PCD:
    """Persistent contrastive divergence: a buffer of ``num_chains`` chains (default the batch
    size) advanced ``steps`` steps per iteration; each chain restarts at a random data point
    with probability ``reinit_prob`` per iteration."""

    sampler: Any = None
    steps: int = 1
    num_chains: int | None = None
    reinit_prob: float = 0.0


@dataclass(frozen=True)
class UCD:
    """Unbiased contrastive divergence: per data point of the batch, two coupled chains run
    until they meet (at most ``max_time`` steps). Estimator with burn-in ``k``.

    ``coupling``: None or :class:`BlockGibbs` for the coupled block Gibbs chains of an RBM
    (Alg. 3; the residual draws of its visible coupling get at most ``max_tries`` tries), or
    a DMALA kernel of the trainer's PPL with a fixed step size, for any energy on binary
    inputs (coordinate-wise maximal coupling of the proposals, a common MH uniform:
    :func:`discrete_kernels.samplers.dlp.coupled_step`).

    ``m`` (default ``k``): the time-averaged estimator of Jacob, O'Leary and Atchade, the
    chain ahead's steps ``k`` to ``m`` averaged (:func:`discrete_kernels.ebm.ucd_weights`):
    unbiased for any ``m >= k``, less variable for larger ``m``; every pair runs at least
    ``m`` steps."""

    k: int = 1
    max_time: int = 100
    max_tries: int = 10
    coupling: Any = None
    m: int | None = None


def check_ucd_coupling(method: UCD, is_rbm: bool, sampler: Any, kernel_hint: str) -> None:
    """Refuse a UCD coupling the estimator cannot use (``ValueError``).

    Coupled block Gibbs (``coupling`` None or :class:`BlockGibbs`) needs an RBM. Otherwise the
    coupling must be a kernel whose sampler couples two chains exactly
    (:meth:`discrete_kernels.Sampler.check_coupling`: DMALA): UCD's telescoping sum needs one
    time-homogeneous kernel that leaves the model invariant (the chain behind must run the same
    kernel as the chain ahead, or met chains part again), which rules out DULA and ACS's
    cyclical step size. ``sampler`` is the coupling kernel's sampler spec, or None when it is
    not a kernel of the trainer's PPL; ``kernel_hint`` spells a DMALA kernel of that PPL.
    """
    if method.coupling is None or isinstance(method.coupling, BlockGibbs):
        if not is_rbm:
            raise ValueError(
                "UCD with coupled block Gibbs chains (the default coupling) needs the RBM "
                f"energy (ebm.RBM); for other energies pass coupling={kernel_hint}(step_size=...)."
            )
        return
    if sampler is None:
        raise ValueError(
            f"UCD: coupling must be BlockGibbs() (RBM) or a DMALA kernel ({kernel_hint}("
            f"step_size=...)), got {method.coupling!r}."
        )
    sampler.check_coupling(kernel_hint)


def check_method(method: Any) -> None:
    """Refuse bad method options (``ValueError`` naming the option)."""
    if isinstance(method, CD):
        check_int("CD", "k", method.k, minimum=1)
    elif isinstance(method, PCD):
        check_int("PCD", "steps", method.steps, minimum=1)
        check_number(
            "PCD",
            "reinit_prob",
            method.reinit_prob,
            low_inclusive=True,
            high=1.0,
            high_inclusive=True,
        )
        if method.num_chains is not None:
            check_int("PCD", "num_chains", method.num_chains, minimum=1)
    elif isinstance(method, UCD):
        check_int("UCD", "k", method.k, minimum=0)
        check_int("UCD", "max_time", method.max_time, minimum=2)
        check_int("UCD", "max_tries", method.max_tries, minimum=1)
        if method.m is not None:
            check_int("UCD", "m", method.m, minimum=method.k)
            if method.m >= method.max_time:
                raise ValueError(
                    f"UCD: m={method.m} must be below max_time={method.max_time} (every pair "
                    "runs at least m steps; max_time caps them)."
                )
    else:
        raise ValueError(f"method must be CD(...), PCD(...) or UCD(...), got {method!r}.")


def check_training_inputs(
    data_shape: tuple[int, ...],
    energy_shapes: Any,
    *,
    num_visible: int | None = None,
    sampler_is_bound: bool = False,
) -> None:
    """Refuse what would train silently wrong or fail deep inside autodiff, at the start of
    ``train`` (both PPLs).

    Parameters
    ----------
    data_shape : shape of the data after the 0/1 check, ``(N, d)``
    energy_shapes : ``{n: shape}``, the shape of the energy's output on ``n`` data rows for
        two different ``n`` (a scalar sum over the batch has the same shape for both)
    num_visible : the RBM's visible units, when the energy is an RBM
    sampler_is_bound : the method's sampler was built with a model or a potential_fn
    """
    num_rows = data_shape[0]
    if num_rows == 0 or len(data_shape) != 2 or data_shape[1] == 0:
        raise ValueError(
            f"train: data has shape {tuple(data_shape)}; give at least one row and one column."
        )
    if num_visible is not None and num_visible != data_shape[1]:
        raise ValueError(
            f"train: the RBM has {num_visible} visible units but the data have "
            f"{data_shape[1]} columns; build RBM({data_shape[1]}, num_hidden)."
        )
    for n, shape in energy_shapes.items():
        if tuple(shape) != (n,):
            raise ValueError(
                f"train: the energy must return one value per data row, shape ({n},) for a "
                f"batch of {n}; got shape {tuple(shape)}. Return the energies, not their sum "
                "or mean, and one column (the trainer averages them)."
            )
    if sampler_is_bound:
        raise ValueError(
            "train: the method's sampler was built with a model or potential_fn; the trainer "
            "runs it on the energy being trained, so that model would be ignored. Build the "
            "kernel with options only, e.g. PCD(sampler=DMALA(step_size=0.2))."
        )


def check_first_update(finite: bool, num_updates: int) -> None:
    """Refuse parameters that are NaN or infinite after the first updates (a NaN or infinite
    learning rate, or an energy that overflows), instead of returning them."""
    if not finite:
        raise ValueError(
            f"train: the parameters are NaN or infinite after the first {num_updates} "
            "update(s); check the optimizer's learning rate (finite and positive) and that the "
            "energy is finite on the data."
        )
