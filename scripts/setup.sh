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
# The example environment plug-in (docs/environments.md): editable, no dependencies; the tests run it.
"$venv/bin/python" -m pip install -q --no-deps -e examples/numberline
# Reasoning Gym and TextArena as plug-ins (docs/environments.md): each library through its extra, then the
# plug-in package itself, editable; the tests run them.
"$venv/bin/python" -m pip install -q -e ".[reasoning-gym,textarena]"
"$venv/bin/python" -m pip install -q --no-deps -e plugins/reasoning_gym -e plugins/textarena
# verifiers environments as a plug-in (docs/environments.md): the library through its extra, the plug-in package,
# the tests' two verifiers environments (written as users write them), and the harness's packages pre-synced
# into <venv>/.verifiers-wheels so every harness resolves offline.
"$venv/bin/python" -m pip install -q -e ".[verifiers]"
"$venv/bin/python" -m pip install -q --no-deps -e plugins/verifiers \
  -e tests/plugins/verifiers_envs/sum -e tests/plugins/verifiers_envs/guess
"$venv/bin/python" -m rla_verifiers presync
# LiveCodeBench's own grader (NVIDIA's PyPI packaging of its lcb_runner), for the test that checks ours agrees
# with it (tests/coding/test_lcb_agreement.py); --no-deps keeps its model clients out: the grader needs numpy.
"$venv/bin/python" -m pip install -q --no-deps "nvidia-livecodebench==26.3"
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
# Local desktops for OSWorld (rla_core/envs/desktop, docs/osworld.md), ~60 MB without recommends:
#   xvfb jwm                       X server and window manager;
#   dbus-x11 at-spi2-core          session bus and the accessibility bus (AT-SPI);
#   python3-pil python3-pyatspi python3-xlib python3-tk
#                                  the in-desktop server's screenshots and accessibility tree, and what
#                                  pyautogui needs under Debian's python3 (tkinter for pymsgbox);
#   scrot                          pyscreeze (pyautogui.screenshot) grabs the X11 screen through it;
#   xdotool wmctrl xdg-utils       cursor position, window activate/close, opening files;
#   gnome-terminal libglib2.0-bin gsettings-desktop-schemas
#                                  the terminal OSWorld's /terminal reads, gsettings and its GNOME keys;
#   socat                          OSWorld's Chrome tasks expose the browser's debugging port 1337 as 9222
#                                  with it (`google-chrome` in a desktop is the chromium installed above).
# RLA_DESKTOP_APPS=1 adds the large applications of OSWorld's domains (~1 GB): scripts/setup_desktop_apps.sh.
desk=()
command -v Xvfb >/dev/null 2>&1 || desk+=(xvfb)
command -v jwm >/dev/null 2>&1 || desk+=(jwm)
command -v bwrap >/dev/null 2>&1 || desk+=(bubblewrap)
command -v dbus-launch >/dev/null 2>&1 || desk+=(dbus-x11)
[ -x /usr/libexec/at-spi-bus-launcher ] || desk+=(at-spi2-core)
/usr/bin/python3 -c "import PIL.ImageGrab" >/dev/null 2>&1 || desk+=(python3-pil)
/usr/bin/python3 -c "import pyatspi" >/dev/null 2>&1 || desk+=(python3-pyatspi)
/usr/bin/python3 -c "import Xlib" >/dev/null 2>&1 || desk+=(python3-xlib)
/usr/bin/python3 -c "import tkinter" >/dev/null 2>&1 || desk+=(python3-tk)
command -v scrot >/dev/null 2>&1 || desk+=(scrot)
command -v xdotool >/dev/null 2>&1 || desk+=(xdotool)
command -v wmctrl >/dev/null 2>&1 || desk+=(wmctrl)
command -v xdg-open >/dev/null 2>&1 || desk+=(xdg-utils)
command -v gnome-terminal >/dev/null 2>&1 || desk+=(gnome-terminal)
command -v gsettings >/dev/null 2>&1 || desk+=(libglib2.0-bin)
[ -f /usr/share/glib-2.0/schemas/org.gnome.desktop.screensaver.gschema.xml ] || desk+=(gsettings-desktop-schemas)
command -v socat >/dev/null 2>&1 || desk+=(socat)
if [ "${#desk[@]}" -gt 0 ]; then
  if [ "$(id -u)" = "0" ]; then
    apt-get update -q && apt-get install -y -q --no-install-recommends "${desk[@]}"
  else
    echo "install Debian's ${desk[*]} (sudo apt-get install --no-install-recommends ${desk[*]})" >&2
  fi
fi
if [ "${RLA_DESKTOP_APPS:-0}" = "1" ]; then
  bash "$(dirname "$0")/setup_desktop_apps.sh"
fi
# Desktops run as this unprivileged user in their bubblewrap sandboxes (uid 1000 `user` inside).
if [ "$(id -u)" = "0" ] && ! id rla-desktop >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin rla-desktop
fi
# OSWorld's desktop_env from PyPI WITHOUT its dependencies (they pin torch 2.5 / CUDA builds, transformers
# 4.35, numpy<2 ...); extra "osworld" has what its evaluator modules import and installs here with no CUDA
# wheels. easyocr (needs CUDA torch + torchvision) stays out: rla_core.envs.desktop.provider puts a
# placeholder in its place that raises, naming it, when an evaluator uses it.
"$venv/bin/python" -m pip install -q -e ".[osworld]"
"$venv/bin/python" -m pip install -q --no-deps "desktop-env==1.0.2"
# pyautogui and its pure-Python helpers for the desktops' python (Debian's /usr/bin/python3, which has
# python3-pil/pyatspi/xlib/tk): a --target folder that each sandbox mounts read-only (PYTHONPATH).
"$venv/bin/python" -m pip install -q --no-deps --target "$venv/desktop-site" --upgrade \
  "pyautogui==0.9.54" "pyscreeze==1.0.1" "pymsgbox==2.0.1" "pytweening==1.2.0" "pygetwindow==0.0.9" \
  "pyrect==0.2.0" "mouseinfo==0.1.3" "pyperclip==1.11.0"
