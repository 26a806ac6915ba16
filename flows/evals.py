"""`rla eval`: a checkpoint of a run on held-out tasks, seeded like the run's own evaluate stage.

By default the episodes are played with the run's evaluation seed (:func:`tasks.evaluate.eval_seed`, the
same at every iteration), so ``rla eval RUN --checkpoint N`` reproduces the run's iteration-N evaluation;
``--seed`` plays other episodes and says so. Results can be saved under
the run's ``evals/`` area (never inside an iteration's stage directories), with the store's commit
protocol: the run lock is held, ``eval.parquet`` is written first and ``_manifest.json`` last, so an
interrupted save leaves nothing that reads as saved::

    <run>/evals/eval-0001/eval.parquet
    <run>/evals/eval-0001/_manifest.json   checkpoint, seed, tasks, rows, sha256, metrics — written last
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from rla_core.config import ProblemFormat, Setting
from rla_core.errors import ArtifactError, ConfigError
from rla_core.stage_inputs import StageName
from rla_core.store import ArtifactStore
from rla_core.store.artifacts import PARQUET_COMPRESSION, PARQUET_COMPRESSION_LEVEL, sha256_bytes
from rla_core.store.manifest import utc_now
from rla_core.store.uri import join

EVALS_DIR = "evals"
EVAL_MANIFEST = "_manifest.json"


@dataclass(frozen=True)
class EvalResult:
    """What one `rla eval` played and found."""

    iteration: int
    stage: str
    seed: int
    stage_seed: bool  # the run's evaluation seed (that of its evaluate stages)
    frame: pl.DataFrame
    metrics: dict[str, float]
    by_task: pl.DataFrame
    saved_to: str | None = None


def per_task(evals: pl.DataFrame) -> pl.DataFrame:
    """task_id, episodes, success_rate, mean_steps — the evaluate metrics per held-out task."""
    from rla_core.algo.metrics import eval_metrics

    rows = []
    for (task_id,), group in evals.group_by(["task_id"], maintain_order=True):
        metrics = eval_metrics(group)
        rows.append({
            "task_id": str(task_id), "episodes": group.height,
            "success_rate": metrics.get("policy/eval_success_rate"),
            "mean_steps": metrics.get("policy/eval_mean_steps"),
        })  # fmt: skip
    schema = {
        "task_id": pl.String,
        "episodes": pl.Int64,
        "success_rate": pl.Float64,
        "mean_steps": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema).sort("task_id")


@contextlib.contextmanager
def policy_checkpoint(
    store: ArtifactStore, run_id: str, iteration: int, stage: str, role: str = "policy"
) -> Iterator[Path]:
    """The ``role`` checkpoint of a stage as a local directory: in place on a local root, else a temp copy."""
    manifest = store.manifest(run_id, iteration, stage)
    if manifest is None:
        raise ArtifactError(
            f"stage '{stage}' of iteration {iteration} in run '{run_id}' has no committed attempt"
        )
    if not store.remote:
        yield Path(store.attempt_location(run_id, iteration, stage, manifest.attempt)) / role
        return
    with tempfile.TemporaryDirectory(prefix="rla-eval-") as tmp:
        yield store.get_dir(run_id, iteration, stage, role, Path(tmp) / role)


def evaluate_run(
    store: ArtifactStore,
    run_id: str,
    *,
    checkpoint: int | None,
    tasks_file: Path | None,
    seed: int | None,
    tasks_format: ProblemFormat | None = None,
) -> EvalResult:
    """Play the held-out tasks with the policy of iteration ``checkpoint`` (default: latest).

    Coding runs also have that iteration's reward model write unit tests for the held-out problems (code
    accuracy, unit-test accuracy and detection, as the evaluate stage reports them). ``tasks_format``: the
    layout of ``tasks_file`` (default: the run's ``coding.eval_format``).
    """
    import torch

    from flows.runs import latest_checkpoint_stage, load_run_config
    from rla_core.algo.metrics import eval_metrics, eval_rows
    from rla_core.models.generator import GeneratorSpec
    from rla_core.stage_inputs import EvaluateInputs, Role
    from tasks.evaluate import eval_seed, evaluate_unit_tests, play_checkpoint

    cfg = load_run_config(store, run_id)
    inputs = EvaluateInputs.from_config(cfg)
    if tasks_format is not None:
        if inputs.coding is None:
            raise ConfigError(
                f"--format names a coding problem layout; run '{run_id}' is a {cfg.setting} run"
            )
        inputs = inputs.model_copy(
            update={"coding": inputs.coding.model_copy(update={"eval_format": tasks_format})}
        )
    doing = f"rla eval {run_id}" + (f" --checkpoint {checkpoint}" if checkpoint is not None else "")
    it, stage = latest_checkpoint_stage(store, run_id, Role.POLICY, checkpoint, doing=doing)
    # Coding: the same iteration's reward model writes the unit tests (found before playing, so a pruned
    # one fails at once).
    reward = (
        latest_checkpoint_stage(store, run_id, Role.REWARD, it, doing=doing)
        if cfg.setting is Setting.CODING
        else None
    )
    stage_seed = eval_seed(cfg.seed)
    used = stage_seed if seed is None else seed
    torch.set_num_threads(inputs.threads)  # as the stages do: thread count can change float sums
    with policy_checkpoint(store, run_id, it, stage) as policy_dir:
        played = play_checkpoint(inputs, policy_dir, tasks_file=tasks_file, iteration=it, seed=used)
    frame = eval_rows(played.frames["rollouts"], iteration=it)
    metrics = eval_metrics(frame)
    if reward is not None:
        rm_it, rm_stage = reward
        with policy_checkpoint(store, run_id, rm_it, rm_stage, Role.REWARD) as reward_dir:
            spec = GeneratorSpec(reward_dir, inputs.models, threads=inputs.threads, role=Role.REWARD)
            metrics |= evaluate_unit_tests(inputs, played, spec, iteration=it, seed=used)[1]
    return EvalResult(it, stage, used, used == stage_seed, frame, metrics, per_task(frame))


def coding_eval_line(metrics: dict[str, float]) -> str:
    """'code acc 0.500, UT acc 0.500, detect 0.333' from an evaluation's metrics ('' when not coding).

    All three are always shown; one without a denominator says why it has no value (a missing signal is
    not a 0): UT accuracy needs a correct program, detection a problem with a correct and a wrong one.
    """
    from rla_core.algo.metrics import CODING_EVAL_LABELS, EVAL_CODE_ACC, EVAL_DETECT

    if EVAL_CODE_ACC not in metrics:
        return ""
    acc = metrics[EVAL_CODE_ACC]

    def missing(key: str) -> str:
        if acc == 0:
            return "no correct program"
        if key != EVAL_DETECT:
            return "no unit test on a problem with a correct program"
        return (
            "no wrong program" if acc == 1 else "no unit test on a problem with a correct and a wrong program"
        )

    parts = [
        f"{label} {metrics[key]:.3f}" if key in metrics else f"{label} n/a ({missing(key)})"
        for key, label in CODING_EVAL_LABELS.items()
    ]
    return ", ".join(parts)


def own_evaluation(store: ArtifactStore, run_id: str, iteration: int) -> float | None:
    """The eval success rate the run's own evaluate stage recorded for ``iteration``, if it ran."""
    manifest = store.manifest(run_id, iteration, StageName.EVALUATE)
    if manifest is None:
        return None
    value = manifest.extra.get("metrics", {}).get("policy/eval_success_rate")
    return float(value) if value is not None else None


def save_eval(store: ArtifactStore, run_id: str, result: EvalResult, *, tasks_file: Path | None) -> str:
    """Write the result under ``<run>/evals/eval-NNNN/`` (manifest last, under the run lock); its location."""
    buf = io.BytesIO()
    result.frame.write_parquet(
        buf, compression=PARQUET_COMPRESSION, compression_level=PARQUET_COMPRESSION_LEVEL
    )
    data = buf.getvalue()
    with store.lock(run_id):
        taken = [
            int(n.split("-")[1]) for n in store.list_run_files(run_id, EVALS_DIR) if n.startswith("eval-")
        ]
        name = f"eval-{max(taken, default=0) + 1:04d}"
        store.write_run_file(run_id, f"{EVALS_DIR}/{name}/eval.parquet", data)
        record = {
            "run_id": run_id, "checkpoint_iteration": result.iteration, "checkpoint_stage": result.stage,
            "seed": result.seed, "stage_seed": result.stage_seed,
            "tasks_file": str(tasks_file.resolve()) if tasks_file else None,
            "rows": result.frame.height, "bytes": len(data), "sha256": sha256_bytes(data),
            "metrics": result.metrics, "created_at": utc_now(),
        }  # fmt: skip
        store.write_run_file(
            run_id, f"{EVALS_DIR}/{name}/{EVAL_MANIFEST}", json.dumps(record, indent=1).encode()
        )
    return join(store.run_location(run_id), EVALS_DIR, name)


def saved_evals(store: ArtifactStore, run_id: str) -> dict[str, dict[str, Any]]:
    """Committed saved evaluations (name → manifest record); directories without a manifest are skipped."""
    out = {}
    for name in store.list_run_files(run_id, EVALS_DIR):
        data = store.read_run_file(run_id, f"{EVALS_DIR}/{name}/{EVAL_MANIFEST}")
        if data is not None:
            out[name] = json.loads(data)
    return out


def read_saved_eval(store: ArtifactStore, run_id: str, name: str) -> pl.DataFrame:
    """The 'eval' frame of a saved evaluation, checked against its manifest's hash and the schema."""
    from rla_core.schemas import validate

    record = saved_evals(store, run_id).get(name)
    data = store.read_run_file(run_id, f"{EVALS_DIR}/{name}/eval.parquet")
    if record is None or data is None:
        raise ArtifactError(
            f"run '{run_id}' has no saved evaluation '{name}'; saved: {sorted(saved_evals(store, run_id))}"
        )
    if sha256_bytes(data) != record["sha256"]:
        raise ArtifactError(
            f"saved evaluation '{name}' of run '{run_id}' is corrupt (hash differs from its manifest)"
        )
    return validate("eval", pl.read_parquet(io.BytesIO(data)), where=f"{run_id}/{EVALS_DIR}/{name}")
