"""`rla report`: one self-contained HTML file per run or study, with interactive plotly figures.

A run report shows learning curves (train success; held-out success with its Wilson 95 % band), the
reward model's step accuracy and outcome agreement, update health (KL, clip fraction, rows kept,
zero-advantage share), the task pool (active / pending / accepted / rejected, difficulty knobs) and
time per stage. A study report overlays the arms (mean over seeds, with the t-interval band when there
are several seeds) and shows the Table-1-style summary, with every pair of arms compared paired by seed
(table ``pairs``, :func:`rla_core.algo.study.paired_comparisons`). plotly.js is inlined once, so the file opens
offline. Each figure is a ``<div class="rla-figure" id="fig-<name>">``; the figures and the HTML are
also logged to the run's (or study's) MLflow run as artifacts under ``report/``.

Everything is read from the artifact store (manifests and frames), through :func:`flows.study.run_metrics`.
"""

from __future__ import annotations

import html
import json
import math
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from flows.study import refresh_study, require_study, run_metrics, summary_tables
from rla_core.algo.metrics import CODING_EVAL_LABELS, EVAL_ENV_ERROR_RATE
from rla_core.algo.stats import mean_interval
from rla_core.algo.study import CLEAN, EVAL_HIGH, EVAL_LOW, EVAL_RATE, StudySummary
from rla_core.config import Setting
from rla_core.errors import UsageError
from rla_core.store import ArtifactStore, publish_file

REPORT_FILE = "report.html"
ARM_COLORS = {
    "outcome-only": "#7f7f7f",
    "policy": "#1f77b4",
    "reward": "#ff7f0e",
    "full": "#2ca02c",
    "stepwise-only": "#9467bd",
    "oracle-stepwise": "#8c564b",
}
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


@dataclass
class Report:
    """A rendered report: title, figures by name, notes on what is missing, and extra HTML sections."""

    title: str
    figures: dict[str, Any] = field(default_factory=dict)  # name → plotly Figure
    captions: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    sections_html: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def html(self) -> str:
        """The whole report as one self-contained HTML document (plotly.js inlined once)."""
        from plotly.offline import get_plotlyjs

        parts = [
            "<!DOCTYPE html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(self.title)}</title>",
            "<style>body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px}"
            "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px}"
            ".missing{background:#fff3cd;border:1px solid #e0c060;padding:8px 12px}"
            ".caption{color:#555;font-size:13px;margin:0 0 24px 0}</style>",
            f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>",
            f"<h1>{html.escape(self.title)}</h1>",
        ]
        if self.warnings:
            items = "".join(f"<li>{html.escape(w)}</li>" for w in self.warnings)
            parts.append(f"<div class='missing' id='warnings'><b>Warnings:</b><ul>{items}</ul></div>")
        if self.missing:
            items = "".join(f"<li>{html.escape(m)}</li>" for m in self.missing)
            parts.append(
                f"<div class='missing' id='missing'><b>Not in this report yet:</b><ul>{items}</ul></div>"
            )
        parts.extend(self.sections_html)
        for name, fig in self.figures.items():
            div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{name}")
            parts.append(f"<div class='rla-figure' data-name='{name}'>{div}</div>")
            if name in self.captions:
                parts.append(f"<p class='caption'>{html.escape(self.captions[name])}</p>")
        parts.append("</body></html>")
        return "\n".join(parts)


def _series(frame: pl.DataFrame, metric: str) -> tuple[list[int], list[float]]:
    rows = frame.filter(pl.col("metric") == metric).sort("iteration")
    return rows["iteration"].to_list(), rows["value"].to_list()


def _ratio(frame: pl.DataFrame, num: str, den: Sequence[str]) -> tuple[list[int], list[float]]:
    """num / sum(den) per iteration where every part is present and the denominator is positive."""
    parts = [dict(zip(*_series(frame, m), strict=True)) for m in (num, *den)]
    its = sorted(set.intersection(*(set(p) for p in parts)))
    xs, ys = [], []
    for it in its:
        total = sum(p[it] for p in parts[1:])
        if total > 0:
            xs.append(it)
            ys.append(parts[0][it] / total)
    return xs, ys


def _layout(fig: Any, title: str, ytitle: str, *, rate: bool = False) -> Any:
    fig.update_layout(
        title=title, height=360, margin={"l": 60, "r": 20, "t": 50, "b": 40}, template="plotly_white",
        legend={"orientation": "h", "y": -0.18},
    )  # fmt: skip
    fig.update_xaxes(title_text="iteration", dtick=1)
    fig.update_yaxes(title_text=ytitle, range=[-0.02, 1.02] if rate else None)
    return fig


def _band(
    fig: Any, xs: list[int], low: list[float], high: list[float], color: str, name: str, **kw: Any
) -> None:
    """A filled interval band (upper edge, then lower edge filled to it), hidden from the legend."""
    import plotly.graph_objects as go

    fig.add_trace(
        go.Scatter(x=xs, y=high, mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip",
                   name=f"{name} (upper)", meta="band", **kw)
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(x=xs, y=low, mode="lines", line={"width": 0}, fill="tonexty", fillcolor=_alpha(color, 0.18),
                   showlegend=False, hoverinfo="skip", name=f"{name} (lower)", meta="band", **kw)
    )  # fmt: skip


def _alpha(color: str, a: float) -> str:
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{a})"


# ---- run report ------------------------------------------------------------------------------------


def run_figures(frame: pl.DataFrame) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Figures of one run from its metric frame (iteration, metric, value); plus captions and what is missing."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figures: dict[str, Any] = {}
    captions: dict[str, str] = {}
    missing: list[str] = []

    fig = go.Figure()
    xs, ys = _series(frame, "policy/success_rate")
    if xs:
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name="train success (rollouts)",
                                 line={"color": _PALETTE[0]}, meta="train"))  # fmt: skip
    else:
        missing.append("train success: no rollout stage has committed yet (`rla resume RUN_ID` continues)")
    ex, ey = _series(frame, EVAL_RATE)
    if ex:
        _, lo = _series(frame, EVAL_LOW)
        _, hi = _series(frame, EVAL_HIGH)
        _band(fig, ex, lo, hi, _PALETTE[2], "held-out")
        fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines+markers", name="held-out success (Wilson 95%)",
                                 line={"color": _PALETTE[2]}, meta="eval"))  # fmt: skip
        cx, cy = _series(frame, CLEAN.rate)
        if cx:
            fig.add_trace(go.Scatter(x=cx, y=cy, mode="lines+markers", name="held-out clean success",
                                     line={"color": _PALETTE[2], "dash": "dot"}, meta="eval_clean"))  # fmt: skip
    else:
        missing.append(
            "held-out success: no evaluation yet (the evaluate stage of iteration 0 runs right after the "
            "bootstrap; `rla resume RUN_ID` continues the run)"
        )
    figures["learning"] = _layout(fig, "Success rate", "success rate", rate=True)
    captions["learning"] = (
        "Train success on the tasks played each iteration; held-out success with its Wilson band; held-out "
        "clean success (dotted): won without an invalid answer."
    )

    fig = go.Figure()
    for i, (metric, label) in enumerate(
        (
            ("reward_model/step_accuracy", "step accuracy (raw)"),
            ("reward_model/step_balanced_accuracy", "step balanced accuracy"),
            ("reward_model/good_verdict_share", "share of steps called good"),
            ("reward_model/good_verdict_precision", "precision of the 'good' verdicts"),
            ("reward_model/outcome_agreement", "outcome agreement"),
            ("reward_model/yardstick_step_balanced_accuracy", "balanced accuracy on the yardstick"),
        )
    ):
        xs, ys = _series(frame, metric)
        if xs:
            fig.add_trace(
                go.Scatter(
                    x=xs, y=ys, mode="lines+markers", name=label,
                    line={"color": _PALETTE[(i + 3) % len(_PALETTE)]},
                )
            )  # fmt: skip
    if not fig.data:
        missing.append("reward-model accuracy: no judge stage has committed yet")
    figures["reward_model"] = _layout(fig, "Reward model vs the engine", "share", rate=True)
    captions["reward_model"] = (
        "Step accuracy: judged steps whose mean vote matches the engine's optimal actions; precision of the "
        "'good' verdicts: steps called good that are; outcome agreement: rollouts whose outcome the mean step "
        "vote foresees."
    )

    # Coding: the paper's held-out columns (docs/method.md, "Coding evaluation"); other settings have none.
    fig = go.Figure()
    for i, (metric, label) in enumerate(CODING_EVAL_LABELS.items()):
        xs, ys = _series(frame, metric)
        if xs:
            fig.add_trace(
                go.Scatter(x=xs, y=ys, mode="lines+markers", name=label, line={"color": _PALETTE[i]})
            )
    if fig.data:
        figures["coding"] = _layout(fig, "Coding evaluation (held-out)", "share", rate=True)
        captions["coding"] = (
            "Code accuracy: held-out programs passing every GT test; UT accuracy: the reward model's tests that "
            "every right program passes; detection: its tests that every right program passes and every wrong "
            "one fails (tasks with both)."
        )

    fig = make_subplots(
        rows=1, cols=4, subplot_titles=("KL (k3)", "clip fraction", "rows used", "zero-advantage share")
    )
    for role, color in (("policy", _PALETTE[0]), ("reward_model", _PALETTE[1])):
        for col, metric in enumerate(("kl", "clip_fraction", "rows_used"), start=1):
            xs, ys = _series(frame, f"{role}/{metric}")
            if xs:
                fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=f"{role} {metric}",
                                         line={"color": color}, legendgroup=role), row=1, col=col)  # fmt: skip
        xs, ys = _ratio(
            frame, f"{role}/rows_zero_advantage", (f"{role}/rows_zero_advantage", f"{role}/rows_kept")
        )
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=f"{role} zero-advantage share",
                                     line={"color": color}, legendgroup=role), row=1, col=4)  # fmt: skip
    if not fig.data:
        missing.append("update health: no training stage has committed yet")
    figures["update_health"] = _layout(fig, "Update health", "")
    fig.update_layout(height=380)

    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for i, status in enumerate(("active", "pending", "accepted", "rejected")):
        xs, ys = _series(frame, f"env/pool_{status}")
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=status, line={"color": _PALETTE[i]}),
                          secondary_y=False)  # fmt: skip
    for i, key in enumerate(("quest_length", "nb_objects", "world_size")):
        xs, ys = _series(frame, f"env/mean_{key}")
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"mean {key} (active)",
                                     line={"color": _PALETTE[i + 4], "dash": "dot"}), secondary_y=True)  # fmt: skip
    figures["task_pool"] = _layout(fig, "Task pool", "tasks")
    fig.update_yaxes(title_text="difficulty (mean of active)", secondary_y=True)
    captions["task_pool"] = (
        "Active and pending tasks at each iteration; accepted and rejected rewrites so far."
    )

    fig = go.Figure()
    timings = frame.filter(pl.col("metric").str.starts_with("timing_s/"))
    for i, stage in enumerate(timings["metric"].unique(maintain_order=True).to_list()):
        xs, ys = _series(timings, stage)
        fig.add_trace(
            go.Bar(x=xs, y=ys, name=stage.removeprefix("timing_s/"), marker={"color": _PALETTE[i % 8]})
        )
    fig.update_layout(barmode="stack")
    figures["timing"] = _layout(fig, "Time per stage", "seconds")
    return figures, captions, missing


def judge_collapse_lines(frame: pl.DataFrame) -> list[str]:
    """The judge's collapse (:func:`rla_core.algo.judging.collapse_warning`) at the latest iteration that
    measured it, on the training steps and on the yardstick."""
    from rla_core.algo.judging import collapse_warning

    lines = []
    for prefix, what in (("reward_model/", "training steps"), ("reward_model/yardstick_", "yardstick")):
        names = [f"{prefix}good_verdict_share", f"{prefix}good_step_share"]
        rows = frame.filter(pl.col("metric").is_in(names))
        if rows.height == 0:
            continue
        last = int(rows["iteration"].max())  # type: ignore[arg-type]
        metrics = dict(rows.filter(pl.col("iteration") == last).select("metric", "value").iter_rows())
        warning = collapse_warning(metrics, prefix=prefix)
        if warning is not None:
            lines.append(f"iteration {last} ({what}): {warning}")
    return lines


def run_report(store: ArtifactStore, run_id: str) -> Report:
    """The report of one run."""
    frame = run_metrics(store, run_id)
    figures, captions, missing = run_figures(frame)
    report = Report(title=f"rlanything run {run_id}", figures=figures, captions=captions, missing=missing)
    report.warnings = judge_collapse_lines(frame)
    iterations = sorted(set(frame["iteration"].to_list()))
    evals = _series(frame, EVAL_RATE)
    # Coding adds the paper's three columns to the table (an iteration without one shows '-'); beside each
    # success rate, the share of episodes our machinery broke (not counted in the rate;
    # docs/environment-errors.md), "—" for a run written before it was measured.
    coding = {
        label: dict(zip(*_series(frame, metric), strict=True))
        for metric, label in CODING_EVAL_LABELS.items()
        if _series(frame, metric)[0]
    }
    env_errors = dict(zip(*_series(frame, EVAL_ENV_ERROR_RATE), strict=True))
    rows = "".join(
        f"<tr><td>{it}</td><td>{v:.3f}</td><td>{_rate(env_errors.get(it))}</td>"
        + "".join(f"<td>{by_it[it]:.3f}</td>" if it in by_it else "<td>-</td>" for by_it in coding.values())
        + "</tr>"
        for it, v in zip(evals[0], evals[1], strict=True)
    )
    heads = "".join(f"<th>{html.escape(label)}</th>" for label in coding)
    header = f"<tr><th>iteration</th><th>held-out success</th><th>env_error_rate</th>{heads}</tr>"
    report.sections_html.append(
        f"<p>Artifacts: <code>{html.escape(store.run_location(run_id))}</code>; iterations with committed stages: "
        f"{', '.join(map(str, iterations)) or 'none'}.</p>"
        + (f"<table>{header}{rows}</table>" if rows else "")
    )
    screens = screens_html(store, run_id)
    if screens:
        report.sections_html.append(screens)
    return report


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


SCREEN_STEPS = 4  # steps of one rollout shown with their screens


def screens_html(store: ArtifactStore, run_id: str) -> str:
    """GUI runs: the first rollout of the latest rollout stage, step by step — the screen the policy saw,
    its answer, the screen after, and the judge's mean score — as inline PNGs. "" for other settings and
    when that stage kept no screenshot (``gui.screenshots=false``): no frame is read for a text run."""
    if store.read_run_info(run_id).config.get("setting") != Setting.GUI.value:
        return ""
    iteration = next(
        (it for it in reversed(store.list_iterations(run_id)) if store.manifest(run_id, it, "rollout")), None
    )
    if iteration is None:
        return ""
    steps = store.read_frame(run_id, iteration, "rollout", "rollouts")
    shown = steps.filter(pl.col("observation_ref").is_not_null())
    return "" if shown.is_empty() else _screens_table(store, run_id, iteration, shown)


def _screens_table(store: ArtifactStore, run_id: str, iteration: int, steps: pl.DataFrame) -> str:
    import base64

    first = steps.row(0, named=True)
    one = (pl.col("task_id") == first["task_id"]) & (pl.col("rollout_id") == first["rollout_id"])
    steps = steps.filter(one).sort("step").head(SCREEN_STEPS)
    scores: dict[int, float] = {}
    if store.manifest(run_id, iteration, "judge") is not None:
        judged = store.read_frame(run_id, iteration, "judge", "judgments").filter(one)
        means = judged.group_by("step").agg(pl.col("score").mean())
        scores = {r["step"]: r["score"] for r in means.iter_rows(named=True) if r["score"] is not None}

    def image(ref: str | None) -> str:
        if ref is None:
            return "—"
        data = base64.b64encode(store.read_file(run_id, iteration, "rollout", ref)).decode("ascii")
        return f"<img class='screen' alt='{html.escape(ref)}' src='data:image/png;base64,{data}' width='320'>"

    rows = "".join(
        f"<tr><td>{r['step']}</td><td>{image(r['observation_ref'])}</td>"
        f"<td><code>{html.escape(r['action'] or '(no action)')}</code><br>"
        f"<small>{html.escape(r['response'][:200])}</small></td><td>{image(r['next_observation_ref'])}</td>"
        f"<td>{format(scores[r['step']], '+.2f') if r['step'] in scores else '—'}</td></tr>"
        for r in steps.iter_rows(named=True)
    )
    return (
        f"<h2 id='screens'>What the agent saw (iteration {iteration}, task {html.escape(first['task_id'])}, "
        f"rollout {first['rollout_id']}, outcome {first['outcome']:+g})</h2>"
        "<table><tr><th>step</th><th>screen</th><th>action and answer</th><th>screen after</th>"
        f"<th>judge (mean of parsed scores; — none parsed)</th></tr>{rows}</table>"
    )


# ---- study report ----------------------------------------------------------------------------------


def _arm_curve(
    frame: pl.DataFrame, arm: str, metric: str
) -> tuple[list[int], list[float], list[float], list[float]]:
    """Mean over the seeds that reached each iteration, with the t-interval (none with one seed)."""
    rows = frame.filter((pl.col("arm") == arm) & (pl.col("metric") == metric))
    xs, means, lows, highs = [], [], [], []
    for it, sub in sorted(rows.group_by("iteration"), key=lambda kv: int(kv[0][0])):
        values = sub["value"].to_list()
        mean, low, high = mean_interval(values)
        xs.append(int(it[0]))
        means.append(mean)
        lows.append(mean if math.isnan(low) else low)
        highs.append(mean if math.isnan(high) else high)
    return xs, means, lows, highs


def study_figures(frame: pl.DataFrame, arms: Sequence[str]) -> dict[str, Any]:
    """Arms overlaid: held-out and train success, RM step accuracy, accepted rewrites, policy KL."""
    import plotly.graph_objects as go

    figures: dict[str, Any] = {}
    panels = (
        ("heldout", EVAL_RATE, "Held-out success (mean over seeds, 95% t-interval)", "success rate", True),
        (
            "heldout_clean",
            CLEAN.rate,
            "Held-out clean success: won with no invalid answer (mean, 95% t-interval)",
            "success rate",
            True,
        ),
        ("train", "policy/success_rate", "Train success (mean over seeds)", "success rate", True),
        (
            "rm_step_accuracy",
            "reward_model/step_accuracy",
            "Reward-model step accuracy (raw)",
            "accuracy",
            True,
        ),
        (
            "rm_step_balanced_accuracy",
            "reward_model/step_balanced_accuracy",
            "Reward-model step balanced accuracy (0.5 = a constant judge)",
            "accuracy",
            True,
        ),
        ("accepted", "env/pool_accepted", "Accepted rewritten tasks (cumulative)", "tasks", False),
        ("policy_kl", "policy/kl", "Policy update KL (k3)", "KL", False),
    )
    for name, metric, title, ytitle, rate in panels:
        fig = go.Figure()
        for i, arm in enumerate(arms):
            color = ARM_COLORS.get(arm, _PALETTE[i % 8])
            xs, mean, low, high = _arm_curve(frame, arm, metric)
            if not xs:
                continue
            if name in ("heldout", "heldout_clean"):
                _band(fig, xs, low, high, color, arm, legendgroup=arm)
            fig.add_trace(go.Scatter(x=xs, y=mean, mode="lines+markers", name=arm, legendgroup=arm,
                                     line={"color": color}, meta=arm))  # fmt: skip
        figures[name] = _layout(fig, title, ytitle, rate=rate)
    return figures


def html_table(table_id: str, frame: pl.DataFrame) -> str:
    """A frame as an HTML table with id ``table_id``: a header row, then one row per frame row (escaped)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in frame.rows()
    )
    return f"<table id='{html.escape(table_id)}'><tr>{head}</tr>{rows}</table>"


def _caption_html(text: str) -> str:
    """A summary caption as HTML: escaped, with its `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def summary_html(summary: StudySummary) -> str:
    """The study summary as HTML: the tables of :func:`flows.study.summary_tables`, cell for cell (among
    them ``pairs``, the paired arm comparisons, when the study has two or more arms)."""
    parts = ["<h2>Summary</h2>"]
    for table in summary_tables(summary):
        parts.append(f"<p>{_caption_html(table.caption)}</p>{html_table(table.id, table.frame)}")
    return "".join(parts)


def study_report(store: ArtifactStore, study_id: str) -> Report:
    """The report of a study (study.parquet and summary.md are refreshed from the runs first)."""
    spec = require_study(store, study_id)
    frame, summary = refresh_study(store, spec)
    report = Report(title=f"rlanything study {study_id}", figures=study_figures(frame, spec.arms))
    started = set(frame["run_id"].unique().to_list())
    for arm, _seed, run_id in spec.run_ids():
        if run_id not in started:
            report.missing.append(
                f"run {run_id} ({arm}) has not started: `rla study {study_id}` continues the study"
            )
        elif not frame.filter((pl.col("run_id") == run_id) & (pl.col("metric") == EVAL_RATE)).height:
            report.missing.append(f"run {run_id} has no evaluation yet")
    report.sections_html.append(summary_html(summary))
    return report


# ---- writing and logging ---------------------------------------------------------------------------


def write_report(store: ArtifactStore, owner: str, report: Report, out: Path | None) -> str:
    """Write the HTML to ``out`` or to ``<root>/<owner>/report.html`` (atomically); returns where."""
    text = report.html()
    if out is not None:
        publish_file(out, text)
        return str(out)
    return store.write_run_file(owner, REPORT_FILE, text.encode("utf-8"))


def log_report(uri: str, experiment: str, owner: str, report: Report, *, kind: str) -> str:
    """Log the HTML and every figure (plotly JSON) to the MLflow run of ``owner``; returns its MLflow id."""
    from mlflow.tracking import MlflowClient

    from tasks import tracking

    tracker = tracking.start_or_resume(
        uri=uri, experiment=experiment, run_id=owner, params={}, tags={"rla.kind": kind}
    )
    client = MlflowClient(uri)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / REPORT_FILE).write_text(report.html(), encoding="utf-8")
        client.log_artifact(tracker.mlflow_run_id, str(base / REPORT_FILE), artifact_path="report")
        figs = base / "figures"
        figs.mkdir()
        for name, fig in report.figures.items():
            (figs / f"{name}.json").write_text(fig.to_json(), encoding="utf-8")
        client.log_artifacts(tracker.mlflow_run_id, str(figs), artifact_path="report/figures")
    if kind == "study":
        tracking.finish(tracker)
    return tracker.mlflow_run_id


def build_report(store: ArtifactStore, *, run_id: str | None, study_id: str | None) -> tuple[str, Report]:
    """(owner id, report) for exactly one of a run id or a study id."""
    if (run_id is None) == (study_id is None):
        given = "both a run id and --study" if run_id is not None else "neither a run id nor --study"
        raise UsageError(
            f"`rla report` was given {given}; it reports on exactly one: a run (`rla report RUN_ID`) or "
            "a study (`rla report --study ID`)"
        )
    if study_id is not None:
        return study_id, study_report(store, study_id)
    assert run_id is not None
    return run_id, run_report(store, run_id)


def figure_data(report: Report) -> dict[str, list[dict[str, Any]]]:
    """Per figure, its traces' names and x values (what a reader checks against the artifacts)."""
    return {
        name: [{"name": t.name, "x": list(t.x) if t.x is not None else []} for t in fig.data]
        for name, fig in report.figures.items()
    }


def report_json(report: Report) -> str:
    return json.dumps(figure_data(report), default=str)


_PAGE_DATA_JS = """
return Array.from(document.querySelectorAll('.rla-figure')).map(function (w) {
  var gd = w.querySelector('.js-plotly-plot');
  return {name: w.dataset.name, rendered: !!(gd && gd._fullLayout),
          traces: ((gd && gd.data) || []).map(function (t) {
            return {name: t.name === undefined ? null : t.name, meta: t.meta === undefined ? null : t.meta,
                    x: Array.from(t.x || []), y: Array.from(t.y || [])};
          })};
});
"""


def browse(html_path: Path, png_dir: Path | None = None, *, width: int = 1280) -> list[dict[str, Any]]:
    """Open a report in headless Chromium; return what each figure holds as rendered by plotly.js.

    With ``png_dir``, also save ``page.png`` (the first screen) and ``<figure>.png`` per figure. Uses the
    browser of the GUI setting (:func:`rla_core.envs.browser.find_browser`: Debian's ``chromium`` and
    ``chromium-driver``, which ``scripts/setup.sh`` installs); BrowserStartError says what to install.
    """
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    from rla_core.envs.browser import chrome_options, find_browser
    from rla_core.errors import BrowserStartError

    found = find_browser()
    with tempfile.TemporaryDirectory(prefix="rla-report-browser-") as profile:
        options = chrome_options(found.chrome, profile, f"--window-size={width},1000")
        try:
            driver = webdriver.Chrome(service=Service(found.chromedriver), options=options)
        except WebDriverException as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BrowserStartError(
                f"Chromium '{found.chrome}' failed to start through '{found.chromedriver}' for the report's "
                f"figures: {first}; check that both come from the same release (chromium --version, "
                "chromedriver --version)"
            ) from exc
        try:
            driver.set_page_load_timeout(120)
            driver.get(html_path.resolve().as_uri())
            data: list[dict[str, Any]] = driver.execute_script(_PAGE_DATA_JS)
            if png_dir is not None:
                png_dir.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(png_dir / "page.png"))
                for element in driver.find_elements(By.CSS_SELECTOR, ".rla-figure"):
                    name = element.get_attribute("data-name")
                    driver.execute_script("arguments[0].scrollIntoView();", element)
                    element.screenshot(str(png_dir / f"{name}.png"))
        finally:
            driver.quit()
    return data
