"""pyro_ext.ebm.train(torch_compile=True): the compiled iteration makes the eager iteration's
moves and parameter updates from the same random numbers, resumes bit for bit, and is refused
where an iteration's work depends on its random numbers."""

import numpy as np
import pytest
import torch

import pyro_ext as px
from discrete_kernels.ebm import bars_and_stripes
from pyro_ext import _ebm_compiled, ebm


def _train(num_steps, compiled, resume=None, sampler=None):
    """PCD-DMALA (restarts included) on bars-and-stripes from seed 0, or from ``resume``."""
    torch.manual_seed(0)
    rbm = ebm.RBM(16, 8, scale=0.5)
    # SGD, not Adam: Adam's first steps are about lr * sign(gradient), so a gradient of 1e-8
    # rounded differently changes a parameter by lr, and the runs part
    optimizer = torch.optim.SGD(rbm.parameters(), lr=0.05)
    method = ebm.PCD(sampler=sampler or px.DMALA(step_size=0.5), num_chains=30, reinit_prob=0.2)
    result = ebm.train(
        rbm,
        bars_and_stripes(),
        optimizer=optimizer,
        method=method,
        num_steps=num_steps,
        batch_size=20,
        progress_bar=False,
        resume=resume,
        torch_compile=compiled,
    )
    return rbm, result


@pytest.fixture
def fresh_compiler():
    """No program compiled by another test (under other inductor options) is reused."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compiled_iterations_equal_the_eager_ones_and_resume(fresh_compiler):
    # inductor's own random numbers differ from eager torch's; with fallback_random the
    # compiled program draws eager torch's, so both runs see the same noise
    with torch._inductor.config.patch(fallback_random=True):
        eager_rbm, eager = _train(6, compiled=False)
        half_rbm, half = _train(3, compiled=True)
        rbm, rest = _train(3, compiled=True, resume=half)
    # the chains' states: every move the same (discrete, so equal)
    assert torch.equal(eager.method_state, rest.method_state)
    assert not torch.equal(eager.method_state, half.method_state)  # the chains moved
    # the gradient (grad_and_value against backward) and the updates up to float rounding
    for a, b in zip(eager_rbm.parameters(), rbm.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for name in ("energy_gap", "accept_prob"):
        np.testing.assert_allclose(eager.history[name], rest.history[name], rtol=1e-5, atol=1e-6)
    assert np.all(rest.history["accept_prob"] > 0.05)


def test_compiled_training_resumes_bit_for_bit_with_inductors_random_numbers(fresh_compiler):
    whole_rbm, whole = _train(4, compiled=True)
    _, half = _train(2, compiled=True)
    torch.rand(5)  # the generator moves on in between: resume restores it
    rbm, rest = _train(2, compiled=True, resume=half)
    assert torch.equal(whole.method_state, rest.method_state)
    for a, b in zip(whole_rbm.parameters(), rbm.parameters(), strict=True):
        assert torch.equal(a, b)


def test_torch_compile_is_refused_where_it_cannot_apply(monkeypatch):
    data = bars_and_stripes()
    rbm = ebm.RBM(16, 4)
    optimizer = torch.optim.SGD(rbm.parameters(), lr=0.1)
    options = dict(optimizer=optimizer, num_steps=1, progress_bar=False)
    with pytest.raises(ValueError, match="torch_compile=True does not apply to UCD"):
        ebm.train(rbm, data, method=ebm.UCD(), torch_compile=True, **options)
    with pytest.raises(ValueError, match="torch_compile=True does not apply to PCD with ACS"):
        ebm.train(rbm, data, method=ebm.PCD(sampler=px.ACS()), torch_compile=True, **options)
    with pytest.raises(ValueError, match="torch_compile must be True or False, got 'yes'"):
        ebm.train(rbm, data, method=ebm.PCD(), torch_compile="yes", **options)

    def broken_compiler(fn, **kwargs):
        def run(*args):
            raise RuntimeError("no C++ compiler found\nlong traceback")

        return run

    # a compiler failure names the way out
    monkeypatch.setattr(_ebm_compiled.torch, "compile", broken_compiler)
    with pytest.raises(RuntimeError, match=r"torch.compile failed \(RuntimeError: no C\+\+ comp"):
        ebm.train(rbm, data, method=ebm.PCD(), torch_compile=True, **options)
