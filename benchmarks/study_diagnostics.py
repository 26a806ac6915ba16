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

Nothing is recomputed: every number is a stage metric the run recorded. Writes a Markdown table.

Run: .venv/bin/python benchmarks/study_diagnostics.py ROOT STUDY [--out FILE]
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import defaultdict
from pathlib import Path

from rla_core.store import ArtifactStore

COLUMNS = (  # (header, stage, metric, denominator metric or None, format)
    ("train success", "rollout", "policy/success_rate", None, ".3f"),
    ("pool task acc", "label", "env/mean_task_acc", None, ".3f"),
    ("zero-adv share", "label", "policy/rows_zero_advantage", "policy/rows_total", ".3f"),
    ("policy rows kept", "label", "policy/rows_kept", None, ".1f"),
    ("RM step acc (raw)", "judge", "reward_model/step_accuracy", None, ".3f"),
    ("RM step balanced acc", "judge", "reward_model/step_balanced_accuracy", None, ".3f"),
    ("RM good verdicts", "judge", "reward_model/good_verdict_share", None, ".3f"),
    ("good steps", "judge", "reward_model/good_step_share", None, ".3f"),
    ("RM outcome agr.", "judge", "reward_model/outcome_agreement", None, ".3f"),
    ("accepted", "label", "env/pending_accepted", None, ".1f"),
)


def _value(
    store: ArtifactStore, run: str, iteration: int, stage: str, metric: str, per: str | None
) -> float | None:
    manifest = store.manifest(run, iteration, stage)
    if manifest is None:
        return None
    metrics = manifest.extra.get("metrics", {})
    if metric not in metrics:
        return None
    if per is None:
        return float(metrics[metric])
    total = float(metrics.get(per, 0.0))
    return float(metrics[metric]) / total if total else None


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
    for arm, arm_runs in runs.items():
        lines += [f"### {arm} (runs: {', '.join(arm_runs)})", ""]
        lines.append("| iteration | n | " + " | ".join(c[0] for c in COLUMNS) + " |")
        lines.append("|---" * (len(COLUMNS) + 2) + "|")
        for iteration in range(1, 100):
            if not any((root / r / f"iter-{iteration:04d}").is_dir() for r in arm_runs):
                break
            cells, n = [], 0
            for _, stage, metric, per, fmt in COLUMNS:
                values = [
                    v for r in arm_runs if (v := _value(store, r, iteration, stage, metric, per)) is not None
                ]
                n = max(n, len(values))
                cells.append(format(statistics.fmean(values), fmt) if values else "—")
            lines.append(f"| {iteration} | {n} | " + " | ".join(cells) + " |")
        lines.append("")
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
