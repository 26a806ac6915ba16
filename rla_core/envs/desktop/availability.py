"""Which OSWorld tasks a local desktop can run: reasons a task is *unavailable*, checked before it is run.

A local desktop has no root (``sudo`` is a stub that fails), no network (its own network namespace), no
GNOME shell, and only the applications installed on the host. A task that needs any of that is reported
unavailable with its reasons and never run — running it would score a broken set-up, not the policy.

What is checked, from the task's JSON alone (``config``, ``evaluator``, ``proxy``):

* set-up steps ``desktop_env`` performs over the network or that neither it nor we implement
  (:data:`UNSUPPORTED_SETUP`);
* ``download`` steps and ``cloud_file`` getters whose file is not in the local cache — the same cache paths
  ``desktop_env`` reads before downloading (``<cache>/<task id>/<uuid5(url)>_<name>``, ``<cache>/<task id>/<dest>``);
* commands that need root or system services (``sudo``, ``systemctl``, ``apt-get`` …: :data:`NEEDS_ROOT`);
* programs a ``launch`` step starts that are not installed on the host (the sandbox mounts the host's ``/usr``;
  ``google-chrome`` is the sandbox's wrapper around Debian's Chromium: :data:`~rla_core.envs.desktop.desktop.SANDBOX_COMMANDS`);
* getters that read live web pages (:data:`NETWORK_GETTERS`) and metrics whose package is a placeholder here
  (:data:`UNAVAILABLE_METRICS`).

Passing these checks is necessary, not sufficient: part 2 (the task set) validates tasks by running them.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rla_core.envs.desktop.desktop import SANDBOX_COMMANDS

UNSUPPORTED_SETUP = {
    "googledrive": "uses a Google Drive account over the network",
    "login": "logs in to a live website",
    "chrome_open_tabs": None,  # only when it opens non-local URLs (checked below)
    "change_wallpaper": "changes the GNOME wallpaper (no GNOME shell and no wallpaper endpoint here)",
    "tidy_desktop": "is not implemented by desktop_env itself",
    "act": "is not implemented by desktop_env itself",
    "replay": "is not implemented by desktop_env itself",
}
NETWORK_GETTERS = {
    "info_from_website": "reads a live web page",
    "googledrive_file": "downloads from Google Drive",
    "pdf_from_url": "downloads a PDF from a URL",
}
UNAVAILABLE_METRICS = {"compare_image_text": "needs easyocr (CUDA torch/torchvision), not installed here"}
NEEDS_ROOT = re.compile(r"(^|[\s;&|(`])(sudo|su|systemctl|service|apt|apt-get|dpkg|snap|pkexec)(\s|$)")
_LOCAL_URL = re.compile(r"^(file:|about:|chrome:|data:|https?://(localhost|127\.0\.0\.1)([:/]|$))")


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


def _steps(task: dict[str, Any]) -> Iterable[dict[str, Any]]:
    yield from task.get("config") or []
    yield from (task.get("evaluator") or {}).get("postconfig") or []


def unavailable_reasons(task: dict[str, Any], cache_dir: Path | None = None) -> list[str]:
    """Why ``task`` (an OSWorld task JSON) cannot run on a local desktop; empty when nothing is known.

    ``cache_dir`` is ``DesktopEnv``'s ``cache_dir`` (files there count as downloaded); None: nothing cached.
    """
    reasons: list[str] = []
    task_cache = (cache_dir / str(task.get("id", ""))) if cache_dir is not None else None
    if task.get("proxy"):
        reasons.append("runs through a network proxy (no network in a local desktop)")
    for step in _steps(task):
        kind, params = step.get("type"), step.get("parameters") or {}
        if kind in UNSUPPORTED_SETUP:
            why = UNSUPPORTED_SETUP[kind]
            if kind == "chrome_open_tabs":
                remote = [u for u in params.get("urls_to_open", []) if not _LOCAL_URL.match(str(u))]
                why = f"opens live web pages {remote}" if remote else None
            if why:
                reasons.append(f"set-up step {kind!r} {why}")
        elif kind == "download":
            for f in params.get("files", []):
                name = f"{uuid.uuid5(uuid.NAMESPACE_URL, f['url'])}_{os.path.basename(f['path'])}"
                if task_cache is None or not (task_cache / name).exists():
                    reasons.append(f"downloads {f['url']} (not in the local cache as {name})")
        elif kind in ("execute", "command", "launch", "execute_with_verification"):
            command, shell = params.get("command"), bool(params.get("shell", False))
            if NEEDS_ROOT.search(_command_text(command)):
                reasons.append(f"needs root or system services: {_command_text(command)[:120]!r}")
            if kind == "launch":
                program = _program(command, shell)
                provided = SANDBOX_COMMANDS.get(program or "")
                if provided is not None and not Path(provided).exists():
                    reasons.append(f"launches {program!r}, which is {provided} in a desktop: not installed")
                elif provided is None and program and shutil.which(program) is None:
                    reasons.append(f"launches {program!r}, which is not installed")
    evaluator = task.get("evaluator") or {}
    for func in _as_list(evaluator.get("func", [])):
        if func in UNAVAILABLE_METRICS:
            reasons.append(f"metric {func!r} {UNAVAILABLE_METRICS[func]}")
    for getter in [*_as_list(evaluator.get("result") or []), *_as_list(evaluator.get("expected") or [])]:
        if not isinstance(getter, dict):
            continue
        kind = getter.get("type")
        if kind in NETWORK_GETTERS:
            reasons.append(f"getter {kind!r} {NETWORK_GETTERS[kind]}")
        elif kind == "cloud_file":
            for dest in _as_list(getter.get("dest", [])):
                if task_cache is None or not (task_cache / str(dest)).exists():
                    reasons.append(f"getter 'cloud_file' downloads {dest!r} (not in the local cache)")
        elif kind in ("vm_command_line", "vm_command_error") and NEEDS_ROOT.search(
            _command_text(getter.get("command"))
        ):
            reasons.append(f"getter {kind!r} needs root: {_command_text(getter.get('command'))[:120]!r}")
    return reasons
