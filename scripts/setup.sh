#!/usr/bin/env bash
# Creates the project's virtual environment on a fresh machine. Idempotent.
# torch goes first and pinned to the local CPU build: a bare `torch` requirement would pull CUDA wheels.
set -euo pipefail
venv="${1:-.venv}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
# ALFWorld engine (extra "alfworld"): fast-downward-textworld is a C++ sdist (~1.5-2.5 min to build on
# 2 cores; never --no-binary :all:, which compiles CMake too). Build its wheel in the background while
# the rest installs; it writes only to the wheel folder.
wheels="$venv/.alfworld-wheels"
mkdir -p "$wheels"
"$venv/bin/python" -m pip wheel -q --no-deps -w "$wheels" "fast-downward-textworld>=20.6.4" &
fd_build=$!
"$venv/bin/python" -m pip install -q "torch==2.13.0"
"$venv/bin/python" -m pip install -q -e ".[dev]"
wait "$fd_build"
"$venv/bin/python" -m pip install -q --find-links "$wheels" -e ".[dev,alfworld]"
# alfworld ships the ALFRED domain, grammar, floor plans and goal library; --no-deps keeps its
# simulator extras (ai2thor, opencv, torchvision ...) out.
"$venv/bin/python" -m pip install -q --no-deps "alfworld==0.4.2"
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
# Local desktops (rla_core/envs/desktop): X server, window manager, Debian python3 with PIL for screenshots.
command -v Xvfb >/dev/null 2>&1 || need+=(xvfb)
command -v jwm >/dev/null 2>&1 || need+=(jwm)
/usr/bin/python3 -c "import PIL.ImageGrab" >/dev/null 2>&1 || need+=(python3-pil)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" = "0" ]; then
    apt-get update -q && apt-get install -y -q "${need[@]}"
  else
    echo "install Debian's ${need[*]} (sudo apt-get install ${need[*]})" >&2
  fi
fi
