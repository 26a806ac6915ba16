"""No-op audit of OSWorld's official tasks: which available ones score > 0 when the agent does nothing.

Every task of the shipped official set (``data/gui/osworld/official/test_all.json``) that a local desktop
can run with the given file cache (:func:`rla_core.envs.osworld.tasks.unavailable` is empty; with an empty
cache these are the offline ones) is played with the single action ``DONE``: OSWorld's set-up, then its
evaluator at once. A task that scores > 0 so is a task a policy "solves" by doing nothing — either the
desktop differs from OSWorld's image where the evaluator looks, or the task itself is lenient.

Results (one row per task: domain, id, score, failure) go to ``--out`` as JSON; the summary is printed,
with the passes :data:`rla_core.envs.desktop.parity.NOOP_PASSES` does not explain.

Run: ``.venv/bin/python benchmarks/osworld_noop_audit.py --out benchmarks/results/osworld_noop_audit.json``
(one desktop; ~10 min on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from rla_core.envs.desktop.parity import NOOP_PASSES
from rla_core.envs.osworld.env import OsworldEnv
from rla_core.envs.osworld.tasks import load_tasks, task_key, unavailable
from rla_core.settings.base import PROJECT_ROOT

OFFICIAL = PROJECT_ROOT / "data" / "gui" / "osworld" / "official"


def official_tasks(meta: Path = OFFICIAL / "test_all.json") -> list[dict[str, Any]]:
    """Every task the meta list names, as our loader reads it (checked, keyed ``"<domain>/<id>"``), in its order."""
    return load_tasks(meta)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache-dir", type=Path, default=None, help="desktop_env file cache (default: empty)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache_dir or Path(tmp) / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        tasks = [t for t in official_tasks() if not unavailable(t, cache)]
        rows: list[dict[str, Any]] = []
        t0 = time.monotonic()
        with OsworldEnv(desktops=1, cache_dir=cache, max_steps=1, runtime_dir=Path(tmp) / "rt") as env:
            for task in tasks:
                started = time.monotonic()
                episode = env.play(task, ["DONE"])
                episode.close()
                rows.append(
                    {
                        "task": task_key(task),
                        "score": episode.score,
                        "failure": episode.failure,
                        "seconds": round(time.monotonic() - started, 1),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    passed = [r["task"] for r in rows if (r["score"] or 0) > 0]
    summary = {
        "available": len(rows),
        "noop_passes": len(passed),
        "passing": passed,
        "unexplained": [t for t in passed if t not in NOOP_PASSES],  # passes parity.NOOP_PASSES does not name
        "failures": [r["task"] for r in rows if r["failure"]],
        "seconds": round(time.monotonic() - t0, 1),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
