"""Two local torch processes (``torch.distributed`` with gloo over loopback) make the draws and
ArviZ data of a one-process run with the same seed; data-parallel EBM training averages the
processes' gradients (one SGD step: the mean of each process's own step); a process that dies
ends the other with an error."""

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


def one_process_step(rank: int, size: int) -> np.ndarray:
    """The worker's RBM after one SGD step on process ``rank``'s share alone, no averaging."""
    torch.manual_seed(0)
    rbm = ebm.RBM(16, 8)
    data = torch.as_tensor(bars_and_stripes(), dtype=torch.float32)
    torch.manual_seed(chain_seeds(3, size)[rank])
    ebm.train(rbm, data, optimizer=torch.optim.SGD(rbm.parameters(), lr=0.1),
              method=ebm.PCD(steps=1, num_chains=8 // size), num_steps=1,
              batch_size=8 // size, progress_bar=False)  # fmt: skip
    return rbm.weights.detach().numpy()


def test_two_processes_make_the_one_process_draws_and_average_the_gradients():
    outputs = run_processes(WORKER, 2, timeout_s=240)
    for out in outputs:
        assert out.returncode == 0, out.stderr[-3000:]
    two = [last_json(out.stdout) for out in outputs]
    one = work(0, 1, 0)
    # SGD is linear in the gradient: the step on the averaged gradient is the mean step
    mean_step = (one_process_step(0, 2) + one_process_step(1, 2)) / 2
    for result in two:  # every process gets the whole run
        assert np.shape(result["draws"]) == (3, 30, 6)
        assert result["chain_coords"] == [0, 1, 2]
        assert result["draws"] == one["draws"]
        assert result["accept"] == one["accept"]
        np.testing.assert_allclose(result["weights"], mean_step, rtol=0, atol=1e-6)
    assert two[0]["weights"] == two[1]["weights"]  # the same parameters in every process
    assert not np.allclose(one["weights"], mean_step, atol=1e-4)  # the averaging is seen


def test_a_process_that_dies_ends_the_other_with_an_error():
    first, second = run_processes(WORKER, 2, "die", timeout_s=120)
    assert second.returncode == 3
    assert first.returncode not in (0, -9)  # ended by itself, not by the time limit
    assert "Connection" in first.stderr or "timed out" in first.stderr, first.stderr[-2000:]


def test_shutdown_without_a_process_group_does_nothing():
    from pyro_ext import distributed

    distributed.shutdown()
    assert distributed.rank_and_size() == (0, 1)
