"""ruff (lint and format) and mypy are part of the test suite, so the test command checks style
and types too."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    if shutil.which("ruff") is None:
        try:
            import ruff  # noqa: F401
        except ImportError:
            pytest.fail("ruff is not installed; install with the test extra")
    return [sys.executable, "-m", "ruff"]


@pytest.mark.parametrize(
    "args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"]
)
def test_ruff(args):
    out = subprocess.run(_ruff() + args, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy():
    """The core and both adapters type-check (configuration in ``pyproject.toml``)."""
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.fail("mypy is not installed; install with the test extra")
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


_WITHOUT_JAX = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("jax", "jaxlib", "numpyro"):
            raise ImportError("not installed: " + name)
sys.meta_path.insert(0, Block())
import pytest
sys.exit(pytest.main(["-q", "--collect-only", "-p", "no:cacheprovider", "tests/pyro_ext"]))
"""


def test_pyro_side_needs_no_jax():
    """pyro_ext and its tests import and collect with JAX and NumPyro absent (tests that
    compare the two backends skip)."""
    pytest.importorskip("torch")  # a NumPyro-only install has no Pyro side to check
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_JAX], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
