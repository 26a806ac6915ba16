"""Run chosen tests N times, optionally beside a CPU hog, and report which ones flake.

A test that passes on a quiet machine and fails on a loaded one blocks every landing (CI runs on a
shared machine). Run this before trusting a tolerance or a timing bound::

    .venv/bin/python scripts/flake_hunt.py --runs 20 --hog 2 -- -m slow \\
        tests/models/test_trainer_placement.py::test_two_process_ddp_matches_one_process

Everything after ``--`` goes to pytest unchanged. The hog is ``--hog`` busy-looping processes started
by this script (stopped by pid at the end, also on Ctrl-C). Each run writes a JUnit XML report; the
summary lists every test with its pass/fail/skip counts, its slowest duration and the first line of
each distinct failure. Exit status: 0 if every run of every test passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Outcomes:
    """What one test did over all runs."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    slowest_s: float = 0.0
    failures: dict[str, int] = field(default_factory=dict)  # first line of the message -> count


def _spin() -> None:
    while True:
        pass


def _parse(report: Path, outcomes: dict[str, Outcomes]) -> None:
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        out = outcomes[name]
        out.slowest_s = max(out.slowest_s, float(case.get("time", "0") or 0))
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if problem is not None:
            out.failed += 1
            first = (problem.get("message") or problem.text or "").strip().splitlines()
            line = first[0][:200] if first else "(no message)"
            out.failures[line] = out.failures.get(line, 0) + 1
        elif case.find("skipped") is not None:
            out.skipped += 1
        else:
            out.passed += 1


def hunt(pytest_args: list[str], *, runs: int, hog: int, python: str) -> dict[str, Outcomes]:
    """Run pytest ``runs`` times with ``hog`` spinning processes alongside; outcomes per test."""
    outcomes: dict[str, Outcomes] = defaultdict(Outcomes)
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(hog)]
    for p in spinners:
        p.start()
    try:
        with tempfile.TemporaryDirectory(prefix="flake-hunt-") as tmp:
            for i in range(runs):
                report = Path(tmp) / f"run-{i}.xml"
                started = time.monotonic()
                proc = subprocess.run(
                    [python, "-m", "pytest", "-q", f"--junitxml={report}", *pytest_args],
                    cwd=ROOT, capture_output=True, text=True, check=False,
                )  # fmt: skip
                elapsed = time.monotonic() - started
                if not report.is_file():
                    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
                    raise SystemExit(f"run {i + 1}: pytest wrote no report (exit {proc.returncode}):\n{tail}")
                _parse(report, outcomes)
                print(f"run {i + 1}/{runs}: pytest exit {proc.returncode} in {elapsed:.0f}s", flush=True)
    finally:
        for p in spinners:
            p.kill()
            p.join()
    return outcomes


def summary(outcomes: dict[str, Outcomes], *, runs: int, hog: int) -> str:
    lines = [f"{runs} runs beside {hog} spinning processes (load on {os.cpu_count()} cores)", ""]
    lines.append("| test | passed | failed | skipped | slowest s |")
    lines.append("|---|---|---|---|---|")
    for name, out in sorted(outcomes.items()):
        lines.append(f"| {name} | {out.passed} | {out.failed} | {out.skipped} | {out.slowest_s:.1f} |")
    for name, out in sorted(outcomes.items()):
        for message, count in out.failures.items():
            lines.append(f"- {name} failed {count}x: {message}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="how many times to run pytest")
    parser.add_argument(
        "--hog", type=int, default=os.cpu_count() or 1, help="busy-looping processes (0 = quiet)"
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs pytest")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: arguments for pytest")
    args = parser.parse_args(argv)
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    if args.runs < 1 or args.hog < 0 or not pytest_args:
        parser.error("need --runs >= 1, --hog >= 0 and pytest arguments after --")
    outcomes = hunt(pytest_args, runs=args.runs, hog=args.hog, python=args.python)
    print(summary(outcomes, runs=args.runs, hog=args.hog))
    return 0 if outcomes and all(o.failed == 0 for o in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
