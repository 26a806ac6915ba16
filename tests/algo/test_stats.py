"""Interval statistics against hand-computed and published values."""

from __future__ import annotations

import doctest
import math

import pytest

from rla_core.algo import stats
from rla_core.algo.stats import mean_interval, proportion, t_cdf, t_quantile, wilson_interval
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
    from flows.study import Change

    def change(pairs: list[tuple[int, int]]) -> Change:  # (successes at iteration 0, at the end) of 200
        return Change.of([((b, 200, 0.0, 0.0), (e, 200, 0.0, 0.0)) for b, e in pairs])

    # two seeds that both gain exactly 5/200: a zero-width interval, but too few seeds to count
    two = change([(37, 42), (30, 35)])
    assert two.delta.values == pytest.approx((0.025, 0.025)) and two.delta.low > 0 and not two.learns
    # three seeds gaining 0.02, 0.03, 0.04: mean 0.03, sd 0.01, t(2) = 4.303 -> 0.03 ± 0.0248 > 0
    three = change([(40, 44), (40, 46), (40, 48)])
    assert abs(three.delta.low - (0.03 - 4.302653 * 0.01 / 3**0.5)) < 1e-6 and three.learns
    # one seed losing: the interval reaches below 0
    assert not change([(40, 44), (40, 46), (40, 30)]).learns
