"""Interval statistics against hand-computed and published values."""

from __future__ import annotations

import ast
import doctest
import math
import re
from pathlib import Path

import pytest

from rla_core.algo import stats
from rla_core.algo.stats import (
    MIN_SEEDS_TO_LEARN,
    Change,
    Interval,
    learns,
    mean_interval,
    proportion,
    proportion_text,
    t_cdf,
    t_quantile,
    wilson_interval,
)
from rla_core.errors import ConfigError


def test_wilson_half_success() -> None:
    # p = 0.5, n = 10, z² = 3.8415: denom = 1.38415, center = 0.5,
    # half = 1.95996/1.38415 · sqrt(0.025 + 0.0096037) = 1.41600 · 0.186021 = 0.263407
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.236593, abs=1e-5)
    assert hi == pytest.approx(0.763407, abs=1e-5)


def test_wilson_zero_and_all_successes_are_not_empty() -> None:
    # 0/10: center = half = (3.8415/20)/1.38415 = 0.138768, so (0, 0.277533); n/n mirrors it.
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0
    assert hi == pytest.approx(0.277533, abs=1e-5)
    lo, hi = wilson_interval(10, 10)
    assert lo == pytest.approx(1 - 0.277533, abs=1e-5)
    assert hi == 1.0


def test_wilson_hundred_episodes() -> None:
    # 30/100: denom = 1.038415, center = (0.3 + 0.0192073)/1.038415 = 0.307398,
    # half = 1.95996/1.038415 · sqrt(0.0021 + 0.0000960) = 1.887454 · 0.046862 = 0.088451
    lo, hi = wilson_interval(30, 100)
    assert lo == pytest.approx(0.218949, abs=1e-5)
    assert hi == pytest.approx(0.395849, abs=1e-5)
    p = proportion(30, 100)
    assert p.rate == 0.3 and (p.low, p.high) == (lo, hi)


def test_t_quantiles_match_tables() -> None:
    # Student-t 0.975 quantiles (standard tables): df 1, 2, 4, 30.
    assert t_quantile(0.975, 1) == pytest.approx(12.706205, abs=1e-5)
    assert t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-5)
    assert t_quantile(0.975, 4) == pytest.approx(2.776445, abs=1e-5)
    assert t_quantile(0.975, 30) == pytest.approx(2.042272, abs=1e-5)
    assert t_quantile(0.025, 2) == pytest.approx(-4.302653, abs=1e-5)
    # df = 1 is the Cauchy distribution: cdf(1) = 1/2 + atan(1)/π = 0.75.
    assert t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-12)
    assert t_cdf(0.0, 7) == pytest.approx(0.5, abs=1e-12)


def test_mean_interval_three_seeds() -> None:
    # mean 0.3, s = 0.1, se = 0.057735, t = 4.302653 → half = 0.248414
    mean, lo, hi = mean_interval([0.2, 0.3, 0.4])
    assert mean == pytest.approx(0.3)
    assert lo == pytest.approx(0.051586, abs=1e-5)
    assert hi == pytest.approx(0.548414, abs=1e-5)


def test_mean_interval_single_value_has_unknown_width() -> None:
    mean, lo, hi = mean_interval([0.4])
    assert mean == 0.4 and math.isnan(lo) and math.isnan(hi)


def test_bad_input_is_a_specific_error() -> None:
    with pytest.raises(ConfigError, match="n >= 1"):
        wilson_interval(0, 0)
    with pytest.raises(ConfigError, match="successes <= n"):
        wilson_interval(11, 10)
    with pytest.raises(ConfigError, match="at least one value"):
        mean_interval([])
    with pytest.raises(ConfigError, match="0 < p < 1"):
        t_quantile(1.0, 3)


def test_docstring_examples() -> None:
    result = doctest.testmod(stats)
    assert result.attempted > 0 and result.failed == 0


def test_an_arm_learns_only_when_the_paired_interval_over_three_or_more_seeds_is_above_zero() -> None:
    # Three seeds whose held-out success rose by 0.02, 0.03 and 0.04 (paired, end − iteration 0):
    # mean = (0.02 + 0.03 + 0.04) / 3 = 0.09 / 3 = 0.03
    # deviations −0.01, 0, +0.01; squares 0.0001, 0, 0.0001; sum 0.0002
    # s² = 0.0002 / (3 − 1) = 0.0001, so s = 0.01
    # se = s / √3 = 0.01 / 1.7320508 = 0.0057735
    # t(0.975, df 2) = 4.302653 (standard table), half = 4.302653 · 0.0057735 = 0.0248414
    # low = 0.03 − 0.0248414 = 0.0051586 > 0: it learns
    assert learns([0.02, 0.03, 0.04])
    _mean, low, _high = mean_interval([0.02, 0.03, 0.04])
    assert low == pytest.approx(0.0051586, abs=1e-6)
    # Every seed rose, but unevenly: 0.01, 0.02, 0.06
    # mean = 0.09 / 3 = 0.03; deviations −0.02, −0.01, +0.03; squares 0.0004, 0.0001, 0.0009; sum 0.0014
    # s² = 0.0014 / 2 = 0.0007, s = 0.0264575; se = 0.0264575 / 1.7320508 = 0.0152753
    # half = 4.302653 · 0.0152753 = 0.0657244; low = 0.03 − 0.0657244 = −0.0357244 < 0: it does not learn
    assert not learns([0.01, 0.02, 0.06])
    assert mean_interval([0.01, 0.02, 0.06])[1] == pytest.approx(-0.0357244, abs=1e-6)
    # Two seeds that both gain exactly 0.025: s = 0, so the interval is [0.025, 0.025], above 0, but two
    # seeds can agree by chance: fewer than MIN_SEEDS_TO_LEARN = 3 never count
    assert MIN_SEEDS_TO_LEARN == 3
    assert mean_interval([0.025, 0.025])[1] == pytest.approx(0.025)
    assert not learns([0.025, 0.025])
    assert learns([0.025, 0.025], min_seeds=2)  # the minimum is the only thing that refused it
    # One seed has no interval at all (NaN ends), whatever the minimum
    assert not learns([0.5], min_seeds=1)
    # One seed losing: 0.02, 0.03, −0.05; mean = 0 / 3 = 0, so low = 0 − half < 0
    assert not learns([0.02, 0.03, -0.05])


def test_change_pairs_iteration_0_and_end_per_seed() -> None:
    # Per seed (successes of 200 at iteration 0, at the end): (40, 44), (40, 46), (40, 48)
    # rates: 40/200 = 0.20 → 44/200 = 0.22, 0.20 → 46/200 = 0.23, 0.20 → 48/200 = 0.24
    # paired changes: 0.02, 0.03, 0.04, the case computed by hand above (low = 0.0051586)
    change = Change.of([(proportion(b, 200), proportion(e, 200)) for b, e in [(40, 44), (40, 46), (40, 48)]])
    assert change.before.values == pytest.approx((0.2, 0.2, 0.2))
    assert change.end.mean == pytest.approx((0.22 + 0.23 + 0.24) / 3)
    assert change.delta.values == pytest.approx((0.02, 0.03, 0.04))
    assert change.delta.low == pytest.approx(0.0051586, abs=1e-6) and change.learns
    # Pairing matters: the same end rates against iteration-0 rates that rose with them do not learn.
    # changes (44−40, 46−45, 48−47) / 200 = 0.02, 0.005, 0.005
    # mean = 0.03 / 3 = 0.01; deviations +0.01, −0.005, −0.005; squares 0.0001, 0.000025, 0.000025
    # s² = 0.00015 / 2 = 0.000075, s = 0.0086603; se = 0.0086603 / 1.7320508 = 0.005
    # half = 4.302653 · 0.005 = 0.0215133; low = 0.01 − 0.0215133 = −0.0115133 < 0
    rose = Change.of([(proportion(b, 200), proportion(e, 200)) for b, e in [(40, 44), (45, 46), (47, 48)]])
    assert rose.delta.low == pytest.approx(-0.0115133, abs=1e-6) and not rose.learns


def test_proportion_text_and_interval_text() -> None:
    # 5/10: rate 0.5, Wilson (0.236593, 0.763407) (test_wilson_half_success), three decimals each
    assert proportion_text(proportion(5, 10)) == "5/10 = 0.500 [0.237, 0.763]"
    assert proportion_text(None) == "not evaluated yet"
    assert Interval.of([0.2, 0.3, 0.4]).text() == "0.300 [0.052, 0.548]"  # test_mean_interval_three_seeds
    assert Interval.of([0.4]).text(2) == "0.40" and Interval.of([]).text() == "–"


SOURCE_DIRS = ("rla_core", "flows", "tasks", "benchmarks", "scripts")


def _fstring_template(node: ast.JoinedStr) -> str:
    """An f-string with each replacement field written as {}: f"{k}/{n} = {r:.3f}" → "{}/{} = {}"."""
    return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


def test_one_proportion_formatter() -> None:
    # Every function of the project that writes a proportion as "k/n = rate [low, high]".
    root = Path(__file__).resolve().parents[2]
    writers = set()
    for folder in SOURCE_DIRS:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for func in ast.walk(tree):
                if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(func):
                    if isinstance(node, ast.JoinedStr) and re.search(
                        r"\{\}/\{\} = \{\} \[", _fstring_template(node)
                    ):
                        writers.add((path.relative_to(root).as_posix(), func.name))
    assert writers == {("rla_core/algo/stats.py", "proportion_text")}
