"""The JAX EBM trainer splits its chains over several devices (here: two host CPU devices via
XLA's host-device-count flag, in a subprocess) and gets the single-device result."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, warnings
import jax, numpy as np, optax
from numpyro_ext import ebm
from discrete_kernels.ebm import bars_and_stripes

data, rbm = bars_and_stripes(), ebm.RBM(16, 8)
methods = {
    "pcd_site_gibbs": ebm.PCD(sampler=ebm.SiteGibbs(), steps=2),
    "pcd_gibbs": ebm.PCD(steps=1),
}
out = {"devices": len(jax.devices())}
for name, method in methods.items():
    r = ebm.train(rbm, rbm.init(jax.random.key(0)), data, optimizer=optax.adam(0.01),
                  method=method, num_steps=10, batch_size=40, rng_key=jax.random.key(1),
                  progress_bar=False)
    out[name] = np.asarray(r.params.weights).tolist()
    if r.method_state is not None:
        out[name + "_buffer_devices"] = len(r.method_state.sharding.device_set)
"""


# in the two-device process only: a batch that does not split evenly stays on one device
WARNING_CASE = """
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ebm.train(rbm, rbm.init(jax.random.key(0)), data, optimizer=optax.sgd(0.01),
              method=ebm.CD(1), num_steps=2, batch_size=41, rng_key=jax.random.key(1),
              progress_bar=False)
out["warnings"] = [str(w.message) for w in caught]
"""


def run_here() -> dict:
    """The same script in this process (one device)."""
    scope: dict = {}
    exec(SCRIPT, scope)
    return json.loads(json.dumps(scope["out"]))


def run(devices: int) -> dict:
    # host CPU devices, whatever accelerator the machine also has
    env = dict(
        os.environ,
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
    )
    code = SCRIPT + WARNING_CASE + "\nprint(json.dumps(out))\n"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# the sharding helper it uses is covered by default in test_chain_sharding.py (the kernels'
# vectorised chains); this end-to-end run of the trainer is behind slow for the suite's time
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_chains_are_split_over_two_devices_with_the_one_device_result():
    one, two = run_here(), run(2)
    assert one["devices"] == 1 and two["devices"] == 2
    assert two["pcd_site_gibbs_buffer_devices"] == two["pcd_gibbs_buffer_devices"] == 2
    for name in ("pcd_site_gibbs", "pcd_gibbs"):
        # the same random numbers; only the order of floating-point sums differs
        np.testing.assert_allclose(two[name], one[name], atol=1e-5)
    assert any("multiples of the 2 local devices" in w for w in two["warnings"])
