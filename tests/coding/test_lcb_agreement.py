"""Our LiveCodeBench grader agrees with LiveCodeBench's own on a table of (program, test) variants.

LiveCodeBench's grader is ``testing_util.run_test`` of the ``nvidia-livecodebench`` package (NVIDIA's PyPI
packaging of LiveCodeBench's ``lcb_runner``; its ``testing_util.py`` is LiveBench's copy of
``lcb_runner/evaluation/testing_util.py``, LiveCodeBench/LiveCodeBench 28fef95 but for the stdin mock).
``scripts/setup.sh`` installs it without its dependencies (the grader needs only numpy). It runs programs in
its own process, unsandboxed, after disabling os and shutil functions there: it runs here in a child
process, on this table of our own harmless programs only. Ours runs each in the sandbox.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from rla_core.coding.benchmarks import assemble_program, livecodebench_task
from rla_core.coding.execute import gt_tests_frame, run_tests
from rla_core.sandbox.runner import Sandbox
from tests.coding import benchmark_fixtures as fx
from tests.coding.test_benchmark_grading import lcb_row

pytest.importorskip(
    "livecodebench.evaluation.testing_util",
    reason="LiveCodeBench's grader is not installed (scripts/setup.sh: pip install --no-deps nvidia-livecodebench)",
)

SOLUTION = "class Solution:\n    def f(self, xs):\n        return {}"
# (name, program, test input, expected output, function name or None for stdin)
VARIANTS: list[tuple[str, str, str, str, str | None]] = [
    ("decimal equal", "print(0.75)", "", "0.7500000000000000", None),
    ("decimal unequal", "print(0.76)", "", "0.75", None),
    ("one line for two", "print(1, 2)", "", "1\n2", None),
    ("blank lines and spaces", "print('  3 4 ')\nprint(5)\nprint()\nprint()", "", "3 4\n5", None),
    ("case", "print('yes')", "", "YES", None),
    ("word and number", "print('abc 1')", "", "abc 1.0", None),
    ("exponent", "print('1e2')", "", "100", None),
    ("bare ceil", "a, b = map(int, input().split())\nprint(ceil(a / b))", "7 2", "4", None),
    ("stdin closed", "print(42)", "", "42", None),
    (
        "main guard",
        "def main():\n    print(input()[::-1])\nif __name__ == '__main__':\n    main()",
        "ab",
        "ba",
        None,
    ),
    ("tuple", SOLUTION.format("min(xs), max(xs)"), "[3, 1, 2]", "[1, 3]", "f"),
    ("wrong list", SOLUTION.format("[max(xs), min(xs)]"), "[3, 1, 2]", "[1, 3]", "f"),
    ("bool as int", SOLUTION.format("int(len(xs) > 1)"), "[3, 1]", "true", "f"),
    ("float for int", SOLUTION.format("sum(xs) / 1"), "[3, 1]", "4", "f"),
    ("top-level function", "def f(xs):\n    return sorted(xs)", "[3, 1, 2]", "[1, 2, 3]", "f"),
    ("two arguments", "def f(xs, k):\n    return xs[k]", "[3, 1, 2]\n2", "2", "f"),
    ("recursion 10000", "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)", "10000", "10000", "f"),
    ("raises", SOLUTION.format("xs[10]"), "[3]", "3", "f"),
]

# Runs LiveCodeBench's run_test on each variant in a forked process of its own (run_test disables os functions in
# the process that calls it, so a second call there fails; LiveCodeBench too grades each sample in a new process)
# and prints the verdicts.
_REFERENCE = """
import json, os, sys
from livecodebench.evaluation.testing_util import run_test
verdicts = []
for name, code, test_in, test_out, func in json.loads(open(sys.argv[1]).read()):
    read, write = os.pipe()
    if os.fork() == 0:
        sample = {"input_output": json.dumps({"inputs": [test_in], "outputs": [test_out], "fn_name": func})}
        results, _ = run_test(sample, test=code, timeout=6)
        os.write(write, b"1" if len(results) == 1 and results[0] is True else b"0")
        os._exit(0)
    os.close(write)
    verdicts.append(os.read(read, 1) == b"1")
    os.wait()
print(json.dumps(verdicts))
"""


def reference_verdicts(tmp_path: Path) -> list[bool]:
    table = tmp_path / "variants.json"
    table.write_text(json.dumps(VARIANTS))
    done = subprocess.run(
        [sys.executable, "-c", _REFERENCE, str(table)],
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )
    verdicts: list[bool] = json.loads(done.stdout.strip().splitlines()[-1])
    return verdicts


def our_verdicts() -> list[bool]:
    tasks, programs = [], []
    for k, (_, code, test_in, test_out, func) in enumerate(VARIANTS):
        tests = (fx.functional if func else fx.stdin)((test_in, test_out))
        task = livecodebench_task(lcb_row(f"v{k}", tests, func=func), release="release_v6")
        tasks.append(task)
        programs.append({"task_id": task.task_id, "rollout_id": 0, "code": assemble_program(code, task)})
    ex = run_tests(
        pl.DataFrame(programs), gt_tests_frame(tasks), sandbox=Sandbox(max_parallel=2), iteration=0
    )
    passed = dict(zip(ex["task_id"].to_list(), ex["passed"].to_list(), strict=True))
    return [passed[t.task_id] for t in tasks]


def test_our_livecodebench_grader_agrees_with_livecodebench(tmp_path: Path) -> None:
    ours, theirs = our_verdicts(), reference_verdicts(tmp_path)
    table = {name: (o, t) for (name, *_), o, t in zip(VARIANTS, ours, theirs, strict=True)}
    assert ours == theirs, {name: pair for name, pair in table.items() if pair[0] != pair[1]}
    # The table exercises both outcomes: the rules decide, not a blanket pass or fail.
    assert 0 < sum(ours) < len(ours)
