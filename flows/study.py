"""`rla study`: the ablation study (paper Table 1, Fig. 1 panel 2) as ordinary resumable runs.

A study runs arms × seeds. Each (arm, seed) is an ordinary run ``<study>-<arm>-s<seed>`` in the same
artifact root, started with the study's base config plus the arm's ablation switches and the seed; so
``rla status``, ``rla resume`` and ``rla report`` work on every run of a study, and runs whose bootstrap
keys agree (same seed, same models) share the cached warm start. Runs go one after another (seed by
seed, so a half-finished study already holds every arm); on a cluster each could be its own flow run.

Re-running ``rla study ID`` continues where it stopped: finished runs are skipped (their last evaluation
is committed), unfinished ones resume. The study keeps ``<root>/<study>/study.json`` (base config, arms,
seeds), ``study.parquet`` (artifact ``study``: one row per study, arm, seed, run, iteration and metric),
``walltime/*.parquet`` (artifact ``study_walltime``: one file per sitting of a run, appended, never
rewritten), ``pairs.parquet`` (artifact ``study_pairs``: every pair of arms compared paired by seed,
:func:`paired_comparisons`) and ``summary.md`` (the Table-1-style summary). The summary's tables are
built once (:func:`summary_tables`) and rendered both to ``summary.md`` and to the HTML report.
"""

from __future__ import annotations

import io
import json
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from flows.arms import ARM_DESCRIPTIONS, ARMS, DEFAULT_ARMS, PRIVILEGED_ARMS
from flows.runs import find_frame, require_run
from rla_core.algo.episodes import played
from rla_core.algo.metrics import clean_wins
from rla_core.algo.stats import (
    MIN_SEEDS_TO_LEARN,
    Interval,
    interval_verdict,
    proportion_text,
    wilson_interval,
)
from rla_core.algo.study import CLEAN, EVAL_EPISODES, SUCCESS, PairSummary, StudySummary, summarize
from rla_core.config import RunConfig, apply_overrides, build_config, upgrade_stored_config
from rla_core.errors import ArtifactError, ConfigError, RunNotFoundError
from rla_core.schemas import empty_frame, validate
from rla_core.stage_inputs import StageName
from rla_core.store import ArtifactStore
from rla_core.store.uri import check_name

DEFAULT_SEEDS: tuple[int, ...] = (1, 2, 3)
STUDY_FILE = "study.json"
STUDY_FRAME = "study.parquet"
SUMMARY_FILE = "summary.md"
PAIRS_FRAME = "pairs.parquet"  # artifact study_pairs, rebuilt with study.parquet
WALLTIME_DIR = "walltime"  # one Parquet file (artifact study_walltime) per finished sitting of a run
# Studies started before the rows existed keep a JSON object run id → wall seconds: read, never written.
LEGACY_WALLTIME_FILE = "walltime.json"


POOL_STATUSES = ("active", "pending", "accepted", "rejected")
DIFFICULTY_KEYS = ("quest_length", "nb_objects", "world_size")


def run_id_for(study_id: str, arm: str, seed: int) -> str:
    """The id of one run of a study: ``<study>-<arm>-s<seed>``."""
    return f"{study_id}-{arm}-s{seed}"


def check_arms(arms: Sequence[str]) -> tuple[str, ...]:
    """The arms, validated (ConfigError naming the known arms otherwise), without duplicates."""
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ConfigError(
            f"unknown arm(s) {', '.join(repr(a) for a in unknown)}; choose from: {', '.join(ARMS)}"
        )
    if not arms:
        raise ConfigError(f"a study needs at least one arm; choose from: {', '.join(ARMS)}")
    return tuple(dict.fromkeys(arms))


def parse_arms(text: str) -> tuple[str, ...]:
    """``"policy,full"`` → ("policy", "full"), validated."""
    return check_arms([a.strip() for a in text.split(",") if a.strip()])


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"1,2,3"`` → (1, 2, 3); ``"3"`` alone means three seeds 1..3."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ConfigError(f"--seeds '{text}' must be a count (3) or a comma-separated list (1,2,3)") from None
    if not values:
        raise ConfigError("--seeds needs at least one seed")
    if len(values) == 1:
        if values[0] < 1:
            raise ConfigError(f"--seeds {values[0]}: a count of seeds must be at least 1")
        return tuple(range(1, values[0] + 1))
    return tuple(dict.fromkeys(values))


def arm_config(base: dict[str, Any], arm: str, seed: int) -> RunConfig:
    """The run config of one (arm, seed): the base config, the arm's switches, ``seed``."""
    data = apply_overrides(json.loads(json.dumps(base)), ARMS[arm])
    data["seed"] = seed
    return build_config(upgrade_stored_config(data))


@dataclass(frozen=True)
class StudySpec:
    """What a study is: its id, base config (a RunConfig dump), arms and seeds. Stored as study.json."""

    study_id: str
    base: dict[str, Any]
    arms: tuple[str, ...]
    seeds: tuple[int, ...]
    created_at: str = ""

    def run_ids(self) -> list[tuple[str, int, str]]:
        """(arm, seed, run_id) in execution order: seed by seed, arms in the given order."""
        return [(arm, seed, run_id_for(self.study_id, arm, seed)) for seed in self.seeds for arm in self.arms]

    def to_json(self) -> bytes:
        body = {
            "study_id": self.study_id,
            "arms": list(self.arms),
            "seeds": list(self.seeds),
            "base": self.base,
            "created_at": self.created_at,
        }
        return json.dumps(body, indent=1, sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes, *, where: str) -> StudySpec:
        try:
            body = json.loads(data)
            return StudySpec(
                study_id=str(body["study_id"]),
                base=dict(body["base"]),
                arms=tuple(body["arms"]),
                seeds=tuple(int(s) for s in body["seeds"]),
                created_at=str(body.get("created_at", "")),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"study file '{where}' is not a valid study record ({exc}); start a new study id"
            ) from None


def read_study(store: ArtifactStore, study_id: str) -> StudySpec | None:
    """The stored spec of a study, or None if the study was never started."""
    data = store.read_run_file(check_name(study_id, what="study id"), STUDY_FILE)
    return None if data is None else StudySpec.from_json(data, where=f"{store.root}/{study_id}/{STUDY_FILE}")


def require_study(store: ArtifactStore, study_id: str) -> StudySpec:
    """The stored spec of a study; RunNotFoundError otherwise."""
    spec = read_study(store, study_id)
    if spec is None:
        raise RunNotFoundError(
            f"no study '{study_id}' under '{store.root}' (no {study_id}/{STUDY_FILE}); start one with "
            f"`rla study {study_id} --preset bench --root {store.root}`"
        )
    return spec


# ---- metrics of one run ----------------------------------------------------------------------------


def _pool_rows(events: pl.DataFrame, iterations: Sequence[int]) -> list[tuple[int, str, float]]:
    """Task-pool sizes per iteration from registry events: active/pending now, accepted/rejected so far."""
    from rla_core.algo.registry import TaskRegistry

    registry = TaskRegistry.from_events(events)
    out: list[tuple[int, str, float]] = []
    for it in iterations:
        snap = registry.snapshot(at_iteration=it)
        upto = registry.events.filter(pl.col("iteration") <= it)
        counts = {
            "active": snap.filter(pl.col("status") == "active").height,
            "pending": snap.filter(pl.col("status") == "pending").height,
            "accepted": upto.filter(pl.col("event") == "accept").height,
            "rejected": upto.filter(pl.col("event") == "reject").height,
        }
        out += [(it, f"env/pool_{k}", float(v)) for k, v in counts.items()]
        specs = [json.loads(s) for s in snap.filter(pl.col("status") == "active")["spec"].to_list()]
        for key in DIFFICULTY_KEYS:
            values = [
                float(s[key]) for s in specs if isinstance(s, dict) and isinstance(s.get(key), int | float)
            ]
            if values:
                out.append((it, f"env/mean_{key}", sum(values) / len(values)))
    return out


def run_metrics(store: ArtifactStore, run_id: str) -> pl.DataFrame:
    """Every number of one run, long: (iteration, metric, value).

    Stage metrics from the committed manifests (``policy/…``, ``reward_model/…``, ``env/…``,
    ``timing_s/<stage>``); evaluation counts with their Wilson 95 % interval (``eval/successes``,
    ``eval/episodes``, ``eval/success_rate``, ``eval/success_low``, ``eval/success_high``, and the same
    ``eval/clean_…`` for wins without an invalid answer); the task
    pool per iteration (``env/pool_active|pending|accepted|rejected``, ``env/mean_<difficulty key>``).
    """
    require_run(store, run_id)
    rows: list[tuple[int, str, float]] = []
    registry_iterations: list[int] = []  # iterations with a task-registry snapshot
    for (it, stage), manifest in store.committed(run_id).items():
        for key, value in manifest.extra.get("metrics", {}).items():
            if isinstance(value, int | float) and math.isfinite(float(value)):
                rows.append((it, str(key), float(value)))
        if "tasks" in manifest.frames:
            registry_iterations.append(it)
        if "eval" in manifest.frames:
            evals = played(store.read_frame(run_id, it, stage, "eval"))  # won and lost episodes only
            if evals.height:
                rows.append((it, EVAL_EPISODES, float(evals.height)))
                won = {SUCCESS: evals["outcome"] > 0, CLEAN: clean_wins(evals)}
                for measure, wins_of in won.items():
                    wins = int(wins_of.sum())
                    low, high = wilson_interval(wins, evals.height)
                    rows += [
                        (it, measure.successes, float(wins)),
                        (it, measure.rate, wins / evals.height),
                        (it, measure.low, low),
                        (it, measure.high, high),
                    ]
    if registry_iterations:
        # The current registry: the last stage, in flow order, of the last iteration that wrote one.
        last_it = max(registry_iterations)
        events = store.read_frame(run_id, last_it, find_frame(store, run_id, last_it, "tasks"), "tasks")
        done_iters = sorted({it for it, _m, _v in rows})
        rows += _pool_rows(events, done_iters)
    return pl.DataFrame(
        rows, schema={"iteration": pl.Int64, "metric": pl.String, "value": pl.Float64}, orient="row"
    ).sort("iteration", "metric")


def run_finished(store: ArtifactStore, run_id: str, iterations: int) -> bool:
    """Whether a run has committed the evaluation after its last iteration."""
    return run_id in store.list_runs() and store.manifest(run_id, iterations, StageName.EVALUATE) is not None


# ---- the study frame and its summary ---------------------------------------------------------------


def study_frame(store: ArtifactStore, spec: StudySpec) -> pl.DataFrame:
    """Artifact ``study``: the metrics of every started run of the study, long format."""
    parts = []
    runs = set(store.list_runs())
    for arm, seed, run_id in spec.run_ids():
        if run_id not in runs:
            continue
        metrics = run_metrics(store, run_id)
        parts.append(
            metrics.with_columns(
                study=pl.lit(spec.study_id),
                arm=pl.lit(arm),
                seed=pl.lit(seed, dtype=pl.Int64),
                run_id=pl.lit(run_id),
            )
        )
    frame = pl.concat(parts) if parts else pl.DataFrame()
    if frame.height == 0:
        return empty_frame("study")
    return validate("study", frame, where=f"study {spec.study_id}")


def write_study_frame(store: ArtifactStore, spec: StudySpec, frame: pl.DataFrame) -> str:
    """Write ``<root>/<study>/study.parquet`` atomically; returns its location."""
    buf = io.BytesIO()
    validate("study", frame, where=f"study {spec.study_id}").write_parquet(buf)
    return store.write_run_file(spec.study_id, STUDY_FRAME, buf.getvalue())


def read_study_frame(store: ArtifactStore, study_id: str) -> pl.DataFrame | None:
    """The stored study frame, or None when none was written yet."""
    data = store.read_run_file(check_name(study_id, what="study id"), STUDY_FRAME)
    return None if data is None else validate("study", pl.read_parquet(io.BytesIO(data)), where=study_id)


CLEAN_EXPLAINED = (
    "an episode counts only if it was won without a single invalid answer. Under the spec's fallback an "
    "invalid answer still plays an action (index 0, or an out-of-range index clamped to the last action), "
    "so a garbled answer can win by luck; clean success is exactly the success the same episodes would have "
    "if an invalid answer ended them."
)


def minutes_text(seconds: Interval) -> str:
    return "–" if math.isnan(seconds.mean) else f"{seconds.mean / 60:.1f}"


@dataclass(frozen=True)
class SummaryTable:
    """One table of the study summary: its id (the HTML table's id), the sentence above it, its cells."""

    id: str
    caption: str
    frame: pl.DataFrame  # every column a String: the cells exactly as summary.md and the report show them


def _cells(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> pl.DataFrame:
    return pl.DataFrame([list(r) for r in rows], schema={c: pl.String for c in columns}, orient="row")


def summary_tables(summary: StudySummary) -> list[SummaryTable]:
    """The summary's tables, built here once: ``summary.md`` and the HTML report render these cells.

    ``summary``: per arm, held-out success at iteration 0 and the end (mean over seeds, t-interval), the
    paired change Δ, whether the arm learns (:func:`rla_core.algo.stats.learns`), reward-model accuracy,
    accepted rewrites and time. ``summary-clean``: the same for clean success. ``pairs`` (with two or more
    arms): every pair of arms paired by seed (:func:`paired_comparisons`). ``per-run``: each run's
    evaluation points as proportions with their Wilson intervals. ``arms``: what each arm switches.
    """

    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    def arm(name: str) -> str:
        return f"{name} (privileged)" if name in PRIVILEGED_ARMS else name

    main = _cells(
        ["arm", "seeds", "iteration 0", "end", "Δ", "learns", "RM step acc (raw)", "RM step balanced acc",
         "RM outcome agr.",
         "accepted rewrites", "wall min/run", "loop compute min/run"],
        [
            [arm(a.arm), str(a.seeds), a.success.before.text(), a.success.end.text(), a.success.delta.text(),
             yes(a.learns), f"{a.step_acc_start.text(2)} → {a.step_acc_end.text(2)}",
             f"{a.balanced_start.text(2)} → {a.balanced_end.text(2)}",
             f"{a.agreement_start.text(2)} → {a.agreement_end.text(2)}", a.accepted.text(1),
             minutes_text(a.wall_s), minutes_text(a.compute_s)]
            for a in summary.arms
        ],
    )  # fmt: skip
    clean = _cells(
        ["arm", "seeds", "iteration 0", "end", "Δ", "learns"],
        [
            [arm(a.arm), str(a.seeds), a.clean.before.text(), a.clean.end.text(), a.clean.delta.text(),
             yes(a.clean.learns)]
            for a in summary.arms
        ],
    )  # fmt: skip
    per_run = _cells(
        ["run", "iteration 0", "end", "end iteration", "clean, iteration 0", "clean, end"],
        [
            [s.run_id, proportion_text(s.before), proportion_text(s.end),
             str(s.last_iteration) if s.end is not None else "–", proportion_text(s.clean_before),
             proportion_text(s.clean_end)]
            for s in summary.seeds
        ],
    )  # fmt: skip
    arms = _cells(
        ["arm", "what it runs"], [[arm(a.arm), ARM_DESCRIPTIONS.get(a.arm, "")] for a in summary.arms]
    )
    pairs = _cells(
        ["arm − baseline", "seeds", "end Δ per seed", "end Δ [95% t]", "decision", "change Δ [95% t]",
         "episodes", "episode Δ [95% normal]", "on these episodes"],
        [
            [f"{arm(p.arm)} − {arm(p.baseline)}", str(len(p.seeds)), per_seed_text(p.seeds, p.comparison.end.values) or "–",
             p.comparison.end.text(), p.comparison.verdict, p.comparison.change.text(),
             str(p.episodes) if p.episodes else "–", p.comparison.episodes.text(),
             interval_verdict(p.comparison.episodes) if p.episodes else "–"]
            for p in summary.pairs
        ],
    )  # fmt: skip
    pairs_table = SummaryTable(
        "pairs",
        "Arms compared paired by seed (held-out success, arm − baseline; the runs of one seed share the warm "
        "start and play the same evaluation episodes). The decision is the 95% t-interval over seeds of the "
        f"per-seed end difference: higher / lower when it lies above / below 0 with ≥ {MIN_SEEDS_TO_LEARN} "
        "seeds. Change Δ: the same for the change from iteration 0. Episode Δ: per-episode differences at the "
        "end pooled over seeds (paired normal interval, stratified by seed): how far these episodes separate "
        "the trained policies, not evidence over training seeds.",
        pairs,
    )
    return [
        SummaryTable(
            "summary",
            f"Study `{summary.study_id}`: held-out success (mean over seeds [95% t-interval]); Δ = end − "
            f"iteration 0 per seed; an arm learns when Δ's interval over ≥ {MIN_SEEDS_TO_LEARN} seeds lies "
            "above 0; RM = reward-model step accuracy (raw, and balanced: the mean of the recalls on good and "
            "bad steps, 0.5 for a constant judge) / outcome agreement vs the engine, first → last judged "
            "iteration; an arm marked (privileged) reads the engine's optimal actions, which the method never "
            "sees: a diagnostic bound, not a method.",
            main,
        ),
        SummaryTable("summary-clean", f"Held-out clean success: {CLEAN_EXPLAINED}", clean),
        *([pairs_table] if summary.pairs else []),
        SummaryTable("per-run", "Per run (successes/episodes, Wilson 95% interval):", per_run),
        SummaryTable("arms", "Arms:", arms),
    ]


def summary_markdown(summary: StudySummary) -> str:
    """The Table-1-style summary (and per-run Wilson intervals) as Markdown: :func:`summary_tables`."""
    parts: list[str] = []
    for table in summary_tables(summary):
        parts += [table.caption, "", *markdown_table(table.frame), ""]
    return "\n".join(parts)


def markdown_table(frame: pl.DataFrame) -> list[str]:
    """A frame as the lines of a Markdown table (header, rule, one line per row; ``|`` escaped)."""

    def row(cells: Sequence[object]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return [row(frame.columns), "|" + "---|" * frame.width, *(row(r) for r in frame.rows())]


def read_eval(store: ArtifactStore, run_id: str, iteration: int) -> pl.DataFrame | None:
    """The 'eval' frame a run committed at ``iteration`` (from the stage that wrote it), or None."""
    for (_, stage), manifest in store.committed(run_id, iteration).items():
        if "eval" in manifest.frames:
            return store.read_frame(run_id, iteration, stage, "eval")
    return None


PAIR_METHOD_SEEDS = "t over seeds"
PAIR_METHOD_EPISODES = "paired normal over episodes, stratified by seed"


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else x


def per_seed_text(seeds: Sequence[int], values: Sequence[float]) -> str:
    """``s1 +0.055, s2 +0.075, s3 -0.025``: one paired difference per seed."""
    return ", ".join(f"s{seed} {v:+.3f}" for seed, v in zip(seeds, values, strict=True))


def pairs_frame(study_id: str, pairs: Sequence[PairSummary]) -> pl.DataFrame:
    """Artifact ``study_pairs``: per pair of arms three rows, quantity ``end`` (decides), ``change`` and
    ``end_episodes`` (the episode view)."""
    rows: list[dict[str, Any]] = []
    for p in pairs:
        c = p.comparison
        for quantity, interval, method, decides, verdict, per_seed in (
            ("end", c.end, PAIR_METHOD_SEEDS, True, c.verdict, per_seed_text(p.seeds, c.end.values)),
            ("change", c.change, PAIR_METHOD_SEEDS, False, c.change_verdict,
             per_seed_text(p.seeds, c.change.values)),
            ("end_episodes", c.episodes, PAIR_METHOD_EPISODES, False, interval_verdict(c.episodes), None),
        ):  # fmt: skip
            rows.append(
                {
                    "study": study_id, "arm": p.arm, "baseline": p.baseline, "quantity": quantity,
                    "method": method, "decides": decides, "seeds": len(p.seeds), "n": len(interval.values),
                    "mean": _finite(interval.mean), "low": _finite(interval.low),
                    "high": _finite(interval.high), "verdict": verdict, "per_seed": per_seed,
                }
            )  # fmt: skip
    if not rows:
        return empty_frame("study_pairs")
    frame = pl.DataFrame(rows, schema=empty_frame("study_pairs").schema)
    return validate("study_pairs", frame, where=f"study {study_id}")


def read_pairs_frame(store: ArtifactStore, study_id: str) -> pl.DataFrame | None:
    """The stored pair rows of a study, or None when none were written yet."""
    data = store.read_run_file(check_name(study_id, what="study id"), PAIRS_FRAME)
    return (
        None if data is None else validate("study_pairs", pl.read_parquet(io.BytesIO(data)), where=study_id)
    )


def refresh_study(store: ArtifactStore, spec: StudySpec) -> tuple[pl.DataFrame, StudySummary]:
    """Rebuild study.parquet, pairs.parquet and summary.md from the runs' artifacts and wall-time rows;
    returns the frame and the summary."""
    frame = study_frame(store, spec)
    write_study_frame(store, spec, frame)
    summary = summarize(
        spec.study_id,
        frame,
        spec.arms,
        wall_s=read_walltimes(store, spec.study_id),
        episodes=lambda run_id, iteration: read_eval(store, run_id, iteration),
    )
    buf = io.BytesIO()
    pairs_frame(spec.study_id, summary.pairs).write_parquet(buf)
    store.write_run_file(spec.study_id, PAIRS_FRAME, buf.getvalue())
    store.write_run_file(spec.study_id, SUMMARY_FILE, summary_markdown(summary).encode())
    return frame, summary


def record_walltime(store: ArtifactStore, study_id: str, run_id: str, wall_s: float) -> str:
    """Append one row of artifact ``study_walltime``: this sitting of ``run_id`` took ``wall_s`` seconds.

    Each sitting is its own small Parquet file ``walltime/<UTC time>-<nonce>.parquet``, written
    atomically; no earlier row is ever read back and rewritten. Returns its location.
    """
    now = time.gmtime()
    sitting = f"{time.strftime('%Y%m%dT%H%M%SZ', now)}-{uuid.uuid4().hex[:8]}"
    row = pl.DataFrame(
        {
            "study": [study_id],
            "run_id": [run_id],
            "sitting": [sitting],
            "ended_at": [time.strftime("%Y-%m-%dT%H:%M:%SZ", now)],
            "wall_s": [float(wall_s)],
        }
    )
    buf = io.BytesIO()
    validate("study_walltime", row, where=f"study {study_id}").write_parquet(buf)
    return store.write_run_file(study_id, f"{WALLTIME_DIR}/{sitting}.parquet", buf.getvalue())


def _legacy_walltimes(store: ArtifactStore, study_id: str) -> pl.DataFrame | None:
    """The rows of a study's ``walltime.json`` (studies from before the Parquet rows), read only."""
    data = store.read_run_file(study_id, LEGACY_WALLTIME_FILE)
    if data is None:
        return None
    where = f"{store.run_location(study_id)}/{LEGACY_WALLTIME_FILE}"
    try:
        walls = {str(k): float(v) for k, v in json.loads(data).items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise ArtifactError(
            f"'{where}' is not a JSON object of run id → seconds ({exc}); move it aside to drop the old "
            "wall times (new ones are rows under walltime/)"
        ) from None
    return pl.DataFrame(
        {
            "study": [study_id] * len(walls),
            "run_id": list(walls),
            "sitting": [LEGACY_WALLTIME_FILE] * len(walls),
            "ended_at": pl.Series([None] * len(walls), dtype=pl.String),
            "wall_s": list(walls.values()),
        },
        schema=empty_frame("study_walltime").schema,
    )


def walltime_frame(store: ArtifactStore, study_id: str) -> pl.DataFrame:
    """Artifact ``study_walltime``: every recorded sitting of the study's runs, oldest first.

    A study started before the rows existed also has its ``walltime.json`` read (one row per run,
    sitting ``walltime.json``, no ``ended_at``); that file is never written again.
    """
    parts = [legacy] if (legacy := _legacy_walltimes(store, study_id)) is not None else []
    for name in store.list_run_files(study_id, WALLTIME_DIR):
        if not name.endswith(".parquet"):  # e.g. the temporary file of an interrupted write
            continue
        data = store.read_run_file(study_id, f"{WALLTIME_DIR}/{name}")
        if data is not None:
            where = f"{store.run_location(study_id)}/{WALLTIME_DIR}/{name}"
            parts.append(validate("study_walltime", pl.read_parquet(io.BytesIO(data)), where=where))
    return pl.concat(parts) if parts else empty_frame("study_walltime")


def read_walltimes(store: ArtifactStore, study_id: str) -> dict[str, float]:
    """Run id → wall seconds spent running it in `rla study` sittings (empty before the first run ends)."""
    totals = walltime_frame(store, study_id).group_by("run_id").agg(pl.col("wall_s").sum())
    return {str(run): float(seconds) for run, seconds in totals.iter_rows()}


# ---- running a study -------------------------------------------------------------------------------


def open_study(
    store: ArtifactStore,
    study_id: str,
    *,
    base: RunConfig | None,
    arms: Sequence[str] | None,
    seeds: Sequence[int] | None,
) -> StudySpec:
    """Create a study, or continue a stored one (arms and seeds may be extended, the base config not)."""
    check_name(study_id, what="study id")
    if study_id in store.list_runs():
        raise ConfigError(
            f"study id '{study_id}' clashes with an existing run under '{store.root}'; choose another study id"
        )
    stored = read_study(store, study_id)
    if stored is None:
        if base is None:
            raise ConfigError(
                f"study '{study_id}' does not exist yet; start it with a config (e.g. --preset bench)"
            )
        return StudySpec(
            study_id=study_id,
            base=base.model_dump(mode="json"),
            arms=check_arms(arms or DEFAULT_ARMS),
            seeds=tuple(seeds or DEFAULT_SEEDS),
            created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
    if base is not None:
        from flows.runs import config_diff

        before = build_config(upgrade_stored_config(stored.base)).model_dump(mode="json")
        changed = [
            k for k in config_diff(before, base.model_dump(mode="json")) if not k.startswith("tracking.")
        ]
        if changed:
            raise ConfigError(
                f"study '{study_id}' was started with a different config (changed: {', '.join(changed[:6])}); "
                f"continue it with `rla study {study_id} --root {store.root}` or choose a new study id"
            )
    return StudySpec(
        study_id=study_id,
        base=stored.base,
        arms=check_arms([*stored.arms, *(arms or ())]),
        seeds=tuple(dict.fromkeys([*stored.seeds, *(seeds or ())])),
        created_at=stored.created_at,
    )


def run_study(
    store: ArtifactStore,
    spec: StudySpec,
    *,
    say: Callable[[str], None] = print,
    execute: Callable[..., None] | None = None,
) -> StudySummary:
    """Run every unfinished (arm, seed) of a study in order, refreshing study.parquet after each run."""
    from flows.runs import execute_run

    run = execute or execute_run
    with store.lock(spec.study_id):
        store.write_run_file(spec.study_id, STUDY_FILE, spec.to_json())
        todo = spec.run_ids()
        for i, (arm, seed, run_id) in enumerate(todo, start=1):
            cfg = arm_config(spec.base, arm, seed)
            if run_finished(store, run_id, cfg.iterations):
                say(f"study {spec.study_id} [{i}/{len(todo)}]: {run_id} is finished, skipped")
                continue
            existing = run_id in store.list_runs()
            say(f"study {spec.study_id} [{i}/{len(todo)}]: {'resuming' if existing else 'starting'} {run_id}")
            started = time.perf_counter()
            run(cfg, run_id, reconfigure=False, existing=existing, say=say)
            took = time.perf_counter() - started
            record_walltime(store, spec.study_id, run_id, took)
            say(f"study {spec.study_id}: {run_id} took {took:.0f} s")
            refresh_study(store, spec)
        _frame, summary = refresh_study(store, spec)
    return summary
