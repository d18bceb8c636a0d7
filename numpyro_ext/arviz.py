"""ArviZ export of a ``numpyro.infer.MCMC`` run, with every Gibbs block's statistics."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from numpyro.infer import Gibbs

from discrete_kernels.stats import arviz_name, block_labels

__all__ = ["gibbs_fields", "to_arviz"]

_BLOCK_FIELD = re.compile(r"block_states\.(\d+)\.(\w+)")


def gibbs_fields(kernel: Gibbs) -> tuple[str, ...]:
    """``extra_fields`` for ``MCMC.run`` that collect each block's default statistics.

    NumPyro's ``Gibbs`` collects only ``z`` by default; its blocks' statistics are addressed
    as ``"block_states.<i>.<field>"``.

    >>> mcmc.run(key, *data, extra_fields=nx.gibbs_fields(kernel))  # doctest: +SKIP
    """
    fields = []
    for i, (block, _) in enumerate(kernel.blocks):
        for name in getattr(block, "default_fields", ()):
            if name != block.sample_field:
                fields.append(f"block_states.{i}.{name}")
    return tuple(fields)


def to_arviz(mcmc: Any, **kwargs: Any):
    """``arviz.from_numpyro(mcmc)``, with each ``Gibbs`` block's statistics in
    ``sample_stats`` under the block's label (``dmala_acceptance_rate``, ``dmala_lp``,
    ``nuts_diverging``) when the run collected them with :func:`gibbs_fields`.

    Parameters
    ----------
    mcmc : numpyro.infer.MCMC
        After ``run``.
    **kwargs
        Passed to ``arviz.from_numpyro``.

    Returns
    -------
    arviz.InferenceData
    """
    import arviz as az
    import xarray as xr

    idata = az.from_numpyro(mcmc, **kwargs)
    kernel = mcmc.sampler
    if not isinstance(kernel, Gibbs):
        return idata
    labels = block_labels([type(block).__name__ for block, _ in kernel.blocks])
    stats = {}
    for key, value in mcmc.get_extra_fields(group_by_chain=True).items():
        match = _BLOCK_FIELD.fullmatch(key)
        if match is None:
            continue
        label, field = labels[int(match.group(1))], match.group(2)
        value = np.asarray(value)
        if field == "potential_energy":
            value = -value  # ArviZ's lp is the log density
        stats[f"{label}_{arviz_name(field)}"] = value
    if not stats:
        return idata
    block_stats = az.dict_to_dataset(stats)
    if "sample_stats" in idata.groups():
        old = idata.sample_stats
        old = old.drop_vars([v for v in old.data_vars if str(v).startswith("block_states.")])
        block_stats = xr.merge([old, block_stats], combine_attrs="drop_conflicts")
    idata.sample_stats = block_stats
    return idata
