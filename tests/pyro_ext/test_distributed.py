"""Two local torch processes (``torch.distributed`` with gloo over loopback) make the draws and
ArviZ data of a one-process run with the same seed, and its EBM training by CD and PCD (five
samplers); UCD's data-parallel step is the mean of each process's own step; a process that
dies ends the other with an error."""

import dataclasses

import numpy as np
import pytest
import torch

from discrete_kernels.distributed import chain_seeds
from discrete_kernels.ebm import bars_and_stripes
from pyro_ext import ebm
from tests.multiprocess import last_json, run_processes
from tests.pyro_ext.distributed_worker import work

WORKER = "tests.pyro_ext.distributed_worker"

#: several processes each: CI runs them in a step of their own (-m multiprocess), outside
#: the default run; the worker processes choose their own device (cpu_only)
pytestmark = [pytest.mark.multiprocess, pytest.mark.cpu_only]


def one_ucd_step(rank: int, size: int) -> np.ndarray:
    """The worker's RBM after one UCD step on process ``rank``'s share alone, no averaging."""
    torch.manual_seed(0)
    rbm = ebm.RBM(16, 8, scale=1.0)
    data = torch.as_tensor(bars_and_stripes(), dtype=torch.float32)
    torch.manual_seed(chain_seeds(3, size)[rank])
    ebm.train(rbm, data, optimizer=torch.optim.SGD(rbm.parameters(), lr=0.1),
              method=ebm.UCD(k=1), num_steps=1, batch_size=8 // size,
              progress_bar=False)  # fmt: skip
    return rbm.weights.detach().numpy()


def test_two_processes_make_the_one_process_draws_and_training():
    outputs = run_processes(WORKER, 2, timeout_s=240)
    for out in outputs:
        assert out.returncode == 0, out.stderr[-3000:]
    two = [last_json(out.stdout) for out in outputs]
    one = work(0, 1, 0)
    # UCD's processes have streams of their own: SGD is linear in the gradient, so the step on
    # the averaged gradient is the mean of the processes' own steps
    ucd_mean_step = (one_ucd_step(0, 2) + one_ucd_step(1, 2)) / 2
    for result in two:  # every process gets the whole run
        assert np.shape(result["draws"]) == (3, 30, 6)
        assert result["chain_coords"] == [0, 1, 2]
        assert result["draws"] == one["draws"]
        assert result["accept"] == one["accept"]
        for name, weights in result["weights"].items():
            expected = ucd_mean_step if name == "ucd" else one["weights"][name]
            np.testing.assert_allclose(weights, expected, rtol=0, atol=1e-6, err_msg=name)
            if name != "ucd":
                np.testing.assert_allclose(result["gap"][name], one["gap"][name], atol=1e-5)
    assert two[0]["weights"] == two[1]["weights"]  # the same parameters in every process
    # the checks have power: the runs differ by method and from the start, and UCD's averaged
    # step is not the one-process step
    torch.manual_seed(0)
    start = ebm.RBM(16, 8, scale=1.0).weights.detach().numpy()
    for name, weights in one["weights"].items():
        assert not np.allclose(weights, start, atol=1e-4), name
    assert not np.allclose(one["weights"]["pcd_dmala"], one["weights"]["pcd_block_gibbs"])
    assert not np.allclose(one["weights"]["ucd"], ucd_mean_step, atol=1e-4)


def test_blocks_of_the_run_stream_make_the_one_process_step_and_own_streams_do_not():
    """In one process, without the runtime: the two blocks of a run, each drawing every row's
    noise from the run's stream, average to the one-process step; blocks that draw from
    streams of their own (the trainer before rows) do not, which gives the equality in the
    two-process test its power."""
    data = torch.as_tensor(bars_and_stripes(), dtype=torch.float32)
    method = ebm.PCD(steps=2, num_chains=8)

    def run(seed: int, rows: ebm.Rows) -> np.ndarray:
        torch.manual_seed(0)
        rbm = ebm.RBM(16, 8, scale=1.0)
        torch.manual_seed(seed)
        ebm.train(rbm, data, optimizer=torch.optim.SGD(rbm.parameters(), lr=0.1),
                  method=dataclasses.replace(method, num_chains=8 // rows.size), num_steps=1,
                  batch_size=8 // rows.size, progress_bar=False, rows=rows)  # fmt: skip
        return rbm.weights.detach().numpy()

    one = run(chain_seeds(3, 1)[0], ebm.ONE_PROCESS)
    # each block of the run's stream, averaged as the all-reduce does: the one-process step
    shared = (
        run(chain_seeds(3, 1)[0], ebm.Rows(0, 2)) + run(chain_seeds(3, 1)[0], ebm.Rows(1, 2))
    ) / 2
    np.testing.assert_allclose(shared, one, rtol=0, atol=1e-6)
    # each block from a stream of its own: elsewhere
    seeds = chain_seeds(3, 2)
    own_streams = (run(seeds[0], ebm.Rows(0, 2)) + run(seeds[1], ebm.Rows(1, 2))) / 2
    assert not np.allclose(one, own_streams, atol=1e-4)


def test_a_process_that_dies_ends_the_other_with_an_error():
    first, second = run_processes(WORKER, 2, "die", timeout_s=120)
    assert second.returncode == 3
    assert first.returncode not in (0, -9)  # ended by itself, not by the time limit
    assert "Connection" in first.stderr or "timed out" in first.stderr, first.stderr[-2000:]


def test_shutdown_without_a_process_group_does_nothing():
    from pyro_ext import distributed

    distributed.shutdown()
    assert distributed.rank_and_size() == (0, 1)
