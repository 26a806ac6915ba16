"""The env_error share bound through the real `rla` CLI: with every desktop failing, the rollout stage fails
with the counts and the first errors and is not committed; `rla resume` plays it again once the fault is gone.

The fault: ``RLA_DESKTOP_SITE`` (the desktop's own Python packages, docs/osworld.md) points at a set whose
``pyautogui`` SIGKILLs the desktop's X server when imported — every action breaks its desktop. The X server
is found in the desktop's own pid namespace, so nothing outside the sandbox is touched. One OSWorld task, one
episode, one desktop, tiny models; marked slow (measured time in docs/environment-errors.md).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from rla_core.store import ArtifactStore
from tests.envs.desktop.conftest import requires_desktop
from tests.flows.conftest import REPO, FlowEnv, planned

pytestmark = [requires_desktop, pytest.mark.slow]
pytest.importorskip("desktop_env", reason="needs desktop-env (scripts/setup.sh, extra osworld)")

EXAMPLES = REPO / "data" / "gui" / "osworld" / "examples" / "os"
CRASHING_PYAUTOGUI = '''"""A pyautogui that SIGKILLs the desktop's X server when imported (a fault-injection test)."""
import os
import signal

for pid in filter(str.isdigit, os.listdir("/proc")):  # the desktop's pid namespace: its own processes only
    try:
        with open(f"/proc/{pid}/comm") as comm:
            if comm.read().strip() == "Xvfb":
                os.kill(int(pid), signal.SIGKILL)
    except OSError:
        pass
'''


@pytest.fixture
def crashing_site() -> Iterator[Path]:
    """A desktop package set the sandbox user can read (pytest's tmp_path is private to root), removed after."""
    site = Path(tempfile.mkdtemp(prefix="rla-crashing-site-", dir="/tmp"))
    (site / "pyautogui").mkdir()
    (site / "pyautogui" / "__init__.py").write_text(CRASHING_PYAUTOGUI)
    for path in (site, site / "pyautogui"):
        path.chmod(0o755)
    (site / "pyautogui" / "__init__.py").chmod(0o644)
    yield site
    shutil.rmtree(site, ignore_errors=True)


def test_every_desktop_failing_stops_the_rollout_stage_and_resume_plays_it_once_fixed(
    flow_env: FlowEnv, crashing_site: Path
) -> None:
    root = flow_env.base / "runs-env-errors"
    tasks = {}
    for name in ("train", "eval"):
        example = EXAMPLES / ("rla-os-write.json" if name == "train" else "rla-os-touch.json")
        tasks[name] = flow_env.base / f"env-errors-{name}.jsonl"
        tasks[name].write_text(json.dumps(json.loads(example.read_text())) + "\n")
    flow_env.rla(
        "run", "--preset", "osworld", *flow_env.settings(root), "--run-id", "e1",
        "--set", "iterations=1", "--set", f"gui.tasks={tasks['train']}", "--set", f"gui.eval_tasks={tasks['eval']}",
        "--set", "gui.osworld.desktops=1", "--set", "rollout.tasks_per_iter=1", "--set", "rollout.rollouts_per_task=1",
        "--set", "evaluation.rollouts_per_task=1", "--set", "models.warm_start_epochs=1", "--set", "judge.m=1",
        "--set", "adaptation.enabled=false", "--set", "rollout.env_retries=1", timeout=1200,
    )  # fmt: skip
    store = ArtifactStore(str(root))
    first = store.committed("e1")[(1, "rollout")]

    # Expected: the rollout's one episode breaks its desktop at its first action, and again on its one
    # replay: 1 of 1 episodes in env_error > rollout.max_env_error_share 0.2 -> the stage fails, the CLI
    # exits 1 naming the counts and the first error, and the rollout of iteration 1 is not committed.
    broken = FlowEnv(flow_env.base, flow_env.env | {"RLA_DESKTOP_SITE": str(crashing_site)})
    proc = broken.rla("resume", "e1", "--root", str(root), "--from-stage", "rollout", "--iteration", "1",
                      check=False, timeout=900)  # fmt: skip
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said[-3000:]
    assert (
        "rollout, iteration 1: 1 of 1 episodes (100%) still ended in env_error after their retries, above "
        "rollout.max_env_error_share=0.2; first errors: rla-os-write-v0#0 desktop: OSWorld task rla-os-write: "
        "the desktop broke during the step"
    ) in said, said[-3000:]
    assert not {s for it, s in store.committed("e1") if it == 1}

    # The fault is gone: resume plays the rollout (a new attempt) and the rest of iteration 1.
    flow_env.rla("resume", "e1", "--root", str(root), timeout=1200)
    done = store.committed("e1")
    assert set(done) == planned(store, "e1")  # every stage of the run, iteration 1's included
    assert done[(1, "rollout")].attempt > first.attempt and "env_errors" not in done[(1, "rollout")].frames
    rollouts = store.read_frame("e1", 1, "rollout", "rollouts")
    assert (
        set(rollouts["status"]) <= {"won", "lost"}
        and rollouts.filter(pl.col("outcome").is_null()).height == 0
    )
