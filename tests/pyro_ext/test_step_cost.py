"""What a Pyro DMALA step costs beyond the user's log density and its gradient, counted in torch
operations (eager torch dispatches each one separately: on a small model the count, not the
arithmetic, sets a step's time; issue 36). A count is deterministic, unlike a timing: these
budgets fail when a change adds operations to every step, and are lowered when one removes
them."""

import sys
from pathlib import Path

import pytest
import torch

import pyro_ext as px

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _torch_operations import aten_operations_per_step as _operations  # noqa: E402

pytestmark = pytest.mark.cpu_only

D = 16

#: operations of one ``px.DMALA(potential_fn=...).sample`` on the CPU beyond one evaluation
#: of the potential with its gradient (the floor below, which adds 2 to use the gradient):
#: the noise, both sides' fused flip logits, the proposal, both sides' log q, the five reads
#: of the MH decision's scalars, the Hamming distance and the statistics' two tensors, the
#: step's record, detaching; 35 when set (the first step makes the cached backward seed),
#: 48.2 before the MH decision ran on Python floats, 70 before issue 36's cuts
POTENTIAL_BUDGET = 36


def _potential(values: dict) -> torch.Tensor:
    s = 2.0 * values["x"] - 1.0
    return -(0.1 * s[:-1] * s[1:]).sum()


def test_potential_mode_step_stays_within_its_operation_budget():
    torch.manual_seed(0)
    kernel = px.DMALA(
        potential_fn=_potential, domain=px.Binary(), step_size=0.2, adapt_step_size=False
    )
    kernel.initial_params = {"x": (torch.rand(D) < 0.5).float()}
    kernel.setup(0)
    params = dict(kernel.initial_params)

    def value_and_grad(x: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_()
        (g,) = torch.autograd.grad(_potential({"x": x}), x)
        return x + 0.0 * g

    floor = _operations(value_and_grad, params["x"])
    step = _operations(kernel.sample, params)
    assert step - floor <= POTENTIAL_BUDGET, (step, floor)
    # the cached seed and the negated potential: no ones_like and no extra negation
    assert step - floor >= POTENTIAL_BUDGET - 4, "budget too loose: lower it"


def test_negated_potential_gives_the_log_density_and_its_gradient():
    """The potential is differentiated with a -1 seed instead of negated twice: the same log
    density and gradient as differentiating ``-potential`` directly."""
    from discrete_kernels.sites import GRADIENT, LeafSpec
    from pyro_ext._target import make_local_fn, potential_log_density

    spec = LeafSpec("x", px.Binary(), GRADIENT)
    local_fn = make_local_fn(potential_log_density(_potential), (spec,))
    x = (torch.arange(D) % 3 == 0).float()
    f, (g,) = local_fn((x,))
    y = x.clone().requires_grad_()
    expected = -_potential({"x": y})
    (expected_g,) = torch.autograd.grad(expected, y)
    assert not f.requires_grad
    torch.testing.assert_close(f, expected.detach())
    torch.testing.assert_close(g, expected_g)
    f2, (g2,) = local_fn((x,))  # the cached seed again
    torch.testing.assert_close(g2, expected_g)
    with torch.no_grad():  # called where gradients are off, it turns them on for itself
        f3, (g3,) = local_fn((x,))
        assert not torch.is_grad_enabled()
    torch.testing.assert_close(f3, expected.detach())
    torch.testing.assert_close(g3, expected_g)
