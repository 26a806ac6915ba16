# Two entry points (README): `make run` runs the default loop, `make test` runs the test suite.
# Both create the virtual environment on first use (torch's CPU build first, then the project).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: setup run test lint typecheck unit bench

setup: $(STAMP)

$(STAMP): pyproject.toml
	bash scripts/setup.sh $(VENV)
	touch $(STAMP)

run: setup
	$(VENV)/bin/rla run

lint: setup
	$(VENV)/bin/ruff check rla_core flows tasks tests benchmarks
	$(VENV)/bin/ruff format --check rla_core flows tasks tests benchmarks

typecheck: setup
	$(VENV)/bin/mypy rla_core

unit: setup
	$(PY) -m pytest -q

test: lint typecheck unit

bench: setup
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done
