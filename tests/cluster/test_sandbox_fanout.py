"""Sandboxed executions fanned out over 2 Ray workers equal the thread pool's.

The Ray side runs in a subprocess inside a private network namespace with only `lo`
(tests/cluster/sandbox_on_ray.py); the thread-pool side runs here. Both run the same real programs in
the real sandbox: stdio and function tests, passes, wrong answers, crashes, an invalid program and an
invalid test, so each batch boundary falls between rows of different kinds.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from rla_core.coding.execute import generated_tests_frame, gt_tests_frame, run_tests
from rla_core.coding.tasks import CodingTask, TestMethod
from rla_core.coding.unit_tests import unit_test_rows
from rla_core.sandbox.runner import Sandbox
from tests.cluster.two_nodes import run_in_netns

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")

REPO = Path(__file__).resolve().parents[2]
SUM_TWO = CodingTask(
    task_id="sum-two",
    question="Read two integers a and b. Print a + b.",
    test_method=TestMethod.STDIO,
    tests=(("1 2", "3"), ("-5 5", "0"), ("7 -10", "-3")),
)
ADD = CodingTask(
    task_id="add",
    question="def add(a, b): return the sum",
    test_method=TestMethod.FUNCTION,
    tests=(("add(1, 2)", "3"), ("add(-1, 1)", "0")),
    entry_point="add",
)


def frames() -> tuple[pl.DataFrame, pl.DataFrame]:
    programs = pl.DataFrame(
        {
            "task_id": ["sum-two"] * 4 + ["add"] * 3,
            "rollout_id": [0, 1, 2, 3, 0, 1, 2],
            "code": [
                "a, b = map(int, input().split())\nprint(a + b)",
                "a, b = map(int, input().split())\nprint(abs(a) + abs(b))",  # wrong on negatives
                "print(1 / 0)",
                None,  # no program extracted: invalid_program, not run
                "def add(a, b):\n    return a + b",
                "def add(a, b):\n    return a - b",
                "def add(a, b)",  # syntax error
            ],
        }
    )
    responses = [
        "**Test Input:**\n```\n2 2\n```\n**Test Output:**\n```\n4\n```\n",
        "**Test Input:**\n```\n1 1\n```\n",  # no output block: an invalid test, never run
    ]
    uts = unit_test_rows(iteration=1, task_id="sum-two", prompts=["p"] * 2, responses=responses)
    tests = pl.concat([gt_tests_frame([SUM_TWO, ADD]), generated_tests_frame(uts, [SUM_TWO])])
    return programs, tests


def test_executions_on_two_ray_workers_equal_the_thread_pools(tmp_path: Path) -> None:
    programs, tests = frames()
    local = run_tests(programs, tests, sandbox=Sandbox(max_parallel=2), iteration=1)
    assert set(local["error_kind"]) == {
        "ok",
        "wrong_answer",
        "runtime_error",
        "invalid_program",
        "invalid_test",
    }
    programs.write_parquet(tmp_path / "programs.parquet")
    tests.write_parquet(tmp_path / "tests.parquet")
    argv = (
        [sys.executable, "-m", "tests.cluster.sandbox_on_ray", *(str(tmp_path / f) for f in
         ("programs.parquet", "tests.parquet", "ray.parquet"))]
    )  # fmt: skip
    proc, left = run_in_netns(argv, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert left == []  # the embedded Ray stopped with the process that started it
    on_ray = pl.read_parquet(tmp_path / "ray.parquet")
    # Row order included; wall_s is a measured time (docs/architecture.md, "Determinism scope").
    assert_frame_equal(on_ray.drop("wall_s"), local.drop("wall_s"))
