"""The examples and benchmarks run end to end (short settings)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "script",
    [
        "examples/binary_bnn.py",
        "examples/variable_selection.py",
        "examples/multimodal_acs.py",
        "examples/pyro_mixture.py",
        "benchmarks/ising_numpyro.py",
        "benchmarks/rbm_acs.py",
    ],
)
def test_script_runs(script):
    args = [sys.executable, str(ROOT / script), "--quick"]
    if script.endswith("ising_numpyro.py"):
        args += ["--repeats", "1"]
    env = dict(os.environ, MPLBACKEND="Agg")
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "|" in out.stdout or "wrote" in out.stdout  # printed its table or wrote its figure
