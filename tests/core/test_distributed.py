"""Chain blocks, per-chain seeds and the merge of per-process results (the bookkeeping of
multi-process runs, shared by both PPLs)."""

import numpy as np
import pytest

from discrete_kernels.distributed import chain_block, chain_seeds, merge_chain_blocks


@pytest.mark.parametrize("num_chains", [1, 3, 4, 7])
@pytest.mark.parametrize("num_processes", [1, 2, 3, 5])
def test_chain_blocks_cover_every_chain_once_in_order(num_chains, num_processes):
    blocks = [chain_block(num_chains, num_processes, p) for p in range(num_processes)]
    assert [c for block in blocks for c in block] == list(range(num_chains))
    sizes = [len(block) for block in blocks]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_chain_block_refuses_a_process_outside_the_run():
    with pytest.raises(ValueError, match="process_id=2 must be below num_processes=2"):
        chain_block(4, 2, 2)


def test_chain_seeds_are_distinct_and_do_not_depend_on_the_chain_count():
    seeds = chain_seeds(7, 64)
    assert len(set(seeds)) == 64 and all(0 <= s < 2**32 for s in seeds)
    assert chain_seeds(7, 3) == seeds[:3]  # chain c's seed is chain c's, whatever the run
    assert chain_seeds(8, 3) != seeds[:3]


def test_merge_concatenates_blocks_in_process_order():
    a = {"x": np.zeros((2, 5, 3)), "y": np.zeros((2, 5))}
    b = {"x": np.ones((1, 5, 3)), "y": np.ones((1, 5))}
    merged = merge_chain_blocks([a, {}, b])  # the middle process had no chain
    assert merged["x"].shape == (3, 5, 3) and merged["x"][2].min() == 1
    assert merge_chain_blocks([]) == {}
    with pytest.raises(ValueError, match="every process must record the same ones"):
        merge_chain_blocks([a, {"x": b["x"]}])
    with pytest.raises(ValueError, match="only the chain axis"):
        merge_chain_blocks([a, {"x": np.ones((1, 4, 3)), "y": b["y"]}])
