"""ArviZ export shared by both adapters' ``to_arviz``, for ArviZ 0.2x and 1.x alike.

ArviZ 0.2x returns an ``arviz.InferenceData`` (each group an ``xarray.Dataset``); ArviZ 1.x
(``arviz-base``, ``arviz-stats``, ``arviz-plots``) returns an ``xarray.DataTree`` (each group a
child node). The two differ in how ``from_dict`` takes its groups and in how a group is replaced;
this module holds those differences in one place, so the adapters' exports give the same groups
and variable names on both lines. ``arviz`` and ``xarray`` are imported inside the functions:
the core imports neither (nor a framework).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .stats import arviz_name

__all__ = [
    "arviz_major",
    "from_arrays",
    "group_dataset",
    "replace_sample_stats",
    "stack_chain_statistics",
]


def arviz_major() -> int:
    """The installed ArviZ's major version: 0 (``InferenceData``) or 1 (``xarray.DataTree``)."""
    import arviz as az

    return int(str(az.__version__).split(".")[0])


def from_arrays(
    posterior: Mapping[str, np.ndarray], sample_stats: Mapping[str, np.ndarray] | None = None
) -> Any:
    """``arviz.from_dict`` on either ArviZ line: arrays shaped ``(chain, draw, ...)``.

    Parameters
    ----------
    posterior : mapping of str to numpy.ndarray
        The posterior group's variables.
    sample_stats : mapping of str to numpy.ndarray, optional
        The sample_stats group's variables; no group when ``None``.

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        ``InferenceData`` under ArviZ 0.2x, ``DataTree`` under ArviZ 1.x; the same groups and
        variables in both.
    """
    import arviz as az

    groups = {"posterior": dict(posterior)}
    if sample_stats is not None:
        groups["sample_stats"] = dict(sample_stats)
    # typed per line by the installed ArviZ; the call below picks the line's form
    from_dict: Any = az.from_dict
    if arviz_major() >= 1:
        return from_dict(groups)  # 1.x: one dict of groups
    return from_dict(**groups)  # 0.2x: one keyword per group


def group_dataset(idata: Any, group: str) -> Any:
    """One group of ``idata`` as an ``xarray.Dataset`` (a ``DataTree`` node under ArviZ 1.x is
    converted; under 0.2x the group already is one). ``KeyError`` when the group is absent."""
    import xarray as xr

    if group not in idata:
        raise KeyError(f"group {group!r} is not in this ArviZ data")
    value = idata[group]
    return value if isinstance(value, xr.Dataset) else value.to_dataset()


def replace_sample_stats(
    idata: Any, stats: Mapping[str, np.ndarray], drop_prefix: str | None = None
) -> Any:
    """``idata`` with ``stats`` merged into its sample_stats group (created when absent).

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        Changed in place and returned.
    stats : mapping of str to numpy.ndarray
        Variables shaped ``(chain, draw, ...)``; they replace variables of the same name.
    drop_prefix : str, optional
        Variables of the existing group whose names start with it are dropped (the raw
        ``block_states.<i>.<field>`` fields NumPyro's ``Gibbs`` leaves there).

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        ``idata`` itself.
    """
    import arviz as az
    import xarray as xr

    merged = az.dict_to_dataset(dict(stats))
    if "sample_stats" in idata:
        old = group_dataset(idata, "sample_stats")
        drop = [v for v in old.data_vars if v in stats]
        if drop_prefix is not None:
            drop += [v for v in old.data_vars if str(v).startswith(drop_prefix)]
        merged = xr.merge([old.drop_vars(drop), merged], combine_attrs="drop_conflicts")
        # InferenceData.__setitem__ appends the name to its list of groups even when it is
        # there already (a group listed twice); DataTree would keep the old node's variables
        # if a Dataset were assigned as an attribute. Delete, then set: right on both lines.
        del idata["sample_stats"]
    idata["sample_stats"] = merged
    return idata


def stack_chain_statistics(stats_by_chain: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Per-chain statistics (each a mapping of field to per-draw values) as ArviZ's sample_stats
    variables: stacked along a leading chain axis, named as ArviZ reads them
    (:func:`discrete_kernels.stats.arviz_name`), ``accepted`` fields as booleans.

    Parameters
    ----------
    stats_by_chain : sequence of mappings of str to array-like
        One mapping per chain, every one with the same fields; values convert with
        ``numpy.asarray`` (move framework tensors to host memory first).

    Returns
    -------
    dict of str to numpy.ndarray
        Each of shape ``(chain, draw, ...)``.
    """
    if not stats_by_chain:
        return {}
    fields = list(stats_by_chain[0])
    for i, stats in enumerate(stats_by_chain):
        if list(stats) != fields:
            raise ValueError(
                f"chain {i} has the statistics {sorted(stats)}, chain 0 has {sorted(fields)}; "
                "every chain must record the same ones."
            )
    out = {}
    for field in fields:
        name = arviz_name(field)
        values = np.stack([np.asarray(stats[field]) for stats in stats_by_chain])
        if name == "accepted" or name.endswith("_accepted"):
            values = values.astype(bool)
        out[name] = values
    return out
