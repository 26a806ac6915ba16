"""Why an arm of a study did or did not help: per-iteration training diagnostics from the stage manifests.

For every arm of study ``STUDY`` under ``ROOT`` (runs named ``<study>-<arm>-s<seed>``, as ``rla study``
names them), the mean over the seeds present of, per iteration:

* ``train success`` — the training pool's rollout success (``rollout: policy/success_rate``); with
  ``env/mean_task_acc`` (label) it shows the pool's difficulty drift under adaptation;
* ``zero-adv share`` — policy rows whose advantage is 0 (``label: policy/rows_zero_advantage`` /
  ``policy/rows_total``): the share of steps the update cannot learn from;
* ``RM step acc (raw)`` — the judge's agreement with the engine's optimal next actions (``judge:
  reward_model/step_accuracy``); ``RM step balanced acc`` — the mean of its recalls on good and on bad steps
  (0.5 for a judge that calls every step the same); ``RM good verdicts`` — the share of steps it calls good;
  ``good steps`` — the share that are good (a judge calling every step bad scores 1 − this raw accuracy);
  ``RM outcome agr.`` — its agreement with the episodes' outcomes;
* ``accepted`` — pending rewrites accepted into the pool (``label: env/pending_accepted``).

A second table per arm, **the judge's rows** (what its update is made of, from the label stage): the rows that
enter the reward model's update by the outcome of their episode (``won``, ``lost``) and by the engine's label of
their step (``good step``, ``bad step``); ``unanimous`` — the share of judged steps whose m judgments all earned
the same raw reward, so they gave no row; ``in band`` — the share of played tasks whose accuracy lies in the
judge's band (``env/share_in_band``: the paper's own means of balance); ``weight won / lost`` — the weights of
``reward.rm_outcome_balance`` when it is on. For an oracle arm the step columns of the first table are the
votes' own (the label stage's), so a noisy oracle's measured balanced accuracy stands there.

A third table, **the judge on its yardstick** (``judge_eval``, ``evaluation.judge_steps``), per run: balanced
accuracy, good-verdict share and the precision of its good verdicts at iteration 0 and at the last iteration
that measured it, and per arm their change (end − start) as a mean over the arm's runs with its 95 %
t-interval over seeds.

First, across arms, **end success against the votes' balanced accuracy** (the noise curve): per arm, the
balanced step accuracy of the votes its policy update used (the judge stage's, else the label stage's; mean over
the arm's iterations and seeds; for a trained judge it is measured on the steps it judged, against the engine's
labels; none where the run's config turns the step-wise reward off, as ``outcome-only``'s does), the
**precision of its "good" verdicts** (the share of the steps it calls good that are good: a judge may call most
good steps bad and still reward only good ones), and the evaluation success (``evaluate:
policy/eval_success_rate``) at iteration 0 and at the last evaluated iteration (named: a run still going ends
earlier) with the change's 95 % t-interval over seeds; sorted by the votes' accuracy.

Nothing is recomputed from rows: every number is a stage metric the run recorded, or (the precision, for a run
written before it was recorded) solved exactly from four of them (:func:`good_verdict_precision`). Writes
Markdown tables.

Run: .venv/bin/python benchmarks/study_diagnostics.py ROOT STUDY [--out FILE]
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import defaultdict
from pathlib import Path

from rla_core.algo.stats import Interval
from rla_core.store import ArtifactStore

JUDGED = ("judge", "label")  # the judge stage's metric, else the label stage's (an oracle's votes)
Column = tuple[str, tuple[str, ...], str, str | None, str]  # header, stages, metric, denominator, format
COLUMNS: tuple[Column, ...] = (
    ("train success", ("rollout",), "policy/success_rate", None, ".3f"),
    ("pool task acc", ("label",), "env/mean_task_acc", None, ".3f"),
    ("zero-adv share", ("label",), "policy/rows_zero_advantage", "policy/rows_total", ".3f"),
    ("policy rows kept", ("label",), "policy/rows_kept", None, ".1f"),
    ("RM step acc (raw)", JUDGED, "reward_model/step_accuracy", None, ".3f"),
    ("RM step balanced acc", JUDGED, "reward_model/step_balanced_accuracy", None, ".3f"),
    ("RM good verdicts", JUDGED, "reward_model/good_verdict_share", None, ".3f"),
    ("good steps", JUDGED, "reward_model/good_step_share", None, ".3f"),
    ("RM outcome agr.", ("judge",), "reward_model/outcome_agreement", None, ".3f"),
    ("accepted", ("label",), "env/pending_accepted", None, ".1f"),
)
BALANCE: tuple[Column, ...] = (
    ("RM rows kept", ("label",), "reward_model/rows_kept", None, ".1f"),
    ("won", ("label",), "reward_model/rows_kept_won", None, ".1f"),
    ("lost", ("label",), "reward_model/rows_kept_lost", None, ".1f"),
    ("good step", ("label",), "reward_model/rows_kept_good_step", None, ".1f"),
    ("bad step", ("label",), "reward_model/rows_kept_bad_step", None, ".1f"),
    ("unanimous", ("label",), "reward_model/unanimous_step_share", None, ".3f"),
    ("in band", ("label",), "env/share_in_band", None, ".3f"),
    ("weight won", ("label",), "reward_model/balance_weight_won", None, ".2f"),
    ("weight lost", ("label",), "reward_model/balance_weight_lost", None, ".2f"),
)
SUCCESS = "policy/eval_success_rate"
YARDSTICK = "reward_model/yardstick_"  # the judge_eval stage's prefix of the judge's step metrics


def _stage_metrics(
    store: ArtifactStore, run: str, iteration: int, stages: tuple[str, ...], metric: str
) -> dict[str, float]:
    """The recorded metrics of the first of ``stages`` that recorded ``metric`` (empty if none did)."""
    for stage in stages:
        manifest = store.manifest(run, iteration, stage)
        metrics = manifest.extra.get("metrics", {}) if manifest is not None else {}
        if metric in metrics:
            return metrics
    return {}


def _value(
    store: ArtifactStore, run: str, iteration: int, stages: tuple[str, ...], metric: str, per: str | None
) -> float | None:
    metrics = _stage_metrics(store, run, iteration, stages, metric)
    if metric not in metrics:
        return None
    if per is None:
        return float(metrics[metric])
    total = float(metrics.get(per, 0.0))
    return float(metrics[metric]) / total if total else None


def _table(store: ArtifactStore, root: Path, arm_runs: list[str], columns: tuple[Column, ...]) -> list[str]:
    lines = [
        "| iteration | n | " + " | ".join(c[0] for c in columns) + " |",
        "|---" * (len(columns) + 2) + "|",
    ]
    for iteration in range(1, 100):
        if not any((root / r / f"iter-{iteration:04d}").is_dir() for r in arm_runs):
            break
        cells, n = [], 0
        for _, stages, metric, per, fmt in columns:
            values = [
                v for r in arm_runs if (v := _value(store, r, iteration, stages, metric, per)) is not None
            ]
            n = max(n, len(values))
            cells.append(format(statistics.fmean(values), fmt) if values else "—")
        lines.append(f"| {iteration} | {n} | " + " | ".join(cells) + " |")
    return lines


def _yardstick(store: ArtifactStore, arm_runs: list[str]) -> list[str]:
    rows = []
    changes: list[list[float]] = [[], [], []]  # per measure: end - start of every run measured twice
    for run in arm_runs:
        done = sorted(it for it, stage in store.committed(run) if stage == "judge_eval")
        if not done:
            continue
        first, last = (_judge(store, run, it, ("judge_eval",), YARDSTICK) for it in (done[0], done[-1]))
        cells = [f"{v:.3f}" if v is not None else "—" for v in (*first, *last)]
        rows.append(
            f"| {run} | {done[0]} → {done[-1]} | "
            + " | ".join(f"{cells[i]} → {cells[i + 3]}" for i in range(3))
            + " |"
        )
        for i, (a, b) in enumerate(zip(first, last, strict=True)):
            if len(done) > 1 and a is not None and b is not None:
                changes[i].append(b - a)
    if not rows:
        return []
    if changes[0]:
        cells = [Interval.of(values).text(signed=True) for values in changes]
        rows.append(
            f"| **change, mean over {len(changes[0])} runs [95 % t-interval]** | | "
            + " | ".join(cells)
            + " |"
        )
    return [
        "| run | iterations | yardstick balanced acc | yardstick good verdicts | yardstick precision of good verdicts |",
        "|---|---|---|---|---|",
        *rows,
    ]


def good_verdict_precision(raw: float, balanced: float, said_good: float, good: float) -> float | None:
    """The share of "good" verdicts that are right, from the judge's recorded step metrics.

    With x, y the shares of all judged steps that are good and called good, bad and called bad, and t the
    good share: raw accuracy = x + y and balanced accuracy = (x / t + y / (1 − t)) / 2, so
    x = t (2 b (1 − t) − raw) / (1 − 2 t); the precision is x / (share called good). Exact (a mean vote of 0
    is a miss in both classes, as the metrics count it); None when t is near ½ or nothing is called good.

        >>> round(good_verdict_precision(0.9, 0.9, 0.26, 0.2), 4)  # recall 0.9 on both, 20 % good
        0.6923
    """
    if abs(1 - 2 * good) < 0.05 or said_good <= 0:
        return None
    hits = good * (2 * balanced * (1 - good) - raw) / (1 - 2 * good)
    return min(1.0, max(0.0, hits / said_good))


JUDGE_METRICS = ("step_accuracy", "step_balanced_accuracy", "good_verdict_share", "good_step_share")


def _judge(
    store: ArtifactStore, run: str, iteration: int, stages: tuple[str, ...], prefix: str
) -> tuple[float | None, float | None, float | None]:
    """The judge's balanced accuracy, good-verdict share and precision of its good verdicts, as recorded
    (a run written before the precision was recorded: solved from the other four)."""
    # all five from the one stage that judged, read once: the judge stage, else (an oracle run) the label stage
    metrics = _stage_metrics(store, run, iteration, stages, prefix + "good_step_share")
    raw, balanced, said_good, good = (metrics.get(prefix + m) for m in JUDGE_METRICS)
    precision = metrics.get(prefix + "good_verdict_precision")
    if precision is None and None not in (raw, balanced, said_good, good):
        precision = good_verdict_precision(raw, balanced, said_good, good)  # type: ignore[arg-type]
    return balanced, said_good, precision


def _curve(store: ArtifactStore, runs: dict[str, list[str]]) -> list[str]:
    rows: list[tuple[float | None, str]] = []
    for arm, arm_runs in runs.items():
        votes: list[float] = []
        precision: list[float] = []
        starts: list[float] = []
        ends: list[float] = []
        last: set[int] = set()
        for run in arm_runs:
            iterations = sorted({it for it, _ in store.committed(run)})
            # a run whose reward never read the votes (outcome-only) was judged all the same: no votes used
            if store.read_run_info(run).config["reward"]["use_stepwise"]:
                for it in (it for it in iterations if it > 0):
                    balanced, _, good_precision = _judge(store, run, it, JUDGED, "reward_model/")
                    votes += [balanced] if balanced is not None else []
                    precision += [good_precision] if good_precision is not None else []
            success = {
                it: v
                for it in iterations
                if (v := _value(store, run, it, ("evaluate",), SUCCESS, None)) is not None
            }
            if len(success) > 1:
                first, final = min(success), max(success)
                last.add(final)
                starts.append(success[first])
                ends.append(success[final])
        if not ends:
            continue
        accuracy = statistics.fmean(votes) if votes else None
        changes = [e - s for s, e in zip(starts, ends, strict=True)]
        rows.append(
            (
                accuracy,
                f"| {arm} | {len(ends)} | {f'{accuracy:.3f}' if accuracy is not None else '—'} | "
                f"{f'{statistics.fmean(precision):.3f}' if precision else '—'} | {statistics.fmean(starts):.3f} | "
                f"{statistics.fmean(ends):.3f} | {'/'.join(map(str, sorted(last)))} | {Interval.of(changes).text(signed=True)} |",
            )
        )
    if not rows:
        return []
    rows.sort(key=lambda r: (r[0] is not None, r[0] or 0.0))  # no votes first, then by the votes' accuracy
    return [
        "| arm | runs | votes' balanced acc | precision of good votes | success, iteration 0 | success, end | end iteration | "
        "change [95 % t-interval] |",
        "|---|---|---|---|---|---|---|---|",
        *(text for _, text in rows),
    ]


def diagnostics(root: Path, study: str) -> str:
    store = ArtifactStore(str(root))
    pattern = re.compile(rf"{re.escape(study)}-(?P<arm>.+)-s(?P<seed>\d+)")
    runs: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.iterdir()):
        if (match := pattern.fullmatch(path.name)) and (path / "iter-0001").is_dir():
            runs[match["arm"]].append(path.name)
    lines = [
        f"Study `{study}`: per-iteration training diagnostics, mean over the seeds whose iteration is done "
        "(n = seeds). Every number is a stage metric recorded in the runs' manifests.",
        "",
    ]
    curve = _curve(store, runs)
    if curve:
        lines += ["### End success against the votes' balanced accuracy", "", *curve, ""]
    for arm, arm_runs in runs.items():
        lines += [f"### {arm} (runs: {', '.join(arm_runs)})", "", *_table(store, root, arm_runs, COLUMNS), ""]
        lines += ["The judge's rows:", "", *_table(store, root, arm_runs, BALANCE), ""]
        yardstick = _yardstick(store, arm_runs)
        if yardstick:
            lines += ["The judge on its yardstick:", "", *yardstick, ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("study")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    text = diagnostics(args.root, args.study)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
