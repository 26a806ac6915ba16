"""The study diagnostics' precision of a judge's "good" verdicts (benchmarks/study_diagnostics.py), by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from study_diagnostics import good_verdict_precision


def test_precision_solved_from_the_four_recorded_metrics() -> None:
    # 16 steps, 4 good: the judge calls 3 good ones good and 3 bad ones good (9 of 12 bad ones bad).
    # raw (3 + 9) / 16 = 0.75; balanced (3/4 + 9/12) / 2 = 0.75; called good 6/16; good 4/16 → precision 3/6.
    assert good_verdict_precision(0.75, 0.75, 6 / 16, 4 / 16) == pytest.approx(0.5)
    # a judge that calls good only good steps (the good → bad oracle): 2 of 4 good called good, all bad bad
    assert good_verdict_precision(14 / 16, (2 / 4 + 1) / 2, 2 / 16, 4 / 16) == pytest.approx(1.0)


def test_no_precision_where_it_is_not_determined() -> None:
    assert good_verdict_precision(0.6, 0.6, 0.3, 0.5) is None  # t = ½: the two equations coincide
    assert good_verdict_precision(0.8, 0.5, 0.0, 0.2) is None  # nothing called good
