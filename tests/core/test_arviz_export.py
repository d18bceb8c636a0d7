"""The ArviZ export shared by both adapters (:mod:`discrete_kernels.arviz_export`), on numpy
arrays: no framework needed, so it runs on every ArviZ line CI installs (0.2x with the pinned
stack, 1.x in the newest-stack job, where no torch is installed). ``px.to_arviz`` is its
tensors moved to numpy followed by :func:`stack_chain_statistics` and :func:`from_arrays`, which
the tests below run on what the Pyro kernels record per chain."""

import numpy as np
import pytest

az = pytest.importorskip("arviz")

from discrete_kernels.arviz_export import (  # noqa: E402
    arviz_major,
    from_arrays,
    group_dataset,
    replace_sample_stats,
    stack_chain_statistics,
)

RNG = np.random.default_rng(0)
CHAINS, DRAWS = 2, 7


def pyro_chain_record(prefix=""):
    """One chain's ``kernel.diagnostics()["sample_stats"]`` as the Pyro kernels write it (per
    draw, host memory): the kernel's field names, before ArviZ's renaming."""
    return {
        f"{prefix}accept_prob": RNG.uniform(size=DRAWS).astype(np.float32),
        f"{prefix}accepted": (RNG.uniform(size=DRAWS) > 0.5).astype(np.float32),
        f"{prefix}step_size": np.full(DRAWS, 0.4, np.float32),
        f"{prefix}hamming_distance": RNG.integers(0, 4, DRAWS).astype(np.float32),
        f"{prefix}lp": -RNG.uniform(1, 5, DRAWS).astype(np.float32),
    }


def groups(idata):
    """Group names on either line (InferenceData.groups(), DataTree.children)."""
    return set(idata.groups()) if arviz_major() == 0 else set(idata.children)


def test_the_installed_line_is_what_the_data_says():
    idata = from_arrays({"x": RNG.normal(size=(CHAINS, DRAWS))})
    expected = "InferenceData" if arviz_major() == 0 else "DataTree"
    assert type(idata).__name__ == expected


def test_pyro_records_become_sample_stats_with_arviz_names():
    """What px.to_arviz builds from its chains: the posterior and every statistic, renamed,
    stacked by chain, ``accepted`` as booleans; ArviZ's summary reads them."""
    records = [pyro_chain_record() for _ in range(CHAINS)]
    posterior = {
        "z": RNG.integers(0, 2, (CHAINS, DRAWS, 3)),
        "mu": RNG.normal(size=(CHAINS, DRAWS)),
    }
    idata = from_arrays(posterior, stack_chain_statistics(records))
    assert groups(idata) == {"posterior", "sample_stats"}
    stats = group_dataset(idata, "sample_stats")
    assert set(stats.data_vars) == {
        "acceptance_rate",
        "accepted",
        "step_size",
        "hamming_distance",
        "lp",
    }
    assert stats["acceptance_rate"].dims == ("chain", "draw")
    np.testing.assert_array_equal(stats["acceptance_rate"].values[1], records[1]["accept_prob"])
    assert stats["accepted"].dtype == bool
    np.testing.assert_array_equal(stats["accepted"].values[0], records[0]["accepted"] > 0)
    assert group_dataset(idata, "posterior")["z"].shape == (CHAINS, DRAWS, 3)
    # the groups read the same way on both lines, attribute or key
    assert idata.sample_stats["lp"].shape == idata["sample_stats"]["lp"].shape == (CHAINS, DRAWS)
    summary = az.summary(idata, group="sample_stats", var_names=["acceptance_rate", "lp"])
    assert list(summary.index) == ["acceptance_rate", "lp"]
    assert {"mean", "sd", "mcse_mean", "ess_bulk", "r_hat"} <= set(summary.columns)


def test_gibbs_block_records_keep_their_labels():
    records = [
        {**pyro_chain_record("dmala_"), "esh_hamiltonian_drift": RNG.normal(size=DRAWS)}
        for _ in range(CHAINS)
    ]
    stats = stack_chain_statistics(records)
    assert "dmala_acceptance_rate" in stats and "acceptance_rate" not in stats
    assert stats["dmala_accepted"].dtype == bool
    assert stats["esh_hamiltonian_drift"].shape == (CHAINS, DRAWS)


def test_chains_with_different_statistics_are_refused():
    first, second = pyro_chain_record(), pyro_chain_record()
    del second["lp"]
    with pytest.raises(ValueError, match="chain 1 has the statistics"):
        stack_chain_statistics([first, second])
    assert stack_chain_statistics([]) == {}


def test_no_statistics_no_group():
    idata = from_arrays({"x": RNG.normal(size=(CHAINS, DRAWS))}, None)
    assert groups(idata) == {"posterior"}
    with pytest.raises(KeyError, match="'sample_stats' is not in"):
        group_dataset(idata, "sample_stats")


def test_replacing_sample_stats_drops_the_raw_fields_and_keeps_the_others():
    """nx.to_arviz's merge: NumPyro's raw ``block_states.<i>.<field>`` variables leave, the
    labelled ones arrive, a variable of the same name is replaced, and the group is listed
    once (InferenceData appends a name on every assignment; DataTree ignores a group set as
    a Python attribute)."""
    raw = {
        "block_states.0.accept_prob": RNG.uniform(size=(CHAINS, DRAWS)),
        "block_states.1.diverging": np.zeros((CHAINS, DRAWS), bool),
        "kept": RNG.normal(size=(CHAINS, DRAWS)),
        "dmala_lp": np.zeros((CHAINS, DRAWS)),
    }
    idata = from_arrays({"x": RNG.normal(size=(CHAINS, DRAWS))}, raw)
    labelled = {
        "dmala_acceptance_rate": raw["block_states.0.accept_prob"],
        "nuts_diverging": raw["block_states.1.diverging"],
        "dmala_lp": -np.ones((CHAINS, DRAWS)),
    }
    out = replace_sample_stats(idata, labelled, drop_prefix="block_states.")
    assert out is idata
    names = list(idata.groups()) if arviz_major() == 0 else list(idata.children)
    assert sorted(names) == ["posterior", "sample_stats"]  # each once
    stats = group_dataset(idata, "sample_stats")
    assert set(stats.data_vars) == {"dmala_acceptance_rate", "nuts_diverging", "dmala_lp", "kept"}
    assert set(idata["sample_stats"].data_vars) == set(stats.data_vars)
    np.testing.assert_array_equal(stats["dmala_lp"].values, -1.0)
    np.testing.assert_array_equal(stats["kept"].values, raw["kept"])


def test_replacing_sample_stats_creates_the_group_when_absent():
    idata = from_arrays({"x": RNG.normal(size=(CHAINS, DRAWS))})
    replace_sample_stats(idata, {"lp": np.zeros((CHAINS, DRAWS))})
    assert groups(idata) == {"posterior", "sample_stats"}
    assert group_dataset(idata, "sample_stats")["lp"].dims == ("chain", "draw")
