#!/usr/bin/env bash
# The applications of OSWorld's domains for local desktops (docs/osworld.md, "Applications"), from Debian,
# ~1 GB: opt-in (`RLA_DESKTOP_APPS=1 bash scripts/setup.sh`, or this script alone); the slow suite's CI path
# runs it (`.ci/run`). Idempotent: installs only what is missing.
#   libreoffice        Calc, Impress, Writer (libreoffice_* and most multi_apps tasks);
#   libreoffice-gtk3   LibreOffice's GTK 3 interface, as on OSWorld's Ubuntu image: without it LibreOffice
#                      draws its own X11 widgets and exposes no accessibility (AT-SPI) tree;
#   gimp vlc thunderbird
#                      the gimp, vlc and thunderbird domains.
set -euo pipefail
apps=()
command -v libreoffice >/dev/null 2>&1 || apps+=(libreoffice)
[ -e /usr/lib/libreoffice/program/libvclplug_gtk3lo.so ] || apps+=(libreoffice-gtk3)
for app in gimp vlc thunderbird; do command -v "$app" >/dev/null 2>&1 || apps+=("$app"); done
if [ "${#apps[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ]; then
  apt-get update -q && apt-get install -y -q --no-install-recommends "${apps[@]}"
else
  echo "install Debian's ${apps[*]} (sudo apt-get install --no-install-recommends ${apps[*]})" >&2
fi
