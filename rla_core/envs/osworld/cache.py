"""Fill ``desktop_env``'s file cache (downloading, or from a folder of downloaded files) and report which tasks
can run.

**Layout.** OSWorld's set-up (``download`` steps) and its ``cloud_file`` getter look in ``<cache>/<task id>/``
before downloading: a set-up file as ``<uuid5(URL)>_<basename of its path>``, a getter's file as its ``dest``.
A task here is its (domain, id), and OSWorld lists some ids under two domains, so the id ``DesktopEnv``
receives is our task key ``<domain>/<id>`` and a task's folder is **``<cache>/<domain>/<id>/``**
(``<cache>/<id>/`` for a task without a domain, e.g. a JSONL line without ``domain``): one function builds it,
:func:`rla_core.envs.osworld.tasks.task_cache`, and ``DesktopEnv`` joins the same path itself. Two tasks of
the same id in different domains never share a file.

Local desktops have no network, so a task runs here only when those files are in the cache. ``fetch``
downloads them (:mod:`rla_core.envs.osworld.fetch`: Google Drive's confirmation page, retries, resume, mirrors,
a manifest); :func:`fill` copies them from a folder the user downloaded them into, found by file name, first
in ``<source>/<domain>/<id>/``, then ``<source>/<id>/``, then ``<source>/`` (the name is the basename of the
set-up path, or the getter's ``dest``).

Commands::

    python -m rla_core.envs.osworld.cache fetch TASKS… [--cache-dir .cache/osworld] [--mirror PREFIX=TARGET]…
        [--runnable-only] [--list-urls] [--jobs 4] [--retries 4] [--timeout 60]
    python -m rla_core.envs.osworld.cache fill TASKS SOURCE [--cache-dir .cache/osworld]
    python -m rla_core.envs.osworld.cache check TASKS [--cache-dir .cache/osworld] [--tasks] [--require-all]

``TASKS`` is an OSWorld meta list (``evaluation_examples/test_all.json``) or a JSONL file of examples.
``fetch`` (:func:`run_fetch`, also ``rla osworld fetch``) shows the total size first, then a progress bar, then
what it fetched, what it retried and what is missing and why; it exits 1 when a file is still missing.
``fill`` prints one line per file copied or still missing (with its URL) and exits 1 when a file is still missing.
``check`` prints, per domain, how many tasks are available and unavailable, and the reasons by category (how
many tasks each keeps out; a task counts once per category); ``--tasks`` adds one line per task first
(``available``, or ``unavailable`` with every reason). A task that cannot run here is a report, not an
error: ``check`` exits 0 once the list loads, unless ``--require-all`` asks for every task to be available.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rla_core.envs.desktop.availability import NETWORK_FILES, Reason
from rla_core.envs.osworld.fetch import (
    FetchOptions,
    Mirrors,
    env_proxies,
    fetch,
    listing,
    plan,
    probe_sizes,
    update_manifest,
)
from rla_core.envs.osworld.tasks import load_tasks, needed_files, task_cache, task_key, unavailability


@dataclass(frozen=True)
class FillResult:
    """What :func:`fill` did: files copied and files still missing, as (task key, field, URL, cache path)."""

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
        key, folder = task_key(task), task_cache(cache_dir, task)
        per_task = (task_cache(source, task), source / task["id"])
        for field, url, name in needed_files(task):
            target = folder / name
            if target.is_file():
                continue
            plain = _source_name(task, field, name)
            places = [*(d / plain for d in per_task), source / plain, *(d / name for d in per_task)]
            found = next((p for p in places if p.is_file()), None)
            if found is None:
                missing.append((key, field, url, target))
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(found, target)
            copied.append((key, field, url, target))
    return FillResult(copied=copied, missing=missing)


def summary(tasks: list[dict[str, Any]], found: list[list[Reason]]) -> Iterator[str]:
    """The availability tables (Markdown): per domain, tasks available and not; per reason category, how many
    tasks it keeps out (a task counts once per category, so the counts add up to more than the unavailable).
    ``found[i]`` are the reasons of ``tasks[i]``."""
    domains: dict[str, list[int]] = {}
    categories: Counter[str] = Counter()
    for task, why in zip(tasks, found, strict=True):
        counts = domains.setdefault(str(task.get("domain") or "-"), [0, 0])
        counts[bool(why)] += 1
        categories.update({r.category for r in why})
    total = [sum(c[i] for c in domains.values()) for i in (0, 1)]
    yield "| domain | tasks | available | unavailable |"
    yield "|---|---:|---:|---:|"
    for domain, (ok, bad) in sorted(domains.items()):
        yield f"| {domain} | {ok + bad} | {ok} | {bad} |"
    yield f"| **all** | **{sum(total)}** | **{total[0]}** | **{total[1]}** |"
    yield ""
    yield "| reason (category) | tasks it keeps out |"
    yield "|---|---:|"
    for category, n in sorted(categories.items(), key=lambda kv: (-kv[1], kv[0])):
        yield f"| {category} | {n} |"


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def run_fetch(
    task_files: Sequence[Path],
    cache_dir: Path,
    *,
    mirrors: Mirrors,
    options: FetchOptions,
    runnable_only: bool = False,
    list_urls: bool = False,
    say: Callable[[str], None] = print,
) -> int:
    """The ``fetch`` command (this module's and ``rla osworld fetch``): 0 when every file is in the cache."""
    tasks = list({task_key(t): t for f in task_files for t in load_tasks(f)}.values())
    if runnable_only:
        kept = [t for t in tasks if not {r.category for r in unavailability(t, cache_dir)} - {NETWORK_FILES}]
        say(f"{len(kept)} of {len(tasks)} tasks need nothing but their files; the others are left out "
            "(`check --tasks` says why)")  # fmt: skip
        tasks = kept
    needed = plan(tasks, cache_dir, all_files=True)
    if list_urls:
        for line in listing(needed, cache_dir, mirrors):
            say(line)
        return 0
    downloads = plan(tasks, cache_dir)
    outcomes = []
    if downloads:
        sizes = probe_sizes(downloads, mirrors=mirrors, options=options)
        known = [s for s in sizes.values() if s is not None]
        files = sum(len(d.targets) for d in downloads)
        say(f"to fetch: {files} files from {len(downloads)} URLs into {cache_dir}: {_mb(sum(known))} announced"
            + (f", {len(downloads) - len(known)} URLs of unknown size" if len(known) < len(downloads) else "")
            + (f" (proxy from {', '.join(env_proxies())})" if env_proxies() else ""))  # fmt: skip
        from tqdm import tqdm

        with tqdm(total=sum(known) or None, unit="B", unit_scale=True, disable=None, desc="fetch") as bar:
            outcomes = fetch(downloads, cache_dir, mirrors=mirrors, options=options, sizes=sizes,
                             progress=bar.update)  # fmt: skip
    manifest = update_manifest(cache_dir, needed, outcomes)
    done = [o for o in outcomes if o.problem is None]
    missing = [o for o in outcomes if o.problem is not None]
    present = sum(len(d.targets) for d in needed) - sum(len(o.download.targets) for o in missing)
    say(f"fetched {len(done)} URLs ({_mb(sum(o.size or 0 for o in done))}); {present} of "
        f"{sum(len(d.targets) for d in needed)} files of {len(tasks)} tasks are in the cache; manifest: {manifest}")  # fmt: skip
    for o in outcomes:
        if o.retried:
            say(f"retried {o.download.url}: {'; '.join(o.retried)}")
    if missing:
        say("\n| missing because | URLs |\n|---|---:|")
        for problem, n in Counter(o.problem for o in missing).most_common():
            say(f"| {problem} | {n} |")
        for o in missing:
            for t in o.download.targets:
                say(
                    f"missing {t.task} {t.field}: {o.download.url} — {o.problem}: {o.detail} (from {o.source})"
                )
    return 1 if missing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rla_core.envs.osworld.cache", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    fetch_p = sub.add_parser("fetch", help="download the files the tasks need into desktop_env's cache")
    fetch_p.add_argument("tasks", type=Path, nargs="+")
    fetch_p.add_argument("--mirror", action="append", default=[], metavar="PREFIX=TARGET",
                         help="fetch URLs under PREFIX from TARGET (a base URL or a local directory) + the rest")  # fmt: skip
    fetch_p.add_argument("--runnable-only", action="store_true",
                         help="only tasks that need nothing but their files (no other unavailability reason)")  # fmt: skip
    fetch_p.add_argument("--list-urls", action="store_true",
                         help="print each URL, where it is fetched from and its cache names; download nothing")  # fmt: skip
    defaults = FetchOptions()
    fetch_p.add_argument("--jobs", type=int, default=defaults.jobs, help="downloads at once")
    fetch_p.add_argument("--retries", type=int, default=defaults.retries, help="further attempts per file")
    fetch_p.add_argument("--timeout", type=float, default=defaults.timeout_s, help="seconds without data")
    fill_p = sub.add_parser("fill", help="copy downloaded files into desktop_env's cache")
    fill_p.add_argument("tasks", type=Path)
    fill_p.add_argument("source", type=Path)
    check_p = sub.add_parser("check", help="list which tasks can run here and why not")
    check_p.add_argument("tasks", type=Path)
    check_p.add_argument("--tasks", dest="per_task", action="store_true", help="one line per task first")
    check_p.add_argument("--require-all", action="store_true", help="exit 1 unless every task is available")
    for p in (fetch_p, fill_p, check_p):
        p.add_argument("--cache-dir", type=Path, default=Path(".cache/osworld"))
    args = parser.parse_args(argv)
    if args.command == "fetch":
        options = FetchOptions(jobs=args.jobs, retries=args.retries, timeout_s=args.timeout)
        return run_fetch(args.tasks, args.cache_dir, mirrors=Mirrors.from_args(args.mirror), options=options,
                         runnable_only=args.runnable_only, list_urls=args.list_urls)  # fmt: skip
    tasks = load_tasks(args.tasks)
    if args.command == "fill":
        result = fill(tasks, args.source, args.cache_dir)
        for key, field, url, target in result.copied:
            print(f"copied  {key} {field}: {url} -> {target}")
        for key, field, url, _target in result.missing:
            print(f"missing {key} {field}: {url} (put it in {args.source / key} or {args.source})")
        return 1 if result.missing else 0
    found = [unavailability(task, args.cache_dir) for task in tasks]
    if args.per_task:
        for task, why in zip(tasks, found, strict=True):
            state = "unavailable: " + "; ".join(r.text for r in why) if why else "available"
            print(f"{task_key(task)}: {state}")
        print()
    for line in summary(tasks, found):
        print(line)
    bad = sum(bool(why) for why in found)
    print(f"\n{len(tasks) - bad} of {len(tasks)} tasks can run here (cache: {args.cache_dir})")
    return 1 if bad and args.require_all else 0


if __name__ == "__main__":
    sys.exit(main())
