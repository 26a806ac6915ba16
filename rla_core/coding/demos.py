"""Warm-start demonstrations for the coding setting (supervised fine-tuning for warm starts, docs/architecture.md#cross-module-interfaces).

Tiny CPU models start knowing nothing; a short SFT on these rows puts some training problems inside
the accuracy bands the loop learns from (spec §2.3 filter 0.2 <= acc <= 0.8).

* :func:`policy_demo_rows`: policy prompt → a short reasoning line and the reference solution in a
  python block (what ``extract_program`` reads back).
* :func:`unit_test_demo_rows`: unit-test prompt → a correct test in the exact output format, whose
  output is obtained by *running the reference solution* in the sandbox on a known GT input (so the
  demo is right even if a GT output had odd whitespace).

Example:
    >>> from rla_core.coding.tasks import CodingTask
    >>> t = CodingTask.from_spec({"task_id": "a", "question": "Print 1.", "test_input": ["x"],
    ...     "test_output": ["1"], "solution": "print(1)"})
    >>> policy_demo_rows([t])["response"][0].endswith("```python\\nprint(1)\\n```")
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from rla_core.coding.prompts import task_policy_prompt, unit_test_prompt
from rla_core.coding.tasks import CodingTask, TestMethod
from rla_core.errors import EnvironmentSpecError
from rla_core.sandbox.runner import ErrorKind, Job, Limits, Sandbox


def _require_solution(task: CodingTask) -> str:
    if not task.solution:
        raise EnvironmentSpecError(
            f"problem '{task.task_id}' has no 'solution': warm-start demos need a reference solution"
        )
    return task.solution


def policy_demo_rows(tasks: Sequence[CodingTask]) -> pl.DataFrame:
    """SFT rows (prompt, response) for the policy: one per task with a reference solution."""
    rows = []
    for t in tasks:
        solution = _require_solution(t)
        rows.append(
            {
                "prompt": task_policy_prompt(t),
                "response": f"I read the input, compute the answer and print it.\n```python\n{solution.strip()}\n```",
            }
        )
    return pl.DataFrame(rows, schema={"prompt": pl.String, "response": pl.String})


def unit_test_response(test_input: str, test_output: str) -> str:
    """A unit-test answer in the exact format the UT prompt asks for (spec §5)."""
    return (
        "I compute the expected output step by step.\n"
        f"**Test Input:**\n```\n{test_input}\n```\n"
        f"**Test Output:**\n```\n{test_output}\n```\n"
        "**Explanation:** the reference behaviour on this input.\n"
    )


def unit_test_demo_rows(
    tasks: Sequence[CodingTask], *, sandbox: Sandbox, tests_per_task: int = 1
) -> pl.DataFrame:
    """SFT rows (prompt, response) for the unit-test generator (stdio tasks only).

    For each task, the first ``tests_per_task`` GT inputs are run through the reference solution in the
    sandbox; the produced stdout (whitespace-trimmed) is the demo's expected output. A reference that
    fails or disagrees with its own GT output raises EnvironmentSpecError naming the problem.
    """
    picked: list[tuple[CodingTask, str, str]] = []
    jobs: list[Job] = []
    for t in tasks:
        if t.test_method is not TestMethod.STDIO:
            continue
        solution = _require_solution(t)
        for test_in, test_out in t.tests[:tests_per_task]:
            picked.append((t, test_in, test_out))
            jobs.append(
                Job(
                    code=solution,
                    stdin=test_in,
                    limits=Limits.for_test(t.time_limit_s, memory_mb=256, output_kb=64),
                )
            )
    results = sandbox.run_many(jobs)
    rows = []
    for (t, test_in, test_out), res in zip(picked, results, strict=True):
        produced = res.stdout.strip()
        if res.error_kind is not ErrorKind.OK or produced.split() != test_out.split():
            raise EnvironmentSpecError(
                f"problem '{t.task_id}': the reference solution gives {res.error_kind} / {produced!r} on "
                f"input {test_in!r}, expected {test_out!r}; fix the solution or the test"
            )
        rows.append(
            {
                "prompt": unit_test_prompt(t.question, test_method=t.test_method, entry_point=t.entry_point),
                "response": unit_test_response(test_in, produced),
            }
        )
    return pl.DataFrame(rows, schema={"prompt": pl.String, "response": pl.String})
