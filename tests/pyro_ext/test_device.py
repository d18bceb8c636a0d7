"""The Pyro kernels follow the model's device and floating dtype, and a step reads nothing back
to the host.

On the CPU the same class of bug as a CUDA "found at least two devices" error is caught by
watching tensor creation: every tensor this library creates must take its device from an input
(a ``device=`` argument or a ``*_like`` constructor), and every step must run without a host
read of a device value (``float(t)``, ``t.item()``, ``bool(t)``, ...), which on a GPU waits for
the device. The same tests run on CUDA where it is present (moments against enumeration there
too); CI has no GPU, so those skip.
"""

from __future__ import annotations

import collections
import os
import traceback

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC, NUTS
from torch.overrides import TorchFunctionMode

import discrete_kernels as dk
import pyro_ext as px
from discrete_kernels.ebm import bars_and_stripes
from discrete_kernels.gradient_check import check_schedule, is_check_draw
from pyro_ext import ebm

from ..mc import assert_mc_close, ising_weights

CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="no CUDA"))]

FACTORIES = {
    torch.tensor,
    torch.as_tensor,
    torch.asarray,
    torch.zeros,
    torch.ones,
    torch.full,
    torch.empty,
    torch.arange,
    torch.eye,
    torch.linspace,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
}
HOST_READS = {"item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__", "__index__"}
# this library's source folders, wherever it is installed
OURS = tuple(os.path.dirname(module.__file__).replace("\\", "/") + "/" for module in (dk, px))
LIBRARIES = ("/torch/", "/array_api_compat/", "/site-packages/", "/dist-packages/")


def _caller() -> str | None:
    """``file:line`` of the innermost caller outside torch and array_api_compat when it is
    this library's code; None when it is Pyro's or the tests' own."""
    for frame in reversed(traceback.extract_stack()[:-3]):
        name = frame.filename.replace("\\", "/")
        if name.startswith(OURS):
            return f"{name.rsplit('/', 2)[-2]}/{name.rsplit('/', 1)[-1]}:{frame.lineno}"
        if not any(part in name for part in LIBRARIES):
            return None
        if "/pyro/" in name:  # Pyro's own code: not ours to check
            return None
    return None


class Watch(TorchFunctionMode):
    """Records tensor creations without a device and host reads made by this library."""

    def __init__(self) -> None:
        super().__init__()
        self.created: collections.Counter = collections.Counter()
        self.host_reads: collections.Counter = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        from_tensor = bool(args) and isinstance(args[0], torch.Tensor)
        if func in FACTORIES and kwargs.get("device") is None and not from_tensor:
            where = _caller()
            if where is not None:
                self.created[f"{name} at {where}"] += 1
        elif name in HOST_READS or (name == "to" and _to_host(args, kwargs)):
            where = _caller()
            if where is not None:
                self.host_reads[f"{name} at {where}"] += 1
        return func(*args, **kwargs)


def _to_host(args, kwargs) -> bool:
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    return isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu"


def _models(device: str, dtype: torch.dtype):
    weights = torch.as_tensor(ising_weights(3), dtype=dtype, device=device)
    half = torch.tensor(0.5, dtype=dtype, device=device)

    def ising():
        x = pyro.sample("x", dist.Bernoulli(half).expand([9]).to_event(1))
        s = 2.0 * x - 1.0
        pyro.factor("ising", 0.3 * s @ weights @ s + 0.2 * s.sum())

    def mixed(y):
        z = pyro.sample("z", dist.Bernoulli(0.8 * half).expand([3]).to_event(1))
        mu = pyro.sample("mu", dist.Normal(0.0 * half, 1.0))
        loads = torch.tensor([1.0, -2.0, 1.5], dtype=dtype, device=device)
        with pyro.plate("data", y.shape[0]):
            pyro.sample("y", dist.Normal(mu + loads @ z, 1.0), obs=y)

    def continuous():
        pyro.sample("m", dist.Normal(0.0 * half, 1.0).expand([3]).to_event(1))

    def indicators():
        # one indicator per row: PlateGibbs draws every row at once
        loads = torch.tensor([0.5, -1.0, 2.0, 0.0, 1.5, -0.5], dtype=dtype, device=device)
        with pyro.plate("rows", 6):
            z = pyro.sample("z", dist.Bernoulli(0.6 * half))
            pyro.sample("y", dist.Normal(2.0 * z - 1.0, 1.0), obs=loads)

    def chain():
        # neighbours coupled edge by edge: PlateGibbs sweeps it colour by colour
        with pyro.plate("sites", 6):
            x = pyro.sample("x", dist.Bernoulli(half))
        s = 2.0 * x - 1.0
        pyro.factor("pairs", 0.4 * s[1:] * s[:-1])

    return ising, mixed, continuous, indicators, chain


KERNELS = {
    "DMALA": lambda m: px.DMALA(m[0]),
    "DULA": lambda m: px.DULA(m[0], step_size=0.2),
    "GWG": lambda m: px.GWG(m[0]),
    "AB-trace": lambda m: px.AB(m[0], variant="trace", block_size=5, burn_in=20),
    "ACS": lambda m: px.ACS(m[0], steps_per_cycle=5),
    "DiscreteGibbs": lambda m: px.DiscreteGibbs(m[0]),
    "ESH": lambda m: px.ESH(m[2]),
    "Gibbs(DMALA, NUTS)": lambda m: px.Gibbs([(px.DMALA(m[1]), ["z"]), (NUTS(m[1]), None)]),
    "PlateGibbs": lambda m: px.PlateGibbs(m[3]),
    "PlateGibbs-colours": lambda m: px.PlateGibbs(m[4]),
}


def _args(name: str, device: str, dtype: torch.dtype) -> tuple:
    if name.startswith("Gibbs"):
        return (torch.tensor([0.3, 1.1, 0.8], dtype=dtype, device=device),)
    return ()


def _floating(tree) -> list[torch.Tensor]:
    """Every floating tensor in a (nested) kernel state."""
    if isinstance(tree, torch.Tensor):
        return [tree] if tree.is_floating_point() else []
    if isinstance(tree, (tuple, list)):
        return [t for item in tree for t in _floating(item)]
    if isinstance(tree, dict):
        return [t for item in tree.values() for t in _floating(item)]
    return []


def _kernel_states(kernel) -> list:
    blocks = [k for k, _ in kernel._blocks] if isinstance(kernel, px.Gibbs) else [kernel]
    out = []
    for block in blocks:
        out += [getattr(block, "_state", None), getattr(block, "_adapt_state", None)]
        out += [getattr(block, "_cached", None)]
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_follows_the_models_device_and_dtype(name, device):
    """A float64 model (torch's default dtype stays float32) on ``device``: the draws, every
    floating tensor of the kernel's state and the statistics stay float64 on that device,
    and no tensor is created without a device from an input."""
    assert torch.get_default_dtype() == torch.float32
    dtype = torch.float64
    kernel = KERNELS[name](_models(device, dtype))
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel, num_samples=25, warmup_steps=40, disable_progbar=True)
    watch = Watch()
    # torch's default device set to the CPU explicitly: a device mode under which
    # torch.as_tensor of a CUDA tensor moves it to the CPU (the kernel must not move the model's)
    torch.set_default_device("cpu")
    try:
        with watch:
            mcmc.run(*_args(name, device, dtype))
    finally:
        torch.set_default_device(None)
    assert not watch.created, dict(watch.created)
    samples = mcmc.get_samples()
    for site, value in samples.items():
        assert value.device.type == device, site
        if value.is_floating_point():
            assert value.dtype == dtype, (site, value.dtype)
    for tensor in _floating(_kernel_states(kernel)):
        assert (tensor.device.type, tensor.dtype) == (device, dtype)
    stats = mcmc.diagnostics()
    idata = px.to_arviz(mcmc)  # one host transfer at the end
    assert idata.posterior.sizes["draw"] == 25
    assert stats  # per-chain diagnostics present


# the kernels whose step is tensor work only; DiscreteGibbs visits coordinates in a Python
# loop that reads each proposal, ESH's trajectory loop counts its steps on the host (one read
# per draw), and exact sites read which substitutions are the current value (one per step)
NO_READ_KERNELS = ["DMALA", "DULA", "GWG", "AB-trace", "ACS"]


@pytest.fixture
def accelerator_path(monkeypatch):
    """The core as it runs for a tensor on an accelerator: ``host_number`` gives every tensor
    back (on the CPU it reads a one-chain step's scalars as Python floats, which costs a CUDA
    chain a wait for the device), patched wherever the core imported it."""
    import sys

    for name, module in list(sys.modules.items()):
        if name.startswith("discrete_kernels") and hasattr(module, "host_number"):
            monkeypatch.setattr(module, "host_number", lambda x: x)


@pytest.mark.cpu_only  # builds its CPU model itself
@pytest.mark.parametrize("name", NO_READ_KERNELS)
def test_a_step_reads_nothing_back_to_the_host(name, accelerator_path):
    """Warmup and sampling steps, each followed by Pyro's per-step ``logging()`` call, read no
    device value on the host, except at the end of warmup (the frozen-chain check), at the
    warmup's checks of the gradient sites (about ten draws in its first half) and when the
    progress text refreshes (every ``LOG_EVERY`` steps). The CPU stands in for the device
    (``accelerator_path``)."""
    kernel = KERNELS[name](_models("cpu", torch.float32))
    pyro.set_rng_seed(0)
    warmup, total = 60, 120
    kernel.setup(warmup)
    params = dict(kernel.initial_params)
    schedule = check_schedule(warmup)
    for t in range(1, total + 1):
        watch = Watch()
        with watch:
            params = kernel.sample(params)
            kernel.logging()
        reads = dict(watch.host_reads)
        checked = t - 1 < warmup and is_check_draw(schedule, t - 1)
        if t == warmup or t == 1 or t % px.driver.LOG_EVERY == 0 or checked:
            assert sum(reads.values()) <= 6, (t, reads)
        else:
            assert not reads, (t, reads)


@pytest.mark.cpu_only  # builds its CPU model itself
def test_watch_catches_a_tensor_made_without_a_device(monkeypatch):
    """The creation check has power: a core function that makes a CPU tensor (as the adapter
    did before it followed the model's device) is reported."""
    import discrete_kernels.metropolis as steps

    original = steps.hamming_distance

    def on_the_default_device(xs, ys, like, *rest):
        return original(xs, ys, like, *rest) + torch.zeros(())  # no device: the bug class

    monkeypatch.setattr(steps, "hamming_distance", on_the_default_device)
    kernel = px.DMALA(_models("cpu", torch.float32)[0])
    kernel.setup(5)
    watch = Watch()
    with watch:
        kernel.sample(dict(kernel.initial_params))
    assert watch.created


@pytest.mark.cpu_only  # places its model on CUDA itself; the default device stays the CPU
@pytest.mark.skipif(not CUDA, reason="no CUDA")
@pytest.mark.parametrize("name", ["DMALA", "GWG", "AB-trace", "ACS", "DiscreteGibbs"])
def test_ising_moments_on_cuda(name):
    """Exactness on the GPU: marginals of a 3x3 Ising model against enumeration."""
    import itertools

    ising = _models("cuda", torch.float32)[0]
    weights = ising_weights(3)
    states = np.array(list(itertools.product([0.0, 1.0], repeat=9)))
    s_all = 2.0 * states - 1.0
    logp = 0.3 * np.einsum("ni,ij,nj->n", s_all, weights, s_all) + 0.2 * s_all.sum(1)
    probs = np.exp(logp - logp.max())
    probs /= probs.sum()
    pyro.set_rng_seed(0)
    mcmc = MCMC(KERNELS[name]((ising, None, None)), 3000, warmup_steps=500, disable_progbar=True)
    mcmc.run()
    x = mcmc.get_samples(group_by_chain=True)["x"]
    assert x.device.type == "cuda"
    assert_mc_close(2.0 * x.cpu().numpy().astype(np.float64) - 1.0, probs @ s_all)


@pytest.mark.cpu_only  # sets the default device itself
@pytest.mark.skipif(not CUDA, reason="no CUDA")
def test_default_device_cuda():
    """``torch.set_default_device("cuda")``: a model written without devices runs on CUDA."""
    previous = torch.get_default_device()
    torch.set_default_device("cuda")
    try:

        def model():
            x = pyro.sample("x", dist.Bernoulli(torch.tensor(0.3)).expand([5]).to_event(1))
            pyro.factor("f", 0.5 * x.sum())

        pyro.set_rng_seed(0)
        mcmc = MCMC(px.DMALA(model), num_samples=200, warmup_steps=100, disable_progbar=True)
        mcmc.run()
        assert mcmc.get_samples()["x"].device.type == "cuda"
    finally:
        torch.set_default_device(previous)


EBM_METHODS = {
    "CD-1": lambda: ebm.CD(1),
    "PCD-gibbs": lambda: ebm.PCD(steps=2),
    "UCD": lambda: ebm.UCD(max_time=50),
    "PCD-DMALA": lambda: ebm.PCD(sampler=px.DMALA(step_size=0.5), steps=2),
    "PCD-ACS": lambda: ebm.PCD(
        sampler=px.ACS(steps_per_cycle=2, alpha_max=1.0, alpha_min=0.1, beta_schedule=[0.9, 0.5]),
        steps=2,
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", list(EBM_METHODS))
def test_ebm_training_follows_the_energys_device_and_dtype(method, device):
    """``pyro_ext.ebm.train`` on a float64 RBM placed on ``device`` with the data given as a
    NumPy array: the data follow the parameters, which stay float64 there, and no tensor is
    created without a device."""
    torch.manual_seed(0)
    rbm = ebm.RBM(16, 4, scale=0.1).to(device=device, dtype=torch.float64)
    watch = Watch()
    with watch:
        result = ebm.train(
            rbm,
            bars_and_stripes(),
            optimizer=torch.optim.SGD(rbm.parameters(), lr=0.01),
            method=EBM_METHODS[method](),
            num_steps=3,
            batch_size=8,
            progress_bar=False,
        )
    assert not watch.created, dict(watch.created)
    assert np.isfinite(result.history["energy_gap"]).all()
    for p in rbm.parameters():
        assert (p.device.type, p.dtype) == (device, torch.float64)


@pytest.mark.cpu_only  # sets torch's default device itself
def test_values_keep_their_device_under_another_default_device():
    """``torch.as_tensor`` of a tensor moves it to torch's default device when one is set (a
    model on the GPU, the default device left at "cpu", saw its values moved to the CPU at
    setup); the adapter's ``as_tensor`` keeps a tensor where it is."""
    from pyro_ext._target import as_tensor

    x = torch.ones(3)
    torch.set_default_device("meta")
    try:
        assert torch.as_tensor(x).device.type == "meta"  # the hazard
        assert as_tensor(x) is x
        assert as_tensor([1.0, 2.0]).device.type == "meta"  # non-tensors as torch does
    finally:
        torch.set_default_device(None)


@pytest.mark.skipif(not CUDA, reason="no CUDA")
@pytest.mark.cpu_only  # places its tensors itself
def test_setup_probes_leave_the_cuda_random_stream_as_it_was():
    """The setup's prior draws on a CUDA model fork CUDA's generator too: a kernel's draws do
    not depend on how many probes its setup made."""
    from pyro_ext._target import fork_rng

    torch.cuda.manual_seed(0)
    torch.rand(1, device="cuda")
    state = torch.cuda.get_rng_state()
    with fork_rng():
        torch.rand(100, device="cuda")
    assert torch.equal(torch.cuda.get_rng_state(), state)
