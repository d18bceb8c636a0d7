"""ArviZ export of a ``pyro.infer.MCMC`` run with this library's sampler statistics."""

from __future__ import annotations

from typing import Any

import numpy as np

from discrete_kernels.arviz_export import from_arrays, stack_chain_statistics


def to_arviz(mcmc: Any) -> Any:
    """ArviZ data with the posterior and the per-draw sampler statistics.

    ``arviz.from_pyro`` keeps only divergences; this adds ``sample_stats`` with
    ``acceptance_rate``, ``accepted``, ``step_size``, ``lp`` and ``hamming_distance`` for every
    chain (collected by the kernels of this library, also from worker processes). Under
    :class:`pyro_ext.Gibbs` every block's statistics appear, prefixed by its label
    (``dmala_acceptance_rate``, ``esh_hamiltonian_drift``). Works with ArviZ 0.2x and 1.x: the
    same groups and variable names on both.

    Parameters
    ----------
    mcmc : pyro.infer.MCMC
        After ``run``.

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        ``InferenceData`` under ArviZ 0.2x, ``DataTree`` under ArviZ 1.x (read a group as
        ``idata["sample_stats"]`` or ``idata.sample_stats`` on both).
    """
    return from_arrays(*chain_arrays(mcmc))


def chain_arrays(mcmc: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """The posterior and the sampler statistics of a finished ``pyro.infer.MCMC`` as NumPy
    arrays shaped ``(chain, draw, ...)`` (the statistics ``None`` when a chain recorded
    none): what :func:`to_arviz` exports and :func:`pyro_ext.distributed.run_chains` gathers.
    """
    if not getattr(mcmc, "_samples", None):
        raise ValueError("to_arviz: this MCMC has no draws yet; call mcmc.run(...) first.")
    samples = mcmc.get_samples(group_by_chain=True)
    posterior = {name: value.detach().cpu().numpy() for name, value in samples.items()}
    num_chains = next(iter(posterior.values())).shape[0]
    # MCMC keeps each chain's kernel.diagnostics(); MCMC.diagnostics() would also compute
    # Pyro's ESS of every site, whose memory grows with the square of the number of draws
    chain_diagnostics = getattr(mcmc, "_diagnostics", None) or [None] * num_chains
    stats_by_chain = [(d or {}).get("sample_stats") for d in chain_diagnostics]
    sample_stats = None
    if all(stats is not None for stats in stats_by_chain):
        sample_stats = stack_chain_statistics([s for s in stats_by_chain if s is not None])
    return posterior, sample_stats
