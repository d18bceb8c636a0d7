"""The Pyro tests run on every device present: the CPU always, CUDA where it is available (CI
has no GPU, so those cases skip).

A case runs with torch's default device set to its device (``torch.set_default_device``), so
the models, data and kernels a test builds without naming a device land there, as a user's do.
Tests that compare against JAX or NumPy arrays inside the library, or start worker processes
(which do not inherit the default device), are marked ``cpu_only``; tests with their own
``device`` parameter (test_device.py) place their tensors themselves.
"""

import pytest
import torch

CUDA = torch.cuda.is_available()
TORCH_DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="no CUDA device")),
]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "device" in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("cpu_only") is not None:
        return
    metafunc.parametrize("torch_device", TORCH_DEVICES, indirect=True)


@pytest.fixture(autouse=True)
def torch_device(request: pytest.FixtureRequest):
    """The case's device; torch's default device while the test runs."""
    device = getattr(request, "param", "cpu")
    if device == "cpu":  # torch's own default: installs no device mode
        yield device
        return
    previous = torch.get_default_device()
    torch.set_default_device(device)
    try:
        yield device
    finally:
        # None, not "cpu": setting "cpu" installs a device mode that later cases would inherit
        # (and under which torch.as_tensor moves a CUDA tensor to the CPU)
        torch.set_default_device(None if previous.type == "cpu" else previous)
