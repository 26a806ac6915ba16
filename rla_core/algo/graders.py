"""When is a program's output right: each grader's comparison and limits, declared once.

A coding task names the grader that judges every one of its tests, ground-truth or written by the reward
model (``CodingTask.grader``; the benchmark loaders stamp it, docs/coding-benchmarks.md). Three graders:

* ``rla`` — ours, for the built-in coding tasks: the same whitespace-separated tokens in the same order
  (:func:`rla_outputs_match`); the run's ``coding.memory_limit_mb`` and ``coding.output_limit_kb``.
* ``livecodebench`` — LiveCodeBench's, which LiveBench grades with too (its ``lcb_runner`` is a copy):
  the outputs' stripped lines, equal in number, each equal as text or token by token as ``Decimal``
  values (:func:`livecodebench_outputs_match`); a function's tuple result compared as a list; no output
  cap of its own, memory :data:`LIVECODEBENCH_MEMORY_MB`.
* ``codecontests`` — DeepMind's CodeContests tester: lower-cased tokens, numbers within an absolute
  1e-5 (:func:`codecontests_outputs_match`); memory the problem's own limit plus 32 MiB
  (:func:`codecontests_memory_mb`); written files capped at 64 MiB.

Where a benchmark caps nothing, :func:`output_limit_kb` still bounds a test's stdout, so a runaway program
cannot fill the disk; an output over it is that test's ``output_limit`` and the other tests go on.

Example:
    >>> outputs_match("0.75\\n", "0.7500000000000000", grader=Grader.LIVECODEBENCH)
    True
    >>> outputs_match("0.75\\n", "0.7500000000000000", grader=Grader.RLA)
    False
    >>> outputs_match("YES", "yes", grader=Grader.CODECONTESTS)
    True
"""

from __future__ import annotations

import math
import re
import string
from decimal import Decimal, InvalidOperation
from enum import StrEnum


class Grader(StrEnum):
    """Whose rules judge a coding task's tests (see the module docstring)."""

    RLA = "rla"
    LIVECODEBENCH = "livecodebench"
    CODECONTESTS = "codecontests"


# LiveCodeBench runs its programs without an address-space limit: its runner calls reliability_guard()
# without the 4 GB its comment names. Ours stays bounded, at that 4 GiB.
LIVECODEBENCH_MEMORY_MB = 4096
# The CodeContests tester's default per-test memory (kDefaultMemoryLimitBytes) for a problem that names none,
# and what it adds to a problem's own limit for the interpreter itself.
CODECONTESTS_DEFAULT_MEMORY_BYTES = 256 << 20
CODECONTESTS_INTERPRETER_BYTES = 32 << 20
# The CodeContests tester's RLIMIT_FSIZE on the files a program writes (its stdout is an uncapped pipe).
CODECONTESTS_FILE_LIMIT_KB = 64 * 1024
# LiveCodeBench caps no output; ours is bounded at the same 64 MiB (a real test's answer is a few MiB at most).
LIVECODEBENCH_OUTPUT_LIMIT_KB = 64 * 1024
# CodeContests' absolute tolerance between two numeric tokens (ValuesMatch's kDoublePrecision).
CODECONTESTS_TOLERANCE = 1e-5

_MIB = 1 << 20
# The characters the CodeContests tester splits outputs on (absl::ByAnyChar(" \n\t\r\v")): no form feed.
_CC_SEPARATORS = re.compile("[ \n\t\r\v]")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
# What absl::SimpleAtod accepts as a number: one optional sign, a decimal mantissa with at least one digit and
# an optional exponent, or inf/infinity/nan (tokens are lower-cased first). No hex, no '_', ASCII digits only.
_CC_NUMBER = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?|inf(?:inity)?|nan(?:\([0-9a-z_]*\))?)"
)


def outputs_match(actual: str, expected: str, *, grader: Grader = Grader.RLA) -> bool:
    """Whether a program's stdout ``actual`` answers a test whose expected output is ``expected``.

    Example:
        >>> outputs_match("1 2\\n3\\n", " 1 2 3 ")
        True
    """
    if grader is Grader.LIVECODEBENCH:
        return livecodebench_outputs_match(actual, expected)
    if grader is Grader.CODECONTESTS:
        return codecontests_outputs_match(actual, expected)
    return rla_outputs_match(actual, expected)


def rla_outputs_match(actual: str, expected: str) -> bool:
    """Ours: the same whitespace-separated tokens in the same order, compared as text.

    Example:
        >>> rla_outputs_match("1  2\\n", "1 2"), rla_outputs_match("12", "1 2")
        (True, False)
    """
    return actual.split() == expected.split()


def _stripped_lines(text: str) -> list[str]:
    # Stripped first, so trailing blank lines add no empty line; then each line stripped.
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except InvalidOperation:
        return None


def livecodebench_outputs_match(actual: str, expected: str) -> bool:
    """LiveCodeBench's (and LiveBench's) stdio comparison.

    Both outputs are stripped and split into lines, each line stripped; the line counts must be equal; a
    line matches when it is equal as text or when both lines are whitespace-separated tokens that all
    parse as ``Decimal`` and are equal value by value (``0.75`` == ``0.7500000000000000``, ``1e2`` ==
    ``100``). A token that is not a number makes an unequal line a mismatch.

    Example:
        >>> livecodebench_outputs_match("0.75\\n", "0.7500000000000000")
        True
        >>> livecodebench_outputs_match("0.75", "0.76"), livecodebench_outputs_match("1 2", "1\\n2")
        (False, False)
    """
    got, want = _stripped_lines(actual), _stripped_lines(expected)
    if len(got) != len(want):
        return False
    for g, w in zip(got, want, strict=True):
        if g == w:
            continue
        g_values, w_values = _decimals(g), _decimals(w)
        try:
            if g_values is None or w_values is None or g_values != w_values:
                return False
        except InvalidOperation:  # a signalling NaN refuses comparison: no match, as the grader's own error
            return False
    return True


def _cc_tokens(text: str) -> list[str]:
    return [token.translate(_ASCII_LOWER) for token in _CC_SEPARATORS.split(text) if token]


def _cc_number(token: str) -> float | None:
    token = token.strip(" \t\n\v\f\r")  # SimpleAtod strips ASCII whitespace (a form feed can be left here)
    if _CC_NUMBER.fullmatch(token) is None:
        return None
    return math.nan if "nan" in token else float(token)


def codecontests_tokens_match(a: str, b: str) -> bool:
    """CodeContests' comparison of two (lower-cased) tokens: text unless both are numbers, then |a-b| < 1e-5.

    Every integer also parses as a double in the tester, so integers take the same branch: exact for
    integers below 2**53 (their difference is 0 or at least 1), and as doubles beyond.

    Example:
        >>> codecontests_tokens_match("1.000001", "1"), codecontests_tokens_match("1.0001", "1")
        (True, False)
    """
    x, y = _cc_number(a), _cc_number(b)
    if x is None or y is None:
        return a == b
    return abs(x - y) < CODECONTESTS_TOLERANCE


def codecontests_outputs_match(actual: str, expected: str) -> bool:
    """The CodeContests tester's comparison (``OutputsMatch``).

    Both outputs are split on spaces, newlines, tabs, carriage returns and vertical tabs (empty parts
    dropped) and ASCII-lower-cased; equal token lists match; lists of different lengths do not; otherwise
    every pair of tokens must match (:func:`codecontests_tokens_match`). Line structure is not compared.

    Example:
        >>> codecontests_outputs_match("YES\\n0.5000001", "yes 0.5"), codecontests_outputs_match("1 2", "1")
        (True, False)
    """
    got, want = _cc_tokens(actual), _cc_tokens(expected)
    if got == want:
        return True
    if len(got) != len(want):
        return False
    return all(codecontests_tokens_match(g, w) for g, w in zip(got, want, strict=True))


def codecontests_memory_mb(memory_limit_bytes: int | None) -> int:
    """The address-space limit (MiB, rounded up) of a CodeContests problem's runs: its own limit, or the
    tester's 256 MiB default when it names none (0 or missing), plus 32 MiB for the interpreter.

    Example:
        >>> codecontests_memory_mb(256_000_000), codecontests_memory_mb(0)
        (277, 288)
    """
    limit = (
        memory_limit_bytes
        if memory_limit_bytes and memory_limit_bytes > 0
        else CODECONTESTS_DEFAULT_MEMORY_BYTES
    )
    return -(-(limit + CODECONTESTS_INTERPRETER_BYTES) // _MIB)


def output_limit_kb(grader: Grader, default_kb: int) -> int:
    """The stdout cap of one test judged by ``grader``: the benchmark's bound, or ``default_kb``
    (``coding.output_limit_kb``) for ours.

    Example:
        >>> output_limit_kb(Grader.CODECONTESTS, 256), output_limit_kb(Grader.RLA, 256)
        (65536, 256)
    """
    caps = {
        Grader.LIVECODEBENCH: LIVECODEBENCH_OUTPUT_LIMIT_KB,
        Grader.CODECONTESTS: CODECONTESTS_FILE_LIMIT_KB,
    }
    return caps.get(grader, default_kb)
