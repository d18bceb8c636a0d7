#!/usr/bin/env bash
# The newest-stack CI job: what a new user on Python 3.12 gets from
# `pip install -e '.[numpyro,arviz,examples,test]'` with no constraints file (today ArviZ 1.x,
# the newest jax and numpy), in its own .venv-newest; no torch, so the Pyro side is skipped.
# Runs the core, NumPyro and ArviZ tests and the examples that need no torch.
set -euo pipefail
cd "$(dirname "$0")/.."
find_python() {  # the first candidate that runs and is 3.12 (a pyenv shim may not run)
  local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}" candidate
  for candidate in python3.12 $(ls -d "$pyenv_root"/versions/3.12*/bin/python3.12 2>/dev/null | sort -rV); do
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      command -v "$candidate"
      return
    fi
  done
}
PYTHON="${PYTHON312:-$(find_python)}"
if [ -z "$PYTHON" ]; then
  echo "ci_newest: no Python 3.12 found (set PYTHON312=/path/to/python3.12)" >&2
  exit 1
fi
if [ ! -x .venv-newest/bin/python ]; then
  "$PYTHON" -m venv .venv-newest
fi
.venv-newest/bin/python -m pip install --quiet --upgrade pip
.venv-newest/bin/python -m pip install --quiet -e ".[numpyro,arviz,examples,test]"
.venv-newest/bin/python - <<'PY'
from importlib.metadata import version
names = ["jax", "jaxlib", "numpyro", "numpy", "arviz", "arviz-base", "arviz-stats", "xarray"]
print("ci_newest resolved:", ", ".join(f"{n} {version(n)}" for n in names))
PY
TESTS=(tests/core tests/numpyro_ext tests/test_examples.py tests/test_bad_inputs.py)
.venv-newest/bin/python -m pytest -q -n auto "${TESTS[@]}"
.venv-newest/bin/python -m pytest -q -m examples tests/test_examples.py tests/test_docs.py
