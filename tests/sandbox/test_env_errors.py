"""Fault injection on the real sandbox: a sandbox killed under a program is ours (retried), a timeout is the program's."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from rla_core.algo.coding_rewards import score_programs
from rla_core.coding.execute import gt_tests_frame, run_tests
from rla_core.coding.tasks import CodingTask
from rla_core.sandbox.runner import ErrorKind, Sandbox
from rla_core.schemas import empty_frame

TASK = CodingTask.from_spec(
    {"task_id": "double", "question": "Print twice the number.", "test_input": ["21\n"], "test_output": ["42\n"],
     "time_limit_s": 2.0}
)  # fmt: skip
# Program 0 answers right after a second (long enough to be killed mid-run); program 1 never answers.
PROGRAMS = ("import time\ntime.sleep(1.0)\nprint(int(input()) * 2)\n", "while True:\n    pass\n")


def _bwrap_children() -> list[int]:
    """Host pids of the sandboxes (bwrap monitors) this process started and that are running now."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        if comm == "bwrap" and ppid == os.getpid():
            found.append(int(entry))
    return found


class KillFirstSandbox(threading.Thread):
    """SIGKILLs the first sandbox it sees (by its host pid) after it has run 0.3 s, once."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.killed: int | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            pids = _bwrap_children()
            if pids:
                time.sleep(0.3)  # the program is running (it sleeps 1 s before answering)
                os.kill(pids[0], signal.SIGKILL)
                self.killed = pids[0]
                return
            time.sleep(0.005)


@pytest.fixture(scope="module")
def serial_sandbox() -> Sandbox:
    return Sandbox(max_parallel=1)  # one run at a time: the first sandbox is program 0's


def _play(sandbox: Sandbox, *, retries: int) -> tuple[pl.DataFrame, pl.DataFrame, int | None]:
    base = pl.DataFrame(
        [{**dict.fromkeys(empty_frame("rollouts").columns), "iteration": 1, "task_id": "double", "slot_id": "double",
          "pending": False, "rollout_id": i, "step": 0, "prompt": "p", "response": code, "action": code,
          "action_valid": True, "done": True, "attempt": 0} for i, code in enumerate(PROGRAMS)],
        schema=empty_frame("rollouts").schema,
    )  # fmt: skip
    programs = base.select("task_id", "rollout_id", code=pl.col("action"))
    killer = KillFirstSandbox()
    killer.start()
    try:
        executions = run_tests(
            programs, gt_tests_frame([TASK]), sandbox=sandbox, iteration=1, retries=retries
        )
    finally:
        killer.stop.set()
        killer.join()
    return score_programs(base, executions), executions, killer.killed


def test_a_killed_sandbox_is_replayed_and_recovered_and_a_timeout_stays_the_programs(
    serial_sandbox: Sandbox,
) -> None:
    # Expected: program 0's sandbox is SIGKILLed once mid-run → error_kind 'sandbox' → run again in a fresh
    # sandbox (retries=2) → passes → won. Program 1 loops past its 2 s limit → 'timeout' → lost, not env_error.
    rollouts, executions, killed = _play(serial_sandbox, retries=2)
    assert killed is not None
    assert executions.sort("rollout_id")["error_kind"].to_list() == [ErrorKind.OK, ErrorKind.TIMEOUT]
    assert rollouts.select("rollout_id", "status", "outcome").rows() == [(0, "won", 1.0), (1, "lost", -1.0)]


def test_without_retries_a_killed_sandbox_is_an_env_error_not_a_failure(serial_sandbox: Sandbox) -> None:
    rollouts, executions, killed = _play(serial_sandbox, retries=0)
    assert killed is not None
    assert executions.sort("rollout_id")["error_kind"].to_list() == [ErrorKind.SANDBOX, ErrorKind.TIMEOUT]
    first = rollouts.row(0, named=True)
    assert (first["status"], first["outcome"], first["score"], first["error_kind"]) == (
        "env_error",
        None,
        None,
        "sandbox",
    )
    assert "sandbox died" in first["error_message"]
    assert rollouts.row(1, named=True)["status"] == "lost"


def test_the_execute_stage_replays_as_many_times_as_the_rollout_and_that_enters_its_key() -> None:
    # The reward model's tests run in the same sandbox as the GT tests: a run that died there is replayed
    # rollout.env_retries times, read through the execute stage's own slice (so it is part of its key).
    from rla_core.config import load_config
    from rla_core.stage_inputs import ExecuteInputs

    two, zero = (
        ExecuteInputs.from_config(load_config(overrides=["setting=coding", f"rollout.env_retries={n}"]))
        for n in (2, 0)
    )
    assert (two.rollout.env_retries, zero.rollout.env_retries) == (2, 0)
    assert two.key_json()["rollout"] == {"env_retries": 2} and two.key_json() != zero.key_json()
