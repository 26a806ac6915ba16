"""What `rla status` and a fast `rla resume` read: stages in pipeline order, headline metrics, the
running stage's progress, and which stages a resume would still have to run — all from the manifests
and the progress record, without starting Prefect or MLflow.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from typing import Any

from flows.runs import load_run_config, package_code_version, resolve_mlflow_uri, resolve_root
from rla_core.algo.metrics import (
    CODING_EVAL_LABELS,
    ENV_ERROR_RATE,
    EVAL_CODE_ACC,
    EVAL_DETECT,
    EVAL_ENV_ERROR_RATE,
    EVAL_UT_ACC,
)
from rla_core.config import RunConfig, Setting
from rla_core.store import ArtifactStore
from rla_core.store.lock import pid_alive
from rla_core.store.manifest import this_host

# Column → metric keys, first present wins (one stage rarely has more than one of them).
HEADLINE: dict[str, tuple[str, ...]] = {
    "success": ("policy/eval_success_rate", "policy/success_rate"),
    "env errors": (EVAL_ENV_ERROR_RATE, ENV_ERROR_RATE),  # share of episodes our machinery broke
    "step acc": ("reward_model/step_accuracy",),
    "kept rows": ("policy/samples",),
    "KL": ("policy/kl", "reward_model/kl"),
}
# Coding runs add the paper's three coding columns: held-out values on the evaluate stage, the training
# problems' on the label stage (docs/method.md, "Coding evaluation").
CODING_HEADLINE: dict[str, tuple[str, ...]] = {
    CODING_EVAL_LABELS[EVAL_CODE_ACC]: (EVAL_CODE_ACC, "policy/gt_pass_all_acc"),
    CODING_EVAL_LABELS[EVAL_UT_ACC]: (EVAL_UT_ACC, "reward_model/syn_ut_acc"),
    CODING_EVAL_LABELS[EVAL_DETECT]: (EVAL_DETECT, "reward_model/perfect_ut_rate"),
}


def headline_columns(setting: Setting) -> dict[str, tuple[str, ...]]:
    """The headline columns of a run's status table: :data:`HEADLINE`, plus :data:`CODING_HEADLINE` in coding."""
    return HEADLINE | (CODING_HEADLINE if setting is Setting.CODING else {})


# A progress record not refreshed for this long, from a process we cannot probe, reads as stale.
STALE_AFTER_S = 120.0
# The states of the stage a progress record names (the one running, or the last that ran and stopped).
ACTIVE_STATES = ("running", "stale", "failed")


def format_metric(value: float) -> str:
    """Four significant digits, never cut: 0.0009695 → '0.0009695', 12345.6 → '1.235e+04'."""
    return f"{value:.4g}"


@dataclass(frozen=True)
class StageRow:
    """One line of `rla status RUN_ID`."""

    iteration: int
    stage: str
    state: str  # done | running | not done | stale | failed
    attempt: int | None
    seconds: float | None
    metrics: dict[str, float]
    progress: str = ""

    def headline(self, column: str) -> str:
        for key in (HEADLINE | CODING_HEADLINE)[column]:
            if key in self.metrics:
                return format_metric(float(self.metrics[key]))
        return ""


@dataclass(frozen=True)
class Running:
    """What the progress record says is running, and whether that process still looks alive."""

    iteration: int
    stage: str
    attempt: int
    alive: bool
    loops: list[dict[str, Any]]
    updated_at: str
    host: str
    pid: int
    error: str | None = None  # why the attempt failed (it is not running any more)

    @property
    def state(self) -> str:
        """``failed`` (with its error), ``running``, or ``stale`` (no live process and no error recorded)."""
        if self.error is not None:
            return "failed"
        return "running" if self.alive else "stale"

    def describe(self) -> str:
        from rla_core.progress import ProgressRecord

        if self.error is not None:
            return f"{self.error} (pid {self.pid} on {self.host}, at {self.updated_at}; `rla resume` runs it again)"
        parts = [ProgressRecord.from_dict(r).line() for r in self.loops if not r.get("finished")]
        done = [r for r in self.loops if r.get("finished")]
        if not parts and done:
            parts = [ProgressRecord.from_dict(done[-1]).line()]
        who = f"pid {self.pid} on {self.host}, updated {self.updated_at}"
        return f"{'; '.join(parts) or 'started'} ({who})"


def read_running(store: ArtifactStore, run_id: str) -> Running | None:
    """The stage the progress record names, if its attempt has not committed (else None)."""
    from tasks.progress import PROGRESS_FILE

    data = store.read_run_file(run_id, PROGRESS_FILE)
    if data is None:
        return None
    try:
        raw = json.loads(data)
        it, stage, attempt = int(raw["iteration"]), str(raw["stage"]), int(raw["attempt"])
        host, pid, updated = str(raw["host"]), int(raw["pid"]), str(raw["updated_at"])
        loops = list(raw.get("loops", []))
        error = None if raw.get("error") is None else str(raw["error"])
    except (ValueError, KeyError, TypeError):
        return None  # a record from an older version: nothing to show
    manifest = store.manifest(run_id, it, stage)
    if manifest is not None and manifest.attempt >= attempt:
        return None  # it finished
    if host == this_host():
        alive = pid_alive(pid)
    else:
        age = dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(updated)
        alive = age.total_seconds() < STALE_AFTER_S
    return Running(it, stage, attempt, alive, loops, updated, host, pid, error)


def stage_rows(store: ArtifactStore, run_id: str, cfg: RunConfig) -> list[StageRow]:
    """Every stage of every iteration in pipeline order (unknown names last), plus the running one."""
    from flows.loop import pipeline_order
    from tasks.stage import RunContext

    order: dict[str, int] = {
        name: i for i, name in enumerate(pipeline_order(RunContext(run_id=run_id, config=cfg)))
    }
    running = read_running(store, run_id)
    rows: list[StageRow] = []
    for it in store.list_iterations(run_id):
        names = set(store.list_stages(run_id, it))
        if running is not None and running.iteration == it:
            names.add(running.stage)
        for name in sorted(names, key=lambda n: (order.get(n, len(order)), n)):
            manifest = store.manifest(run_id, it, name)
            if running is not None and (running.iteration, running.stage) == (it, name):
                rows.append(StageRow(it, name, running.state, running.attempt, None, {}, running.describe()))
            elif manifest is None:
                rows.append(StageRow(it, name, "not done", None, None, {}))
            else:
                secs = manifest.extra.get("stage_compute_s")
                metrics = {k: float(v) for k, v in manifest.extra.get("metrics", {}).items()}
                rows.append(StageRow(it, name, "done", manifest.attempt, float(secs) if secs is not None else None,
                                     metrics))  # fmt: skip
    return rows


def pending_stages(store: ArtifactStore, cfg: RunConfig, run_id: str) -> list[str]:
    """``iteration/stage`` of every stage a resume with ``cfg`` would run; empty when nothing is left.

    The flow's own plan (:func:`flows.loop.plan`): a stage counts as done when its attempt in use has the
    content key the flow would compute today (same code, config slice, seed and extra files, with the
    outputs of the attempts in use upstream as inputs) and its files are intact; everything downstream of
    a stage still to run is still to run too.
    """
    from flows.loop import plan
    from tasks.stage import RunContext

    if store.read_run_info(run_id).code_version != package_code_version():
        # The code changed since the run last ran, and with it perhaps the flow's wiring: let the flow decide.
        return ["(code changed since the run last ran)"]
    run = RunContext(run_id=run_id, config=cfg, storage_options=store.storage_options)
    return [f"{p.iteration}/{p.stage}" for p in plan(run, store=store) if not p.done]


def where_looked(root: str) -> str:
    """``'runs' (= /abs/runs, from the working directory /abs)`` or the URI itself."""
    resolved = resolve_root(root)
    if resolved == root:
        return f"'{root}'"
    return f"'{root}' (= {resolved}, relative to the working directory {os.getcwd()})"


def runs_table(store: ArtifactStore, root: str) -> Any:
    """`rla status`: one row per run (setting, iterations, stages done, what is running)."""
    from rich.table import Table

    table = Table("run", "setting", "iterations", "stages done", "running", "config hash",
                  title=f"runs under {where_looked(root)}", title_justify="left")  # fmt: skip
    for rid in store.list_runs():
        cfg = load_run_config(store, rid)
        rows = stage_rows(store, rid, cfg)
        done = sum(r.state == "done" for r in rows)
        running = next((f"{r.iteration}/{r.stage} ({r.state})" for r in rows if r.state in ACTIVE_STATES), "")
        table.add_row(rid, str(cfg.setting), str(cfg.iterations), str(done), running, cfg.config_hash()[:12])
    return table


def run_table(store: ArtifactStore, run_id: str, *, full: bool) -> tuple[str, Any]:
    """`rla status RUN_ID`: a header (where things are) and a table of stages in pipeline order.

    Headline metrics are real columns; ``full`` adds every metric with its full name and value.
    """
    from rich.table import Column, Table

    cfg = load_run_config(store, run_id)
    header = (
        f"run {run_id} ({cfg.setting}, {cfg.iterations} iterations)\n"
        f"  artifacts: {resolve_root(store.run_location(run_id))}\n"
        f"  mlflow:    {resolve_mlflow_uri(cfg.tracking.mlflow_uri)} (experiment '{cfg.tracking.experiment}', "
        f"tag rla.run_id={run_id})"
    )
    columns = headline_columns(cfg.setting)
    # Headers and cells are never cut (the issue: 'policy/kl=0.000' for 0.0009695): minimum widths.
    table = Table(
        *(
            Column(c, no_wrap=True, min_width=len(c))
            for c in ("iter", "stage", "state", "attempt", "seconds")
        ),
        *(Column(c, justify="right", no_wrap=True, min_width=max(len(c), 9)) for c in columns),
    )
    if full:
        table.add_column("all metrics", overflow="fold")
    rows = stage_rows(store, run_id, cfg)
    for r in rows:
        cells = [
            str(r.iteration), r.stage, r.state, str(r.attempt or "-"),
            f"{r.seconds:.1f}" if r.seconds is not None else "-", *(r.headline(c) for c in columns),
        ]  # fmt: skip
        if full:
            cells.append(
                "\n".join(f"{k}={v!r}" for k, v in sorted(r.metrics.items())) if r.metrics else r.progress
            )
        table.add_row(*cells)
    running = [r for r in rows if r.state in ACTIVE_STATES]
    for r in running:
        header += f"\n  {r.state}: iteration {r.iteration} {r.stage} — {r.progress}"
    for line in judge_warnings(rows):
        header += f"\n  warning: {line}"
    return header, table


def judge_warnings(rows: list[StageRow]) -> list[str]:
    """The judge's collapse (:func:`rla_core.algo.judging.collapse_warning`) at the latest judged iteration,
    on the training steps (judge stage) and on the yardstick (judge_eval stage), one line each."""
    from rla_core.algo.judging import collapse_warning
    from tasks.judge_eval import YARDSTICK_PREFIX

    lines = []
    for stage, prefix, what in (
        ("judge", "reward_model/", "training steps"),
        ("judge_eval", YARDSTICK_PREFIX, "yardstick"),
    ):
        done = [r for r in rows if r.stage == stage and r.state == "done"]
        warning = collapse_warning(done[-1].metrics, prefix=prefix) if done else None
        if warning is not None:
            lines.append(f"iteration {done[-1].iteration} {stage} ({what}): {warning}")
    return lines
