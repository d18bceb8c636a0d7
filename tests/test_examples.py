"""Every example runs end to end in its reduced mode (``-m examples``, which CI runs after the
default run: ``.ci/run``), and the benchmarks' smoke runs (``-m slow``)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SLOW = pytest.mark.slow  # benchmarks' smoke runs: `pytest -m slow`
EXAMPLE = pytest.mark.examples  # the gallery's reduced mode: `pytest -m examples`

#: every script in examples/ (a test below checks that none is missing)
EXAMPLES = [
    "examples/binary_bnn.py",
    "examples/pyro_binary_bnn.py",
    "examples/sg_binary_bnn.py",
    "examples/spike_and_slab.py",
    "examples/variable_selection.py",
    "examples/gaussian_mixture.py",
    "examples/pyro_mixture.py",
    "examples/change_point.py",
    "examples/potts.py",
    "examples/ising.py",
    "examples/multimodal_acs.py",
    "examples/ebm_bars_and_stripes.py",
    "examples/ebm_ising.py",
    "examples/ebm_digits.py",
]
BENCHMARKS = [
    "benchmarks/scaling.py",
    "benchmarks/ising_numpyro.py",
    "benchmarks/ising_pyro.py",
    "benchmarks/mixed_gibbs.py",
    "benchmarks/rbm_acs.py",
    "benchmarks/acs_bnn.py",
    "benchmarks/ab_targets.py",
    "benchmarks/esh_targets.py",
    "benchmarks/ucd_couplings.py",
    "benchmarks/ucd_cost.py",
    "benchmarks/ucd_noise.py",
    "benchmarks/ebm_pcd_kernels.py",
]
EXTRA_ARGS = {
    "examples/binary_bnn.py": ["--dataset", "both"],
    "examples/pyro_binary_bnn.py": ["--dataset", "both"],
    "benchmarks/ising_numpyro.py": ["--repeats", "1"],
}
HAS_TORCH = importlib.util.find_spec("torch") is not None
#: scripts that need torch (Pyro): they skip where it is absent, as in the newest-stack CI job
#: (scripts/ci_newest.sh), which installs no torch; change_point.py runs its NumPyro half there
TORCH_EXAMPLES = {"examples/pyro_binary_bnn.py", "examples/pyro_mixture.py"}
NEEDS_TORCH = pytest.mark.skipif(not HAS_TORCH, reason="needs torch (Pyro), not installed")
if not HAS_TORCH:
    EXTRA_ARGS["examples/change_point.py"] = ["--ppl", "numpyro"]
#: scripts that write their figure to --out (the others write under examples/figures/)
TAKES_OUT = {s for s in EXAMPLES if not Path(s).name.startswith("ebm_")}


def test_every_example_is_tested():
    scripts = {f"examples/{p.name}" for p in (ROOT / "examples").glob("*.py")}
    assert scripts - {"examples/bnn_data.py"} == set(EXAMPLES)


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(s, marks=[EXAMPLE, NEEDS_TORCH] if s in TORCH_EXAMPLES else EXAMPLE)
        for s in EXAMPLES
    ]
    + [pytest.param(s, marks=SLOW) for s in BENCHMARKS],
)
def test_script_runs(script, tmp_path):
    args = [sys.executable, str(ROOT / script), "--quick", *EXTRA_ARGS.get(script, [])]
    if script in TAKES_OUT:
        args += ["--out", str(tmp_path)]
    env = dict(os.environ, MPLBACKEND="Agg")
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "|" in out.stdout or "wrote" in out.stdout  # printed its table or wrote its figure
    if script in TAKES_OUT:  # the reduced mode draws the figure too, so its code cannot rot
        assert list(tmp_path.glob("*.png")), "no figure written"
