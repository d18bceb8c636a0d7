#!/usr/bin/env bash
# The project's checks on a GPU machine, in one run that fits a short loan of the device:
#   1. the Pyro tests' CUDA cases (tests/pyro_ext, `-k cuda`: the CPU cases are CI's),
#   2. the device-step benchmark (benchmarks/device_step.py; its rows go to their own `-gpu`
#      block of docs/benchmarks.md, copied to OUT) and benchmarks/collected_fields.py,
#   3. the JAX tests (tests/core, tests/numpyro_ext) with what time is left.
# Logs are written as they go (`-v`), so a run cut by its time limit still names each result.
#
# Usage, in the repository root with the wheels of ../shared/gpu.md in .whl/:
#   bash scripts/gpu_check.sh OUT [SECONDS] [PYRO_TESTS...]
# SECONDS: the whole run's limit (default 540). PYRO_TESTS: the Pyro test files or folders to
# run (default tests/pyro_ext; their CUDA cases take about 8 minutes with 14 workers, more than
# one loan leaves next to the rest, so name the files an earlier run did not reach).
set -u
out=${1:?usage: bash scripts/gpu_check.sh OUT [SECONDS] [PYRO_TESTS...]}
total=${2:-540}
shift $(($# < 2 ? $# : 2))
pyro_tests=("${@:-tests/pyro_ext}")
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1

left() { echo $((total - SECONDS)); }
# SIGINT first: pytest then stops its workers and still prints the summary of what ran
run_for() { timeout -s INT -k 20 "$@"; }

{
  nvidia-smi -L
  python3 -c "import jax, torch; print(jax.__version__, jax.devices(), torch.__version__, torch.cuda.is_available())"
} > "$out/device.txt" 2>&1

run_for 180 python3 -m pytest "${pyro_tests[@]}" -k cuda -n 14 -v --tb=short -p no:cacheprovider \
  > "$out/pyro_cuda.log" 2>&1
echo "exit $? after ${SECONDS} s" >> "$out/pyro_cuda.log"

run_for 180 python3 benchmarks/device_step.py --budget 0.5 > "$out/device_step.log" 2>&1
echo "exit $? after ${SECONDS} s" >> "$out/device_step.log"
cp docs/benchmarks.md "$out/benchmarks.md"
# does NumPyro's per-field collection (one lax.cond per field and step) cost the MCMC step's
# extra 70 µs seen on an H200?
run_for 90 python3 benchmarks/collected_fields.py > "$out/collected_fields.log" 2>&1

if [ "$(left)" -gt 60 ]; then
  run_for "$(($(left) - 25))" python3 -m pytest tests/core tests/numpyro_ext -n 15 -v --tb=short \
    -p no:cacheprovider > "$out/jax.log" 2>&1
  echo "exit $? after ${SECONDS} s" >> "$out/jax.log"
fi
