"""The benchmark harness (``benchmarks/_common.py``, ``python -m benchmarks``) and the scaling
benchmark's pieces on tiny targets, in this process (the scripts' smoke runs: ``-m slow`` in
``tests/test_examples.py``)."""

import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402
import _torch_operations  # noqa: E402
import device_step  # noqa: E402
import discs  # noqa: E402
import ising_ess  # noqa: E402
import scaling  # noqa: E402
import small_models  # noqa: E402
import user_suite  # noqa: E402


def test_write_section_replaces_its_block_and_names_command_and_machine(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nintro\n")
    _common.write_section("demo", "## Demo\n\n| a |\n| --- |\n| 1 |", path=doc)
    _common.write_section("other", "## Other\n\ntext", path=doc)
    _common.write_section("demo", "## Demo\n\n| a |\n| --- |\n| 2 |", path=doc)
    text = doc.read_text()
    assert text.count("<!-- demo:start -->") == 1 and "| 2 |" in text and "| 1 |" not in text
    assert text.index("intro") < text.index("demo:start") < text.index("other:start")
    block = text.split("<!-- demo:start -->")[1].split("<!-- demo:end -->")[0]
    assert "Command: `python" in block and "CPU cores" in block and "jax " in block


def test_targets_agree_and_ess_is_multichain():
    x = jnp.asarray(np.random.default_rng(0).integers(0, 2, 36), jnp.float32)
    dense = _common.dense_ising_log_density(jnp.asarray(_common.ising_coupling_matrix(6)))
    np.testing.assert_allclose(dense(x), _common.ising_log_density(x), rtol=1e-5)
    draws = np.random.default_rng(1).standard_normal((4, 500))
    assert 1000 < _common.ess(draws) < 3000  # independent draws: ESS about 2,000
    assert _common.ess(np.repeat(draws[:, :50], 10, axis=1)) < 400  # each value 10 times


def test_step_and_floor_timings_run_on_a_small_target():
    log_density = scaling.ising_log_density
    step = scaling.kernel_step_seconds(log_density, 16, 2, budget=0.01)
    floor = scaling.floor_step_seconds(log_density, 16, 2, budget=0.01)
    assert 0 < floor and 0 < step < 1


def test_operation_count_sees_forward_and_backward_operations():
    """The operations-per-step column of the Pyro rows: torch's dispatched operations."""
    import torch

    def advance(x):
        (grad,) = torch.autograd.grad((x * x).sum(), x)  # mul, sum; backward: ones, 2 muls...
        return (x + grad).detach().requires_grad_()

    count = _torch_operations.aten_operations_per_step(advance, torch.ones(3, requires_grad=True))
    assert count >= 5 and count == int(count)  # the backward pass is counted too
    assert _torch_operations.aten_operations_per_step(lambda t: t * 2 + 1, torch.ones(3)) == 2


@pytest.mark.slow
def test_device_step_loops_run_on_a_small_target():
    """The hand-written DMALA step and the MCMC difference timing of benchmarks/device_step.py
    (its GPU rows come from the same functions)."""
    hand = device_step.hand_dmala_step_seconds(scaling.ising_log_density, 16, 2, budget=0.01)
    mcmc, accept = device_step.mcmc_step_seconds(
        scaling.ising_log_density, 16, 2, draws=20, repeats=1
    )
    assert 0 < hand < 1 and 0 < mcmc < 1 and 0 <= accept <= 1


def test_sections_of_an_accelerator_run_are_kept_apart(tmp_path, monkeypatch):
    doc = tmp_path / "benchmarks.md"
    _common.write_section("demo", "## Demo\n\ncpu rows", path=doc)
    monkeypatch.setattr(_common, "accelerator", lambda: "gpu: NVIDIA H100 80GB HBM3")
    _common.write_section("demo", "## Demo\n\ngpu rows", path=doc)
    text = doc.read_text()
    assert "cpu rows" in text and "gpu rows" in text
    assert "<!-- demo-gpu:start -->" in text and "## Demo (gpu: NVIDIA H100 80GB HBM3)" in text


@pytest.mark.slow
def test_gibbs_comparison_runs_on_a_small_lattice():
    model, log_density = ising_ess.ising_model(3)
    for name in ("DMALA", "DiscreteGibbs"):
        energy, seconds = ising_ess.energy_run(name, model, log_density, 20, 0)
        assert seconds > 0 and np.asarray(energy).shape[0] == ising_ess.CHAINS


def _record(ess: float, per_second: float) -> dict:
    return {"ess": ess, "ess_per_second": per_second}


def test_ratio_rule_prints_a_number_only_from_enough_ess_or_seeds():
    rule = _common.ratio_under_rule
    reached = rule([_record(500, 6.0)], [_record(450, 2.0)])
    assert reached["valid"] and reached["text"] == "3x"
    short = rule([_record(500, 6.0)] * 3, [_record(27, 0.4)] * 3)  # the old 15x: ESS 27
    assert not short["valid"] and "x" not in short["text"] and "27 < 400" in short["text"]
    ratios = [1.0, 2.0, 3.0, 4.0, 10.0]
    seeds = rule([_record(500, r) for r in ratios], [_record(100, 1.0)] * 5)
    assert seeds["valid"] and (seeds["median"], seeds["low"], seeds["high"]) == (3.0, 1.0, 10.0)
    assert seeds["text"] == "3x (1x-10x, 5 seeds, min ESS 100)"


def test_run_until_ess_grows_the_run_until_the_target_or_the_budget():
    rng = np.random.default_rng(0)
    calls = []

    def run(draws, seed):  # independent draws: ESS about 4 * draws; one second per 100 draws
        calls.append(draws)
        return rng.standard_normal((4, draws)), draws / 100

    record = _common.run_until_ess(run, 10, 0, target=400, budget_seconds=100)
    assert record["reached"] and record["ess"] >= 400 and calls[0] == 10 and len(calls) > 1
    calls.clear()
    record = _common.run_until_ess(run, 10, 0, target=400, budget_seconds=0.12)
    assert not record["reached"] and calls == [10]  # 1.5 times the run would not fit 0.12 s
    calls.clear()
    record = _common.run_until_ess(run, 10, 0, target=400, budget_seconds=0.3)
    assert not record["reached"] and calls == [10, 27]  # grown to 90% of the budget, no more


def test_discs_models_match_their_definitions_written_out_site_by_site():
    """Ising and Potts (open boundaries), the factorial HMM: the vectorised log densities
    against loops over sites and neighbour pairs."""
    rng = np.random.default_rng(3)
    ising = discs.make_target("ising", 4, seed=1)
    field = discs.lattice_field(4, None, np.random.default_rng(1))
    x = rng.integers(0, 2, (4, 4))
    s = 2 * x - 1
    pairs = sum(s[i, j] * s[i + 1, j] for i in range(3) for j in range(4))
    pairs += sum(s[i, j] * s[i, j + 1] for i in range(4) for j in range(3))
    expected = 0.5 * pairs - sum(field[i, j] * s[i, j] for i in range(4) for j in range(4))
    np.testing.assert_allclose(ising.log_density(jnp.asarray(x, jnp.float32)), expected, rtol=1e-5)
    assert (field[1:3, 1:3] > -1.01).all() and (field[0, 0] < 1.01)  # disc inside, +0.5 there

    potts = discs.make_target("potts", 3, seed=2)
    field = discs.lattice_field(3, 4, np.random.default_rng(2))
    labels = rng.integers(0, 4, (3, 3))
    agree = sum(labels[i, j] == labels[i + 1, j] for i in range(2) for j in range(3))
    agree += sum(labels[i, j] == labels[i, j + 1] for i in range(3) for j in range(2))
    expected = agree - sum(field[i, j, labels[i, j]] for i in range(3) for j in range(3))
    one_hot = potts.encode(jnp.asarray(labels))
    np.testing.assert_allclose(potts.log_density(one_hot), expected, rtol=1e-5)
    np.testing.assert_array_equal(potts.labels(one_hot), labels)

    fhmm = discs.make_target("fhmm", (5, 2), seed=4)
    w, b, y = (fhmm.parameters[k] for k in ("w", "b", "y"))
    x = rng.integers(0, 2, (5, 2))
    expected = sum(np.log(0.1) if x[0, k] else np.log(0.9) for k in range(2))
    for step in range(1, 5):
        for k in range(2):
            expected += np.log(0.8) if x[step, k] == x[step - 1, k] else np.log(0.2)
    for step in range(5):
        mean = sum(x[step, k] * w[k] for k in range(2)) + b
        expected += -((y[step] - mean) ** 2) / (2 * 2.0**2)
    np.testing.assert_allclose(fhmm.log_density(jnp.asarray(x, jnp.float32)), expected, rtol=1e-5)

    reference = np.zeros((2, 2), int)
    labels = np.array([[[[0, 1], [1, 1]], [[0, 0], [0, 0]]]])  # (1 chain, 2 draws, 2, 2)
    np.testing.assert_array_equal(discs.hamming_to_reference(labels, reference), [[3, 0]])


@pytest.mark.slow
def test_small_models_hand_scan_samples_the_ising_model():
    """The plain loop the small-models rows compare against is DMALA: its draws of a 2x2
    dense Ising model (4 chains) give the exact mean energy by enumeration."""
    import jax

    log_density = small_models.model_log_density(small_models.target(2, dense=True))
    states = jnp.asarray([[(k >> i) & 1 for i in range(4)] for k in range(16)], jnp.float32)
    log_p = jax.vmap(log_density)(states)
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    exact = float(np.sum(p * -np.asarray(log_p)))
    draws = np.asarray(small_models.hand_scan(log_density, 4, 4, 4000)(jax.random.key(0)))
    assert set(np.unique(draws)) <= {0.0, 1.0}
    # every 10th step kept, as MCMC(..., thinning=10): (400 draws, chains); the first 1,000
    # steps left out (the slice of 1,000 draws this test took before the thinning was empty)
    energy = -np.asarray(jax.vmap(jax.vmap(log_density))(jnp.asarray(draws)))
    assert energy.shape == (400, 4)
    kept = energy[100:]
    batches = kept.reshape(30, -1).mean(1)  # batch means over 10 draws x 4 chains
    error = batches.std(ddof=1) / np.sqrt(len(batches))
    assert abs(kept.mean() - exact) < 5 * error + 1e-3, (kept.mean(), exact)


def test_benchmark_command_lists_every_script():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    listed = [line.split()[0] for line in out.stdout.splitlines()]
    scripts = [p.stem for p in (ROOT / "benchmarks").glob("*.py") if not p.stem.startswith("_")]
    scripts.remove("user_models")  # the suite's models and answers, run by user_suite
    external = ["bnn_width", "pyro_bnn_width"]  # examples run as benchmarks (EXTERNAL)
    assert sorted(listed) == sorted(scripts + external)


@pytest.mark.slow
def test_benchmark_command_quick_run_of_the_ebm_plate_gibbs_comparison():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "ebm_plate_gibbs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("| PlateGibbs |") == 2  # a JAX row and a torch row


@pytest.mark.slow
def test_benchmark_command_quick_run_of_the_scaling_study():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "scaling"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "exit 0" in out.stdout and "| target | d | chains |" in out.stdout


@pytest.mark.slow
def test_user_suite_rows_and_table_on_a_small_model():
    """The user-model suite's measurement of one model in its smoke mode, and its table
    (13 s: behind -m slow for the default suite's time; the ratio rule it prints is tested
    by default above)."""
    from benchmarks import user_models

    entry = user_models.MODELS["ising"]
    rows, size, method = user_suite.model_rows(
        entry, quick=True, max_seconds=30, only=[entry.recommended, "DiscreteGibbs"]
    )
    assert [r["sampler"] for r in rows] == [entry.recommended, "DiscreteGibbs"]
    assert all(r["seconds"] > 0 and r["ess"] > 0 and np.isfinite(r["z"]) for r in rows)
    assert rows[1]["ratio"] == pytest.approx(1.0) or rows[1]["z"] >= 4
    lines = user_suite.table({"ising": (rows, size, method)})
    assert lines[2].startswith("| ising | 5 |") and "transfer matrices" in method
    assert f"{entry.recommended} *" in lines[2]
    assert "none: min ESS" in lines[2] or rows[1]["z"] >= 4  # 30 draws: no ratio under the rule


@pytest.mark.slow
def test_benchmark_command_quick_run_of_the_user_suite():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "user_suite"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # the quick run prints the table it would write (its header as in benchmarks/user_suite.py)
    assert "exit 0" in out.stdout and "| model | size | sampler | seconds |" in out.stdout


@pytest.mark.slow
def test_benchmark_command_quick_run_of_discs_and_ising_ess():
    """Smoke runs of the DISCS models and the Ising ESS comparison (nothing written)."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "discs", "ising_ess"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("exit 0") == 2
    assert "| factorial HMM L = 6, K = 3 | DiscreteGibbs |" in out.stdout
    assert "| 10x10, J = 0.4407 | DiscreteGibbs |" in out.stdout
