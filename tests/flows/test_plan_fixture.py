"""Typed stages changed no behaviour: the pre-change code's record of a test-preset run.

``tests/fixtures/stage_plan/`` was written by the code before typed stages (commit 58cfcb8, see
``environment.json`` and ``make_fixture.py``) from a finished ``--preset test`` run: each stage's config
slice as JSON, its manifest (content key = hash of its output files, inputs by producing stage,
metrics), ``rla status --full``, the fast resume's answer, and what ``--from-stage`` marks. The session's
``base`` run is the same config and seed played by today's code, so it must show the same.

Float results depend on the CPU's kernels: content keys and metric values are compared when this
machine has the fixture's CPU capability and torch (the machine kind the project runs on); the
structure (stages, wiring, files, metric names, states, attempts, resume and ``--from-stage``) always.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from flows.runs import invalidate_from, load_run_config
from rla_core.config import SPEED_ONLY_KEYS, InferenceDtype, load_config, on_cuda
from rla_core.errors import RlaError
from rla_core.store import ArtifactStore
from tasks.stage import all_stages
from tests.flows.conftest import FlowEnv

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "stage_plan"
ENV = json.loads((FIXTURE / "environment.json").read_text())


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return ""


# Same float kernels: the same CPU vendor/family (an Intel Xeon and an AMD EPYC both report AVX512, yet
# their training losses differ in the 7th digit), the same capability and the same torch.
SAME_KERNELS = (ENV["cpu_model"] in _cpu_model()) and (
    torch.backends.cpu.get_cpu_capability(),
    torch.__version__,
) == (ENV["cpu_capability"], ENV["torch"])
OTHER_SETTINGS = ("coding", "gui", "plugin")  # the fixture run is a text-game run

# The one-time slice changes, each a field a stage really reads that its old string list missed, or a
# section the old list named whole although the stage reads part of it (docs/architecture.md, changelog).
HIDDEN_READS = {
    ("adapt", "threads"),  # opening the environment model sets torch's thread count
    ("bootstrap", "rollout.max_steps"),  # demonstrations are cut at the training step budget
    ("execute", "setting"),  # fills the coding section only in the coding setting
    ("write_tests", "setting"),
    # judge and label open no environment but ask the registry for the adapter of the setting's engine
    ("judge", "textgame.engine"),
    ("label", "textgame.engine"),
}
NARROWED = {
    ("evaluate", "textgame.tasks"),  # evaluation reads the held-out file only
    ("evaluate", "evaluation.every"),  # the flow reads the schedule; the stage plays what is due
}
# Stages added after the fixture was made (the judge's yardstick: tests/flows/test_judge_eval.py).
NEW_STAGES = {"judge_eval"}
# Config keys added after the fixture was made (screenshots in the prompts; environment errors; the
# oracle judge diagnostic; the environment model's warm start).
NEW_KEYS = {
    "judge.source",
    "models.environment_warm_start_epochs",
    "models.images.policy",
    "models.images.reward",
    "rollout.env_retries",
    "rollout.max_env_error_share",
    # packed micro-batches (docs/configuration.md)
    "training.policy.max_tokens_per_micro_batch",
    "training.reward.max_tokens_per_micro_batch",
    "training.sft_max_tokens_per_micro_batch",
    # the judge's second look: tiny sizes per role, a noisy oracle, the balance option (docs/study.md)
    "models.tiny.policy.width",
    "models.tiny.policy.layers",
    "models.tiny.reward.width",
    "models.tiny.reward.layers",
    "models.tiny.environment.width",
    "models.tiny.environment.layers",
    "judge.oracle_flip.good",
    "judge.oracle_flip.bad",
    "reward.rm_outcome_balance",
}
# Metrics added after the fixture was made (docs/environment-errors.md; the judge's balanced accuracy).
NEW_METRICS = {
    "env/env_error_rate",
    "env/eval_env_error_rate",
    "reward_model/step_balanced_accuracy",
    "reward_model/good_verdict_share",
    "reward_model/good_step_share",
    "reward_model/good_verdict_precision",
    # the share of padding in the updates' and warm starts' forward passes
    "policy/padding_share",
    "reward_model/padding_share",
    "policy/warm_start_padding_share",
    "reward_model/warm_start_padding_share",
    "policy/warm_start_loop_s",
    "reward_model/warm_start_loop_s",
    # the balance of the judge's rows (docs/method.md)
    "reward_model/rows_kept_won",
    "reward_model/rows_kept_lost",
    "reward_model/rows_kept_good_step",
    "reward_model/rows_kept_bad_step",
    "reward_model/steps_judged",
    "reward_model/steps_unanimous",
    "reward_model/unanimous_step_share",
}


def resolved(leaf: str, value: Any) -> Any:
    """A generating stage's slice holds ``models.serving.dtype`` resolved for this machine (once 'auto')."""
    if leaf != "models.serving.dtype":
        return value
    return InferenceDtype(value).resolve(cuda=on_cuda("auto")).value


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        return {k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix.removesuffix("."): data}


def test_each_stage_slice_equals_the_old_one_where_its_section_is_unchanged() -> None:
    old = json.loads((FIXTURE / "old_slices.json").read_text())
    cfg = load_config(
        preset="test", overrides=["artifact_root=/tmp/fixture/runs", "models.cache_dir=/tmp/fixture/models"]
    )
    assert set(old) | NEW_STAGES == {str(name) for name in all_stages()}
    for name, stage in all_stages().items():
        if name in NEW_STAGES:
            continue
        before, after = _flat(old[name]), _flat(stage.slice(cfg).key_json())
        for leaf in before.keys() & after.keys():
            assert after[leaf] == before[leaf] or resolved(leaf, before[leaf]) == after[leaf], (name, leaf)
        for leaf in before.keys() - after.keys():
            other_setting = leaf.split(".")[0] in OTHER_SETTINGS
            assert other_setting or leaf in SPEED_ONLY_KEYS or (name, leaf) in NARROWED, (name, leaf)
        for leaf in after.keys() - before.keys():
            assert (
                (leaf in OTHER_SETTINGS and after[leaf] is None)
                or (name, leaf) in HIDDEN_READS
                or leaf in NEW_KEYS
            ), (
                name,
                leaf,
            )


def _manifests(store: ArtifactStore, run_id: str) -> list[dict[str, Any]]:
    """The fixture's manifest summary (make_fixture.py) of a run, made by today's code."""
    committed = store.committed(run_id)
    producers = {m.content_key: f"{it}/{stage}" for (it, stage), m in committed.items()}
    return [
        {
            "iteration": it, "stage": stage, "attempt": m.attempt, "content_key": m.content_key,
            "inputs": {k: producers.get(v, v) for k, v in sorted(m.inputs.items())},
            "metrics": {
                k: v for k, v in sorted(m.extra["metrics"].items())
                if not k.startswith("timing_s/") and k not in NEW_METRICS
            },
            "files": sorted(e.path for e in m.artifacts),
        }
        for (it, stage), m in committed.items()
    ]  # fmt: skip


def _wall_clock(metric: str) -> bool:
    """Seconds measured while the stage ran (``timing_s/…``, ``policy/loop_s``): different every run."""
    return metric.startswith("timing_s/") or metric.endswith("_s")


def _names_follow_samples(iteration: object, stage: str) -> bool:
    """An update on sampled rows logs other metric names when its batch is empty (a no-op) on one run only."""
    return stage.startswith("train_") and f"{iteration}/{stage}" in SAMPLED


def _structure(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **r,
            "content_key": None,
            "metrics": None if _names_follow_samples(r["iteration"], r["stage"]) else sorted(r["metrics"]),
        }
        for r in rows
    ]


def _values(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Content keys hash each stage's code version, which every later change to a stage's modules moves
    # (by design); what this fixture pins is what the stages write: files and metrics.
    return [
        {**r, "content_key": None, "metrics": {k: v for k, v in r["metrics"].items() if not _wall_clock(k)}}
        for r in rows
    ]


# The generator's sampler changed once after the fixture was made (one counter-based uniform per row and
# token instead of a Gumbel draw per vocabulary entry: docs/changelog.md): the same distribution, other
# samples. Stages that sample, and every stage downstream of one, write other values since; the others
# must still write the same bytes.
SAMPLING_STAGES = {"rollout", "judge", "write_tests", "adapt", "evaluate"}


def _sampled(rows: list[dict[str, Any]]) -> set[str]:
    """``iteration/stage`` of the stages that sample or read, directly or not, what one sampled."""
    out: set[str] = set()
    grew = True
    while grew:
        grew = False
        for row in rows:
            name = f"{row['iteration']}/{row['stage']}"
            if name not in out and (row["stage"] in SAMPLING_STAGES or out & set(row["inputs"].values())):
                out.add(name)
                grew = True
    return out


SAMPLED = _sampled(json.loads((FIXTURE / "manifests.json").read_text()))

# The warm start packs its rows since the fixture was made (training.sft_max_tokens_per_micro_batch,
# docs/changelog.md): the same loss up to float rounding, so the bootstrap stage's metrics are compared to
# a relative 1e-4 (measured: 8e-6 on the reward model's last-epoch loss, 6e-7 on the policy's; the first
# epoch's losses equal) and every other value exactly. (The padded layout, the key set to null, gave the
# old warm-start checkpoint bit for bit on the tiny model: logits at the response positions only are the
# same logits.)
PACKED = {"0/bootstrap"}


def test_the_run_writes_what_the_old_code_wrote(base_run: tuple[Path, str]) -> None:
    root, run_id = base_run
    now = _manifests(ArtifactStore(str(root)), run_id)
    before = json.loads((FIXTURE / "manifests.json").read_text())
    assert _structure(now) == _structure(before)
    assert {f"{r['iteration']}/{r['stage']}" for r in before} - {"0/seed_tasks", "0/bootstrap"} == SAMPLED
    if SAME_KERNELS:  # same files byte for byte, same metrics, where no sampled row reaches

        def unsampled(rows: list[dict[str, Any]], *, packed: bool) -> list[dict[str, Any]]:
            names = [(r, f"{r['iteration']}/{r['stage']}") for r in rows]
            return [r for r, name in names if name not in SAMPLED and (name in PACKED) == packed]

        assert _values(unsampled(now, packed=False)) == _values(unsampled(before, packed=False))
        for row_now, row_before in zip(
            _values(unsampled(now, packed=True)), _values(unsampled(before, packed=True)), strict=True
        ):
            assert {**row_now, "metrics": None} == {**row_before, "metrics": None}
            assert row_now["metrics"] == pytest.approx(row_before["metrics"], rel=1e-4)


def _status_rows(text: str) -> list[tuple[str, ...]]:
    """(iter, stage, state, attempt, metric names...) per stage of `rla status --full` (seconds and timings dropped)."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0]:
            rows.append([*cells[:4]])
        metric = cells[-1].split("=")[0]
        if _names_follow_samples(rows[-1][0], rows[-1][1]):
            continue
        if metric and not metric.startswith("timing_s/") and metric not in NEW_METRICS:
            stage = f"{rows[-1][0]}/{rows[-1][1]}"
            values = SAME_KERNELS and not _wall_clock(metric) and stage not in SAMPLED | PACKED
            rows[-1].append(cells[-1] if values else metric)
    return [tuple(r) for r in rows]


def _packed_values(text: str) -> dict[str, float]:
    """The values `rla status --full` shows for the PACKED stages' metrics (compared to float rounding)."""
    out: dict[str, float] = {}
    stage = ""
    for line in text.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        stage = f"{cells[0]}/{cells[1]}" if cells[0] else stage
        metric, _, value = cells[-1].partition("=")
        if stage in PACKED and value and metric not in NEW_METRICS and not _wall_clock(metric):
            out[metric] = float(value)
    return out


def test_status_full_shows_what_it_showed(flow_env: FlowEnv, base_run: tuple[Path, str]) -> None:
    root, run_id = base_run
    now = flow_env.rla("status", run_id, "--root", str(root), "--full").stdout
    before = (FIXTURE / "status_full.txt").read_text()
    assert _status_rows(now) == _status_rows(before)
    assert len(_status_rows(now)) == 17  # 3 set-up stages + 2 iterations of 7
    if SAME_KERNELS:
        assert _packed_values(now) == pytest.approx(_packed_values(before), rel=1e-4)
        assert len(_packed_values(before)) == 14  # the warm start's 7 metrics of each model


def _normalise(text: str, run_id: str, root: str) -> str:
    return re.sub(r"\s+", " ", text.replace(root, "<root>").replace(run_id, "<run>"))


def test_fast_resume_of_the_finished_run_answers_as_before(
    flow_env: FlowEnv, base_run: tuple[Path, str]
) -> None:
    root, run_id = base_run
    now = flow_env.rla("resume", run_id, "--root", str(root)).stdout
    before = (FIXTURE / "resume.txt").read_text()
    assert _normalise(now, run_id, str(Path(root).resolve())) == _normalise(
        before, "fixture", "/tmp/fixture/runs"
    )
    assert now.startswith("nothing to do")


@pytest.mark.parametrize("case", sorted(json.loads((FIXTURE / "from_stage.json").read_text())))
def test_from_stage_marks_what_it_marked(base_run: tuple[Path, str], tmp_path: Path, case: str) -> None:
    root, run_id = base_run
    expected = json.loads((FIXTURE / "from_stage.json").read_text())[case]
    copy = tmp_path / "runs"
    shutil.copytree(root / run_id, copy / run_id)
    store = ArtifactStore(str(copy))
    iteration, stage = case.split("/")
    try:
        got: dict[str, Any] = {
            "marked": invalidate_from(
                store, run_id, cfg=load_run_config(store, run_id), iteration=int(iteration), stage=stage
            )
        }
    except RlaError as exc:
        got = {"error": f"{type(exc).__name__}: {exc}"}
    assert got == expected
