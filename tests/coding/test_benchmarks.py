"""Loaders of the paper's coding benchmarks (rla_core/coding/benchmarks.py) on fixtures in their layouts."""

from __future__ import annotations

import base64
import copy
import doctest
import json
import pickle
import re
import zlib
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from rla_core.algo.graders import Grader
from rla_core.algo.metrics import EVAL_CODE_ACC, EVAL_DETECT, EVAL_UT_ACC, coding_eval_metrics
from rla_core.coding import benchmarks
from rla_core.coding.benchmarks import (
    LCB_PROGRAM_HEADER,
    assemble_program,
    decode_test_cases,
    load_benchmark,
    plain_unpickle,
)
from rla_core.coding.execute import generated_tests_frame, gt_tests_frame, run_tests
from rla_core.coding.tasks import CodingTask, TestForm, TestMethod
from rla_core.config import ProblemFormat
from rla_core.errors import EnvironmentSpecError
from rla_core.sandbox.runner import Sandbox
from tests.coding import benchmark_fixtures as fx

LCB, LIVEBENCH, CC = ProblemFormat.LIVECODEBENCH, ProblemFormat.LIVEBENCH, ProblemFormat.CODECONTESTS
FILES = {LCB: fx.LCB_FILE, LIVEBENCH: fx.LIVEBENCH_FILE, CC: fx.CODECONTESTS_FILE}
ROWS = {LCB: fx.LCB_ROWS, LIVEBENCH: fx.LIVEBENCH_ROWS, CC: fx.CODECONTESTS_ROWS}


def test_docstring_examples() -> None:
    result = doctest.testmod(benchmarks, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("fmt", [LCB, LIVEBENCH, CC])
def test_committed_fixtures_are_what_the_fixture_module_writes(fmt: ProblemFormat, tmp_path: Path) -> None:
    fx.write(tmp_path)
    fresh = tmp_path / FILES[fmt].relative_to(fx.ROOT)
    read = pl.read_parquet if fresh.suffix == ".parquet" else (lambda p: pl.read_ndjson(p))
    assert read(FILES[fmt]).equals(read(fresh))


def test_livecodebench_rows_map_onto_tasks() -> None:
    loaded = load_benchmark(fx.LCB_FILE, LCB)
    tasks = loaded.tasks
    assert loaded.invalid == [] and loaded.per_release == {"release_v6": 3}
    by_id = {t.task_id: t for t in tasks}
    assert list(by_id) == ["lcb-abc900_a", "lcb-3999", "lcb-4000"]
    stdin, packed, plain = by_id.values()
    # Public tests first, then the private ones (packed: base64 → zlib → pickle → JSON; or plain JSON).
    assert stdin.test_method is TestMethod.STDIO
    assert stdin.tests == (("3 4", "12"), ("0 7", "0"), ("-2 5", "-10"))
    assert packed.test_method is TestMethod.FUNCTION and packed.entry_point == "countEven"
    # Functional tests stay in LiveCodeBench's form (one JSON value per argument line), parsed when they run.
    assert packed.tests[0] == ("[1, 2, 4]", "2") and len(packed.tests) == 4
    assert plain.tests[0] == ('["a", "b"]\n"-"', '"a-b"') and len(plain.tests) == 3
    assert (packed.gt_test_form, stdin.gt_test_form) == (TestForm.JSON, TestForm.CALL)
    assert "class Solution" in packed.question and "Starter code" in packed.question
    assert "Solution().countEven" in packed.test_prelude
    # Provenance: testN.jsonl holds release_vN's problems; LCB's 6 s limit; LCB's imports before programs.
    assert {(t.source, t.release) for t in tasks} == {("livecodebench", "release_v6")}
    assert [t.problem_id for t in tasks] == ["abc900_a", "3999", "4000"]
    assert {t.time_limit_s for t in tasks} == {6.0}
    assert {t.program_header for t in tasks} == {LCB_PROGRAM_HEADER}
    # LiveCodeBench's grader and its bounded memory; no prompt of its own (the policy's template is used).
    assert {(t.grader, t.memory_limit_mb, t.prompt) for t in tasks} == {(Grader.LIVECODEBENCH, 4096, "")}
    # Provenance reaches the task registry's rows through the spec, and round-trips.
    assert packed.spec()["release"] == "release_v6" and packed.spec()["problem_id"] == "3999"
    assert CodingTask.from_spec(packed.spec()) == packed


def test_livebench_rows_map_onto_tasks() -> None:
    loaded = load_benchmark(fx.LIVEBENCH_FILE, LIVEBENCH, time_limit_s=3.0)
    assert loaded.invalid == [] and loaded.release == "2025-04-02"
    stdin, functional, completion = loaded.tasks
    tasks = loaded.tasks
    assert stdin.test_method is TestMethod.STDIO and len(stdin.tests) == 3
    # The policy sees LiveBench's own prompt as is; the reward model the problem (the LiveCodeBench row's).
    assert stdin.prompt == fx.LIVEBENCH_ROWS[0]["turns"][0]
    assert stdin.question == fx.LIVEBENCH_ROWS[0]["original_json"]["question_content"]
    assert {t.grader for t in tasks} == {Grader.LIVECODEBENCH}
    assert stdin.solution == fx.LIVEBENCH_ROWS[0]["solution"]
    assert functional.entry_point == "maxGap" and functional.tests[0] == ("[1, 5, 2]", "4")
    assert completion.partial_solution == fx.LIVEBENCH_ROWS[2]["partial_solution"]
    assert completion.tests[0] == ("[1, 2, 2]", "true")  # JSON, read when the test runs
    assert {(t.source, t.release, t.time_limit_s) for t in tasks} == {("livebench", "2025-04-02", 3.0)}
    assert stdin.problem_id == fx.LIVEBENCH_ROWS[0]["question_id"]
    assert CodingTask.from_spec(completion.spec()) == completion


def test_codecontests_rows_map_onto_tasks() -> None:
    loaded = load_benchmark(fx.CODECONTESTS_FILE, CC)
    assert loaded.invalid == [] and loaded.per_release == {"test": 2}
    tasks = loaded.tasks
    double, pair = tasks
    # public + private + generated, in that order; CodeContests' own time limits (seconds + nanos).
    assert double.tests == (("2\n", "4\n"), ("5\n", "10\n"), ("0\n", "0\n"), ("-3\n", "-6\n"))
    assert (double.time_limit_s, pair.time_limit_s) == (2.0, 1.5)
    assert double.solution == "print(2 * int(input()))"  # the first Python 3 solution (language 3)
    assert {(t.source, t.release, t.test_method) for t in tasks} == {
        ("codecontests", "test", TestMethod.STDIO)
    }
    assert double.task_id == "cc-1900_A.-Double-It" and double.problem_id == "1900_A. Double It"
    # CodeContests' grader; memory: the row's 256 000 000 bytes + 32 MiB, in MiB rounded up = 277.
    assert {(t.grader, t.memory_limit_mb) for t in tasks} == {(Grader.CODECONTESTS, 277)}
    assert load_benchmark(fx.CODECONTESTS_FILE, CC, limit=1).tasks == [double]


def _jsonl(tmp_path: Path, name: str, rows: list[Any]) -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, default=str)) + "\n" for r in rows))
    return path


def _with(row: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(row)
    for key, value in changes.items():
        if value is _DROP:
            out.pop(key)
        else:
            out[key] = value
    return out


_DROP = object()


def _hostile(path: Path) -> str:
    """A packed test field whose pickle would create ``path`` when loaded by a plain ``pickle.loads``."""

    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (path,))

    return base64.b64encode(zlib.compress(pickle.dumps(Payload()))).decode()


def _reasons(path: Path, fmt: ProblemFormat) -> dict[str, str]:
    loaded = load_benchmark(path, fmt)
    tasks, invalid = loaded.tasks, loaded.invalid
    assert [t.problem_id for t in tasks] == ["good"]
    # Every malformed row is named by file and line, and its reason names the field.
    assert all(p.where.startswith(f"{path.name}:") for p in invalid)
    return {p.task_id or p.where: p.reason for p in invalid}


def test_malformed_livecodebench_rows_are_reported_with_file_line_and_field(tmp_path: Path) -> None:
    good = _with(fx.LCB_ROWS[1], question_id="good")
    sentinel = tmp_path / "pwned"
    rows: list[Any] = [
        good,
        _with(good, question_id=_DROP, question_content="x"),
        _with(good, question_id="content", question_content="  "),
        _with(good, question_id="public", public_test_cases="{not json"),
        _with(good, question_id="private", private_test_cases="@@not base64@@"),
        _with(good, question_id="zlib", private_test_cases=base64.b64encode(b"not zlib").decode()),
        _with(good, question_id="hostile", private_test_cases=_hostile(sentinel)),
        _with(good, question_id="nonstr", private_test_cases=base64.b64encode(zlib.compress(pickle.dumps([1]))).decode()),
        _with(good, question_id="shape", public_test_cases=json.dumps([{"input": "1", "output": "1"}])),
        _with(good, question_id="mixed", public_test_cases=json.dumps(fx.stdin(("1", "1")))),
        _with(good, question_id="none", public_test_cases="[]", private_test_cases="[]"),
        _with(good, question_id="func", metadata="{}"),
        _with(good, question_id="meta", metadata="[1]"),
        _with(good, question_id="arg", public_test_cases=json.dumps(fx.functional(("[1, 2", "1")))),
        "{not json",
        "[1, 2]",
    ]  # fmt: skip
    reasons = _reasons(_jsonl(tmp_path, "test.jsonl", rows), LCB)
    assert not sentinel.exists()  # the hostile pickle was refused, not run
    assert "field 'question_id'" in reasons["test.jsonl:2"]
    assert "field 'question_content'" in reasons["content"]
    assert "field 'public_test_cases'" in reasons["public"] and "neither JSON nor base64" in reasons["public"]
    assert "field 'private_test_cases' is neither JSON nor base64" in reasons["private"]
    assert "not zlib data" in reasons["zlib"]
    assert "refused pickle" in reasons["hostile"] and "not a plain value" in reasons["hostile"]
    assert "must pickle a JSON string" in reasons["nonstr"]
    assert "field 'public_test_cases[0]'" in reasons["shape"] and "testtype" in reasons["shape"]
    assert "mixes test types ['functional', 'stdin']" in reasons["mixed"]
    assert "has no tests" in reasons["none"]
    assert "field 'metadata.func_name'" in reasons["func"]
    assert "field 'metadata' must be a JSON object" in reasons["meta"]
    assert "one JSON value per argument line" in reasons["arg"]
    assert reasons["test.jsonl:15"].startswith("not valid JSON")
    assert "must be a JSON object" in reasons["test.jsonl:16"]
    assert all(
        "problem '" in r and "test.jsonl:" in r for k, r in reasons.items() if not k.startswith("test.")
    )


def test_malformed_livebench_rows_are_reported_with_file_row_and_field(tmp_path: Path) -> None:
    good = _with(fx.LIVEBENCH_ROWS[2], question_id="good")
    rows = [
        good,
        _with(good, question_id="task", task="agentic_coding"),
        _with(good, question_id="turns", turns=[]),
        _with(good, question_id="original", original_json=None),
        _with(good, question_id="partial", partial_solution=""),
        _with(good, question_id="packed", private_test_cases="%%%"),
    ]
    # LiveBench ships Parquet: the malformed rows are named by their row number.
    path = tmp_path / "test-00000-of-00001.parquet"
    pl.DataFrame(rows).write_parquet(path)
    reasons = _reasons(path, LIVEBENCH)
    assert (
        "field 'task' is 'agentic_coding'" in reasons["task"]
        and "test-00000-of-00001.parquet:row 2" in reasons["task"]
    )
    assert "field 'turns'" in reasons["turns"]
    assert "field 'original_json' must be a JSON object" in reasons["original"]
    assert "field 'partial_solution'" in reasons["partial"]
    assert "field 'private_test_cases'" in reasons["packed"]


def test_malformed_codecontests_rows_are_reported_with_file_line_and_field(tmp_path: Path) -> None:
    good = _with(fx.CODECONTESTS_ROWS[0], name="good")
    rows = [
        good,
        _with(good, name=_DROP),
        _with(good, name="desc", description=""),
        _with(good, name="uneq", private_tests={"input": ["1"], "output": []}),
        _with(good, name="shape", generated_tests=[1, 2]),
        _with(good, name="limit", time_limit=[2]),
        _with(good, name="text", time_limit="2s"),
        _with(good, name="memory", memory_limit_bytes=-1),
        _with(good, name="file", input_file="../etc/passwd"),
        _with(good, name="nanos", time_limit={"seconds": 1.5, "nanos": 0}),
        _with(good, name="empty", public_tests=None, private_tests={"input": [], "output": []}, generated_tests=None),
        _with(good, name="slow", time_limit={"seconds": 120, "nanos": 0}),
    ]  # fmt: skip
    reasons = _reasons(_jsonl(tmp_path, "valid.jsonl", rows), CC)
    assert "field 'name'" in reasons["valid.jsonl:2"]
    assert "field 'description'" in reasons["desc"]
    assert "field 'private_tests' must hold equal-length" in reasons["uneq"]
    assert "field 'generated_tests'" in reasons["shape"]
    assert "field 'time_limit' must be {seconds, nanos}" in reasons["limit"]
    assert (
        "field 'time_limit' text must be 'seconds: S nanos: N'" in reasons["text"]
    )  # the JSON export's form
    assert "field 'memory_limit_bytes'" in reasons["memory"]
    assert "field 'input_file' must be a plain file name" in reasons["file"]
    assert "integer seconds and nanos" in reasons["nanos"]
    assert "field 'test_input' is empty" in reasons["empty"]
    assert "field 'time_limit_s'" in reasons["slow"]


def test_duplicate_ids_and_missing_files_raise(tmp_path: Path) -> None:
    row = fx.CODECONTESTS_ROWS[0]
    with pytest.raises(EnvironmentSpecError, match=re.escape("duplicate problem id '1900_A. Double It'")):
        load_benchmark(_jsonl(tmp_path, "test.jsonl", [row, row]), CC)
    with pytest.raises(EnvironmentSpecError, match=re.escape("does not exist; docs/coding-benchmarks.md")):
        load_benchmark(tmp_path / "missing.parquet", LIVEBENCH)


def test_a_hostile_pickle_is_refused_before_anything_runs(tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"
    hostile = _hostile(sentinel)
    with pytest.raises(EnvironmentSpecError, match="refused pickle: opcode STACK_GLOBAL"):
        decode_test_cases(hostile, field="private_test_cases")
    assert not sentinel.exists()
    # A protocol-0 pickle names its global with GLOBAL, and one with REDUCE on a memoised global: refused.
    for proto in (0, 2):
        with pytest.raises(pickle.UnpicklingError, match="not a plain value"):
            plain_unpickle(pickle.dumps(Path("x"), protocol=proto))
    # The unpickler itself resolves no global either (were a named opcode ever let through).
    with pytest.raises(pickle.UnpicklingError, match="only plain values"):
        benchmarks._PlainUnpickler(__import__("io").BytesIO(pickle.dumps(len))).load()
    # Plain values load; so does the real format's payload, a pickled JSON string.
    assert plain_unpickle(pickle.dumps(["a", 1, 2.0, None, True, {"k": (1, 2)}, {3}])) == [
        "a",
        1,
        2.0,
        None,
        True,
        {"k": (1, 2)},
        {3},
    ]
    # A zlib bomb is refused before it is inflated past the bound.
    bomb = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(["x" * 10_000])))).decode()
    with pytest.raises(EnvironmentSpecError, match="inflates past 1000 bytes"):
        decode_test_cases(bomb, field="private_test_cases", max_bytes=1000)


def test_programs_are_assembled_as_the_benchmarks_grade_them() -> None:
    completion = next(t for t in load_benchmark(fx.LIVEBENCH_FILE, LIVEBENCH).tasks if t.partial_solution)
    rest = "        return True"
    # LiveBench: the partial solution goes before a completion, not before a program that repeats it.
    assert assemble_program(rest, completion) == f"{LCB_PROGRAM_HEADER}{completion.partial_solution}\n{rest}"
    whole = completion.partial_solution + "return True"
    assert assemble_program(whole, completion) == LCB_PROGRAM_HEADER + whole
    ours = CodingTask("t", "q", TestMethod.STDIO, (("1", "1"),))
    assert assemble_program("print(1)", ours) == "print(1)"


# Hand-checked (tests/coding/benchmark_fixtures.py: every task has a right program r = rollout 0, a wrong
# one w = rollout 1 failing a GT test, UT 0 right, UT 1 with a wrong expected output):
#   code accuracy = programs passing every GT test / programs = 1 of 2 per task = 0.5 for every set;
#   UT accuracy  = tests every GT program (r) passes / tests = UT 0 of each task = 0.5 for every set;
#   detection    = tests r passes and w fails / tests:
#     LiveCodeBench: UT 0 of all 3 tasks tells them apart → 3/6 = 0.5;
#     LiveBench: not the sum task's (sum and max of one number agree) → 2/6;
#     CodeContests: not Largest Pair's (4 4: 8 either way) → 1/4.
EXPECTED = {
    LCB: {EVAL_CODE_ACC: 0.5, EVAL_UT_ACC: 0.5, EVAL_DETECT: 0.5},
    LIVEBENCH: {EVAL_CODE_ACC: 0.5, EVAL_UT_ACC: 0.5, EVAL_DETECT: 2 / 6},
    CC: {EVAL_CODE_ACC: 0.5, EVAL_UT_ACC: 0.5, EVAL_DETECT: 1 / 4},
}


@pytest.mark.parametrize("fmt", [LCB, LIVEBENCH, CC])
def test_the_three_metrics_on_known_programs_and_tests(fmt: ProblemFormat) -> None:
    tasks = load_benchmark(FILES[fmt], fmt).tasks
    by_id = {t.task_id: t for t in tasks}
    programs = pl.DataFrame(
        [
            {"task_id": tid, "rollout_id": k, "code": assemble_program(code, by_id[tid])}
            for tid in by_id
            for k, code in enumerate(fx.PROGRAMS[tid])
        ]
    )
    unit_tests = pl.DataFrame(
        [
            {"task_id": tid, "test_idx": k, "test_input": i, "test_output": o, "valid": True}
            for tid in by_id
            for k, (i, o) in enumerate(fx.UNIT_TESTS[tid])
        ]
    )
    sandbox = Sandbox(max_parallel=2)
    gt = run_tests(programs, gt_tests_frame(tasks), sandbox=sandbox, iteration=0)
    generated = run_tests(programs, generated_tests_frame(unit_tests, tasks), sandbox=sandbox, iteration=0)
    # The right programs pass every GT test: the harness (header, prelude, completion) grades as intended.
    right = gt.filter(pl.col("rollout_id") == 0)
    assert right["passed"].all(), right.filter(~pl.col("passed"))
    metrics = coding_eval_metrics(
        programs.select("task_id", "rollout_id"), pl.concat([gt, generated]), unit_tests
    )
    assert metrics == pytest.approx(EXPECTED[fmt])
