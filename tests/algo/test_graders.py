"""Each benchmark's comparison rule, by hand (rla_core/algo/graders.py).

LiveCodeBench's rule follows ``lcb_runner/evaluation/testing_util.py`` (``grade_stdio``,
``get_stripped_lines``, ``convert_line_to_decimals``) at LiveCodeBench/LiveCodeBench commit 28fef95;
LiveBench grades with a copy of it (``livebench/lcb_runner/evaluation/testing_util.py`` at LiveBench/LiveBench
commit b0fb577). CodeContests' rule follows ``execution/tester_sandboxer.cc`` (``OutputsMatch``,
``ValuesMatch``, ``SplitAndLowercase``) at google-deepmind/code_contests commit fa7a4f8.
"""

from __future__ import annotations

import doctest

import pytest

from rla_core.algo import graders
from rla_core.algo.graders import (
    Grader,
    codecontests_memory_mb,
    codecontests_outputs_match,
    codecontests_tokens_match,
    livecodebench_outputs_match,
    output_limit_kb,
    outputs_match,
    rla_outputs_match,
)


def test_docstring_examples() -> None:
    result = doctest.testmod(graders, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_livecodebench_compares_stripped_lines_then_decimal_values() -> None:
    # "0.75" and "0.7500000000000000" differ as text; as Decimals 0.75 == 0.7500000000000000 → match.
    assert livecodebench_outputs_match("0.75\n", "0.7500000000000000")
    # Decimal 0.75 != 0.76 → no match.
    assert not livecodebench_outputs_match("0.75\n", "0.76")
    # "1 2" is one line, "1\n2" two: the line counts differ (1 ≠ 2) → no match, though the tokens agree.
    assert not livecodebench_outputs_match("1 2\n", "1\n2")
    # Stripped whole first: trailing blank lines and surrounding spaces add no line → 2 lines each, equal.
    assert livecodebench_outputs_match("  3 4 \n5\n\n\n", "3 4\n5")
    # Line 1 "3  4" vs "3 4": unequal text, tokens [3, 4] == [3, 4] as Decimals → match.
    assert livecodebench_outputs_match("3  4", "3 4")
    # "1e2" parses as Decimal 100 → equal to "100".
    assert livecodebench_outputs_match("1e2", "100")
    # Case matters: "yes" vs "YES" is unequal text and not a number → no match.
    assert not livecodebench_outputs_match("yes", "YES")
    # A token that is not a number on an unequal line: "abc 1" vs "abc 1.0" → Decimal("abc") fails → no match.
    assert not livecodebench_outputs_match("abc 1", "abc 1.0")
    # An empty output is one empty line; an expected "0" is one line "0": "" ≠ "0", [] ≠ [0] → no match.
    assert not livecodebench_outputs_match("", "0")
    assert livecodebench_outputs_match("\n", "")
    # NaN equals nothing, not even itself, unless the text is equal: "nan" == "nan" as text → match.
    assert livecodebench_outputs_match("nan", "nan") and not livecodebench_outputs_match("NaN", "nan")
    # A signalling NaN refuses comparison: no match rather than an error.
    assert not livecodebench_outputs_match("sNaN", "snan")


def test_codecontests_lowercases_tokens_and_compares_numbers_within_1e_5() -> None:
    # "yes" and "YES" lower-case to the same token → equal lists → match.
    assert codecontests_outputs_match("yes\n", "YES")
    # 1.000001 - 1 = 1e-6 < 1e-5 → match; 1.0001 - 1 = 1e-4 ≥ 1e-5 → no match.
    assert codecontests_outputs_match("1.000001", "1")
    assert not codecontests_outputs_match("1.0001", "1")
    # Integers take the double branch too: 3 vs 4 differ by 1 → no match; 7 vs 7.000000 differ by 0 → match.
    assert not codecontests_outputs_match("3", "4") and codecontests_outputs_match("7", "7.000000")
    # Line structure is not compared: tokens ["1", "2"] == ["1", "2"] → match.
    assert codecontests_outputs_match("1 2\n", "1\n2\n")
    # Token counts differ (2 vs 1) → no match.
    assert not codecontests_outputs_match("1 2", "1")
    # A word against a number is compared as text: "one" ≠ "1" → no match.
    assert not codecontests_tokens_match("one", "1")
    # Only ASCII letters are lower-cased: "É" stays "É" ≠ "é".
    assert not codecontests_outputs_match("É", "é")
    # A form feed does not separate tokens ("1\f2" is one token, not a number) → vs "1 2": 1 token ≠ 2.
    assert not codecontests_outputs_match("1\f2", "1 2")
    # absl's grammar: a leading "+", ".5", "5." and exponents are numbers; "1_000" and hex are not.
    assert codecontests_tokens_match("+.5", "0.5") and codecontests_tokens_match("5.", "5e0")
    assert not codecontests_tokens_match("1_000", "1000") and not codecontests_tokens_match("0x10", "16")
    # inf - inf is NaN, and NaN < 1e-5 is false: "inf" vs "infinity" do not match (their text differs).
    assert not codecontests_tokens_match("inf", "infinity") and codecontests_outputs_match("inf", "inf")
    # Beyond 2**53 doubles cannot tell neighbours apart: 10**18 and 10**18 + 1 are the same double → match.
    assert codecontests_tokens_match("1000000000000000000", "1000000000000000001")


def test_ours_stays_whitespace_tokens_as_text() -> None:
    # Ours, unchanged: the same tokens as text, so 0.75 ≠ 0.7500000000000000 and yes ≠ YES.
    assert rla_outputs_match("1  2\n3 ", "1 2 3")
    assert not rla_outputs_match("0.75", "0.7500000000000000") and not rla_outputs_match("yes", "YES")
    assert outputs_match("0.75", "0.7500000000000000", grader=Grader.LIVECODEBENCH)
    assert not outputs_match("0.75", "0.7500000000000000")  # ours by default


@pytest.mark.parametrize(
    ("limit_bytes", "mib"),
    [
        # 256 000 000 B + 32 MiB (33 554 432 B) = 289 554 432 B = 276.14 MiB → 277 (rounded up).
        (256_000_000, 277),
        # 64 MiB + 32 MiB = 96 MiB exactly.
        (64 << 20, 96),
        # None or 0: the tester's default 256 MiB + 32 MiB = 288.
        (0, 288),
        (None, 288),
    ],
)
def test_codecontests_memory_is_the_rows_limit_plus_32_mib(limit_bytes: int | None, mib: int) -> None:
    assert codecontests_memory_mb(limit_bytes) == mib


def test_output_caps_per_grader() -> None:
    # Benchmarks: 64 MiB (CodeContests' file limit; LiveCodeBench's own is none). Ours: the config's.
    assert output_limit_kb(Grader.LIVECODEBENCH, 256) == output_limit_kb(Grader.CODECONTESTS, 256) == 65536
    assert output_limit_kb(Grader.RLA, 256) == 256
