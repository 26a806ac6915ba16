"""The stage machinery every task module uses (design §3): content keys, attempts, caching, logging.

A stage is declared with :func:`stage`::

    @stage("judge", config=("judge", "models"))
    def judge(ctx: StageContext, *, rollouts: StageRef, reward_model: StageRef) -> dict[str, float]:
        ...  # read inputs through ctx, write outputs through ctx.writer, return metrics

Calling ``judge(run, iteration, rollouts=..., reward_model=...)`` computes the stage's content key —
stage name, code version (:mod:`tasks.code_closure`: every project file the task module imports,
transitively, or runs/reads as a declared resource), its config slice, its inputs' content keys and
its seed. The manifests are the source of truth: if the attempt in use has the same key and intact
outputs, the stage is skipped; otherwise the body runs in a fresh attempt and its manifest is
committed last. Metrics go to MLflow with ``step=iteration``.

Prefect's result cache is machine-wide (every run on the machine shares it), so its cache key is the
content key *plus the run's identity* — resolved artifact root and run id (:func:`prefect_cache_key`)
— and a result it hands back is used only if it names this run's attempt in use (design §3): two runs
with the same config and seed never see each other's stage references.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
from prefect import get_run_logger, task
from prefect.context import TaskRunContext

from rla_core.config import RunConfig, TrainConfig, hash_jsonable
from rla_core.store import ArtifactStore, StageWriter, publish_dir
from tasks.code_closure import code_version
from tasks.progress import stage_progress
from tasks.tracking import Tracker, publish_iteration_summary

if TYPE_CHECKING:
    from rla_core.models.generator import Generator

STAGE_SECONDS_KEY = "stage_compute_s"


@dataclass(frozen=True)
class RunContext:
    """What every stage of one training run shares. Small and picklable (it travels to Prefect tasks)."""

    run_id: str
    config: RunConfig
    storage_options: dict[str, Any] = field(default_factory=dict)
    tracker: Tracker | None = None
    cache_dir: str = ".cache"

    @functools.cached_property
    def store(self) -> ArtifactStore:
        return ArtifactStore(self.config.artifact_root, storage_options=self.storage_options)


@dataclass(frozen=True)
class StageRef:
    """A committed stage attempt: what downstream stages take as input (by content key)."""

    run_id: str
    iteration: int
    stage: str
    attempt: int
    content_key: str
    metrics: dict[str, float]


@dataclass
class StageContext:
    """Handed to a stage body: its identity, seed, config, a writer for its outputs and readers for inputs."""

    run: RunContext
    iteration: int
    stage: str
    seed: int
    writer: StageWriter
    _scratch: list[Path] = field(default_factory=list)

    @property
    def config(self) -> RunConfig:
        return self.run.config

    @property
    def log(self) -> Any:
        return get_run_logger()

    def read(self, ref: StageRef, name: str) -> pl.DataFrame:
        """Read frame ``name`` of an input stage (schema-validated, hash-checked)."""
        return self.run.store.read_frame(ref.run_id, ref.iteration, ref.stage, name)

    def has_frame(self, ref: StageRef, name: str) -> bool:
        manifest = self.run.store.manifest(ref.run_id, ref.iteration, ref.stage)
        return manifest is not None and name in manifest.frames

    def checkpoint(self, ref: StageRef, name: str) -> Path:
        """A local directory holding checkpoint ``name`` of an input stage (materialised once if remote)."""
        return local_checkpoint(self.run, ref, name)

    @contextlib.contextmanager
    def generator(self, ref: StageRef, name: str) -> Iterator[Generator]:
        """A generator over checkpoint ``name`` (the role) of an input stage, closed when the block ends.

        With the vLLM backend a server is started on exactly that checkpoint, served under the producing
        stage's content key and the role, and stopped when the block ends (also on errors).
        """
        from rla_core.models.generator import open_generator
        from rla_core.models.serving import served_name

        _set_threads(self.config.threads)
        gen = open_generator(
            self.checkpoint(ref, name), models=self.config.models, role=name,
            name=served_name(ref.content_key, name),
        )  # fmt: skip
        try:
            yield gen
        finally:
            gen.close()

    def task_specs(self, task_ids: list[str], tasks: StageRef) -> dict[str, dict[str, Any]]:
        """Specs of ``task_ids`` from the task registry written by stage ``tasks`` (in the given order)."""
        from rla_core.algo.registry import TaskRegistry

        registry = TaskRegistry.from_events(self.read(tasks, "tasks"))
        return {task_id: registry.task(task_id)["spec"] for task_id in task_ids}

    def tag(self, key: str, value: str) -> None:
        """An MLflow tag on the run (e.g. checkpoint ids); no-op without a tracker."""
        if self.run.tracker is not None:
            self.run.tracker.set_tags({key: value})

    def scratch(self) -> Path:
        """A fresh local temporary directory, removed when the stage ends."""
        path = Path(tempfile.mkdtemp(prefix=f"rla-{self.stage}-"))
        self._scratch.append(path)
        return path

    def cleanup(self) -> None:
        for path in self._scratch:
            shutil.rmtree(path, ignore_errors=True)


def local_checkpoint(run: RunContext, ref: StageRef, name: str) -> Path:
    """Local path of a checkpoint directory written by a stage with ``writer.put_dir(dir, name)``."""
    store = run.store
    if not store.remote:
        return Path(store.attempt_location(ref.run_id, ref.iteration, ref.stage, ref.attempt)) / name
    target = Path(run.cache_dir) / "checkpoints" / ref.content_key / name
    if target.is_dir():
        return target
    # Content-keyed: a copy another process published meanwhile is the same checkpoint, so it is kept.
    publish_dir(target, lambda tmp: store.get_dir(ref.run_id, ref.iteration, ref.stage, name, tmp))
    return target


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def file_digest(path: str | Path) -> str:
    """sha256 of a data file's bytes (part of the content key of stages that read it)."""
    from rla_core.settings import resolve_data_path

    p = resolve_data_path(path)
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else f"missing:{path}"


def derive_seed(master: int, iteration: int, stage: str) -> int:
    """A stage's seed: a pure function of the run seed, the iteration and the stage name."""
    digest = hashlib.sha256(f"{master}:{iteration}:{stage}".encode()).hexdigest()
    return int(digest[:8], 16)


def signal_frames(
    ctx: StageContext,
    *,
    rollouts: StageRef,
    judgments: StageRef | None,
    unit_tests: StageRef | None,
    executions: StageRef | None,
) -> dict[str, pl.DataFrame]:
    """The frames the label and adapt stages read: rollouts plus the setting's reward-model signals.

    Coding executions are the GT runs written by the rollout stage plus the generated-test runs.
    """
    frames = {"rollouts": ctx.read(rollouts, "rollouts")}
    if judgments is not None:
        frames["judgments"] = ctx.read(judgments, "judgments")
    if unit_tests is not None:
        frames["unit_tests"] = ctx.read(unit_tests, "unit_tests")
    if executions is not None:
        frames["executions"] = pl.concat(
            [ctx.read(rollouts, "executions"), ctx.read(executions, "executions")]
        )
    return frames


def train_checkpoint(
    ctx: StageContext, *, rows: pl.DataFrame, base: StageRef, name: str, cfg: TrainConfig, prefix: str
) -> dict[str, float]:
    """One RL update of checkpoint ``name`` of stage ``base``; the result is written as checkpoint ``name``."""
    from rla_core.models.trainer import Placement, rl_update

    _set_threads(ctx.config.threads)
    out = ctx.scratch() / name
    # training.device/dtype/processes/strategy: in-process or `accelerate launch` workers (issue 12).
    placement = Placement.from_config(ctx.config.training, threads=ctx.config.threads)
    stats = rl_update(
        ctx.checkpoint(base, name), rows, cfg=cfg, out_dir=out, seed=ctx.seed, lora=ctx.config.models.lora,
        placement=placement,
    )  # fmt: skip
    ctx.writer.put_dir(out, name)
    ctx.tag(f"checkpoint.{name}", f"iter-{ctx.iteration:04d}/{ctx.stage}")
    return {f"{prefix}/{k}": float(v) for k, v in stats.items()}


def run_identity(run: RunContext) -> dict[str, Any]:
    """Where a run lives: its resolved artifact root (absolute local path, or URI plus endpoint) and id."""
    store = run.store
    root = store.root if store.remote else str(Path(store.root).expanduser().resolve())
    client = run.storage_options.get("client_kwargs") or {}
    endpoint = run.storage_options.get("endpoint_url") or client.get("endpoint_url")
    return {"root": root, "endpoint": endpoint, "run_id": run.run_id}


def prefect_cache_key(run: RunContext, content_key: str) -> str:
    """Prefect's cache key of a stage: the content key plus the run's identity (design §3)."""
    return hash_jsonable({"content_key": content_key, **run_identity(run)})


def _cache_key(_ctx: TaskRunContext, parameters: dict[str, Any]) -> str:
    return prefect_cache_key(parameters["run"], str(parameters["key"]))


StageBody = Callable[..., dict[str, float]]


class Stage:
    """A declared stage: call it with (run, iteration, **inputs) to get a :class:`StageRef`."""

    def __init__(
        self,
        name: str,
        body: StageBody,
        *,
        config: tuple[str, ...],
        key_extra: Callable[[RunContext], Any] | None,
        retries: int,
    ) -> None:
        self.name = name
        self.body = body
        self.config_sections = config
        self.key_extra = key_extra

        def run_stage(run: RunContext, iteration: int, key: str, inputs: dict[str, StageRef]) -> StageRef:
            return self._execute(run, iteration, key, inputs)

        run_stage.__name__ = run_stage.__qualname__ = f"stage_{name}"
        self.task = task(
            name=name,
            cache_key_fn=_cache_key,
            persist_result=True,
            retries=retries,
            task_run_name=f"{name}-iter{{iteration}}",
        )(run_stage)

    def key(self, run: RunContext, iteration: int, inputs: dict[str, StageRef]) -> str:
        """The stage's content key (design §3)."""
        return hash_jsonable(
            {
                "stage": self.name,
                "iteration": iteration,
                "code": code_version(self.body.__module__),
                "config": run.config.section_hash(*self.config_sections),
                "seed": derive_seed(run.config.seed, iteration, self.name),
                "inputs": {k: v.content_key for k, v in sorted(inputs.items())},
                "extra": self.key_extra(run) if self.key_extra else None,
            }
        )

    def __call__(self, run: RunContext, iteration: int, **inputs: StageRef) -> StageRef:
        key = self.key(run, iteration, inputs)
        done = run.store.is_done(run.run_id, iteration, self.name, key)
        ref: StageRef = self.task.with_options(refresh_cache=not done)(run, iteration, key, inputs)
        if not self._is_attempt_in_use(run, iteration, ref):
            # A cached result that is not this run's attempt in use (e.g. a Prefect result stored before
            # the attempt was re-run): the manifest decides, so run the task for real (it answers from
            # the manifest when the stage is done, without running the body).
            ref = self.task.with_options(refresh_cache=True)(run, iteration, key, inputs)
        return ref

    def _is_attempt_in_use(self, run: RunContext, iteration: int, ref: StageRef) -> bool:
        if (ref.run_id, ref.iteration, ref.stage) != (run.run_id, iteration, self.name):
            return False
        manifest = run.store.manifest(run.run_id, iteration, self.name)
        return manifest is not None and (manifest.attempt, manifest.content_key) == (
            ref.attempt,
            ref.content_key,
        )

    def _execute(self, run: RunContext, iteration: int, key: str, inputs: dict[str, StageRef]) -> StageRef:
        store = run.store
        manifest = store.manifest(run.run_id, iteration, self.name)
        if manifest is not None and manifest.stage_key == key and not store.problems(manifest):
            # Done by an earlier process whose Prefect cache we cannot see: the manifest decides.
            return StageRef(
                run.run_id, iteration, self.name, manifest.attempt, manifest.content_key,
                dict(manifest.extra.get("metrics", {})),
            )  # fmt: skip
        logger = get_run_logger()
        seed = derive_seed(run.config.seed, iteration, self.name)
        with store.begin(run.run_id, iteration, self.name) as writer:
            ctx = StageContext(run=run, iteration=iteration, stage=self.name, seed=seed, writer=writer)
            logger.info("%s iteration %d started (attempt %d)", self.name, iteration, writer.attempt)
            start = time.perf_counter()
            try:
                with stage_progress(run, iteration, self.name, writer.attempt, log=logger.info):
                    metrics = dict(self.body(ctx, **inputs))
            finally:
                ctx.cleanup()
            elapsed = time.perf_counter() - start
            metrics[f"timing_s/{self.name}"] = elapsed
            manifest = writer.commit(
                key,
                inputs={k: v.content_key for k, v in inputs.items()},
                extra={"metrics": metrics, "seed": seed, STAGE_SECONDS_KEY: elapsed},
            )
        if run.tracker is not None:
            run.tracker.log_metrics(metrics, step=iteration)
        logger.info(
            "%s iteration %d done in %.1fs (attempt %d): %s",
            self.name, iteration, elapsed, manifest.attempt,
            ", ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()) if not k.startswith("timing_s/")),
        )  # fmt: skip
        publish_iteration_summary(store, run.run_id, iteration)
        return StageRef(run.run_id, iteration, self.name, manifest.attempt, manifest.content_key, metrics)


def stage(
    name: str,
    *,
    config: tuple[str, ...],
    key_extra: Callable[[RunContext], Any] | None = None,
    retries: int = 0,
) -> Callable[[StageBody], Stage]:
    """Declare a stage body (see the module docstring)."""

    def wrap(body: StageBody) -> Stage:
        return Stage(name, body, config=config, key_extra=key_extra, retries=retries)

    return wrap
