"""ArviZ export of a ``pyro.infer.MCMC`` run with this library's sampler statistics."""

from __future__ import annotations

from typing import Any

import numpy as np

from discrete_kernels.stats import arviz_name


def to_arviz(mcmc: Any):
    """InferenceData with the posterior and the per-draw sampler statistics.

    ``arviz.from_pyro`` keeps only divergences; this adds ``sample_stats`` with
    ``acceptance_rate``, ``accepted``, ``step_size``, ``lp`` and ``hamming_distance`` for every
    chain (collected by the kernels of this library, also from worker processes). Under
    :class:`pyro_ext.Gibbs` every block's statistics appear, prefixed by its label
    (``dmala_acceptance_rate``, ``esh_hamiltonian_drift``).

    Parameters
    ----------
    mcmc : pyro.infer.MCMC
        After ``run``.

    Returns
    -------
    arviz.InferenceData
    """
    import arviz as az

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
        present = [stats for stats in stats_by_chain if stats is not None]
        sample_stats = {
            arviz_name(name): np.stack([np.asarray(stats[name]) for stats in present])
            for name in present[0]
        }
        for name, values in sample_stats.items():
            if name == "accepted" or name.endswith("_accepted"):
                sample_stats[name] = values.astype(bool)
    return az.from_dict(posterior=posterior, sample_stats=sample_stats)
