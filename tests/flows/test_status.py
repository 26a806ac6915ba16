"""`rla status` of a stage that failed: its error, from the progress record, not a stale stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.status import read_running
from rla_core.config import load_config
from tasks.context import RunContext
from tasks.progress import stage_progress


def test_a_stage_that_failed_shows_its_error_instead_of_stale(tmp_path: Path) -> None:
    run = RunContext(run_id="r", config=load_config(overrides=[f"artifact_root={tmp_path}"]))
    with pytest.raises(RuntimeError), stage_progress(run, 1, "rollout", 1, log=lambda _line: None):
        raise RuntimeError("plug-in 'x' raised in step: boom (task 'line-0')\nthe rest of the traceback")
    running = read_running(run.store, "r")
    assert running is not None and (running.iteration, running.stage, running.state) == (
        1,
        "rollout",
        "failed",
    )
    assert running.describe().startswith(
        "RuntimeError: plug-in 'x' raised in step: boom (task 'line-0') (pid "
    )
    with stage_progress(run, 1, "judge", 1, log=lambda _line: None):  # a live stage is running, not failed
        assert read_running(run.store, "r").state == "running"  # type: ignore[union-attr]
