"""Local OSWorld desktops: start, reset, step, accessibility tree and screenshot times with 1 and 2 desktops.

For N in (1, 2): a :class:`DesktopPool` of N desktops is started (all at once: "start" is the wall time
until all answer), then each desktop, in its own thread, is driven by OSWorld's unmodified
``desktop_env.DesktopEnv`` through our provider: ``reset`` with a task config that opens a terminal
(the first reset of an unused desktop skips the revert; later ones revert = fresh home + restart),
``step`` with pyautogui code (``pause=0``; includes the observation: screenshot + tree), ``GET /accessibility`` and ``GET /screenshot``. Reported per
operation: median and max seconds over all desktops and repeats, the idle resident memory per desktop
(sum of its processes' RSS before any application), and processes left after the pool is closed.

**Episodes per minute**: the shipped OSWorld-format tasks (``data/gui/osworld``) played through
:class:`~rla_core.envs.osworld.env.OsworldEnv` — reset with the task's set-up, observation (linearised tree,
candidate actions, screenshot), the scripted solution chosen among the candidates (2 actions: a typed
command, ``DONE``), ``evaluate()`` — with 1 and 2 desktops, one thread per desktop; ``--episodes`` per desktop.
A tiny policy adds its generation time per step on top (the loop's rollout stage also steps episodes one
after another within a turn; resets of a wave run in parallel).

Run: ``.venv/bin/python benchmarks/bench_osworld.py [--repeats 3] [--episodes 6] [--out runs/bench/osworld.json]``
(~3 min on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from rla_core.envs.desktop.desktop import Desktop
from rla_core.envs.desktop.pool import DesktopOptions, DesktopPool
from rla_core.envs.desktop.provider import install, make_env

TASK: dict[str, Any] = {
    "id": "bench-terminal",
    "instruction": "(benchmark)",
    "config": [
        {"type": "launch", "parameters": {"command": ["gnome-terminal"]}},
        {
            "type": "execute",
            "parameters": {
                "command": "wmctrl -l | grep -q Terminal",
                "shell": True,
                "until": {"returncode": 0},
            },
        },
        {"type": "activate_window", "parameters": {"window_name": "Terminal"}},
    ],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "cat ~/Desktop/done.txt", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "ok\n"}},
    },
}


def rss_mib(desktop: Desktop) -> float:
    total_kib = 0
    for pid in desktop.processes():
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
        except OSError:
            continue
    return total_kib / 1024


def timed_get(url: str) -> tuple[float, int]:
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=60) as r:
        size = len(r.read())
    return time.monotonic() - t0, size


def drive(
    desktop: Desktop, repeats: int, cache: Path, out: dict[str, list[float]], lock: threading.Lock
) -> None:
    env = make_env(desktop, stop_on_close=False, action_space="pyautogui", cache_dir=str(cache))
    local: dict[str, list[float]] = {"reset": [], "step": [], "tree": [], "screenshot": [], "tree_kb": []}
    scores = []
    for _ in range(repeats):
        t0 = time.monotonic()
        env.reset(task_config=TASK)
        local["reset"].append(time.monotonic() - t0)
        t0 = time.monotonic()
        env.step("pyautogui.typewrite('echo ok > ~/Desktop/done.txt\\n')", pause=0)
        local["step"].append(time.monotonic() - t0)
        seconds, size = timed_get(desktop.url + "/accessibility")
        local["tree"].append(seconds)
        local["tree_kb"].append(size / 1024)
        local["screenshot"].append(timed_get(desktop.url + "/screenshot")[0])
        scores.append(env.evaluate())
    env.close()
    with lock:
        for key, values in local.items():
            out.setdefault(key, []).extend(values)
        out.setdefault("score", []).extend(float(s) for s in scores)


def episodes_per_minute(n: int, episodes: int, runtime: Path) -> dict[str, Any]:
    """Play ``episodes`` shipped task variants per desktop on ``n`` desktops at once; the rate and the scores."""
    from concurrent.futures import ThreadPoolExecutor

    from rla_core.envs.osworld.env import OsworldEnv
    from rla_core.envs.osworld.tasks import current_key, load_tasks, with_variant
    from rla_core.settings.base import PROJECT_ROOT

    shipped = load_tasks(PROJECT_ROOT / "data" / "gui" / "osworld" / "all.json")
    variants = [with_variant(t, k, 1) for t in shipped for k in t["task_template"]]
    jobs = [variants[i % len(variants)] for i in range(n * episodes)]
    with OsworldEnv(desktops=n, cache_dir=runtime / "cache", max_steps=5, runtime_dir=runtime) as env:

        def play(spec: dict[str, Any]) -> float:
            episode = env.play(spec, spec["solutions"][current_key(spec)])
            episode.close()
            return float(episode.score or 0.0)

        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=n) as ex:
            scores = list(ex.map(play, jobs))
        seconds = time.monotonic() - t0
    return {
        "desktops": n,
        "episodes": len(jobs),
        "seconds": round(seconds, 1),
        "episodes_per_minute": round(60 * len(jobs) / seconds, 1),
        "solved": sum(s > 0 for s in scores),
    }


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3), "n": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=6, help="episodes per desktop (episodes per minute)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench/osworld.json"))
    args = parser.parse_args()
    install()
    results: dict[str, Any] = {}
    for n in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            pool = DesktopPool(DesktopOptions(size=n, runtime_dir=Path(tmp)))
            start_s = time.monotonic() - t0
            try:
                desktops = pool.desktops()
                idle = [rss_mib(d) for d in desktops]
                samples: dict[str, list[float]] = {}
                lock = threading.Lock()
                threads = [
                    threading.Thread(
                        target=drive, args=(d, args.repeats, Path(tmp) / f"cache{i}", samples, lock)
                    )
                    for i, d in enumerate(desktops)
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            finally:
                pool.close()
            left = sum(len(d.processes()) for d in desktops)
        row = {
            "desktops": n,
            "start_all_s": round(start_s, 3),
            "idle_rss_mib_per_desktop": round(statistics.mean(idle), 1),
            **{k: summary(v) for k, v in samples.items() if k not in ("score", "tree_kb")},
            "tree_kb": summary(samples["tree_kb"]),
            "scores": samples["score"],
            "processes_left": left,
        }
        results[f"{n}_desktops"] = row
        print(json.dumps(row))
    for n in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            rate = episodes_per_minute(n, args.episodes, Path(tmp))
        results[f"{n}_desktops"]["episodes_per_minute"] = rate
        print(json.dumps(rate))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
