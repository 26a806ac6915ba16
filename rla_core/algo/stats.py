"""Interval statistics for study summaries: Wilson intervals per evaluation point, t-intervals over seeds.

Pure functions, no third-party dependencies (the Student-t quantile is computed from the regularised
incomplete beta function). Used by ``rla study`` to build its Table-1-style summary: a
:class:`Proportion` per evaluation point (successes of episodes, Wilson interval), an :class:`Interval`
of a mean over seeds, a :class:`Change` of an arm from iteration 0 to its end (paired per seed), and
the rule :func:`learns` that decides whether an arm learns. :func:`proportion_text` is the one way a
proportion is written in the summary and the report. Two arms are compared by :class:`PairedComparison`:
per-seed differences with a t-interval over seeds (which decides, :func:`paired_verdict`), and as a
second view the per-episode differences pooled over seeds (:func:`paired_episode_interval`).

Example:
    >>> lo, hi = wilson_interval(5, 10)
    >>> round(lo, 4), round(hi, 4)
    (0.2366, 0.7634)
    >>> round(t_quantile(0.975, 2), 4)
    4.3027
    >>> m, lo, hi = mean_interval([0.2, 0.3, 0.4])
    >>> round(m, 4), round(lo, 4), round(hi, 4)
    (0.3, 0.0516, 0.5484)
    >>> proportion_text(proportion(5, 10))
    '5/10 = 0.500 [0.237, 0.763]'
    >>> learns([0.02, 0.03, 0.04]), learns([0.025, 0.025])
    (True, False)
    >>> [paired_verdict(d) for d in ([0.02, 0.03, 0.04], [-0.02, -0.03, -0.04], [0.1, -0.1, 0.0])]
    ['higher', 'lower', 'not separated']
    >>> paired_episode_interval([[1, 0, 0, -1], [1, 1, 0, 0]]).text()
    '0.250 [-0.240, 0.740]'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rla_core.errors import ConfigError

Z_95 = 1.959963984540054  # standard-normal 0.975 quantile


def wilson_interval(successes: int, n: int, *, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``successes / n`` (default: 95 %).

    ``center = (p + z²/2n) / (1 + z²/n)``, ``half = z/(1 + z²/n) · sqrt(p(1-p)/n + z²/4n²)``.
    Unlike the normal interval it stays inside [0, 1] and is not empty at 0 or n successes.
    """
    if n <= 0:
        raise ConfigError(f"wilson_interval needs n >= 1 episodes, got n={n}")
    if not 0 <= successes <= n:
        raise ConfigError(f"wilson_interval needs 0 <= successes <= n, got successes={successes}, n={n}")
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At 0 or n successes the lower or upper end is exactly 0 or 1 (avoid float round-off there).
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student-t cumulative distribution function with ``df`` degrees of freedom."""
    if df <= 0:
        raise ConfigError(f"t_cdf needs df > 0, got {df}")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Student-t quantile: the t with ``t_cdf(t, df) = p`` (bisection, to ~1e-12)."""
    if not 0.0 < p < 1.0:
        raise ConfigError(f"t_quantile needs 0 < p < 1, got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


def mean_interval(values: Sequence[float], *, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the t-interval of the mean of ``values`` (e.g. one value per seed).

    ``mean ± t_{(1+level)/2, n-1} · s / sqrt(n)`` with the sample standard deviation ``s``. With one
    value the interval is unknown and both ends are NaN (never a fabricated zero width).
    """
    xs = [float(v) for v in values]
    if not xs:
        raise ConfigError("mean_interval needs at least one value")
    if not 0.0 < level < 1.0:
        raise ConfigError(f"mean_interval needs 0 < level < 1, got {level}")
    n = len(xs)
    mean = math.fsum(xs) / n
    if n == 1:
        return mean, math.nan, math.nan
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile((1.0 + level) / 2.0, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class Proportion:
    """A success proportion ``successes / n`` with its (Wilson) interval ``[low, high]``."""

    successes: int
    n: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.successes / self.n


def proportion(successes: int, n: int) -> Proportion:
    """A :class:`Proportion` with its 95 % Wilson interval."""
    low, high = wilson_interval(successes, n)
    return Proportion(successes, n, low, high)


NOT_EVALUATED = "not evaluated yet"


def proportion_text(p: Proportion | None) -> str:
    """``k/n = rate [low, high]`` (three decimals), or "not evaluated yet" for a missing point.

    The only formatter of a proportion: the study summary (markdown) and the report (HTML) both use it.
    """
    if p is None:
        return NOT_EVALUATED
    return f"{p.successes}/{p.n} = {p.rate:.3f} [{p.low:.3f}, {p.high:.3f}]"


@dataclass(frozen=True)
class Interval:
    """A mean with its 95 % t-interval (NaN ends when unknown) and the values it came from."""

    mean: float
    low: float
    high: float
    values: tuple[float, ...]

    @staticmethod
    def of(values: Sequence[float]) -> Interval:
        """The interval of ``values`` (all NaN and no values when there are none)."""
        if not values:
            return Interval(math.nan, math.nan, math.nan, ())
        mean, low, high = mean_interval(values)
        return Interval(mean, low, high, tuple(float(v) for v in values))

    def text(self, digits: int = 3, *, signed: bool = False) -> str:
        """``mean [low, high]``; the mean alone when the interval is unknown; "–" without values. ``signed``:
        every number with its sign (a change: ``+0.067 [+0.005, +0.129]``)."""
        if math.isnan(self.mean):
            return "–"
        f = f"{'+' if signed else ''}.{digits}f"
        if math.isnan(self.low):
            return format(self.mean, f)
        return f"{self.mean:{f}} [{self.low:{f}}, {self.high:{f}}]"


# An arm learns only with at least this many seeds: two seeds can agree by chance to the last episode
# (a zero-width interval above 0), so two never count.
MIN_SEEDS_TO_LEARN = 3


def learns(deltas: Sequence[float], *, min_seeds: int = MIN_SEEDS_TO_LEARN, level: float = 0.95) -> bool:
    """Whether paired per-seed changes (end − iteration 0, one per seed) show that an arm learns.

    True when there are at least ``min_seeds`` changes and the lower end of their t-interval (``level``,
    default 95 %) lies above 0: the end exceeds iteration 0 by more than the interval over seeds.
    """
    if len(deltas) < max(min_seeds, 2):  # one value has no interval at all
        return False
    _mean, low, _high = mean_interval(deltas, level=level)
    return low > 0


@dataclass(frozen=True)
class Change:
    """A held-out measure of one arm over seeds: iteration 0, the end, and the paired per-seed change."""

    before: Interval
    end: Interval
    delta: Interval  # per seed (end − before), paired

    @staticmethod
    def of(points: Sequence[tuple[Proportion, Proportion]]) -> Change:
        """From one (iteration 0, end) pair of proportions per seed."""
        rates = [(b.rate, e.rate) for b, e in points]
        return Change(
            before=Interval.of([b for b, _ in rates]),
            end=Interval.of([e for _, e in rates]),
            delta=Interval.of([e - b for b, e in rates]),
        )

    @property
    def learns(self) -> bool:
        """:func:`learns` on the paired per-seed changes."""
        return learns(self.delta.values)


# ---- two arms, paired ------------------------------------------------------------------------------

HIGHER, LOWER, NOT_SEPARATED, TOO_FEW_SEEDS = "higher", "lower", "not separated", "too few seeds"


def paired_verdict(diffs: Sequence[float], *, min_seeds: int = MIN_SEEDS_TO_LEARN) -> str:
    """What per-seed differences ``arm − baseline`` (one per seed, paired) say about the arm.

    The rule of :func:`learns`, applied both ways: "higher" when the 95 % t-interval of the differences
    over at least ``min_seeds`` seeds lies above 0, "lower" when it lies below 0, "not separated" when it
    contains 0, and "too few seeds" with fewer than ``min_seeds`` (two seeds can agree by chance).
    """
    if len(diffs) < max(min_seeds, 2):
        return TOO_FEW_SEEDS
    if learns(diffs, min_seeds=min_seeds):
        return HIGHER
    if learns([-d for d in diffs], min_seeds=min_seeds):
        return LOWER
    return NOT_SEPARATED


def paired_episode_interval(groups: Sequence[Sequence[float]], *, z: float = Z_95) -> Interval:
    """Per-episode paired differences pooled over seeds: their mean with a paired normal interval.

    ``groups``: one sequence per seed of per-episode differences ``d = win(arm) − win(baseline)`` (each
    −1, 0 or +1) on the same episodes (same game, episode and sampling seeds) under the two policies. The
    mean is over all N episodes; its variance is stratified by seed, ``Σ_s n_s · s_s² / N²`` with
    ``s_s²`` the sample variance of seed s's differences: within a seed the two trained policies are
    fixed and only the episodes vary, so the spread *between* seeds (training luck) is left out on
    purpose: that is the t-interval over seeds, which decides. The interval is ``mean ± z · sqrt(var)``.

    Why a normal interval and not a paired bootstrap: the mean of N ≈ 600 bounded differences is close
    to normal, and a percentile bootstrap of that mean converges to the same interval; the closed form
    needs no resampling seed, costs nothing and can be checked by hand. Both are too narrow when only a
    few episodes differ between the arms (then every difference is 0 but a handful); with no episode
    that differs the interval is the single point 0, as a bootstrap's would be. Episodes of one game are
    counted as independent, which they are not quite: one more reason this view does not decide.

    A seed with a single episode has no variance: the ends are NaN then (never a fabricated width).
    """
    xs = [[float(d) for d in g] for g in groups]
    if not xs or any(not g for g in xs):
        raise ConfigError("paired_episode_interval needs at least one episode for every seed")
    n = sum(len(g) for g in xs)
    flat = tuple(d for g in xs for d in g)
    mean = math.fsum(flat) / n
    if any(len(g) < 2 for g in xs):
        return Interval(mean, math.nan, math.nan, flat)
    var = 0.0
    for g in xs:
        m = math.fsum(g) / len(g)
        var += len(g) * math.fsum((d - m) ** 2 for d in g) / (len(g) - 1)
    half = z * math.sqrt(var) / n
    return Interval(mean, mean - half, mean + half, flat)


def interval_verdict(interval: Interval) -> str:
    """Whether an interval of ``arm − baseline`` lies above 0 ("higher"), below 0 ("lower") or neither."""
    if math.isnan(interval.low) or math.isnan(interval.high):
        return NOT_SEPARATED
    if interval.low > 0:
        return HIGHER
    if interval.high < 0:
        return LOWER
    return NOT_SEPARATED


@dataclass(frozen=True)
class PairedComparison:
    """Arm versus baseline on held-out success, paired by seed (runs of one seed share the warm start and
    every evaluation episode).

    ``end``: per seed, end(arm) − end(baseline), t-interval over seeds: **the interval that decides**
    (:attr:`verdict`). ``change``: per seed, Δ(arm) − Δ(baseline), Δ = end − iteration 0 (equal to ``end``
    when iteration 0 is the same shared warm start). ``episodes``: the second view, per-episode
    differences at the end pooled over seeds (:func:`paired_episode_interval`).
    """

    end: Interval
    change: Interval
    episodes: Interval

    @staticmethod
    def of(
        points: Sequence[tuple[tuple[Proportion, Proportion], tuple[Proportion, Proportion]]],
        episodes: Sequence[Sequence[float]] = (),
    ) -> PairedComparison:
        """From one ((arm before, arm end), (baseline before, baseline end)) per seed, and optionally one
        sequence of per-episode end differences per seed (none: the episode view is empty)."""
        end = [a_end.rate - b_end.rate for (_ab, a_end), (_bb, b_end) in points]
        change = [(a_end.rate - a0.rate) - (b_end.rate - b0.rate) for (a0, a_end), (b0, b_end) in points]
        return PairedComparison(
            end=Interval.of(end),
            change=Interval.of(change),
            episodes=paired_episode_interval(episodes) if episodes else Interval.of([]),
        )

    @property
    def seeds(self) -> int:
        return len(self.end.values)

    @property
    def verdict(self) -> str:
        """:func:`paired_verdict` of the per-seed end differences: what the study concludes."""
        return paired_verdict(self.end.values)

    @property
    def change_verdict(self) -> str:
        """:func:`paired_verdict` of the per-seed differences of the change from iteration 0."""
        return paired_verdict(self.change.values)
