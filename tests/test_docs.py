"""The documentation site builds in strict mode (a broken link, a missing page or a docstring
whose parameters no longer match its signature fails), and its home page is the README."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# the site's tests need the docs extra; the tutorial's code does not (the newest-stack CI job
# runs it without mkdocs)
needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None
    or importlib.util.find_spec("mkdocstrings_handlers") is None,
    reason="needs the docs extra (mkdocs, mkdocstrings-python)",
)


def home_page() -> str:
    """docs/index.md as generated from README.md (links made relative to docs/)."""
    text = (ROOT / "README.md").read_text()
    text = text.replace("](docs/", "](")
    return "<!-- generated from README.md by tests/test_docs.py; edit README.md -->\n" + text


@needs_mkdocs
def test_home_page_is_the_readme():
    expected = home_page()
    if os.environ.get("DK_WRITE_DOCS"):  # DK_WRITE_DOCS=1 pytest tests/test_docs.py
        (ROOT / "docs" / "index.md").write_text(expected)
    assert (ROOT / "docs" / "index.md").read_text() == expected, (
        "docs/index.md is out of date: run DK_WRITE_DOCS=1 pytest tests/test_docs.py"
    )


@needs_mkdocs
def test_site_builds_in_strict_mode(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    reference = (tmp_path / "api" / "numpyro_ext" / "index.html").read_text()
    assert "DMALA" in reference and "shard_chains" in reference
    # the gallery pages include the examples' code itself, not a copy that could drift
    gallery = (tmp_path / "gallery" / "binary_bnn" / "index.html").read_text()
    assert "network_output" in gallery and "--8&lt;--" not in gallery


@pytest.mark.examples  # the tutorial's code is an example too: it runs with them (-m examples)
def test_tutorial_code_runs_in_order(tmp_path, monkeypatch):
    """Every python block of docs/tutorial.md, in order, in one namespace (figures go to a
    temporary folder)."""
    import re

    text = (ROOT / "docs" / "tutorial.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile("\n".join(blocks), "docs/tutorial.md", "exec"), scope)
    assert (tmp_path / "tutorial_trace.png").exists() and (tmp_path / "tutorial_ess.png").exists()
