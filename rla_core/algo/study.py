"""The analysis rules of an ablation study: per run, per arm, per pair of arms (paper Table 1).

Frames in, results out, no I/O: :func:`seed_results` reads one run's held-out successes (with their
Wilson intervals) from a study frame (long rows ``arm, seed, run_id, iteration, metric, value``);
:func:`summarize` gives, per arm, the change of held-out success over seeds (:class:`~rla_core.algo.stats.Change`)
and, per pair of arms, the comparison paired by seed and by episode (:func:`paired_comparisons`).
``flows.study`` runs the study and stores and renders what these return.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import polars as pl

from rla_core.algo.episodes import is_env_error
from rla_core.algo.stats import Change, Interval, PairedComparison, Proportion
from rla_core.errors import ArtifactError


@dataclass(frozen=True)
class HeldOut:
    """One held-out success measure and its names in the long metric frames (with its Wilson interval)."""

    title: str
    successes: str
    rate: str
    low: str
    high: str


# Names in the long metric frames (besides every stage metric in the manifests).
EVAL_EPISODES = "eval/episodes"


SUCCESS = HeldOut(
    "held-out success", "eval/successes", "eval/success_rate", "eval/success_low", "eval/success_high"
)


# Won without one invalid answer (rla_core.algo.metrics.clean_wins): success if an invalid answer ended the episode.
CLEAN = HeldOut(
    "held-out clean success (won with no invalid answer)",
    "eval/clean_successes",
    "eval/clean_success_rate",
    "eval/clean_success_low",
    "eval/clean_success_high",
)


HELD_OUT = (SUCCESS, CLEAN)


EVAL_SUCCESSES, EVAL_RATE, EVAL_LOW, EVAL_HIGH = SUCCESS.successes, SUCCESS.rate, SUCCESS.low, SUCCESS.high


@dataclass(frozen=True)
class SeedResult:
    """One run of a study: held-out success at iteration 0 and at its last evaluation, with Wilson intervals."""

    arm: str
    seed: int
    run_id: str
    last_iteration: int
    before: Proportion | None  # successes of episodes at iteration 0, Wilson interval
    end: Proportion | None  # the same at the last evaluated iteration
    clean_before: Proportion | None  # the same for wins without an invalid answer
    clean_end: Proportion | None
    step_acc: tuple[float, float] | None  # first and last judged iteration
    step_balanced_acc: (
        tuple[float, float] | None
    )  # the same, mean of per-class recalls (a constant scores 0.5)
    outcome_agreement: tuple[float, float] | None
    accepted: float
    compute_s: float  # stage compute time without the (shared, cached) warm start
    wall_s: float | None = None  # wall time of the `rla study` sittings that ran it


@dataclass(frozen=True)
class ArmSummary:
    arm: str
    seeds: int
    success: Change  # held-out success
    clean: Change  # held-out clean success (wins without an invalid answer)
    step_acc_start: Interval
    step_acc_end: Interval
    balanced_start: Interval
    balanced_end: Interval
    agreement_start: Interval
    agreement_end: Interval
    accepted: Interval
    compute_s: Interval
    wall_s: Interval

    @property
    def learns(self) -> bool:
        """Held-out success at the end exceeds iteration 0 by more than the 95 % interval over seeds."""
        return self.success.learns


@dataclass(frozen=True)
class PairSummary:
    """Two arms of a study compared paired by seed: ``arm − baseline`` (:class:`PairedComparison`)."""

    arm: str
    baseline: str
    seeds: tuple[int, ...]  # the seeds paired, in the study's order
    comparison: PairedComparison

    @property
    def episodes(self) -> int:
        """Paired episodes behind the episode view (0 when it was not computed)."""
        return len(self.comparison.episodes.values)


@dataclass(frozen=True)
class StudySummary:
    study_id: str
    arms: list[ArmSummary]
    seeds: list[SeedResult] = field(default_factory=list)
    pairs: list[PairSummary] = field(default_factory=list)


def _first_last(series: dict[int, float]) -> tuple[float, float] | None:
    if not series:
        return None
    keys = sorted(series)
    return series[keys[0]], series[keys[-1]]


def _series(sub: pl.DataFrame, metric: str) -> dict[int, float]:
    rows = sub.filter(pl.col("metric") == metric)
    return dict(zip(rows["iteration"].to_list(), rows["value"].to_list(), strict=True))


def _eval_point(sub: pl.DataFrame, it: int | None, measure: HeldOut = SUCCESS) -> Proportion | None:
    """Successes of episodes with the stored Wilson interval at iteration ``it``, if it was evaluated."""
    if it is None:
        return None
    names = (measure.successes, EVAL_EPISODES, measure.low, measure.high)
    values = [_series(sub, m).get(it) for m in names]
    if any(v is None for v in values):
        return None
    wins, eps, low, high = (float(v or 0.0) for v in values)
    return Proportion(int(wins), int(eps), low, high)


def seed_results(frame: pl.DataFrame) -> list[SeedResult]:
    """One :class:`SeedResult` per run in a study frame."""
    out = []
    for (arm, seed, run_id), sub in frame.group_by(["arm", "seed", "run_id"], maintain_order=True):
        evaluated = sorted(_series(sub, EVAL_SUCCESSES))
        last = evaluated[-1] if evaluated and evaluated[-1] > 0 else None
        # The warm start is cached and shared across a study's runs: only the loop's stages count here.
        timings = sub.filter(
            pl.col("metric").str.starts_with("timing_s/") & (pl.col("metric") != "timing_s/bootstrap")
        )
        accepted = _series(sub, "env/pool_accepted")
        out.append(
            SeedResult(
                arm=str(arm),
                seed=int(seed),
                run_id=str(run_id),
                last_iteration=last or 0,
                before=_eval_point(sub, 0),
                end=_eval_point(sub, last),
                clean_before=_eval_point(sub, 0, CLEAN),
                clean_end=_eval_point(sub, last, CLEAN),
                step_acc=_first_last(_series(sub, "reward_model/step_accuracy")),
                step_balanced_acc=_first_last(_series(sub, "reward_model/step_balanced_accuracy")),
                outcome_agreement=_first_last(_series(sub, "reward_model/outcome_agreement")),
                accepted=accepted[max(accepted)] if accepted else 0.0,
                compute_s=float(timings["value"].sum()),
            )
        )
    return out


# One episode of an evaluation: the same game, episode seed and sampling seed in every run of one seed.
EVAL_KEY = ("task_id", "rollout_id")


EpisodeReader = Callable[[str, int], pl.DataFrame | None]  # (run id, iteration) → its 'eval' frame


def episode_wins(evals: pl.DataFrame, *, where: str) -> dict[tuple[str, int], int | None]:
    """(task_id, rollout_id) → 1 if the episode was won (outcome > 0), else 0, and None when its environment
    failed (env_error: no outcome, docs/environment-errors.md); ArtifactError on duplicates."""
    duplicated = int(evals.select(EVAL_KEY).is_duplicated().sum())
    if duplicated:
        raise ArtifactError(
            f"the 'eval' frame of {where} has {duplicated} rows sharing a (task_id, rollout_id): its episodes "
            "cannot be paired with another arm's; re-run that evaluation (`rla resume RUN_ID --from-stage "
            "evaluate --iteration N`)"
        )
    won = evals.select(
        pl.when(is_env_error(evals)).then(None).otherwise((pl.col("outcome") > 0).cast(pl.Int64)).alias("won")
    )["won"].to_list()
    keys = zip(evals["task_id"].to_list(), evals["rollout_id"].to_list(), strict=True)
    return dict(zip(keys, won, strict=True))


def episode_differences(
    arm: dict[tuple[str, int], int | None],
    baseline: dict[tuple[str, int], int | None],
    *,
    arm_where: str,
    baseline_where: str,
) -> list[float]:
    """Per episode, win(arm) − win(baseline), in (task_id, rollout_id) order; the two must hold the same episodes.

    An episode in env_error (None) in either run is dropped from both. ArtifactError when either holds an
    episode the other lacks (counts and an example of each).
    """
    only_arm, only_baseline = sorted(arm.keys() - baseline.keys()), sorted(baseline.keys() - arm.keys())
    if only_arm or only_baseline:

        def example(keys: list[tuple[str, int]]) -> str:
            return f" (e.g. task {keys[0][0]!r} rollout {keys[0][1]})" if keys else ""

        raise ArtifactError(
            f"cannot pair the held-out episodes of {arm_where} and {baseline_where}: {len(only_arm)} episode(s) "
            f"only in the first{example(only_arm)}, {len(only_baseline)} only in the second"
            f"{example(only_baseline)}; the runs of one seed must evaluate the same held-out tasks with the "
            "same evaluation settings (the study's base config), so that they play the same episodes"
        )
    out = []
    for k in sorted(arm):
        a, b = arm[k], baseline[k]
        if a is not None and b is not None:
            out.append(float(a - b))
    return out


def paired_comparisons(
    seeds: Sequence[SeedResult], arms: Sequence[str], *, episodes: EpisodeReader | None = None
) -> list[PairSummary]:
    """Every pair of arms, paired by seed: ``arm − baseline`` for each arm against every earlier one.

    Runs of one seed share the warm start and play the same evaluation episodes (one evaluation seed per
    run seed, :func:`tasks.evaluate.eval_seed`), so their difference is measured without the luck of two
    draws. A seed is paired when both runs were evaluated at iteration 0 and their last evaluations are at
    the same iteration (a half-finished study compares only what both runs reached). ``episodes`` (run id,
    iteration → its 'eval' frame) adds the second view, per-episode differences at the end pooled over
    seeds; episodes pair by (task_id, rollout_id), and an ArtifactError says so when two runs of one seed
    did not play the same episodes.
    """
    by_key = {(s.arm, s.seed): s for s in seeds}
    wins_of: dict[tuple[str, int], dict[tuple[str, int], int | None]] = {}

    def wins(s: SeedResult) -> dict[tuple[str, int], int | None]:
        key = (s.run_id, s.last_iteration)
        if key not in wins_of:
            assert episodes is not None
            evals = episodes(s.run_id, s.last_iteration)
            where = f"run {s.run_id} (iteration {s.last_iteration})"
            if evals is None:
                raise ArtifactError(
                    f"{where} has evaluation metrics but no committed 'eval' frame; `rla status {s.run_id}` "
                    "shows its stages"
                )
            wins_of[key] = episode_wins(evals, where=where)
        return wins_of[key]

    out = []
    for i, baseline in enumerate(arms):
        for arm in arms[i + 1 :]:
            points, diffs, paired = [], [], []
            for a in (s for s in seeds if s.arm == arm):
                b = by_key.get((baseline, a.seed))
                if b is None or a.before is None or a.end is None or b.before is None or b.end is None:
                    continue
                if a.last_iteration != b.last_iteration:
                    continue
                points.append(((a.before, a.end), (b.before, b.end)))
                paired.append(a.seed)
                if episodes is not None:
                    diffs.append(
                        episode_differences(
                            wins(a), wins(b), arm_where=f"run {a.run_id}", baseline_where=f"run {b.run_id}"
                        )
                    )
            out.append(PairSummary(arm, baseline, tuple(paired), PairedComparison.of(points, diffs)))
    return out


def summarize(
    study_id: str,
    frame: pl.DataFrame,
    arms: Sequence[str],
    *,
    wall_s: dict[str, float] | None = None,
    episodes: EpisodeReader | None = None,
) -> StudySummary:
    """The Table-1-style summary of a study frame: per arm, intervals over seeds; per pair of arms, the
    paired comparison (:func:`paired_comparisons`).

    ``wall_s`` (run id → seconds of wall time, :func:`flows.study.read_walltimes`) adds the wall time per run;
    ``episodes`` (run id, iteration → 'eval' frame, e.g. :func:`flows.study.read_eval`) the episode view of the pairs.
    """
    seeds = [dataclasses.replace(s, wall_s=(wall_s or {}).get(s.run_id)) for s in seed_results(frame)]
    out = []
    for arm in arms:
        mine = [s for s in seeds if s.arm == arm]
        full = [s for s in mine if s.before is not None and s.end is not None]
        success = [(s.before, s.end) for s in full if s.before is not None and s.end is not None]
        clean = [
            (s.clean_before, s.clean_end)
            for s in full
            if s.clean_before is not None and s.clean_end is not None
        ]
        out.append(
            ArmSummary(
                arm=arm,
                seeds=len(full),
                success=Change.of(success),
                clean=Change.of(clean),
                step_acc_start=Interval.of([s.step_acc[0] for s in full if s.step_acc]),
                step_acc_end=Interval.of([s.step_acc[1] for s in full if s.step_acc]),
                balanced_start=Interval.of([s.step_balanced_acc[0] for s in full if s.step_balanced_acc]),
                balanced_end=Interval.of([s.step_balanced_acc[1] for s in full if s.step_balanced_acc]),
                agreement_start=Interval.of([s.outcome_agreement[0] for s in full if s.outcome_agreement]),
                agreement_end=Interval.of([s.outcome_agreement[1] for s in full if s.outcome_agreement]),
                accepted=Interval.of([s.accepted for s in full]),
                compute_s=Interval.of([s.compute_s for s in full]),
                wall_s=Interval.of([s.wall_s for s in full if s.wall_s is not None]),
            )
        )
    pairs = paired_comparisons(seeds, arms, episodes=episodes)
    return StudySummary(study_id=study_id, arms=out, seeds=seeds, pairs=pairs)
