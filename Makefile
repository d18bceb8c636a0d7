# Shortcuts; each assumes the environment of scripts/setup_env.sh (.venv).
PY := .venv/bin/python
export NO_MKDOCS_2_WARNING := 1

.PHONY: docs serve-docs test bench bench-quick

docs:  ## build the documentation site into site/ (strict: a broken reference fails)
	$(PY) -m mkdocs build --strict

serve-docs:
	$(PY) -m mkdocs serve

test:
	$(PY) -m pytest -q

bench:  ## regenerate docs/benchmarks.md (tens of minutes)
	$(PY) -m benchmarks

bench-quick:
	$(PY) -m benchmarks --quick
