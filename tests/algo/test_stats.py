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
    PairedComparison,
    Proportion,
    interval_verdict,
    learns,
    mean_interval,
    paired_episode_interval,
    paired_verdict,
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
    # a change, signed: the same interval shifted down by 0.35
    assert Interval.of([-0.15, -0.05, 0.05]).text(signed=True) == "-0.050 [-0.298, +0.198]"
    assert Interval.of([0.067]).text(signed=True) == "+0.067"


def test_paired_seed_differences_of_two_arms() -> None:
    # Arm vs baseline, 3 seeds, successes of 200; both arms start from the seed's shared warm start (40/200).
    # End: seed 1 arm 70 vs baseline 60, seed 2 75 vs 60, seed 3 55 vs 60
    # per-seed differences: 70/200 − 60/200 = 0.35 − 0.30 = 0.05; 0.375 − 0.30 = 0.075; 0.275 − 0.30 = −0.025
    # mean = (0.05 + 0.075 − 0.025) / 3 = 0.1 / 3 = 0.0333333
    # deviations +0.0166667, +0.0416667, −0.0583333; squares 0.00027778, 0.00173611, 0.00340278; sum 0.00541667
    # s² = 0.00541667 / (3 − 1) = 0.00270833, s = 0.0520416; se = 0.0520416 / √3 = 0.0520416 / 1.7320508 = 0.0300463
    # t(0.975, df 2) = 4.302653, half = 4.302653 · 0.0300463 = 0.1292786
    # interval [0.0333333 − 0.1292786, 0.0333333 + 0.1292786] = [−0.0959453, 0.1626120]: contains 0
    Point = tuple[Proportion, Proportion]  # (iteration 0, end) of one run

    def seed(arm_end: int, base_end: int, arm_before: int = 40) -> tuple[Point, Point]:
        arm = (proportion(arm_before, 200), proportion(arm_end, 200))
        return arm, (proportion(40, 200), proportion(base_end, 200))

    pair = PairedComparison.of([seed(70, 60), seed(75, 60), seed(55, 60)])
    assert pair.end.values == pytest.approx((0.05, 0.075, -0.025))
    assert pair.end.mean == pytest.approx(0.0333333, abs=1e-6)
    assert pair.end.low == pytest.approx(-0.0959453, abs=1e-6)
    assert pair.end.high == pytest.approx(0.1626120, abs=1e-6)
    assert pair.end.text() == "0.033 [-0.096, 0.163]"
    assert pair.seeds == 3 and pair.verdict == "not separated"
    # Same iteration 0 in both arms: the difference of the changes is the difference of the ends.
    assert pair.change.values == pytest.approx(pair.end.values) and pair.change_verdict == "not separated"
    # No episodes given: the episode view is empty.
    assert pair.episodes.values == () and math.isnan(pair.episodes.mean)
    # Iteration 0 differing in seed 3 (arm 30/200 = 0.15, baseline 0.20):
    # change of seed 3 = (0.275 − 0.15) − (0.30 − 0.20) = 0.125 − 0.1 = 0.025, while its end difference stays −0.025
    other = PairedComparison.of([seed(70, 60), seed(75, 60), seed(55, 60, arm_before=30)])
    assert other.change.values == pytest.approx((0.05, 0.075, 0.025))
    assert other.end.values == pytest.approx(pair.end.values)
    # changes 0.05, 0.075, 0.025: mean 0.15 / 3 = 0.05; deviations 0, +0.025, −0.025; squares sum 0.00125
    # s² = 0.000625, s = 0.025, se = 0.025 / 1.7320508 = 0.0144338, half = 4.302653 · 0.0144338 = 0.0621033
    # low = 0.05 − 0.0621033 = −0.0121033 < 0
    assert other.change.low == pytest.approx(-0.0121033, abs=1e-6) and other.change_verdict == "not separated"


def test_paired_verdict_both_ways_and_with_too_few_seeds() -> None:
    # 0.02, 0.03, 0.04: low = 0.0051586 > 0 (test_an_arm_learns_...): higher; negated: high = −0.0051586 < 0
    assert paired_verdict([0.02, 0.03, 0.04]) == "higher"
    assert paired_verdict([-0.02, -0.03, -0.04]) == "lower"
    # 0.05, 0.075, −0.025: [−0.096, 0.163] contains 0 (test_paired_seed_differences_of_two_arms)
    assert paired_verdict([0.05, 0.075, -0.025]) == "not separated"
    # Two seeds that agree exactly (zero width, above 0) are not enough, as for `learns`.
    assert paired_verdict([0.025, 0.025]) == "too few seeds" and paired_verdict([]) == "too few seeds"
    assert paired_verdict([0.025, 0.025], min_seeds=2) == "higher"


def test_paired_episode_interval_by_hand() -> None:
    # Two seeds of 4 paired episodes each, d = win(arm) − win(baseline):
    # seed 1: +1, 0, 0, −1 (sum 0); seed 2: +1, +1, 0, 0 (sum 2); N = 8, mean = 2 / 8 = 0.25
    # seed 1: mean 0, squared deviations 1, 0, 0, 1 → sum 2, s² = 2 / 3, n · s² = 4 · 2/3 = 8/3
    # seed 2: mean 0.5, squared deviations 0.25 × 4 → sum 1, s² = 1 / 3, n · s² = 4/3
    # var(mean) = (8/3 + 4/3) / N² = 4 / 64, sd = 2 / 8 = 0.25; half = 1.959964 · 0.25 = 0.489991
    interval = paired_episode_interval([[1, 0, 0, -1], [1, 1, 0, 0]])
    assert interval.mean == pytest.approx(0.25)
    assert interval.low == pytest.approx(0.25 - 0.489991, abs=1e-6)
    assert interval.high == pytest.approx(0.25 + 0.489991, abs=1e-6)
    assert len(interval.values) == 8 and interval_verdict(interval) == "not separated"
    # All differences equal: no spread within any seed, a single point (what a bootstrap would give too).
    same = paired_episode_interval([[1, 1], [1, 1, 1]])
    assert (same.mean, same.low, same.high) == (1.0, 1.0, 1.0) and interval_verdict(same) == "higher"
    nothing = paired_episode_interval([[0, 0, 0], [0, 0]])
    assert (nothing.mean, nothing.low, nothing.high) == (0.0, 0.0, 0.0)
    assert interval_verdict(nothing) == "not separated"
    # Stratified by seed: seed 1 all +1, seed 2 all 0. Pooled mean (2 + 0) / 4 = 0.5; within each seed the
    # differences do not vary, so the interval is [0.5, 0.5]: the spread between seeds is the t-interval's.
    between = paired_episode_interval([[1, 1], [0, 0]])
    assert (between.mean, between.low, between.high) == (0.5, 0.5, 0.5)
    # A seed of one episode has no variance: unknown ends, never a fabricated width.
    one = paired_episode_interval([[1, 0], [1]])
    assert one.mean == pytest.approx(2 / 3) and math.isnan(one.low) and math.isnan(one.high)
    assert interval_verdict(one) == "not separated"
    with pytest.raises(ConfigError, match="at least one episode"):
        paired_episode_interval([[1], []])
    # The episode view inside a comparison: given per-seed episode differences.
    pair = PairedComparison.of(
        [((proportion(1, 4), proportion(2, 4)), (proportion(1, 4), proportion(2, 4)))], [[1, 0, 0, -1]]
    )
    assert pair.episodes.mean == 0.0 and pair.end.values == (0.0,) and pair.verdict == "too few seeds"


def test_interval_verdict() -> None:
    assert interval_verdict(Interval(0.1, 0.01, 0.2, ())) == "higher"
    assert interval_verdict(Interval(-0.1, -0.2, -0.01, ())) == "lower"
    assert interval_verdict(Interval(0.1, 0.0, 0.2, ())) == "not separated"  # touching 0 is not above it
    assert interval_verdict(Interval.of([])) == "not separated"


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
