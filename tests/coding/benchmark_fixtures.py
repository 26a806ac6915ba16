"""Fixture problems in the published layouts of LiveCodeBench, LiveBench and CodeContests.

Written for this project (no benchmark data is copied): a few small problems per format, stdin and
functional, each with a right program and a deliberately wrong one, and two unit tests a reward model
might write (one right and discriminating, one with a wrong expected output). The committed files under
``tests/fixtures/coding_benchmarks/`` are what :func:`write` produces; regenerate them with
``python -m tests.coding.benchmark_fixtures``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import pickle
import zlib
from pathlib import Path
from typing import Any

import polars as pl

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "coding_benchmarks"
LCB_FILE = ROOT / "livecodebench" / "test6.jsonl"  # LiveCodeBench's release_v6 additions
LIVEBENCH_FILE = ROOT / "livebench" / "test-00000-of-00001.parquet"
CODECONTESTS_FILE = ROOT / "codecontests" / "test-00000-of-00001.parquet"


def pack(tests: list[dict[str, str]]) -> str:
    """LiveCodeBench's packed private tests: base64 of zlib of a pickled JSON string."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def stdin(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"input": i, "output": o, "testtype": "stdin"} for i, o in pairs]


def functional(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"input": i, "output": o, "testtype": "functional"} for i, o in pairs]


# ---- LiveCodeBench -----------------------------------------------------------------------------------

LCB_ROWS: list[dict[str, Any]] = [
    {
        "question_title": "Multiply",
        "question_content": "You are given two integers A and B on one line. Print A times B.",
        "platform": "atcoder",
        "question_id": "abc900_a",
        "contest_id": "abc900",
        "contest_date": "2025-02-01T00:00:00",
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": json.dumps(stdin(("3 4", "12"))),
        "private_test_cases": pack(stdin(("0 7", "0"), ("-2 5", "-10"))),
        "metadata": "{}",
    },
    {
        "question_title": "count-even-numbers",
        "question_content": "Given an integer array nums, return how many of its elements are even.",
        "platform": "leetcode",
        "question_id": "3999",
        "contest_id": "weekly-contest-900",
        "contest_date": "2025-02-02T00:00:00",
        "starter_code": "class Solution:\n    def countEven(self, nums: List[int]) -> int:\n        ",
        "difficulty": "easy",
        "public_test_cases": json.dumps(functional(("[1, 2, 4]", "2"))),
        "private_test_cases": pack(functional(("[]", "0"), ("[7, 9]", "0"), ("[2, 2, 3, 8]", "3"))),
        "metadata": json.dumps({"func_name": "countEven"}),
    },
    {
        "question_title": "join-words",
        "question_content": "Given a list of strings words and a string sep, return the words joined by sep.",
        "platform": "leetcode",
        "question_id": "4000",
        "contest_id": "weekly-contest-900",
        "contest_date": "2025-02-02T00:00:00",
        "starter_code": "class Solution:\n    def joinWords(self, words: List[str], sep: str) -> str:\n        ",
        "difficulty": "easy",
        "public_test_cases": json.dumps(functional(('["a", "b"]\n"-"', '"a-b"'))),
        # Stored as plain JSON: LiveCodeBench's loader tries JSON before the packed form.
        "private_test_cases": json.dumps(
            functional(('["x"]\n", "', '"x"'), ('["p", "q", "r"]\n""', '"pqr"'))
        ),
        "metadata": json.dumps({"func_name": "joinWords"}),
    },
]

# ---- LiveBench (coding category) ---------------------------------------------------------------------


def _original(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("question_title", "question_content", "platform", "question_id", "contest_id", "starter_code")
    return {
        **{k: row[k] for k in keys},
        "contest_date": dt.datetime(2025, 3, 1),
        "difficulty": "easy",
        "metadata": row["metadata"],
    }


_LB_PROMPT = (
    "### Instructions: You will be given a question (problem specification) and will generate a correct "
    "Python program that matches the specification and passes all tests.\n\n### Question:\n{q}\n\n"
    "### Answer: (use the provided format with backticks)\n"
)
_LB_SUM = {
    "question_title": "Sum of N",
    "question_content": "The first line holds N, the second N integers. Print their sum.",
    "platform": "atcoder",
    "question_id": "abc901_a",
    "contest_id": "abc901",
    "starter_code": "",
    "metadata": "{}",
}
_LB_GAP = {
    "question_title": "max-adjacent-gap",
    "question_content": "Given an integer array nums of length at least 2, return the largest absolute "
    "difference between two adjacent elements.",
    "platform": "leetcode",
    "question_id": "4001",
    "contest_id": "weekly-contest-901",
    "starter_code": "class Solution:\n    def maxGap(self, nums: List[int]) -> int:\n        ",
    "metadata": json.dumps({"func_name": "maxGap"}),
}
_LB_SORTED = {
    "question_title": "is-sorted",
    "question_content": "Given an integer array nums, return true if it is sorted in non-decreasing order.",
    "platform": "leetcode",
    "question_id": "4002",
    "contest_id": "weekly-contest-901",
    "starter_code": "class Solution:\n    def isSorted(self, nums: List[int]) -> bool:\n        ",
    "metadata": json.dumps({"func_name": "isSorted"}),
}


def _livebench_row(
    question_id: str,
    source: dict[str, Any],
    turn: str,
    public: list[dict[str, str]],
    private: list[dict[str, str]],
    *,
    task: str = "LCB_generation",
    solution: str = "",
    remainder: str = "",
    partial_solution: str = "",
) -> dict[str, Any]:
    """One row of LiveBench's coding table for the LiveCodeBench problem ``source``."""
    return {
        "question_id": question_id,
        "category": "coding",
        "turns": [turn],
        "question_title": source["question_title"],
        "public_test_cases": json.dumps(public),
        "private_test_cases": pack(private),
        "original_json": _original(source),
        "release_date": dt.datetime(2025, 3, 1),
        "citation": "fixture",
        "task": task,
        "livebench_release_date": dt.datetime(2025, 4, 2),
        "livebench_removal_date": "",
        "remainder": remainder,
        "solution": solution,
        "partial_solution": partial_solution,
    }


LIVEBENCH_ROWS: list[dict[str, Any]] = [
    _livebench_row(
        "5b1c0a6e0f3d4c2b9a8e7d6c5b4a3921",
        _LB_SUM,
        _LB_PROMPT.format(q=_LB_SUM["question_content"]),
        stdin(("3\n1 2 3", "6")),
        stdin(("1\n-5", "-5"), ("2\n10 -3", "7")),
        solution="input()\nprint(sum(map(int, input().split())))",
    ),
    _livebench_row(
        "6c2d1b7f1a4e5d3c0b9f8e7d6c5b4a32",
        _LB_GAP,
        _LB_PROMPT.format(q=_LB_GAP["question_content"]),
        functional(("[1, 5, 2]", "4")),
        functional(("[3, 3]", "0"), ("[10, 0, 4]", "10")),
    ),
    _livebench_row(
        "7d3e2c8a2b5f6e4d1c0a9f8e7d6c5b43",
        _LB_SORTED,
        _LB_PROMPT.format(q=_LB_SORTED["question_content"])
        + "Complete the code below; write the rest of it only.\n```python\n"
        + _LB_SORTED["starter_code"]
        + "\n```\n",
        functional(("[1, 2, 2]", "true")),
        functional(("[3, 1]", "false"), ("[]", "true")),
        task="coding_completion",
        remainder="return all(a <= b for a, b in zip(nums, nums[1:]))",
        partial_solution=_LB_SORTED["starter_code"],
    ),
]

# ---- CodeContests ------------------------------------------------------------------------------------


def _io(*pairs: tuple[str, str]) -> dict[str, list[str]]:
    return {"input": [i for i, _ in pairs], "output": [o for _, o in pairs]}


CODECONTESTS_ROWS: list[dict[str, Any]] = [
    {
        "name": "1900_A. Double It",
        "description": "Given an integer n on one line, print 2n.",
        "public_tests": _io(("2\n", "4\n")),
        "private_tests": _io(("5\n", "10\n")),
        "generated_tests": _io(("0\n", "0\n"), ("-3\n", "-6\n")),
        "source": 2,
        "difficulty": 7,
        "solutions": {"language": [2, 3], "solution": ["int main(){}", "print(2 * int(input()))"]},
        # Right on the public test (2 + 2 = 4), wrong on the others.
        "incorrect_solutions": {"language": [3], "solution": ["print(int(input()) + 2)"]},
        "cf_contest_id": 1900,
        "cf_index": "A",
        "cf_points": 500.0,
        "cf_rating": 800,
        "cf_tags": ["math"],
        "is_description_translated": False,
        "untranslated_description": "",
        "time_limit": {"seconds": 2, "nanos": 0},
        "memory_limit_bytes": 256000000,
        "input_file": "",
        "output_file": "",
    },
    {
        "name": "1900_B. Largest Pair",
        "description": "The first line holds n, the second n integers. Print the largest sum of two of them.",
        "public_tests": _io(("3\n1 5 2\n", "7\n")),
        "private_tests": _io(("2\n-1 -2\n", "-3\n")),
        "generated_tests": _io(("4\n0 0 0 9\n", "9\n")),
        "source": 2,
        "difficulty": 8,
        "solutions": {
            "language": [3],
            "solution": ["input()\nxs = sorted(map(int, input().split()))\nprint(xs[-1] + xs[-2])"],
        },
        "incorrect_solutions": {
            "language": [3],
            "solution": ["input()\nprint(2 * max(map(int, input().split())))"],
        },
        "cf_contest_id": 1900,
        "cf_index": "B",
        "cf_points": 1000.0,
        "cf_rating": 1000,
        "cf_tags": ["greedy", "sortings"],
        "is_description_translated": False,
        "untranslated_description": "",
        "time_limit": {"seconds": 1, "nanos": 500000000},
        "memory_limit_bytes": 256000000,
        "input_file": "",
        "output_file": "",
    },
]

# ---- known programs and unit tests (task id → ...) ---------------------------------------------------

# (right program, deliberately wrong program) as a policy would write them (the harness adds the rest).
PROGRAMS: dict[str, tuple[str, str]] = {
    "lcb-abc900_a": (
        "a, b = map(int, input().split())\nprint(a * b)",
        "a, b = map(int, input().split())\nprint(a + b)",
    ),
    "lcb-3999": (
        "class Solution:\n    def countEven(self, nums: List[int]) -> int:\n        return sum(x % 2 == 0 for x in nums)",
        "class Solution:\n    def countEven(self, nums: List[int]) -> int:\n        return sum(x % 2 for x in nums)",
    ),
    # A top-level function answers the functional tests too.
    "lcb-4000": (
        "def joinWords(words, sep):\n    return sep.join(words)",
        "def joinWords(words, sep):\n    return ''.join(words)",
    ),
    "livebench-5b1c0a6e0f3d4c2b9a8e7d6c5b4a3921": (
        "input()\nprint(sum(map(int, input().split())))",
        "input()\nprint(max(map(int, input().split())))",
    ),
    "livebench-6c2d1b7f1a4e5d3c0b9f8e7d6c5b4a32": (
        "class Solution:\n    def maxGap(self, nums: List[int]) -> int:\n"
        "        return max(abs(a - b) for a, b in zip(nums, nums[1:]))",
        "class Solution:\n    def maxGap(self, nums: List[int]) -> int:\n        return nums[-1] - nums[0]",
    ),
    # A completion: only the rest of the method; the partial solution is put before it.
    "livebench-7d3e2c8a2b5f6e4d1c0a9f8e7d6c5b43": (
        "        return all(a <= b for a, b in zip(nums, nums[1:]))",
        "        return nums == sorted(nums, reverse=True)",
    ),
    "cc-1900_A.-Double-It": ("print(2 * int(input()))", "print(int(input()) + 2)"),
    "cc-1900_B.-Largest-Pair": (
        "input()\nxs = sorted(map(int, input().split()))\nprint(xs[-1] + xs[-2])",
        "input()\nprint(2 * max(map(int, input().split())))",
    ),
}

# Two reward-model tests per task: (input, output) right and telling the wrong program apart, then one
# whose expected output is wrong. Exceptions noted where a test does not tell the two programs apart.
UNIT_TESTS: dict[str, list[tuple[str, str]]] = {
    "lcb-abc900_a": [("3 5", "15"), ("1 1", "2")],
    "lcb-3999": [("countEven([2, 4])", "2"), ("countEven([1])", "1")],
    "lcb-4000": [('joinWords(["a", "b"], "+")', "'a+b'"), ('joinWords([], "+")', "'+'")],
    # Right but not discriminating: sum and max of one number agree.
    "livebench-5b1c0a6e0f3d4c2b9a8e7d6c5b4a3921": [("1\n4", "4"), ("2\n1 1", "3")],
    "livebench-6c2d1b7f1a4e5d3c0b9f8e7d6c5b4a32": [("maxGap([0, 5, 6])", "5"), ("maxGap([1, 2])", "2")],
    "livebench-7d3e2c8a2b5f6e4d1c0a9f8e7d6c5b43": [
        ("isSorted([1, 3])", "True"),
        ("isSorted([2, 1])", "True"),
    ],
    "cc-1900_A.-Double-It": [("7", "14"), ("1", "3")],
    # Right but not discriminating: with two equal largest numbers both programs agree.
    "cc-1900_B.-Largest-Pair": [("2\n4 4", "8"), ("2\n1 2", "4")],
}


def write(root: Path = ROOT) -> None:
    """Write the three fixture files (LiveCodeBench JSONL, LiveBench and CodeContests Parquet)."""
    lcb = root / LCB_FILE.relative_to(ROOT)
    lcb.parent.mkdir(parents=True, exist_ok=True)
    lcb.write_text("".join(json.dumps(r) + "\n" for r in LCB_ROWS), encoding="utf-8")
    for rows, path in ((LIVEBENCH_ROWS, LIVEBENCH_FILE), (CODECONTESTS_ROWS, CODECONTESTS_FILE)):
        target = root / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        pl.DataFrame(rows).write_parquet(target)


if __name__ == "__main__":
    write()
