"""`rla study` and `rla report` end to end: a real 2-arm × 1-seed study of test-preset runs,
its study.parquet and summary, HTML reports opened in headless Chromium (every figure holds its data),
continuing a finished study, and the specific errors for bad input. Also, without a study: the summary's
tables (one set of cells, rendered to Markdown and HTML) on a hand-made study frame, the wall-time rows, and
the paired arm comparisons of a hand-made 2-arm × 2-seed study (eval artifacts written by hand)."""

from __future__ import annotations

import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest

from flows.study import (
    PAIRS_FRAME,
    STUDY_FILE,
    STUDY_FRAME,
    SUMMARY_FILE,
    WALLTIME_DIR,
    StudySpec,
    read_eval,
    read_pairs_frame,
    read_walltimes,
    record_walltime,
    refresh_study,
    run_id_for,
    study_frame,
    summary_markdown,
    summary_tables,
    walltime_frame,
)
from rla_core.algo.stats import proportion, proportion_text, wilson_interval
from rla_core.algo.study import EVAL_RATE, StudySummary, episode_differences, episode_wins, summarize
from rla_core.errors import ArtifactError
from rla_core.schemas import validate
from rla_core.store import ArtifactStore
from tests.flows.conftest import FlowEnv

ARMS = ("policy", "full")
STUDY = "st"


@pytest.fixture(scope="module")
def study_root(flow_env: FlowEnv) -> Path:
    """A finished study: arms policy and full, seed 1, one iteration of the test preset each.

    The accuracy bands are open so both models update whatever the samples (a task whose rollouts all
    win or all lose would otherwise leave the update empty, and the report's update figures without data).
    The first run may bootstrap the session's model cache (minutes on a loaded machine): a long timeout.
    """
    root = flow_env.base / "runs-study"
    flow_env.rla(
        "study", STUDY, "--preset", "test", "--arms", ",".join(ARMS), "--seeds", "1",
        *flow_env.settings(root), "--set", "iterations=1",
        "--set", "reward.policy_acc_band={low: 0.0, high: 1.0}", "--set", "reward.rm_acc_band={low: 0.0, high: 1.0}",
        timeout=1500,
    )  # fmt: skip
    return root


def evaluated_iterations(store: ArtifactStore, run_id: str) -> list[int]:
    return [it for it in store.list_iterations(run_id) if store.manifest(run_id, it, "evaluate") is not None]


Rows = list[list[str]]  # a table: its header, then its rows, every cell as text


def frame_rows(frame: pl.DataFrame) -> Rows:
    return [list(frame.columns), *([str(v) for v in row] for row in frame.rows())]


def markdown_tables(text: str) -> list[Rows]:
    """Every Markdown table of ``text`` (runs of lines starting with '|'), without the rule line."""
    tables: list[Rows] = []
    current: Rows | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        if current is None:
            current = []
            tables.append(current)
        if re.fullmatch(r"\|(---\|)+", line.strip()):  # the rule under the header
            continue
        current.append([c.strip().replace("\\|", "|") for c in line.strip()[1:-1].split(" | ")])
    return tables


class _Tables(HTMLParser):
    """Every <table id=...> of a page: its rows of <th>/<td> texts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, Rows] = {}
        self._table: Rows | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = self.tables.setdefault(str(dict(attrs).get("id")), [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._table is not None and self._cell is not None:
            self._table[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def html_tables(text: str) -> dict[str, Rows]:
    parser = _Tables()
    parser.feed(text)
    return parser.tables


def assert_rendered_cell_for_cell(summary: StudySummary, markdown: str, page: str) -> None:
    """summary.md and the HTML report show exactly the cells of summary_tables, in its order."""
    expected = summary_tables(summary)
    assert markdown_tables(markdown) == [frame_rows(t.frame) for t in expected]
    tables = html_tables(page)
    assert {t.id: tables.get(t.id) for t in expected} == {t.id: frame_rows(t.frame) for t in expected}


def test_study_writes_runs_frame_and_summary(flow_env: FlowEnv, study_root: Path) -> None:
    store = ArtifactStore(str(study_root))
    runs = {run_id_for(STUDY, arm, 1) for arm in ARMS}
    assert runs <= set(store.list_runs())
    data = store.read_run_file(STUDY, STUDY_FRAME)
    assert data is not None
    frame = validate("study", pl.read_parquet(io.BytesIO(data)))
    assert set(frame["arm"].unique().to_list()) == set(ARMS)
    for arm in ARMS:
        run_id = run_id_for(STUDY, arm, 1)
        evals = frame.filter((pl.col("run_id") == run_id) & (pl.col("metric") == EVAL_RATE))
        # "Before" (iteration 0) and after the last iteration, each from the run's own eval artifact.
        assert evals["iteration"].to_list() == evaluated_iterations(store, run_id) == [0, 1]
        for row in evals.iter_rows(named=True):
            episodes = store.read_frame(run_id, row["iteration"], "evaluate", "eval")
            assert row["value"] == pytest.approx(float((episodes["outcome"] > 0).mean() or 0.0))
    # The full arm trains the reward model; the policy arm keeps it frozen.
    full_stages = frame.filter(pl.col("run_id") == run_id_for(STUDY, "full", 1))["metric"].to_list()
    policy_stages = frame.filter(pl.col("run_id") == run_id_for(STUDY, "policy", 1))["metric"].to_list()
    assert "timing_s/train_reward" in full_stages and "timing_s/train_reward" not in policy_stages
    # One sitting ran each run: one wall-time row each.
    walls = walltime_frame(store, STUDY)
    assert sorted(walls["run_id"].to_list()) == sorted(runs) and (walls["wall_s"] > 0).all()
    # summary.md is the summary of the stored frame and wall times, table for table and cell for cell ...
    tables = markdown_tables((store.read_run_file(STUDY, SUMMARY_FILE) or b"").decode())
    summary = summarize(
        STUDY, frame, ARMS, wall_s=read_walltimes(store, STUDY), episodes=lambda r, i: read_eval(store, r, i)
    )
    assert tables == [frame_rows(t.frame) for t in summary_tables(summary)]
    # The pair rows: full − policy, paired on seed 1, from the two runs' own eval artifacts.
    pairs = read_pairs_frame(store, STUDY)
    assert pairs is not None and pairs["quantity"].to_list() == ["end", "change", "end_episodes"]
    assert set(pairs["arm"]) == {"full"} and set(pairs["baseline"]) == {"policy"}
    ends = [store.read_frame(run_id_for(STUDY, arm, 1), 1, "evaluate", "eval") for arm in ("full", "policy")]
    joined = ends[0].join(ends[1], on=["task_id", "rollout_id"], suffix="_base")
    assert joined.height == ends[0].height == ends[1].height  # the two arms played the same episodes
    diff = float(((joined["outcome"] > 0).cast(int) - (joined["outcome_base"] > 0).cast(int)).mean() or 0.0)
    row = {r["quantity"]: r for r in pairs.iter_rows(named=True)}
    assert row["end"]["mean"] == pytest.approx(diff) and row["end_episodes"]["mean"] == pytest.approx(diff)
    assert row["end"]["verdict"] == "too few seeds" and row["end"]["low"] is None  # one seed: no interval
    assert row["end_episodes"]["n"] == joined.height and row["end"]["decides"]
    # ... and its cells are the runs' numbers: per run, successes/episodes of its own eval artifacts
    main, _clean, _pairs, per_run, arms = (
        {row[0]: dict(zip(t[0], row, strict=True)) for row in t[1:]} for t in tables
    )
    assert set(main) == set(arms) == set(ARMS) and set(per_run) == runs
    for arm in ARMS:
        run_id = run_id_for(STUDY, arm, 1)
        for column, it in (("iteration 0", 0), ("end", 1)):
            won = store.read_frame(run_id, it, "evaluate", "eval")["outcome"] > 0
            assert per_run[run_id][column] == proportion_text(proportion(int(won.sum()), won.len()))
        assert per_run[run_id]["end iteration"] == "1"
        begin, end = (per_run[run_id][c].split(" = ")[1].split(" ")[0] for c in ("iteration 0", "end"))
        # one seed: the arm's means are that seed's rates, with no interval, and one seed never "learns"
        assert (main[arm]["seeds"], main[arm]["iteration 0"], main[arm]["end"]) == ("1", begin, end)
        assert main[arm]["learns"] == "no" and main[arm]["wall min/run"] != "–"

    # Continuing a finished study runs nothing again (and times nothing).
    before = {r: store.manifest(r, 1, "evaluate") for r in runs}
    proc = flow_env.rla("study", STUDY, "--root", str(study_root))
    assert proc.stderr.count("is finished, skipped") == 2
    assert {r: store.manifest(r, 1, "evaluate") for r in runs} == before
    assert walltime_frame(store, STUDY).height == 2


def _figures(page: list[dict[str, object]]) -> dict[str, list[dict[str, object]]]:
    return {str(f["name"]): list(f["traces"]) for f in page if f["rendered"]}  # type: ignore[arg-type]


def test_reports_render_in_chromium_with_every_figure_holding_its_data(
    flow_env: FlowEnv, study_root: Path, tmp_path: Path
) -> None:
    from flows.report import browse

    store = ArtifactStore(str(study_root))
    run_id = run_id_for(STUDY, "full", 1)
    run_html, study_html = tmp_path / "run.html", tmp_path / "study.html"
    flow_env.rla("report", run_id, "--root", str(study_root), "--out", str(run_html))
    flow_env.rla("report", "--study", STUDY, "--root", str(study_root), "--out", str(study_html))

    page = browse(run_html, tmp_path / "run-png")
    assert (tmp_path / "run-png" / "page.png").stat().st_size > 10_000  # a real screenshot
    figures = _figures(page)
    assert set(figures) == {"learning", "reward_model", "update_health", "task_pool", "timing"}
    evaluated = evaluated_iterations(store, run_id)
    by_meta = {t["meta"]: t for t in figures["learning"]}
    assert by_meta["eval"]["x"] == evaluated  # one point per evaluated iteration
    assert by_meta["eval_clean"]["x"] == evaluated
    assert all(c <= e for c, e in zip(by_meta["eval_clean"]["y"], by_meta["eval"]["y"], strict=True))
    assert by_meta["train"]["x"] == [1]
    assert sum(1 for t in figures["learning"] if t["meta"] == "band") == 2  # Wilson band edges
    judge_lines = {t["name"] for t in figures["reward_model"]}
    # balanced accuracy is drawn only for iterations whose judged steps hold both classes
    assert {"step accuracy (raw)", "share of steps called good", "outcome agreement"} <= judge_lines
    assert judge_lines <= {"step accuracy (raw)", "step balanced accuracy", "share of steps called good",
                           "outcome agreement"}  # fmt: skip
    health = {t["name"] for t in figures["update_health"]}
    assert {"policy kl", "policy clip_fraction", "policy rows_used", "reward_model kl"} <= health
    assert {t["name"] for t in figures["task_pool"]} >= {"active", "pending", "accepted", "rejected"}
    assert all(t["x"] for f in figures.values() for t in f)  # no empty trace anywhere

    page = browse(study_html, tmp_path / "study-png")
    figures = _figures(page)
    assert {"heldout", "heldout_clean", "train", "rm_step_accuracy", "accepted", "policy_kl"} <= set(figures)
    for panel in ("heldout", "heldout_clean"):
        lines = {t["meta"]: t for t in figures[panel] if t["meta"] in ARMS}
        assert set(lines) == set(ARMS)  # every arm present
        for arm in ARMS:
            assert lines[arm]["x"] == evaluated_iterations(store, run_id_for(STUDY, arm, 1))
    assert {t["meta"] for t in figures["train"]} == set(ARMS)
    # The report's tables are the summary's cells, exactly as summary.md shows them.
    spec_frame = validate(
        "study", pl.read_parquet(io.BytesIO(store.read_run_file(STUDY, STUDY_FRAME) or b""))
    )
    summary = summarize(
        STUDY,
        spec_frame,
        ARMS,
        wall_s=read_walltimes(store, STUDY),
        episodes=lambda r, i: read_eval(store, r, i),
    )
    markdown = (store.read_run_file(STUDY, SUMMARY_FILE) or b"").decode()
    assert_rendered_cell_for_cell(summary, markdown, study_html.read_text(encoding="utf-8"))
    assert [row[0] for row in html_tables(study_html.read_text(encoding="utf-8"))["summary"][1:]] == list(
        ARMS
    )


def test_bad_input_gets_specific_errors(flow_env: FlowEnv, study_root: Path, tmp_path: Path) -> None:
    root = str(study_root)
    proc = flow_env.rla("study", "other", "--arms", "policy,bogus", "--root", root, check=False)
    assert proc.returncode != 0 and "unknown arm(s) 'bogus'" in proc.stderr and "stepwise-only" in proc.stderr
    clash = run_id_for(STUDY, "full", 1)
    proc = flow_env.rla("study", clash, "--root", root, check=False)
    assert proc.returncode != 0 and "clashes with an existing run" in proc.stderr
    proc = flow_env.rla("report", "nope", "--root", root, "--no-mlflow", check=False)
    assert proc.returncode != 0 and "no run 'nope'" in proc.stderr
    proc = flow_env.rla("report", "--study", "nope", "--root", root, "--no-mlflow", check=False)
    assert proc.returncode != 0 and "no study 'nope'" in proc.stderr

    # A run that has started but not evaluated yet: the report renders and says what is missing.
    store = ArtifactStore(root)
    cfg = store.read_run_info(clash).config
    store.write_run_info("fresh", config=cfg, config_hash="0" * 64, code_version="test")
    out = tmp_path / "fresh.html"
    proc = flow_env.rla("report", "fresh", "--root", root, "--no-mlflow", "--out", str(out))
    assert "missing:" in proc.stderr and "no evaluation yet" in proc.stderr
    assert "id='missing'" in out.read_text(encoding="utf-8")


def test_arms_set_exactly_their_ablation_switches() -> None:
    from flows.study import ARMS, arm_config
    from rla_core.config import load_config

    base = load_config(preset="bench").model_dump(mode="json")
    switches = {
        arm: (
            (c := arm_config(base, arm, 7)).reward.use_outcome,
            c.reward.use_stepwise,
            c.training.reward.enabled,
            c.adaptation.enabled,
            c.reward.rm_outcome_balance,
            (c.judge.source.value, c.judge.oracle_flip.good, c.judge.oracle_flip.bad),
            c.seed,
        )
        for arm in ARMS
    }
    judge = ("reward_model", 0.0, 0.0)
    # oracle arms: the policy arm with the engine's labels as votes, turned over with the arm's probabilities
    oracle = {
        "oracle-stepwise": ("oracle", 0.0, 0.0), "oracle-p10": ("oracle", 0.1, 0.1),
        "oracle-p25": ("oracle", 0.25, 0.25), "oracle-p40": ("oracle", 0.4, 0.4),
        "oracle-p45": ("oracle", 0.45, 0.45), "oracle-good80": ("oracle", 0.8, 0.0),
    }  # fmt: skip
    assert switches == {
        "outcome-only": (True, False, False, False, False, judge, 7),
        "policy": (True, True, False, False, False, judge, 7),
        "reward": (True, True, True, False, False, judge, 7),
        "full": (True, True, True, True, False, judge, 7),
        "stepwise-only": (False, True, True, False, False, judge, 7),
        "reward-balanced": (True, True, True, False, True, judge, 7),
        "full-balanced": (True, True, True, True, True, judge, 7),
        **{arm: (True, True, False, False, False, votes, 7) for arm, votes in oracle.items()},
    }


def test_bench_preset_evaluates_on_at_least_100_held_out_episodes() -> None:
    from rla_core.config import load_config
    from rla_core.settings.base import read_jsonl

    cfg = load_config(preset="bench")
    train = read_jsonl(cfg.textgame.tasks, what="training task")
    held_out = read_jsonl(cfg.textgame.eval_tasks, what="evaluation task")
    assert len(held_out) * cfg.evaluation.rollouts_per_task >= 100
    seeds = {r["spec"]["seed"] for r in train}
    assert not seeds & {r["spec"]["seed"] for r in held_out}  # no held-out game is trained on
    assert cfg.models.reward_label_noise > 0 and cfg.models.warm_start_seed is not None


def test_flip_judge_labels_flips_the_requested_share() -> None:
    from rla_core.envs.prompts import judge_demo_response
    from rla_core.errors import ConfigError
    from rla_core.settings.warm_start import flip_judge_labels

    goods = [True, False, True, False, True, True, False, False]
    rows = pl.DataFrame(
        {"prompt": [f"p{i}" for i in range(8)], "response": [judge_demo_response("x", good=g) for g in goods]}
    )
    flipped = flip_judge_labels(rows, share=0.25, seed=3)["response"].to_list()
    changed = [i for i, (a, b) in enumerate(zip(rows["response"], flipped, strict=True)) if a != b]
    assert len(changed) == 2  # round(0.25 · 8)
    for i in changed:
        assert flipped[i] == judge_demo_response("x", good=not goods[i])
    assert flip_judge_labels(rows, share=0.25, seed=3)["response"].to_list() == flipped  # seeded
    with pytest.raises(ConfigError, match="not a step verdict"):
        flip_judge_labels(pl.DataFrame({"prompt": ["p"], "response": ["def f(): pass"]}), share=1.0, seed=0)


def _study_frame(study: str, gains: dict[str, list[tuple[int, int]]], episodes: int = 200) -> pl.DataFrame:
    """A study frame by hand: per arm, per seed, (successes at iteration 0, at iteration 2) of ``episodes``;
    clean successes 5 fewer; RM step accuracy 0.5 then 0.7; 3 accepted rewrites; 60 s per rollout stage."""
    rows: list[tuple[str, str, int, str, int, str, float]] = []
    for arm, pairs in gains.items():
        for seed, (before, end) in enumerate(pairs, start=1):
            run_id = run_id_for(study, arm, seed)

            def add(it: int, metric: str, value: float) -> None:
                rows.append((study, arm, seed, run_id, it, metric, float(value)))  # noqa: B023

            for it, wins in ((0, before), (2, end)):
                for prefix, k in (("eval/success", wins), ("eval/clean_success", wins - 5)):
                    low, high = wilson_interval(k, episodes)
                    add(it, f"{prefix}es", k)
                    add(it, f"{prefix}_rate", k / episodes)
                    add(it, f"{prefix}_low", low)
                    add(it, f"{prefix}_high", high)
                add(it, "eval/episodes", episodes)
            for it, acc in ((1, 0.5), (2, 0.7)):
                add(it, "reward_model/step_accuracy", acc)
                add(it, "timing_s/rollout", 60.0)
            add(2, "env/pool_accepted", 3)
    columns = ["study", "arm", "seed", "run_id", "iteration", "metric", "value"]
    return validate("study", pl.DataFrame(rows, schema=columns, orient="row"))


def test_summary_tables_are_rendered_cell_for_cell(tmp_path: Path) -> None:
    from flows.report import summary_html

    # full: +4, +6, +8 of 200 (Δ 0.02, 0.03, 0.04: mean 0.03, t-interval low 0.0052 > 0, learns);
    # policy: +4, +1, +1 (Δ 0.02, 0.005, 0.005: mean 0.01, low −0.0115, does not learn);
    # reward: one seed only, never evaluated at the end
    gains = {"full": [(40, 44), (40, 46), (40, 48)], "policy": [(40, 44), (45, 46), (47, 48)]}
    frame = _study_frame("hs", gains)
    frame = pl.concat([frame, _study_frame("hs", {"reward": [(40, 40)]}).filter(pl.col("iteration") == 0)])
    summary = summarize(
        "hs", frame, ["full", "policy", "reward"], wall_s={run_id_for("hs", "full", 1): 300.0}
    )
    tables = {t.id: t.frame for t in summary_tables(summary)}
    main = {row["arm"]: row for row in tables["summary"].to_dicts()}
    assert main["full"] == {
        "arm": "full",
        "seeds": "3",
        "iteration 0": "0.200 [0.200, 0.200]",  # 40/200 in every seed: zero width
        "end": "0.230 [0.205, 0.255]",  # 0.22, 0.23, 0.24: s = 0.01, half = 4.302653 · 0.01 / √3 = 0.0248
        "Δ": "0.030 [0.005, 0.055]",
        "learns": "yes",
        "RM step acc (raw)": "0.50 [0.50, 0.50] → 0.70 [0.70, 0.70]",
        "RM step balanced acc": "– → –",  # the hand-made frame records no balanced accuracy
        "RM outcome agr.": "– → –",
        "accepted rewrites": "3.0 [3.0, 3.0]",
        "wall min/run": "5.0",  # 300 s of the one run with a wall time
        "loop compute min/run": "2.0",  # 2 × 60 s per run, the mean over seeds
    }
    assert (main["policy"]["Δ"], main["policy"]["learns"]) == ("0.010 [-0.012, 0.032]", "no")
    assert (main["reward"]["seeds"], main["reward"]["iteration 0"], main["reward"]["learns"]) == (
        "0",
        "–",
        "no",
    )
    clean = {row["arm"]: row for row in tables["summary-clean"].to_dicts()}
    assert (
        clean["full"]["iteration 0"] == "0.175 [0.175, 0.175]" and clean["full"]["learns"] == "yes"
    )  # 35/200
    per_run = {row["run"]: row for row in tables["per-run"].to_dicts()}
    # Wilson 40/200: center 0.205654, half 0.055201 → [0.150, 0.261] (see tests/algo/test_stats.py)
    assert per_run["hs-full-s1"]["iteration 0"] == "40/200 = 0.200 [0.150, 0.261]"
    assert per_run["hs-full-s1"]["end"] == proportion_text(proportion(44, 200))
    assert per_run["hs-full-s1"]["end iteration"] == "2"
    assert (per_run["hs-reward-s1"]["end"], per_run["hs-reward-s1"]["end iteration"]) == (
        "not evaluated yet",
        "–",
    )
    assert tables["arms"]["arm"].to_list() == ["full", "policy", "reward"]
    # Both renderings show these cells and nothing else.
    assert_rendered_cell_for_cell(summary, summary_markdown(summary), summary_html(summary))


def test_wall_times_are_appended_rows_and_old_json_is_still_read(tmp_path: Path) -> None:
    store = ArtifactStore(str(tmp_path))
    full, policy = run_id_for("w", "full", 1), run_id_for("w", "policy", 1)
    assert read_walltimes(store, "w") == {} and walltime_frame(store, "w").height == 0
    # A study from before the rows: its walltime.json (run id → seconds) is read, never rewritten.
    store.write_run_file("w", "walltime.json", json.dumps({full: 60.0}).encode())
    first = record_walltime(store, "w", full, 30.0)
    first_bytes = Path(first).read_bytes()
    record_walltime(store, "w", full, 30.5)
    record_walltime(store, "w", policy, 120.0)
    files = store.list_run_files("w", WALLTIME_DIR)
    assert len(files) == 3 and all(f.endswith(".parquet") for f in files)
    assert Path(first).read_bytes() == first_bytes  # earlier rows are never rewritten
    assert json.loads(store.read_run_file("w", "walltime.json") or b"") == {full: 60.0}
    rows = walltime_frame(store, "w")
    assert rows.height == 4 and validate("study_walltime", rows).equals(rows)
    assert rows.filter(pl.col("sitting") == "walltime.json")["ended_at"].to_list() == [None]
    assert read_walltimes(store, "w") == {full: 60.0 + 30.0 + 30.5, policy: 120.0}


def test_report_needs_exactly_one_of_run_and_study(tmp_path: Path) -> None:
    from flows.report import build_report
    from rla_core.errors import UsageError

    store = ArtifactStore(str(tmp_path))
    with pytest.raises(UsageError, match="given both a run id and --study"):
        build_report(store, run_id="r", study_id="s")
    with pytest.raises(UsageError, match=r"given neither .*`rla report RUN_ID`"):
        build_report(store, run_id=None, study_id=None)


def _write_eval(
    store: ArtifactStore,
    run_id: str,
    iteration: int,
    wins: list[int],
    rollouts: int = 2,
    metrics: dict[str, float] | None = None,
) -> None:
    """Commit an evaluate stage by hand: episode k is task ``t<k // rollouts>``, rollout ``k % rollouts``."""
    n = len(wins)
    writer = store.begin(run_id, iteration, "evaluate")
    writer.write_frame(
        "eval",
        pl.DataFrame(
            {
                "iteration": [iteration] * n,
                "task_id": [f"t{k // rollouts}" for k in range(n)],
                "rollout_id": [k % rollouts for k in range(n)],
                "outcome": [1.0 if w else -1.0 for w in wins],
                "steps": [3] * n,
                "invalid_actions": [0] * n,
                "status": ["won" if w else "lost" for w in wins],
                "error_kind": [None] * n,
                "error_message": [None] * n,
                "attempt": [0] * n,
            }
        ),
    )
    writer.commit("hand-made", {}, {"metrics": metrics or {}})


def _hand_study(root: Path, ends: dict[tuple[str, int], list[int]]) -> tuple[ArtifactStore, StudySpec]:
    """Study ``ps``: arms policy and full, seeds 1 and 2, evaluated at iterations 0 (the seed's warm start,
    the same in both arms) and 1 (``ends``), 4 episodes each (2 tasks × 2 rollouts)."""
    store = ArtifactStore(str(root))
    spec = StudySpec(study_id="ps", base={}, arms=("policy", "full"), seeds=(1, 2))
    store.write_run_file("ps", STUDY_FILE, spec.to_json())
    warm = {1: [1, 0, 0, 0], 2: [0, 1, 0, 0]}
    for arm, seed, run_id in spec.run_ids():
        store.write_run_info(run_id, config={}, config_hash="0" * 64, code_version="test")
        _write_eval(store, run_id, 0, warm[seed])
        _write_eval(store, run_id, 1, ends[(arm, seed)])
    return store, spec


def test_a_study_of_two_arms_and_two_seeds_writes_the_pair_rows_and_the_report_shows_them(
    tmp_path: Path,
) -> None:
    from flows.report import study_report

    # Held-out wins per episode at iteration 1 (episodes (t0, 0), (t0, 1), (t1, 0), (t1, 1)):
    # seed 1: policy 1, 0, 0, 0 (0.25); full 1, 1, 0, 0 (0.50): end difference 0.25, per episode 0, +1, 0, 0
    # seed 2: policy 0, 1, 0, 0 (0.25); full 1, 1, 1, 0 (0.75): end difference 0.50, per episode +1, 0, +1, 0
    ends = {
        ("policy", 1): [1, 0, 0, 0],
        ("full", 1): [1, 1, 0, 0],
        ("policy", 2): [0, 1, 0, 0],
        ("full", 2): [1, 1, 1, 0],
    }
    store, spec = _hand_study(tmp_path, ends)
    _frame, summary = refresh_study(store, spec)
    assert store.read_run_file("ps", PAIRS_FRAME) is not None
    pairs = read_pairs_frame(store, "ps")
    assert pairs is not None and validate("study_pairs", pairs).equals(pairs)
    rows = {r["quantity"]: r for r in pairs.iter_rows(named=True)}
    assert list(rows) == ["end", "change", "end_episodes"]
    assert {(r["study"], r["arm"], r["baseline"]) for r in rows.values()} == {("ps", "full", "policy")}
    # Per seed (t over seeds, decides): 0.25, 0.50; mean 0.375; s = |0.50 − 0.25| / √2 = 0.1767767;
    # se = s / √2 = 0.125; t(0.975, df 1) = 12.706205, half = 12.706205 · 0.125 = 1.5882756
    end = rows["end"]
    assert (end["seeds"], end["n"], end["decides"], end["method"]) == (2, 2, True, "t over seeds")
    assert end["mean"] == pytest.approx(0.375)
    assert end["low"] == pytest.approx(0.375 - 1.5882756, abs=1e-6)
    assert end["high"] == pytest.approx(0.375 + 1.5882756, abs=1e-6)
    assert (end["verdict"], end["per_seed"]) == ("too few seeds", "s1 +0.250, s2 +0.500")
    # Iteration 0 is the same in both arms: the change differs exactly as the end does.
    change = rows["change"]
    assert (change["mean"], change["per_seed"], change["decides"]) == (end["mean"], end["per_seed"], False)
    # Per episode, pooled over seeds: 0, +1, 0, 0 and +1, 0, +1, 0; N = 8, mean = 3 / 8 = 0.375
    # seed 1: mean 0.25, squared deviations 0.0625 × 3 + 0.5625 = 0.75, s² = 0.25, n · s² = 1
    # seed 2: mean 0.5, squared deviations 0.25 × 4 = 1, s² = 1/3, n · s² = 4/3
    # var(mean) = (1 + 4/3) / 64 = 0.0364583, sd = 0.1909407; half = 1.959964 · 0.1909407 = 0.3742370
    episodes = rows["end_episodes"]
    assert (episodes["n"], episodes["seeds"], episodes["per_seed"]) == (8, 2, None)
    assert episodes["mean"] == pytest.approx(0.375)
    assert episodes["low"] == pytest.approx(0.375 - 0.3742370, abs=1e-6)
    assert episodes["high"] == pytest.approx(0.375 + 0.3742370, abs=1e-6)
    assert episodes["verdict"] == "higher"  # on these episodes; the decision (2 seeds) is not
    # summary.md and the report show the pairs table, cell for cell.
    table = {t.id: t.frame for t in summary_tables(summary)}["pairs"].to_dicts()
    assert table == [
        {
            "arm − baseline": "full − policy",
            "seeds": "2",
            "end Δ per seed": "s1 +0.250, s2 +0.500",
            "end Δ [95% t]": "0.375 [-1.213, 1.963]",
            "decision": "too few seeds",
            "change Δ [95% t]": "0.375 [-1.213, 1.963]",
            "episodes": "8",
            "episode Δ [95% normal]": "0.375 [0.001, 0.749]",
            "on these episodes": "higher",
        }
    ]
    markdown = (store.read_run_file("ps", SUMMARY_FILE) or b"").decode()
    page = study_report(store, "ps").html()
    assert_rendered_cell_for_cell(summary, markdown, page)
    assert html_tables(page)["pairs"][1][0] == "full − policy"


def test_pairing_episodes_that_differ_between_arms_is_an_error(tmp_path: Path) -> None:
    # seed 2's full run played 3 rollouts per task: episodes (t0, 2) and (t1, 2) are only in it.
    ends = {("policy", 1): [1, 0, 0, 0], ("full", 1): [1, 1, 0, 0], ("policy", 2): [0, 1, 0, 0]}
    store = ArtifactStore(str(tmp_path))
    spec = StudySpec(study_id="ps", base={}, arms=("policy", "full"), seeds=(1, 2))
    store.write_run_file("ps", STUDY_FILE, spec.to_json())
    for _arm, _seed, run_id in spec.run_ids():
        store.write_run_info(run_id, config={}, config_hash="0" * 64, code_version="test")
        _write_eval(store, run_id, 0, [1, 0, 0, 0])
    for (arm, seed), wins in ends.items():
        _write_eval(store, run_id_for("ps", arm, seed), 1, wins)
    _write_eval(store, run_id_for("ps", "full", 2), 1, [1, 1, 1, 0, 0, 0], rollouts=3)
    with pytest.raises(
        ArtifactError, match=r"cannot pair the held-out episodes of run ps-full-s2 and run ps-policy-s2"
    ):
        refresh_study(store, spec)
    # Without episodes (the seed-level view alone) the same runs still compare.
    summary = summarize("ps", study_frame(store, spec), spec.arms)
    assert summary.pairs[0].seeds == (1, 2) and summary.pairs[0].episodes == 0


def test_an_episode_in_env_error_in_either_run_is_dropped_from_both() -> None:
    # Four episodes; (t, 1) hit a dead desktop in the arm's run, (t, 3) in the baseline's: the pairs are
    # (t, 0): 1 − 0 = 1 and (t, 2): 0 − 1 = −1 only.
    def evals(outcomes: list[float | None]) -> pl.DataFrame:
        return pl.DataFrame(
            {"task_id": ["t"] * 4, "rollout_id": [0, 1, 2, 3], "outcome": outcomes,
             "status": [None if o is not None else "env_error" for o in outcomes]},
            schema={"task_id": pl.String, "rollout_id": pl.Int64, "outcome": pl.Float64, "status": pl.String},
        )  # fmt: skip

    arm = episode_wins(evals([1.0, None, -1.0, 1.0]), where="arm")
    baseline = episode_wins(evals([-1.0, 1.0, 1.0, None]), where="baseline")
    assert arm[("t", 1)] is None and baseline[("t", 3)] is None
    assert episode_differences(arm, baseline, arm_where="arm", baseline_where="baseline") == [1.0, -1.0]


def test_report_and_status_show_the_env_error_rate_beside_the_success_rate(tmp_path: Path) -> None:
    from flows.report import run_report
    from flows.status import StageRow

    # Iteration 0: 4 played episodes, 1 won (0.250); the evaluate stage measured 1 of 5 episodes in env_error
    # (0.200). Iteration 1 was written before the share was measured: its cell is "—", not a made-up 0.
    store = ArtifactStore(str(tmp_path))
    store.write_run_info("r", config={}, config_hash="0" * 64, code_version="test")
    _write_eval(store, "r", 0, [1, 0, 0, 0], metrics={"env/eval_env_error_rate": 0.2})
    _write_eval(store, "r", 1, [1, 1, 0, 0])
    page = run_report(store, "r").html()
    assert "<th>held-out success</th><th>env_error_rate</th>" in page
    assert (
        "<tr><td>0</td><td>0.250</td><td>0.200</td></tr><tr><td>1</td><td>0.500</td><td>—</td></tr>" in page
    )
    # `rla status`: the column beside "success", the evaluation's share first, else the rollout's.
    row = StageRow(1, "rollout", "done", 1, 2.0, {"policy/success_rate": 0.5, "env/env_error_rate": 0.25})
    assert (row.headline("success"), row.headline("env errors")) == ("0.5", "0.25")
    evaluated = StageRow(1, "evaluate", "done", 1, 2.0, {"env/eval_env_error_rate": 0.0})
    assert evaluated.headline("env errors") == "0"


def test_report_and_status_warn_when_the_judge_collapses_onto_the_majority_label(tmp_path: Path) -> None:
    from flows.report import run_report
    from flows.status import StageRow, judge_warnings

    # Iteration 1: 40 % of steps called good where 42 % are (fine); iteration 2: 3 % where 18 % are (< half).
    store = ArtifactStore(str(tmp_path))
    store.write_run_info("r", config={}, config_hash="0" * 64, code_version="test")
    for it, said, true in ((1, 0.40, 0.42), (2, 0.03, 0.18)):
        writer = store.begin("r", it, "judge")
        metrics = {"reward_model/good_verdict_share": said, "reward_model/good_step_share": true}
        writer.commit("hand-made", {}, {"metrics": metrics})
    page = run_report(store, "r").html()
    assert (
        "id='warnings'" in page
        and "iteration 2 (training steps): the judge calls 3% of steps good while 18%" in page
    )
    # `rla status`: the latest judge stage (and yardstick) only; a judge above half its good-step share says nothing.
    rows = [
        StageRow(1, "judge", "done", 1, 1.0, {"reward_model/good_verdict_share": 0.03, "reward_model/good_step_share": 0.18}),
        StageRow(2, "judge", "done", 1, 1.0, {"reward_model/good_verdict_share": 0.10, "reward_model/good_step_share": 0.18}),
        StageRow(2, "judge_eval", "done", 1, 1.0, {"reward_model/yardstick_good_verdict_share": 0.01,
                                                   "reward_model/yardstick_good_step_share": 0.20}),
    ]  # fmt: skip
    assert judge_warnings(rows) == [
        "iteration 2 judge_eval (yardstick): the judge calls 1% of steps good while 20% are (below half): it has "
        "collapsed onto the majority label, so its step-wise rewards carry little besides the outcome (docs/study.md)"
    ]
