"""Benchmark problems graded as their benchmarks grade them, through the real sandbox.

Rows are built in each benchmark's published layout (tests/coding/benchmark_fixtures.py) and loaded by
rla_core/coding/benchmarks.py; programs run in the bubblewrap sandbox. Each rule cites the code it follows:

* LiveCodeBench ``lcb_runner/evaluation/testing_util.py`` at LiveCodeBench/LiveCodeBench 28fef95 (LiveBench's
  copy: ``livebench/lcb_runner/evaluation/testing_util.py`` at LiveBench/LiveBench b0fb577): ``import_string``
  (header, recursion limit 50 000), ``grade_call_based`` (``json.loads`` of each argument line at run time,
  tuple → list), ``grade_stdio`` (stripped lines, Decimal tokens);
* LiveBench ``livebench/common.py::load_questions`` at b0fb577 (release and removal dates);
* CodeContests ``execution/tester_sandboxer.cc`` at google-deepmind/code_contests fa7a4f8 (comparison,
  RLIMIT_AS = problem limit + 32 MiB, RLIMIT_FSIZE 64 MiB) and ``convert_riegeli_to_json.py`` at acd2c5e
  (its JSON export).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from rla_core.algo.graders import Grader
from rla_core.coding.benchmarks import (
    assemble_program,
    codecontests_task,
    livecodebench_task,
    load_benchmark,
)
from rla_core.coding.execute import build_job, generated_tests_frame, gt_tests_frame, run_tests
from rla_core.coding.prompts import task_policy_prompt
from rla_core.coding.tasks import CodingTask
from rla_core.config import EvalGrader, ProblemFormat
from rla_core.errors import EnvironmentSpecError
from rla_core.sandbox.runner import Sandbox
from rla_core.settings.coding import with_eval_grader
from tests.coding import benchmark_fixtures as fx

CC_FAST = {"seconds": 2, "nanos": 0}


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(max_parallel=2)


def lcb_row(qid: str, tests: list[dict[str, str]], *, func: str | None = None) -> dict[str, Any]:
    """A LiveCodeBench code-generation row (its published fields), all tests public."""
    return {
        "question_title": qid, "question_content": f"Problem {qid}.", "platform": "leetcode" if func else "atcoder",
        "question_id": qid, "contest_id": "c", "contest_date": "2025-02-01T00:00:00", "starter_code": "",
        "difficulty": "easy", "public_test_cases": json.dumps(tests), "private_test_cases": "[]",
        "metadata": json.dumps({"func_name": func} if func else {}),
    }  # fmt: skip


def cc_row(name: str, tests: list[tuple[str, str]], **extra: Any) -> dict[str, Any]:
    """A CodeContests row (its Hugging Face layout), all tests public."""
    return {
        "name": name, "description": f"Problem {name}.", "public_tests": fx._io(*tests), "private_tests": None,
        "generated_tests": None, "time_limit": CC_FAST, "memory_limit_bytes": 256_000_000, "input_file": "",
        "output_file": "", "solutions": {"language": [], "solution": []},
    } | extra  # fmt: skip


def grade(sandbox: Sandbox, cases: list[tuple[CodingTask, str]]) -> list[tuple[bool, str]]:
    """(passed, error_kind) per GT test of each (task, program), in task then test order."""
    tasks = {t.task_id: t for t, _ in cases}
    programs = pl.DataFrame(
        [
            {"task_id": t.task_id, "rollout_id": k, "code": assemble_program(code, t)}
            for k, (t, code) in enumerate(cases)
        ]
    )
    ex = run_tests(programs, gt_tests_frame(list(tasks.values())), sandbox=sandbox, iteration=0)
    ex = ex.sort("rollout_id", "test_idx")
    return list(zip(ex["passed"].to_list(), ex["error_kind"].to_list(), strict=True))


def test_livecodebench_rules_in_the_sandbox(sandbox: Sandbox) -> None:
    def task(qid: str, tests: list[dict[str, str]], func: str | None = None) -> CodingTask:
        return livecodebench_task(lcb_row(qid, tests, func=func), release="release_v6")

    decimal = task("dec", fx.stdin(("", "0.7500000000000000")))  # an empty input: stdin closed
    lines = task("lines", fx.stdin(("", "1\n2")))
    ceil_ = task("ceil", fx.stdin(("7 2", "4")))
    pair = task("pair", fx.functional(("[3, 1, 2]", "[1, 3]")), func="minMax")
    deep = task("deep", fx.functional(("10000", "10000")), func="depth")
    cases = [
        # 0.75 vs 0.7500000000000000: equal Decimals → pass; 0.76 ≠ 0.75 → wrong.
        (decimal, "print(0.75)"),
        (decimal, "print(0.76)"),
        # "1 2" is one line where two are expected (1 ≠ 2 lines) → wrong; "1\n2" → pass.
        (lines, "print(1, 2)"),
        (lines, "print(1)\nprint(2)"),
        # ceil without an import: the header's `from math import *`.
        (ceil_, "a, b = map(int, input().split())\nprint(ceil(a / b))"),
        # A tuple result compared as a list: (1, 3) → [1, 3] == [1, 3].
        (pair, "class Solution:\n    def minMax(self, xs):\n        return min(xs), max(xs)"),
        # Recursion 10 000 deep: the header's limit is 50 000 (Python's default, 1 000, would fail).
        (deep, "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)"),
    ]
    ok, wrong = (True, "ok"), (False, "wrong_answer")
    assert grade(sandbox, cases) == [ok, wrong, wrong, ok, ok, ok, ok]
    # Under our rules (coding.eval_grader=rla) 0.75 and the tuple fail, as they did before.
    ours = {t.task_id: with_eval_grader(t, EvalGrader.RLA) for t in (decimal, pair)}
    assert grade(sandbox, [(ours[t.task_id], code) for t, code in (cases[0], cases[5])]) == [wrong, wrong]


def test_large_functional_arguments_are_parsed_at_run_time(sandbox: Sandbox) -> None:
    # Two 2·10⁵-element lists as LiveCodeBench stores them: one JSON value per argument line.
    n = 200_000
    xs, ys = list(range(n)), list(range(n, 0, -1))
    row = lcb_row("big", fx.functional((f"{json.dumps(xs)}\n{json.dumps(ys)}", str(n * n))), func="dot")
    task = livecodebench_task(row, release="release_v6")
    # Within the 256 MiB that compiling them as Python literals exhausted (coding.memory_limit_mb's default).
    small = dataclasses.replace(task, memory_limit_mb=256)
    right = "def dot(xs, ys):\n    return sum(a + b for a, b in zip(xs, ys))"  # every pair sums to n
    wrong = "def dot(xs, ys):\n    return sum(xs)"
    # The right answer passes; a wrong one on the huge input is a wrong answer, not a runtime error.
    assert grade(sandbox, [(small, right), (small, wrong)]) == [(True, "ok"), (False, "wrong_answer")]


def test_codecontests_rules_in_the_sandbox(sandbox: Sandbox) -> None:
    words = codecontests_task(cc_row("words", [("", "YES\n1\n")]), release="test")
    # A problem that reads input.txt and answers in output.txt (convert_riegeli_to_json writes these fields).
    files = codecontests_task(
        cc_row("files", [("2 3\n", "5\n")], input_file="input.txt", output_file="output.txt"), release="test"
    )
    cases = [
        # "yes" vs "YES": lower-cased → equal; 1.000001 vs 1: |1e-6| < 1e-5 → pass.
        (words, "print('yes')\nprint(1.000001)"),
        # 1.0001 vs 1: |1e-4| ≥ 1e-5 → wrong.
        (words, "print('yes')\nprint(1.0001)"),
        # Read the file, write the file: judged on output.txt.
        (
            files,
            "a, b = map(int, open('input.txt').read().split())\nopen('output.txt', 'w').write(str(a + b))",
        ),
        # Stdin and stdout still work (the tester's own way), when nothing is written to output.txt.
        (files, "a, b = map(int, input().split())\nprint(a + b)"),
        # A wrong answer in the file is wrong even if stdout is right.
        (files, "a, b = map(int, input().split())\nprint(a + b)\nopen('output.txt', 'w').write('6')"),
    ]
    assert grade(sandbox, cases) == [
        (True, "ok"), (False, "wrong_answer"), (True, "ok"), (True, "ok"), (False, "wrong_answer"),
    ]  # fmt: skip


def test_large_outputs_pass_and_an_output_over_the_cap_fails_alone(sandbox: Sandbox) -> None:
    mib = 1 << 20
    # A 1 MiB answer: 131 072 lines of "abcdefg" (8 bytes with the newline) = 1 048 576 bytes.
    line = "abcdefg"
    big = "\n".join([line] * (mib // 8))
    lcb = livecodebench_task(
        lcb_row("out", fx.stdin(("big", big), ("huge", "0"), ("small", "1"))), release="v"
    )
    cc = codecontests_task(cc_row("out", [("big", big), ("huge", "0"), ("small", "1")]), release="test")
    # "huge": 65 MiB, over the 64 MiB cap of both formats → output_limit for that test alone.
    program = (
        "import sys\nq = input()\n"
        f"if q == 'big':\n    sys.stdout.write('\\n'.join([{line!r}] * {mib // 8}))\n"
        f"elif q == 'huge':\n    sys.stdout.write('x' * {65 * mib})\nelse:\n    print(1)"
    )
    expected = [(True, "ok"), (False, "output_limit"), (True, "ok")]
    assert grade(sandbox, [(lcb, program), (cc, program)]) == expected * 2


def test_limits_and_tests_of_every_kind_follow_the_task(sandbox: Sandbox) -> None:
    task = codecontests_task(cc_row("lim", [("", "1")], memory_limit_bytes=64 << 20), release="test")
    # CodeContests: 64 MiB + 32 MiB for the interpreter = 96 MiB; its output cap is 64 MiB.
    job = build_job(_pairs(task, "print(1)")[0], memory_mb=256, output_kb=256)
    assert (job.limits.memory_mb, job.limits.output_kb) == (96, 64 * 1024)
    # A reward-model test of a benchmark task is judged by the task's grader too ("YES" vs "yes" passes),
    # and keeps our rule that an empty test is invalid; the GT test with an empty input ran (stdin closed).
    unit_tests = pl.DataFrame(
        {"task_id": ["cc-lim"] * 2, "test_idx": [0, 1], "test_input": ["", ""], "test_output": ["YES", ""],
         "valid": [True, True]}
    )  # fmt: skip
    tests = generated_tests_frame(unit_tests, [task])
    assert tests["valid"].to_list() == [False, False]
    unit_tests = unit_tests.with_columns(pl.Series("test_input", ["x", "x"]))
    programs = pl.DataFrame({"task_id": ["cc-lim"], "rollout_id": [0], "code": ["print('yes')"]})
    ex = run_tests(
        programs,
        pl.concat([gt_tests_frame([task]), generated_tests_frame(unit_tests, [task])]),
        sandbox=sandbox,
        iteration=0,
    ).sort("test_kind", "test_idx")
    # generated 0: "yes" vs "YES" → pass; generated 1: empty output → invalid; gt 0: "yes" vs "1" → wrong.
    assert ex["error_kind"].to_list() == ["ok", "invalid_test", "wrong_answer"]


def _pairs(task: CodingTask, code: str) -> list[Any]:
    from rla_core.coding.execute import _pairs_of

    return _pairs_of(gt_tests_frame([task]), code)


def test_benchmark_gt_tests_may_be_empty_but_ours_may_not() -> None:
    # A CodeContests test with no input (stdin closed) and a LiveCodeBench test with an empty answer load.
    assert codecontests_task(cc_row("e", [("", "42\n")]), release="test").tests == (("", "42\n"),)
    assert livecodebench_task(lcb_row("e", fx.stdin(("1", ""))), release="v").tests == (("1", ""),)
    with pytest.raises(EnvironmentSpecError, match="is empty"):
        CodingTask.from_spec({"task_id": "ours", "question": "q", "test_input": [""], "test_output": ["1"]})


def test_codecontests_json_export_loads(tmp_path: Path) -> None:
    # convert_riegeli_to_json.py: one JSON array; tests and solutions as lists of objects; the Duration as
    # protobuf text; input_file/output_file only when set.
    problem = {
        "source": 2, "name": "1900_A. Double It", "description": "Print 2n.", "difficulty": 7,
        "solutions": [{"language": 2, "solution": "int main(){}"}, {"language": 3, "solution": "print(2)"}],
        "incorrect_solutions": [], "public_tests": [{"input": "1\n", "output": "2\n"}],
        "private_tests": [{"input": "2\n", "output": "4\n"}], "generated_tests": [],
        "time_limit": "seconds: 1\nnanos: 500000000\n", "memory_limit_bytes": 256000000,
        "cf_tags": ["math"], "is_description_translated": False,
    }  # fmt: skip
    files = dict(problem, name="files", input_file="input.txt", output_file="output.txt")
    path = tmp_path / "code_contests_valid.json"
    path.write_text("[\n" + ",\n".join(json.dumps(p) for p in (problem, files)) + "\n]")
    loaded = load_benchmark(path, ProblemFormat.CODECONTESTS)
    assert loaded.invalid == [] and loaded.per_release == {"valid": 2}
    double, with_files = loaded.tasks
    assert double.tests == (("1\n", "2\n"), ("2\n", "4\n")) and double.time_limit_s == 1.5
    assert double.solution == "print(2)" and double.grader is Grader.CODECONTESTS
    assert (with_files.input_file, with_files.output_file) == ("input.txt", "output.txt")


def _livebench_file(tmp_path: Path) -> Path:
    base = fx.LIVEBENCH_ROWS[0]
    dates = [  # (question id, release date, removal date)
        ("first", "2024-06-24", ""),
        ("removed", "2024-06-24", "2024-11-25"),
        ("later", "2024-11-25", ""),
    ]
    rows = [
        dict(base, question_id=q, livebench_release_date=r, livebench_removal_date=d) for q, r, d in dates
    ]
    rows.append(dict(base, question_id="bcb", task="code_generation", livebench_release_date="2024-11-25"))
    path = tmp_path / "test-00000-of-00001.parquet"
    pl.DataFrame(rows).write_parquet(path)
    return path


def test_livebench_releases_are_selected_as_livebench_selects_them(tmp_path: Path) -> None:
    path = _livebench_file(tmp_path)
    fmt = ProblemFormat.LIVEBENCH
    # Release 2024-08-31 is not in the file: refused with the list of its releases.
    with pytest.raises(EnvironmentSpecError, match=r"not a release of this LiveBench file.*2024-06-24"):
        load_benchmark(path, fmt, livebench_release="2024-08-31")
    # 2024-06-24: "removed" (removed 2024-11-25, later than the release) is in; "later" was added after.
    before = load_benchmark(path, fmt, livebench_release="2024-06-24")
    assert [t.problem_id for t in before.tasks] == ["first", "removed"]
    assert before.per_release == {"2024-06-24": 2}
    # Default: the newest release, 2024-11-25: "removed" is out (its removal date is not later), the
    # BigCodeBench-style question is counted once as not supported yet, not reported as malformed.
    after = load_benchmark(path, fmt)
    assert after.release == "2024-11-25" and after.invalid == []
    assert [t.problem_id for t in after.tasks] == ["first", "later"]
    assert after.left_out == {
        "removed by release 2024-11-25": 1,
        "task 'code_generation' (BigCodeBench-style tests): not supported yet": 1,
    }
    assert "LiveBench release 2024-11-25: 2 problems loaded (2024-06-24: 1, 2024-11-25: 1)" in after.summary()


def test_a_livebench_row_keeps_its_own_prompt() -> None:
    tasks = load_benchmark(fx.LIVEBENCH_FILE, ProblemFormat.LIVEBENCH).tasks
    completion = next(t for t in tasks if t.partial_solution)
    # LiveBench's turn is the whole prompt (one "### Answer" section, its completion rule): used as is.
    assert task_policy_prompt(completion) == fx.LIVEBENCH_ROWS[2]["turns"][0]
    assert task_policy_prompt(completion).count("### Answer") == 1
    # A LiveCodeBench row has no prompt of its own: the policy's template wraps its question.
    lcb = load_benchmark(fx.LCB_FILE, ProblemFormat.LIVECODEBENCH).tasks[0]
    assert task_policy_prompt(lcb).startswith("Solve the programming problem below")


@pytest.mark.parametrize(
    "module", ["rla_core.coding.execute", "rla_core.coding.prompts", "rla_core.coding.tasks"]
)
def test_docstring_examples(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_the_evaluation_warns_once_with_what_a_release_leaves_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rla_core.config import CodingConfig, Setting
    from rla_core.settings.coding import CodingSetting
    from rla_core.stage_inputs import CodingEval, EvaluateInputs

    path = _livebench_file(tmp_path)
    section = CodingConfig(eval_problems=str(path), eval_format=ProblemFormat.LIVEBENCH)
    coding = CodingEval.model_validate({k: getattr(section, k) for k in CodingEval.model_fields})
    # Only the coding section is read: the rest of the slice is left out (building it would load torch).
    inputs = EvaluateInputs.model_construct(setting=Setting.CODING, coding=coding)
    with caplog.at_level("INFO", logger="rla_core.settings.coding"):
        played = CodingSetting().eval_tasks(inputs, None)
    assert [t.task_id for t in played] == ["livebench-first", "livebench-later"]
    (record,) = caplog.records
    assert (
        record.levelname == "WARNING"
        and "1 task 'code_generation' (BigCodeBench-style tests)" in record.message
    )
