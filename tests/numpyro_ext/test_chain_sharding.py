"""Vectorised chains are split over all local devices (here: two host CPU devices via XLA's
host-device-count flag, in a subprocess) with the draws of the same run on one device
(``shard_chains = False``); a chain count that does not divide stays on one device with a
warning."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys, warnings
import jax, numpy as np, numpyro, numpyro.distributions as dist
from numpyro.infer import MCMC
import numpyro_ext as nx

def discrete():
    x = numpyro.sample("x", dist.Bernoulli(0.3).expand([6]))
    numpyro.factor("coupling", 0.5 * (x[:-1] * x[1:]).sum())

def continuous():
    numpyro.sample("y", dist.Normal(0, 1).expand([3]))

out = {"devices": len(jax.devices())}
kernels = {"dmala": lambda: nx.DMALA(discrete),
           "esh": lambda: nx.ESH(continuous, step_size=0.3, num_steps=5)}
for name in sys.argv[1:]:
    make = kernels[name]
    for shard in (True, False):
        kernel = make()
        kernel.shard_chains = shard
        mcmc = MCMC(kernel, num_warmup=20, num_samples=30, num_chains=4,
                    chain_method="vectorized", progress_bar=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning when the chains divide
            mcmc.run(jax.random.key(0))
        label = name if shard else name + "_one"
        out[label] = {k: np.asarray(v).tolist() for k, v in mcmc.get_samples(True).items()}
        out[label + "_devices"] = len(jax.tree.leaves(mcmc.last_state)[0].sharding.device_set)
with warnings.catch_warnings(record=True) as caught:  # a chain count that does not divide
    warnings.simplefilter("always")
    mcmc = MCMC(nx.DMALA(discrete), num_warmup=2, num_samples=2, num_chains=3,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(0))
out["odd_devices"] = len(jax.tree.leaves(mcmc.last_state)[0].sharding.device_set)
out["warnings"] = [str(w.message) for w in caught]
print(json.dumps(out))
"""


def run(devices: int, *kernels: str) -> tuple[dict, str]:
    # host CPU devices, whatever accelerator the machine also has
    env = dict(
        os.environ,
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
    )
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, *kernels], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_vectorised_chains_split_over_two_devices_with_the_one_device_draws():
    two, stderr = run(2, "dmala")
    assert two["devices"] == 2
    assert two["dmala_devices"] == 2 and two["dmala_one_devices"] == 1
    # the same random numbers per chain: the same draws
    assert two["dmala"] == two["dmala_one"]
    assert two["odd_devices"] == 1
    assert any(
        "num_chains=3 must be multiples of the 2 local devices" in w for w in two["warnings"]
    )
    assert "rematerialization" not in stderr  # no value moved to one device inside the loop


@pytest.mark.slow
def test_esh_chains_split_over_two_devices():
    two, _ = run(2, "esh")
    assert two["esh_devices"] == 2 and two["esh_one_devices"] == 1
    # equal up to the order of floating-point sums
    np.testing.assert_allclose(two["esh"]["y"], two["esh_one"]["y"], atol=1e-5)
