"""Fill ``desktop_env``'s file cache from a folder of downloaded files, and report which tasks can run.

OSWorld's set-up (``download`` steps) and its ``cloud_file`` getter look in ``<cache>/<task id>/`` before
downloading: a set-up file as ``<uuid5(URL)>_<basename of its path>``, a getter's file as its ``dest``. Local
desktops have no network, so a task runs here only when those files are in the cache. :func:`fill` copies
them from a folder the user downloaded them into, found by file name, first in ``<source>/<task id>/`` then
in ``<source>/`` (the name is the basename of the set-up path, or the getter's ``dest``).

Commands::

    python -m rla_core.envs.osworld.cache fill TASKS SOURCE [--cache-dir .cache/osworld]
    python -m rla_core.envs.osworld.cache check TASKS [--cache-dir .cache/osworld]

``TASKS`` is an OSWorld meta list (``evaluation_examples/test_all.json``) or a JSONL file of examples. ``fill``
prints one line per file copied or still missing (with its URL); ``check`` one line per task: ``available``
or ``unavailable`` with every reason. Both exit 1 when a task stays unavailable.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rla_core.envs.osworld.tasks import load_tasks, needed_files, unavailable


@dataclass(frozen=True)
class FillResult:
    """What :func:`fill` did: files copied and files still missing, as (task id, field, URL, cache path)."""

    copied: list[tuple[str, str, str, Path]]
    missing: list[tuple[str, str, str, Path]]


def _source_name(task: dict[str, Any], field: str, cache_name: str) -> str:
    """The plain file name a user downloads for a needed file (set-up: the path's basename; getter: dest)."""
    if ".parameters.files[" in field:
        for step in task["config"]:
            for f in step.get("parameters", {}).get("files", []) if step.get("type") == "download" else []:
                if cache_name.endswith("_" + os.path.basename(f["path"])):
                    return os.path.basename(f["path"])
    return cache_name


def fill(tasks: list[dict[str, Any]], source: Path, cache_dir: Path) -> FillResult:
    """Copy every needed file found under ``source`` into ``cache_dir`` (existing cache files are kept)."""
    copied, missing = [], []
    for task in tasks:
        for field, url, name in needed_files(task):
            target = cache_dir / task["id"] / name
            if target.is_file():
                continue
            plain = _source_name(task, field, name)
            found = next(
                (
                    p
                    for p in (source / task["id"] / plain, source / plain, source / task["id"] / name)
                    if p.is_file()
                ),
                None,
            )
            if found is None:
                missing.append((task["id"], field, url, target))
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(found, target)
            copied.append((task["id"], field, url, target))
    return FillResult(copied=copied, missing=missing)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rla_core.envs.osworld.cache", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    fill_p = sub.add_parser("fill", help="copy downloaded files into desktop_env's cache")
    fill_p.add_argument("tasks", type=Path)
    fill_p.add_argument("source", type=Path)
    check_p = sub.add_parser("check", help="list which tasks can run here and why not")
    check_p.add_argument("tasks", type=Path)
    for p in (fill_p, check_p):
        p.add_argument("--cache-dir", type=Path, default=Path(".cache/osworld"))
    args = parser.parse_args(argv)
    tasks = load_tasks(args.tasks)
    if args.command == "fill":
        result = fill(tasks, args.source, args.cache_dir)
        for tid, field, url, target in result.copied:
            print(f"copied  {tid} {field}: {url} -> {target}")
        for tid, field, url, _target in result.missing:
            print(f"missing {tid} {field}: {url} (put it in {args.source / tid} or {args.source})")
    bad = 0
    for task in tasks:
        reasons = unavailable(task, args.cache_dir)
        bad += bool(reasons)
        if args.command == "check" or reasons:
            print(f"{task['id']}: " + ("unavailable: " + "; ".join(reasons) if reasons else "available"))
    print(f"{len(tasks) - bad} of {len(tasks)} tasks can run here")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
