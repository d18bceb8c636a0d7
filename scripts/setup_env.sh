#!/usr/bin/env bash
# Create .venv (if missing) and install discrete-kernels with the pinned, tested stack.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first and pinned: an unpinned resolve would pull a multi-GB CUDA build
.venv/bin/python -m pip install --quiet -c constraints.txt torch==2.13.0
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".[all]"
