"""ArviZ export of a ``numpyro.infer.MCMC`` run, with every Gibbs block's statistics."""

from __future__ import annotations

import re
import sys
from typing import Any

import numpy as np
from numpyro.infer import Gibbs

from discrete_kernels.arviz_export import arviz_major, replace_sample_stats
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


def _restore_numpyro_submodules() -> None:
    """Set each imported ``numpyro.*`` submodule as an attribute of its parent package again.

    ArviZ 1.x imports ``numpyro`` lazily (``importlib.util.LazyLoader``); when something else
    imports it first, the lazy module's execution can drop the attributes its own imports set
    (seen with ``import arviz; import jax; import numpyro.infer``: ``numpyro.infer.gibbs`` and
    ``numpyro.infer.initialization`` missing), and ``arviz.from_numpyro`` then fails reading
    ``numpyro.infer.initialization``. The submodules are in ``sys.modules``; only the
    attributes are missing.
    """
    for name, module in list(sys.modules.items()):
        parent, _, child = name.rpartition(".")
        if module is None or not name.startswith("numpyro.") or parent not in sys.modules:
            continue
        if child not in vars(sys.modules[parent]):
            setattr(sys.modules[parent], child, module)


def to_arviz(mcmc: Any, **kwargs: Any) -> Any:
    """``arviz.from_numpyro(mcmc)``, with each ``Gibbs`` block's statistics in
    ``sample_stats`` under the block's label (``dmala_acceptance_rate``, ``dmala_lp``,
    ``nuts_diverging``) when the run collected them with :func:`gibbs_fields`.

    Works with ArviZ 0.2x and 1.x: the same groups and variable names on both.

    Parameters
    ----------
    mcmc : numpyro.infer.MCMC
        After ``run``.
    **kwargs
        Passed to ``arviz.from_numpyro``. ``log_likelihood`` defaults to ``True`` on both
        ArviZ lines (0.2x's default; 1.x's own default leaves the group out).

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        ``InferenceData`` under ArviZ 0.2x, ``DataTree`` under ArviZ 1.x (read a group as
        ``idata["sample_stats"]`` or ``idata.sample_stats`` on both).
    """
    import arviz as az

    _restore_numpyro_submodules()
    if arviz_major() >= 1:
        # the same groups on both lines: 0.2x adds log_likelihood unless told not to
        kwargs.setdefault("log_likelihood", True)
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
    # from_numpyro copies every extra field into sample_stats under its raw name
    return replace_sample_stats(idata, stats, drop_prefix="block_states.")
