"""Which OSWorld tasks a local desktop can run: reasons a task is *unavailable*, checked before it is run.

A local desktop has no root (``sudo`` is a stub that fails), no network (its own network namespace), no
init system, no sound server, jwm instead of GNOME Shell, and only the applications installed on the host.
A task whose set-up, evaluator (its ``postconfig`` and getters included) or instruction needs any of that is
reported unavailable with its reasons and never run — running it would score a broken set-up, not the
policy.

What is checked, from the task's JSON alone (``config``, ``evaluator``, ``instruction``, ``proxy``):

* set-up steps ``desktop_env`` performs over the network or that neither it nor we implement
  (:data:`UNSUPPORTED_SETUP`);
* ``download`` steps and ``cloud_file`` getters whose file is not in the local cache — the paths
  ``desktop_env`` reads before downloading (``<cache>/<task id>/<uuid5(url)>_<name>``, ``<cache>/<task id>/<dest>``;
  the task id ``desktop_env`` sees is our task key, :func:`rla_core.envs.osworld.tasks.task_key`);
* what the commands of set-up steps, ``postconfig`` steps and getters need, and what the instruction asks
  for: one declared rule per need (:data:`NEEDS`: root, systemd, installing software, GNOME Shell, a sound
  server, conda, an application that is not installed);
* a global shortcut of OSWorld's Ubuntu image (:data:`IMAGE_SHORTCUTS`) that a step presses
  (``pyautogui.hotkey(…)``, normalised to ``"ctrl+alt+t"``) and the desktop does not bind
  (:data:`rla_core.envs.desktop.parity.GLOBAL_SHORTCUTS`);
* applications named in ``related_apps`` (:data:`RELATED_APPS`) and programs a ``launch`` step starts that
  are not installed on the host (the sandbox mounts the host's ``/usr``;
  ``google-chrome`` is the sandbox's wrapper around Debian's Chromium: :data:`~rla_core.envs.desktop.desktop.SANDBOX_COMMANDS`);
* getters that read live web pages (:data:`NETWORK_GETTERS`) or an application's desktop entry
  (:data:`APPLICATION_GETTERS`), and metrics whose package is a placeholder here (:data:`UNAVAILABLE_METRICS`).

Every reason has a *category* (:class:`Reason`), the short name ``python -m rla_core.envs.osworld.cache check``
counts. Passing these checks is necessary, not sufficient: a task is proven only by playing it.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rla_core.envs.desktop.desktop import SANDBOX_COMMANDS
from rla_core.envs.desktop.parity import GLOBAL_SHORTCUTS


@dataclass(frozen=True)
class Reason:
    """Why a task cannot run here: ``category`` (a short name, counted) and ``text`` (field and detail)."""

    category: str
    text: str

    def __str__(self) -> str:
        return self.text


# Categories, one declaration each (the table of `cache check` counts tasks per category).
NETWORK_FILES = "files to download (not in the cache)"
NETWORK = "network (live sites, accounts, proxy)"
NOT_IMPLEMENTED = "set-up type not implemented"
ROOT = "root (sudo)"
SYSTEMD = "systemd"
INSTALLING = "installing software"
GNOME_SHELL = "GNOME Shell"
SOUND = "sound server (pulseaudio)"
CONDA = "conda"
APPLICATION = "application not installed"
SHORTCUT = "global shortcut not bound"
OCR = "OCR metric (easyocr)"

UNSUPPORTED_SETUP: dict[str, tuple[str, str] | None] = {
    "googledrive": (NETWORK, "uses a Google Drive account over the network"),
    "login": (NETWORK, "logs in to a live website"),
    "update_browse_history": (NETWORK, "downloads its browsing-history database template from Google Drive"),
    "chrome_open_tabs": None,  # only when it opens non-local URLs (checked below)
    "change_wallpaper": (GNOME_SHELL, "changes the GNOME wallpaper (no GNOME Shell and no wallpaper endpoint here)"),
    "tidy_desktop": (NOT_IMPLEMENTED, "is not implemented by desktop_env itself"),
    "act": (NOT_IMPLEMENTED, "is not implemented by desktop_env itself"),
    "replay": (NOT_IMPLEMENTED, "is not implemented by desktop_env itself"),
}  # fmt: skip
NETWORK_GETTERS = {
    "info_from_website": "reads a live web page",
    "googledrive_file": "downloads from Google Drive",
    "pdf_from_url": "downloads a PDF from a URL",
}
UNAVAILABLE_METRICS = {"compare_image_text": "needs easyocr (CUDA torch/torchvision), not installed here"}
APPLICATION_GETTERS = {"default_video_player": "vlc"}
"""Getters whose answer names an application's desktop entry, which exists only where it is installed
(``default_video_player`` reads ``xdg-mime``'s default for video files, ``vlc.desktop`` on OSWorld's image)."""

IMAGE_SHORTCUTS = {
    "ctrl+alt+t": "opens a terminal",
    "alt+f10": "maximises the focused window",
}
"""The global shortcuts of OSWorld's Ubuntu image that official tasks press in a set-up or ``postconfig``
step (GNOME binds them, not an application). The other keys official steps press (``ctrl+s``, ``ctrl+q``,
``f11``, ``shift+ctrl+e``) are the focused application's own shortcuts and work wherever it runs."""


def _words(*names: str) -> re.Pattern[str]:
    """A command word: at the start, after a separator or a quote, ended by a separator, a quote or the end
    (a path component such as ``~/Desktop/service`` is no command)."""
    return re.compile(rf"(?:^|[\s;&|(`'\"])(?P<prog>{'|'.join(map(re.escape, names))})(?=[\s;&|)`'\"]|$)")


@dataclass(frozen=True)
class Need:
    """One thing a local desktop lacks, found by ``pattern`` in a command (or, with ``in_instruction``, in the
    instruction). With ``program``, the match's group ``prog`` names a program and the need holds only when
    it is not installed (:func:`installed`); ``{prog}`` in ``reason`` is replaced by it. ``unless``: a match
    of this pattern in the same text cancels the need."""

    category: str
    reason: str
    pattern: re.Pattern[str]
    program: bool = False
    in_instruction: bool = False
    unless: re.Pattern[str] | None = None


APPLICATIONS = ("gnome-terminal", "nautilus", "code", "thunderbird", "vlc", "gimp", "libreoffice", "soffice")
"""Applications of OSWorld's image that official set-up, ``postconfig`` and getter commands run by name."""

RELATED_APPS = {
    **dict.fromkeys(("chrome", "browser"), "google-chrome"),
    **dict.fromkeys(("libreoffice", "libreoffice_calc", "libreoffice_impress", "libreoffice_writer", "calc",
                     "writer"), "libreoffice"),
    **dict.fromkeys(("vscode", "vs_code"), "code"),
    **dict.fromkeys(("terminal", "gnome-terminal"), "gnome-terminal"),
    "gimp": "gimp", "thunderbird": "thunderbird", "vlc": "vlc",
}  # fmt: skip
"""The program of each application name official tasks give in ``related_apps`` (lower case, ``_`` for
spaces); a task about an application that is not installed is unavailable even when its set-up starts
nothing (an ``infeasible`` task about GIMP asks the agent to find out, in GIMP, that it cannot be done).
Names that are no program (``os``, ``pdf``, ``image``) are not listed."""

NEEDS: tuple[Need, ...] = (
    Need(ROOT, "needs root (sudo is a stub that fails in a desktop)", _words("sudo", "su", "pkexec")),
    Need(SYSTEMD, "needs systemd (no init system in a desktop)",
         _words("systemctl", "service", "timedatectl", "loginctl", "hostnamectl", "journalctl")),
    Need(INSTALLING, "installs software (no root and no network in a desktop)",
         re.compile(r"\b(?:apt|apt-get|snap)\s+(?:-\S+\s+)*(?:install|update|upgrade|remove|purge)\b"
                    r"|\bdpkg\s+-i\b|\bpip3?\s+install\b|--install-extension\b")),
    Need(INSTALLING, "checks that {prog!r} is installed, which it is not (installing it needs root and network)",
         re.compile(r"\bwhich\s+(?P<prog>[\w.+-]+)"), program=True),
    Need(INSTALLING, "asks to install software (no network in a desktop)", re.compile(r"\binstall(?:ing)?\b", re.I),
         in_instruction=True, unless=re.compile(r"\bunpacked\b|\blocal\b|\blocated\b|\.vsix\b", re.I)),
    Need(GNOME_SHELL, "needs GNOME Shell (favourites, extensions): the desktop runs jwm",
         re.compile(r"\borg\.gnome\.shell\b|\bgnome-extensions\b|\bgnome-shell\b")),
    Need(SOUND, "needs a sound server (no pulseaudio in a desktop)", _words("pulseaudio", "pactl", "pacmd", "amixer")),
    Need(CONDA, "runs {prog!r}, which is not installed", _words("conda"), program=True),
    Need(APPLICATION, "runs {prog!r}, which is not installed", _words(*APPLICATIONS), program=True),
)  # fmt: skip
"""One rule per need (see the module docstring); read in order, each need reported once per field."""

_LOCAL_URL = re.compile(r"^(file:|about:|chrome:|data:|https?://(localhost|127\.0\.0\.1)([:/]|$))")
_HOTKEY = re.compile(r"\bhotkey\s*\(([^()]*)\)")
_COMMAND_STEPS = ("execute", "command", "launch", "execute_with_verification")
_COMMAND_GETTERS = ("vm_command_line", "vm_command_error")


def _as_list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else [x]


def _command_text(command: Any) -> str:
    return command if isinstance(command, str) else " ".join(map(str, command or []))


def _program(command: Any, shell: bool) -> str | None:
    if isinstance(command, list) and command and not shell:
        return str(command[0])
    try:
        words = shlex.split(_command_text(command))
    except ValueError:
        return None
    return words[0] if words else None


def installed(program: str) -> bool:
    """Whether a desktop has ``program``: the sandbox's own commands, else the host's PATH (it mounts ``/usr``)."""
    provided = SANDBOX_COMMANDS.get(program)
    return Path(provided).exists() if provided is not None else shutil.which(program) is not None


def hotkeys(text: str) -> list[str]:
    """The key combinations ``pyautogui.hotkey(…)`` calls in ``text`` press, as ``"ctrl+alt+t"`` (lower case,
    in the order pressed); ``hotkey('ctrl', 'alt', 't')``, ``hotkey("ctrl","alt","t")`` and
    ``hotkey(["shift", "ctrl", "e"])`` alike. Arguments that are not literal key names are skipped.

    >>> hotkeys("import pyautogui; pyautogui.hotkey('ctrl', 'alt', 't'); pyautogui.hotkey(['alt', 'F10'])")
    ['ctrl+alt+t', 'alt+f10']
    """
    out = []
    for args in _HOTKEY.findall(text):
        try:
            value = ast.literal_eval(f"({args},)")
        except (ValueError, SyntaxError):
            continue
        keys = value[0] if len(value) == 1 and isinstance(value[0], list | tuple) else value
        if keys and all(isinstance(k, str) for k in keys):
            out.append("+".join(k.lower() for k in keys))
    return out


def _needs_in(text: str, where: str, *, instruction: bool = False) -> Iterator[Reason]:
    for need in NEEDS:
        if need.in_instruction != instruction or (need.unless is not None and need.unless.search(text)):
            continue
        for match in need.pattern.finditer(text):
            prog = match.groupdict().get("prog")
            if need.program and prog is not None and installed(prog):
                continue
            yield Reason(need.category, f"{where} {need.reason.format(prog=prog)}: {text[:120]!r}")
            break
    if not instruction:
        for combo in hotkeys(text):
            if combo in IMAGE_SHORTCUTS and combo not in GLOBAL_SHORTCUTS:
                what = IMAGE_SHORTCUTS[combo]
                yield Reason(SHORTCUT, f"{where} presses {combo} (on OSWorld's image it {what}), which this "
                                       "desktop does not bind")  # fmt: skip


def _steps(task: dict[str, Any]) -> Iterable[tuple[str, dict[str, Any]]]:
    for i, step in enumerate(task.get("config") or []):
        yield f"set-up step config[{i}]", step
    for i, step in enumerate((task.get("evaluator") or {}).get("postconfig") or []):
        yield f"evaluator postconfig[{i}]", step


def reasons(task: dict[str, Any], cache_dir: Path | None = None) -> list[Reason]:
    """Why ``task`` (an OSWorld task JSON) cannot run on a local desktop, with categories; empty when nothing
    is known. ``cache_dir`` is ``DesktopEnv``'s ``cache_dir`` (files there count as downloaded); None: nothing
    cached. A reason is listed once (two steps with the same need and text give one)."""
    out: list[Reason] = []
    task_cache = (cache_dir / str(task.get("id", ""))) if cache_dir is not None else None
    if task.get("proxy"):
        out.append(Reason(NETWORK, "runs through a network proxy (no network in a local desktop)"))
    for where, step in _steps(task):
        kind, params = step.get("type"), step.get("parameters") or {}
        if kind in UNSUPPORTED_SETUP:
            why = UNSUPPORTED_SETUP[kind]
            if kind == "chrome_open_tabs":
                remote = [u for u in params.get("urls_to_open", []) if not _LOCAL_URL.match(str(u))]
                why = (NETWORK, f"opens live web pages {remote}") if remote else None
            if why:
                out.append(Reason(why[0], f"{where} {kind!r} {why[1]}"))
        elif kind == "download":
            for f in params.get("files", []):
                name = f"{uuid.uuid5(uuid.NAMESPACE_URL, f['url'])}_{os.path.basename(f['path'])}"
                if task_cache is None or not (task_cache / name).exists():
                    out.append(
                        Reason(NETWORK_FILES, f"downloads {f['url']} (not in the local cache as {name})")
                    )
        elif kind in _COMMAND_STEPS:
            command, shell = params.get("command"), bool(params.get("shell", False))
            found = _needs_in(_command_text(command), where)
            # a launched program is checked below, with the sandbox's own commands
            out.extend(r for r in found if kind != "launch" or r.category != APPLICATION)
            if kind == "launch":
                program = _program(command, shell)
                provided = SANDBOX_COMMANDS.get(program or "")
                if provided is not None and not Path(provided).exists():
                    out.append(
                        Reason(
                            APPLICATION,
                            f"launches {program!r}, which is {provided} in a desktop: not installed",
                        )
                    )
                elif provided is None and program and not installed(program):
                    out.append(Reason(APPLICATION, f"launches {program!r}, which is not installed"))
    evaluator = task.get("evaluator") or {}
    for func in _as_list(evaluator.get("func", [])):
        if func in UNAVAILABLE_METRICS:
            out.append(Reason(OCR, f"metric {func!r} {UNAVAILABLE_METRICS[func]}"))
    for getter in [*_as_list(evaluator.get("result") or []), *_as_list(evaluator.get("expected") or [])]:
        if not isinstance(getter, dict):
            continue
        kind = getter.get("type")
        if kind in NETWORK_GETTERS:
            out.append(Reason(NETWORK, f"getter {kind!r} {NETWORK_GETTERS[kind]}"))
        elif kind == "cloud_file":
            for dest in _as_list(getter.get("dest", [])):
                if task_cache is None or not (task_cache / str(dest)).exists():
                    out.append(
                        Reason(
                            NETWORK_FILES, f"getter 'cloud_file' downloads {dest!r} (not in the local cache)"
                        )
                    )
        elif kind in _COMMAND_GETTERS:
            out.extend(_needs_in(_command_text(getter.get("command")), f"getter {kind!r}"))
        elif kind in APPLICATION_GETTERS and not installed(APPLICATION_GETTERS[kind]):
            program = APPLICATION_GETTERS[kind]
            out.append(
                Reason(APPLICATION, f"getter {kind!r} reads {program!r}'s desktop entry: not installed")
            )
    for app in _as_list(task.get("related_apps") or []):
        program = RELATED_APPS.get(str(app).lower().replace(" ", "_"))
        if program is not None and not installed(program):
            out.append(
                Reason(APPLICATION, f"related_apps names {app!r}, whose program {program!r} is not installed")
            )
    if isinstance(task.get("instruction"), str):
        out.extend(_needs_in(task["instruction"], "the instruction", instruction=True))
    return list(dict.fromkeys(out))


def unavailable_reasons(task: dict[str, Any], cache_dir: Path | None = None) -> list[str]:
    """:func:`reasons` as text (field and detail)."""
    return [r.text for r in reasons(task, cache_dir)]
