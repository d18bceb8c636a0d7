"""Two local JAX processes (``jax.distributed`` over loopback, gloo collectives on CPU) make
the draws, the ArviZ data and the EBM training of a one-process run with the same keys; a
process that dies ends the other with an error."""

import numpy as np
import pytest

from tests.multiprocess import last_json, run_processes
from tests.numpyro_ext.distributed_worker import work

WORKER = "tests.numpyro_ext.distributed_worker"

#: several processes each: CI runs them in a step of their own (-m multiprocess), outside
#: the default run
pytestmark = pytest.mark.multiprocess


def test_two_processes_make_the_one_process_draws_and_training():
    outputs = run_processes(WORKER, 2, timeout_s=240)
    for out in outputs:
        assert out.returncode == 0, out.stderr[-3000:]
    two = [last_json(out.stdout) for out in outputs]
    one = work(0, 1, 0)
    assert two[0]["processes"] == 2 and one["processes"] == 1
    assert two[0]["chain_devices"] == 2  # the chains were split over both processes
    for result in two:  # every process gets the whole run
        assert result["draws"] == one["draws"]
        assert result["arviz_x"] == one["arviz_x"] == one["draws"]
        assert result["chain_coords"] == [0, 1, 2, 3]
        assert result["accept"] == one["accept"]
        assert result["buffer"] == one["buffer"]
        np.testing.assert_allclose(result["weights"], one["weights"], rtol=0, atol=1e-6)
        np.testing.assert_allclose(result["gap"], one["gap"], rtol=1e-5, atol=1e-5)


def test_a_process_that_dies_ends_the_other_with_an_error():
    first, second = run_processes(WORKER, 2, "die", timeout_s=120)
    assert second.returncode == 3
    assert first.returncode not in (0, -9)  # ended by itself, not by the time limit
    assert "stopped sending heartbeats" in first.stderr
