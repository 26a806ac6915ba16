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
# Debian packages:
#   chromium + chromium-driver  GUI setting (rla_core/envs/miniwob) and report screenshots, offline-capable;
#   bubblewrap                  the coding sandbox's filesystem/namespace isolation (rla_core/sandbox);
#   tmux                        terminal captures in tests of what an operator sees.
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" = "0" ]; then
    apt-get update -q && apt-get install -y -q "${need[@]}"
  else
    echo "install Debian's ${need[*]} (sudo apt-get install ${need[*]})" >&2
  fi
fi
