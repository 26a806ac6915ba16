"""Programs × tests through the real sandbox → 'executions' (rla_core/coding/execute.py)."""

from __future__ import annotations

import polars as pl
import pytest

from rla_core.algo.graders import outputs_match
from rla_core.coding.execute import generated_tests_frame, gt_tests_frame, run_tests
from rla_core.coding.tasks import CodingTask, TestMethod
from rla_core.coding.unit_tests import unit_test_rows
from rla_core.sandbox.runner import Sandbox

SUM_TWO = CodingTask(
    task_id="sum-two",
    question="Read two integers a and b. Print a + b.",
    test_method=TestMethod.STDIO,
    tests=(("1 2", "3"), ("-5 5", "0"), ("100 250", "350"), ("7 -10", "-3"), ("0 0", "0")),
)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(max_parallel=2)


def _ut(test_in: str, test_out: str | None) -> str:
    out = "" if test_out is None else f"**Test Output:**\n```\n{test_out}\n```\n"
    return f"**Test Input:**\n```\n{test_in}\n```\n{out}**Explanation:** x"


def test_outputs_match_is_whitespace_normalised() -> None:
    assert outputs_match("3\n", "3")
    assert outputs_match("1  2\n3 ", "1 2 3")
    assert not outputs_match("12", "1 2")


def test_execution_matrix_and_hand_checked_coding_metrics(sandbox: Sandbox) -> None:
    programs = pl.DataFrame(
        {
            "task_id": ["sum-two"] * 4,
            "rollout_id": [0, 1, 2, 3],
            "code": [
                "a, b = map(int, input().split())\nprint(a + b)",  # correct
                "a, b = map(int, input().split())\nprint(abs(a) + abs(b))",  # wrong on negatives
                "print(1 / 0)",  # crashes
                None,  # no python block was extracted
            ],
        }
    )
    uts = unit_test_rows(
        iteration=0,
        task_id="sum-two",
        prompts=["p"] * 4,
        responses=[_ut("2 2", "4"), _ut("-1 1", "0"), _ut("1 1", "3"), _ut("5 5", None)],
    )
    assert uts["valid"].to_list() == [True, True, True, False]
    assert uts["invalid_reason"][3] == "no **Test Output:** code block"
    tests = pl.concat([gt_tests_frame([SUM_TWO]), generated_tests_frame(uts, [SUM_TWO])])
    ex = run_tests(programs, tests, sandbox=sandbox, iteration=3)
    assert ex.height == 4 * 9  # 4 programs × (5 GT + 4 generated) tests
    matrix = {
        (r["rollout_id"], r["test_kind"], r["test_idx"]): (r["passed"], r["error_kind"])
        for r in ex.iter_rows(named=True)
    }
    # Rollout 0 passes every GT test and the three valid generated tests except the wrong one (1 1 → 3).
    assert [matrix[(0, "gt", k)][0] for k in range(5)] == [True] * 5
    assert [matrix[(0, "generated", k)] for k in range(4)] == [
        (True, "ok"),
        (True, "ok"),
        (False, "wrong_answer"),
        (False, "invalid_test"),
    ]
    # Rollout 1 (abs): GT inputs 1 2 / 100 250 / 0 0 have no negatives → pass; -5 5 and 7 -10 → wrong.
    assert [matrix[(1, "gt", k)][0] for k in range(5)] == [True, False, True, False, True]
    assert [matrix[(1, "generated", k)][0] for k in range(4)] == [True, False, False, False]
    assert {matrix[(2, kind, k)][1] for kind, n in (("gt", 5), ("generated", 3)) for k in range(n)} == {
        "runtime_error"
    }
    assert {matrix[(3, "gt", k)][1] for k in range(5)} == {"invalid_program"}
    assert ex["iteration"].unique().to_list() == [3]

    # Spec §2.3-2.5 numbers from this real matrix, by hand:
    gt_all = ex.filter(pl.col("test_kind") == "gt").group_by("rollout_id").agg(pl.col("passed").all())
    gt_codes = set(gt_all.filter(pl.col("passed"))["rollout_id"].to_list())
    assert gt_codes == {0}  # only the correct program passes all 5 GT tests
    acc = len(gt_codes) / 4  # 1 GT code / 4 codes
    assert acc == 0.25
    gen = ex.filter(pl.col("test_kind") == "generated")
    non_gt = {1, 2, 3}
    raw = []
    for k in range(4):
        col = {r: matrix[(r, "generated", k)][0] for r in range(4)}
        is_gt_ut = all(col[r] for r in gt_codes)
        raw.append(sum(not col[r] for r in non_gt) if is_gt_ut else -sum(col[r] for r in non_gt))
    # UT0 (2 2→4): GT-UT, abs passes it, crash+missing fail → +2; UT1 (-1 1→0): GT-UT, all 3 wrong
    # codes fail → +3; UT2 wrong test, no wrong code passes → −0; UT3 invalid → fails all → −0.
    assert raw == [2, 3, 0, 0]
    syn_ut_acc = 2 / 4  # UT0, UT1 are passed by every GT code
    perfect_ut_rate = 1 / 4  # only UT1 is also failed by every non-GT code
    assert (syn_ut_acc, perfect_ut_rate) == (0.5, 0.25)
    # The project's §2.5 implementation agrees on the same real executions.
    from rla_core.algo.coding_rewards import coding_metrics

    metrics = coding_metrics(programs.select("task_id", "rollout_id"), ex, uts)
    assert metrics == {"acc": 0.25, "syn_ut_acc": 0.5, "perfect_ut_rate": 0.25}
    assert gen.height == 16


def test_function_method_harness(sandbox: Sandbox) -> None:
    task = CodingTask(
        task_id="add",
        question="def add(a, b): return the sum",
        test_method=TestMethod.FUNCTION,
        tests=(("add(1, 2)", "3"), ("add(-1, 1)", "0")),
        entry_point="add",
        test_prelude="HELPER = 1",
    )
    programs = pl.DataFrame(
        {
            "task_id": ["add"] * 3,
            "rollout_id": [0, 1, 2],
            "code": ["def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b", "def add(a, b)"],
        }
    )
    ex = run_tests(programs, gt_tests_frame([task]), sandbox=sandbox, iteration=0).sort(
        "rollout_id", "test_idx"
    )
    # a - b: add(1, 2) = -1 ≠ 3 → wrong; add(-1, 1) = -2 ≠ 0 → wrong. Missing ':' → syntax error.
    assert ex["error_kind"].to_list() == [
        "ok",
        "ok",
        "wrong_answer",
        "wrong_answer",
        "runtime_error",
        "runtime_error",
    ]


def test_function_method_exit_zero_before_the_assert_is_not_a_pass(sandbox: Sandbox) -> None:
    # Exit status 0 alone is no proof: each of these exits 0 before the harness's assert can run.
    task = CodingTask(
        task_id="add",
        question="def add(a, b): return the sum",
        test_method=TestMethod.FUNCTION,
        tests=(("add(1, 2)", "3"),),
        entry_point="add",
    )
    hacks = [
        "import sys\nsys.exit(0)",  # while being defined
        "import os\ndef add(a, b):\n    os._exit(0)",  # while being called
        "def add(a, b):\n    raise SystemExit(0)",
        "def add(a, b):\n    print('rla-verdict-0000000000000000')\n    raise SystemExit(0)",  # a guessed line
    ]
    programs = pl.DataFrame(
        {"task_id": ["add"] * len(hacks), "rollout_id": list(range(len(hacks))), "code": hacks}
    )
    ex = run_tests(programs, gt_tests_frame([task]), sandbox=sandbox, iteration=0).sort("rollout_id")
    assert ex["passed"].to_list() == [False] * len(hacks)
    assert ex["error_kind"].to_list() == ["runtime_error"] * len(hacks)
