"""The examples (default run) and the benchmarks (``-m slow``) run end to end, short
settings."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


SLOW = pytest.mark.slow  # benchmarks' smoke runs: `pytest -m slow`


@pytest.mark.parametrize(
    "script",
    [
        "examples/binary_bnn.py",
        pytest.param("examples/variable_selection.py", marks=SLOW),
        # the code of these is tested directly (ACS/AB tests, tests/*/test_ebm.py);
        # their smoke runs are behind slow to keep the default run under ten minutes
        pytest.param("examples/multimodal_acs.py", marks=SLOW),
        pytest.param("examples/ebm_bars_and_stripes.py", marks=SLOW),
        pytest.param("examples/ebm_ising.py", marks=SLOW),
        pytest.param("examples/ebm_digits.py", marks=SLOW),
        # Pyro compositions with NUTS and ESH run by default in the peer-model and ESH tests
        pytest.param("examples/pyro_mixture.py", marks=SLOW),
        pytest.param("benchmarks/scaling.py", marks=SLOW),
        pytest.param("benchmarks/ising_numpyro.py", marks=SLOW),
        pytest.param("benchmarks/ising_pyro.py", marks=SLOW),
        pytest.param("benchmarks/mixed_gibbs.py", marks=SLOW),
        pytest.param("benchmarks/rbm_acs.py", marks=SLOW),
        pytest.param("benchmarks/ab_targets.py", marks=SLOW),
        pytest.param("benchmarks/esh_targets.py", marks=SLOW),
        pytest.param("benchmarks/ucd_couplings.py", marks=SLOW),
    ],
)
def test_script_runs(script):
    args = [sys.executable, str(ROOT / script), "--quick"]
    if script.endswith("ising_numpyro.py"):
        args += ["--repeats", "1"]
    if script.endswith("binary_bnn.py"):
        args += ["--num-chains", "1"]  # sequential chains compile once each: one is enough
    env = dict(os.environ, MPLBACKEND="Agg")
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "|" in out.stdout or "wrote" in out.stdout  # printed its table or wrote its figure
