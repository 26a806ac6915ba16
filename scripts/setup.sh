#!/usr/bin/env bash
# Creates the project's virtual environment on a fresh machine. Idempotent.
# torch goes first and pinned to the local CPU build: a bare `torch` requirement would pull CUDA wheels.
set -euo pipefail
venv="${1:-.venv}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "torch==2.13.0"
"$venv/bin/python" -m pip install -q -e ".[dev]"
# Sandbox user for model-written code (rla_core/sandbox): unprivileged, no home, no shell.
if [ "$(id -u)" = "0" ] && ! id rla-sandbox >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin rla-sandbox
fi
# GUI setting (rla_core/envs/miniwob): headless Chromium + chromedriver from Debian, offline-capable.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ]; then
    apt-get update -q && apt-get install -y -q chromium chromium-driver
  else
    echo "GUI setting: install Debian's 'chromium' and 'chromium-driver' (sudo apt-get install chromium chromium-driver)" >&2
  fi
fi
