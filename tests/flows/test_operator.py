"""What an operator and an analyst see: stage progress in the logs, `rla status` in pipeline
order with headline columns and the running stage read from another process, `rla inspect` column/row
selection and CSV/JSON, `rla eval` seeded like the evaluate stage with a per-task breakdown and saved
results, the export's model card, resolved locations, Prefect artifacts and a resume that answers from
the manifests. The finished run is the session's shared test-preset run (tests/flows/conftest.py)."""

from __future__ import annotations

import io
import json
import sqlite3
import time
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from flows.evals import coding_eval_line, read_saved_eval, saved_evals
from flows.inspect_cmd import apply_filters, shorten
from flows.loop import pipeline_order
from flows.runs import load_run_config, resolve_mlflow_uri, resolve_root
from flows.status import format_metric, pending_stages, read_running, stage_rows
from rla_core import progress
from rla_core.config import load_config
from rla_core.errors import ConfigError
from rla_core.store import ArtifactStore
from tasks.evaluate import eval_seed
from tasks.progress import stage_progress
from tasks.stage import RunContext, stage_seed
from tests.conftest import S3Endpoint
from tests.flows.conftest import FlowEnv


def _rows(stdout: str) -> list[list[str]]:
    """Cells of a rich table's body rows (│-separated)."""
    return [
        [c.strip() for c in line.strip("│ ").split("│")]
        for line in stdout.splitlines()
        if line.startswith("│")
    ]


def test_status_lists_stages_in_pipeline_order_with_headline_columns(
    flow_env: FlowEnv, base_run: tuple[Path, str]
) -> None:
    root, run_id = base_run
    proc = flow_env.rla("status", run_id, "--root", str(root))
    rows = _rows(proc.stdout)
    order = pipeline_order(RunContext(run_id=run_id, config=load_config(None, preset="test")))
    shown = [(int(r[0]), r[1]) for r in rows]
    assert shown == sorted(shown, key=lambda k: (k[0], order.index(k[1])))  # pipeline, not alphabetical
    assert [s for it, s in shown if it == 1][:3] == ["rollout", "judge", "label"]
    header = next(line for line in proc.stdout.splitlines() if "┃ iter" in line)
    assert "iter" in header and "success" in header and "KL" in header and "kept rows" in header
    # Numbers are shown with 4 significant digits, never cut: the KL cell equals the manifest's value.
    store = ArtifactStore(str(root))
    manifest = store.manifest(run_id, 1, "train_policy")
    assert manifest is not None
    kl = manifest.extra["metrics"]["policy/kl"]
    train_row = next(r for r in rows if (r[0], r[1]) == ("1", "train_policy"))
    assert train_row[-1] == f"{kl:.4g}"
    # Where it looked is absolute; --full lists every metric by its full name.
    assert f"artifacts: {root / run_id}" in proc.stdout and "mlflow:    sqlite:///" in proc.stdout
    full = flow_env.rla("status", run_id, "--root", str(root), "--full")
    assert f"policy/kl={kl!r}" in full.stdout.replace("\n", "").replace("│", "").replace(" ", "")
    missing = flow_env.rla("status", "--root", "no-such-root")
    assert f"no runs under 'no-such-root' (= {flow_env.base / 'no-such-root'}" in " ".join(
        missing.stdout.split()
    )


def test_status_shows_the_running_stage_from_another_process(tmp_path: Path, flow_env: FlowEnv) -> None:
    cfg = load_config(None, preset="test", overrides=(f"artifact_root={tmp_path / 'runs'}",))
    run = RunContext(run_id="live", config=cfg)
    store = run.store
    store.write_run_info(
        "live", config=cfg.model_dump(mode="json"), config_hash=cfg.config_hash(), code_version="x"
    )
    writer = store.begin("live", 1, "rollout")
    lines: list[str] = []
    with stage_progress(run, 1, "rollout", writer.attempt, log=lines.append) as reporter:
        reporter.record_every_s = 0.0
        with progress.track("", total=8, unit="episodes", rate="steps") as counter:
            counter.advance(3, steps=12, tokens=300)
            proc = flow_env.rla("status", "live", "--root", str(tmp_path / "runs"))
            states = [r.state for r in stage_rows(store, "live", cfg)]
    flat = " ".join(proc.stdout.split())
    assert "running: iteration 1 rollout — rollout iter 1: 3/8 episodes" in flat
    assert "12 steps, 300 tokens" in flat and states == ["running"]
    assert lines[-1].startswith("rollout iter 1: 3/8 episodes") and "(done in " in lines[-1]
    # Once the attempt commits, the stage reads as done and nothing is "running".
    writer.commit("k", inputs={})
    assert [r.state for r in stage_rows(store, "live", cfg)] == ["done"]


def test_inspect_selects_columns_and_rows_and_pipes_csv_json(
    flow_env: FlowEnv, base_run: tuple[Path, str]
) -> None:
    root, run_id = base_run
    store = ArtifactStore(str(root))
    frame = store.read_frame(run_id, 1, "rollout", "rollouts")
    expected = frame.filter((pl.col("step") >= 1) & pl.col("action_valid")).select(
        "task_id", "step", "action"
    )
    args = ["inspect", run_id, "--iteration", "1", "--artifact", "rollouts", "--root", str(root)]
    sel = [
        "--columns",
        "task_id,step,action",
        "--where",
        "step>=1",
        "--where",
        "action_valid==true",
        "--head",
        "0",
    ]
    as_csv = flow_env.rla(*args, *sel, "--format", "csv")
    assert_frame_equal(pl.read_csv(io.StringIO(as_csv.stdout), schema=expected.schema), expected)
    as_json = flow_env.rla(*args, *sel, "--format", "json", "--head", "2")
    assert [json.loads(line) for line in as_json.stdout.splitlines()] == expected.head(2).to_dicts()
    # All 19 columns do not fit a terminal: one block per row, text cut to --width with a marker.
    records = flow_env.rla(*args, "--head", "1", "--width", "30")
    assert "── row 0" in records.stdout and " prompt: " in records.stdout
    prompt_line = next(line for line in records.stdout.splitlines() if " prompt: " in line)
    assert len(prompt_line.split(" prompt: ", 1)[1]) == 30 and prompt_line.endswith("…")
    bad = flow_env.rla(*args, "--columns", "nope", check=False)
    assert bad.returncode != 0 and "no column nope" in bad.stderr and "task_id" in bad.stderr


def test_eval_reproduces_the_runs_evaluation_and_saves_results(
    flow_env: FlowEnv, base_run: tuple[Path, str]
) -> None:
    root, run_id = base_run
    store = ArtifactStore(str(root))
    proc = flow_env.rla("eval", run_id, "--checkpoint", "2", "--root", str(root), "--save")
    assert "(the run's evaluation seed)" in proc.stdout
    assert "own evaluation of iteration 2" in proc.stdout and "(same seed and tasks)" in proc.stdout
    # Per-task breakdown: one row per held-out task.
    own = store.read_frame(run_id, 2, "evaluate", "eval")
    assert {r[0] for r in _rows(proc.stdout)} == set(own["task_id"].to_list())
    (name,) = saved_evals(store, run_id)
    record = saved_evals(store, run_id)[name]
    assert record["checkpoint_iteration"] == 2 and record["stage_seed"] is True
    # One evaluation seed for every iteration (paired evaluation points): iteration 0's stage seed.
    cfg = load_run_config(store, run_id)
    assert record["seed"] == eval_seed(cfg.seed) == stage_seed(cfg.seed, 0, "evaluate")
    saved = read_saved_eval(store, run_id, name)
    # Same seed, same checkpoint: exactly the episodes of the run's own iteration-2 evaluation.
    assert_frame_equal(saved, own)
    assert (root / run_id / "evals" / name / "_manifest.json").is_file()
    assert not any(p.name == "evals" for p in (root / run_id).glob("iter-*/**"))
    assert not (flow_env.base / ".cache" / "export").exists()  # no leftover copies


def test_export_writes_a_model_card(flow_env: FlowEnv, base_run: tuple[Path, str], tmp_path: Path) -> None:
    root, run_id = base_run
    flow_env.rla("export", run_id, "--to", str(tmp_path / "out"), "--root", str(root))
    card = (tmp_path / "out" / "README.md").read_text()
    info = ArtifactStore(str(root)).read_run_info(run_id)
    assert (
        f"run `{run_id}`" in card and info.config_hash in card and "iteration 2, stage `train_policy`" in card
    )
    prompt = ArtifactStore(str(root)).read_frame(run_id, 2, "rollout", "rollouts")["prompt"][0]
    assert prompt in card  # the policy's prompt format, shown with a real prompt of the run


def test_resume_of_a_finished_run_answers_from_the_manifests(
    flow_env: FlowEnv, base_run: tuple[Path, str]
) -> None:
    root, run_id = base_run
    store = ArtifactStore(str(root))
    cfg = load_run_config(store, run_id)
    assert pending_stages(store, cfg, run_id) == []
    assert pending_stages(store, cfg.model_copy(update={"iterations": 3}), run_id)[0] == "3/rollout"
    started = time.monotonic()
    proc = flow_env.rla("resume", run_id, "--root", str(root))
    elapsed = time.monotonic() - started
    assert "nothing to do" in proc.stdout
    assert "Starting temporary server" not in proc.stderr  # Prefect was not started
    print(f"resume of a finished run: {elapsed:.1f}s")


def test_run_log_tags_and_prefect_artifacts_say_what_runs_and_where(
    flow_env: FlowEnv, base_run: tuple[Path, str]
) -> None:
    root, run_id = base_run
    log = (flow_env.base / "base-run.log").read_text()
    for stage in ("seed_tasks", "bootstrap", "rollout", "judge", "train_policy", "evaluate"):
        assert (
            f"{stage} iteration 1 started (attempt 1)" in log
            or f"{stage} iteration 0 started (attempt 1)" in log
        )
    assert "rollout iter 1: " in log and " episodes, " in log and " steps/s" in log
    assert "judge iter 1: " in log and " judgments/s" in log
    flat = " ".join(log.split())
    assert f"artifacts={root / run_id}" in flat and f"mlflow={flow_env.mlflow_uri}" in flat
    with sqlite3.connect(flow_env.base / "mlflow.db") as db:
        tags = dict(db.execute("select t.key, t.value from tags t join runs r on t.run_uuid = r.run_uuid "
                               "where r.name = ?", (run_id,)).fetchall())  # fmt: skip
    assert tags["rla.artifact_uri"] == str(root / run_id)
    assert tags["rla.mlflow_uri"] == flow_env.mlflow_uri and tags["rla.iterations"] == "2"
    # Prefect artifacts (the flow run's Artifacts tab): per iteration, every stage with its metrics.
    with sqlite3.connect(flow_env.prefect_db) as db:
        query = "select data from artifact where key = ? order by created desc limit 1"  # the latest version
        data = [row[0] for row in db.execute(query, (f"{run_id}-iter-0001",))]
    assert data, "no Prefect artifact for iteration 1"
    latest = json.loads(data[0]) if data[0].startswith('"') else data[0]
    for stage in ("rollout", "judge", "label", "train_policy", "evaluate"):
        assert f"| {stage} |" in latest
    assert "`policy/success_rate`" in latest


def test_locations_resolve_and_cells_are_never_cut_inside_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert (
        resolve_mlflow_uri("sqlite:///mlflow.db") == f"sqlite:///{tmp_path}/mlflow.db"
    )  # 4 slashes: absolute
    assert resolve_mlflow_uri("sqlite:////data/m.db") == "sqlite:////data/m.db"
    assert resolve_mlflow_uri("http://mlflow:5000") == "http://mlflow:5000"
    assert resolve_root("runs") == str(tmp_path / "runs") and resolve_root("s3://b/runs") == "s3://b/runs"
    assert format_metric(0.0009695) == "0.0009695" and format_metric(12345.6) == "1.235e+04"
    # 'look\nnorth' is 10 characters with the newline shown as ⏎; cut to 6 = 5 characters and the marker.
    assert shorten("look\nnorth", 20) == "look⏎north" and shorten("look\nnorth", 6) == "look⏎…"
    df = pl.DataFrame({"step": [0, 1, 2], "action": ["go", None, "take key"], "ok": [True, False, True]})
    assert apply_filters(df, ["step>=1", "ok==true"])["action"].to_list() == ["take key"]
    assert apply_filters(df, ["action==null"])["step"].to_list() == [1]
    assert apply_filters(df, ["action~key"])["step"].to_list() == [2]
    with pytest.raises(ConfigError, match="not a Int64 value"):
        apply_filters(df, ["step>=two"])
    with pytest.raises(ConfigError, match="COLUMN OP VALUE"):
        apply_filters(df, ["step"])


def test_progress_record_on_an_s3_root_reads_from_another_store(s3: S3Endpoint) -> None:
    root = f"s3://{s3.make_bucket()}/runs"
    cfg = load_config(None, preset="test", overrides=(f"artifact_root={root}",))
    run = RunContext(run_id="remote", config=cfg, storage_options=s3.storage_options)
    run.store.write_run_info("remote", config=cfg.model_dump(mode="json"), config_hash="h", code_version="x")
    writer = run.store.begin("remote", 2, "judge")
    with stage_progress(run, 2, "judge", writer.attempt, log=lambda _line: None) as reporter:
        reporter.record_every_s = 0.0
        with progress.track("", total=5, unit="steps", rate="judgments") as counter:
            counter.advance(2, judgments=6)
            reader = ArtifactStore(root, storage_options=s3.storage_options)  # as another process would
            running = read_running(reader, "remote")
    assert running is not None and (running.iteration, running.stage, running.alive) == (2, "judge", True)
    assert running.describe().startswith("judge iter 2: 2/5 steps") and "6 judgments" in running.describe()


def test_rla_eval_prints_all_three_coding_metrics_and_says_why_one_is_missing() -> None:
    # No correct program: UT accuracy and detection have no denominator → n/a with that reason, not 0.
    assert coding_eval_line({"policy/eval_code_acc": 0.0}) == (
        "code acc 0.000, UT acc n/a (no correct program), detect n/a (no correct program)"
    )
    # Every program correct: detection (tests that a wrong program fails) has none.
    line = coding_eval_line({"policy/eval_code_acc": 1.0, "reward_model/eval_ut_acc": 0.5})
    assert line == "code acc 1.000, UT acc 0.500, detect n/a (no wrong program)"
    assert coding_eval_line({"policy/eval_success_rate": 1.0}) == ""  # not a coding run
