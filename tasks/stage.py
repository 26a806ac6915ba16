"""The stage machinery every task module uses (docs/architecture.md#the-design-contract): typed inputs, content keys, attempts, caching.

A stage is declared with :func:`stage`, naming the slice of the configuration it reads
(:mod:`rla_core.stage_inputs`)::

    @stage(StageName.JUDGE, inputs=JudgeInputs)
    def judge(ctx: StageContext[JudgeInputs], *, rollouts: StageRef, reward_model: StageRef) -> dict[str, float]:
        ...  # ctx.inputs is the slice; read inputs through ctx, write outputs through ctx.writer

Calling ``judge(run, iteration, rollouts=..., reward_model=...)`` computes the stage's content key —
stage name, code version (:mod:`tasks.code_closure`: every project file the task module imports,
transitively, or runs/reads as a declared resource), the canonical JSON of its slice (speed-only keys
left out), its inputs' content keys, its seed and, for a stage declared with ``reads_file``, the sha256 of
that data file's bytes (recorded in the manifest as :data:`READ_FILE_KEY`, so a later process can tell
that the file changed since: ``flows.preflight``). The body sees the slice, never the whole config, so a
field that changes its results always changes its key. The manifests are the source of truth: if the
attempt in use has the same key and intact outputs, the stage is skipped; otherwise the body runs in a
fresh attempt and its manifest is committed last. Metrics go to MLflow with ``step=iteration``.

Stages register themselves (:data:`STAGES`). Under :func:`planning` a stage call runs nothing: it records
what it would run (:class:`PlannedStage`) and hands back the attempt in use when that one is current,
so calling the flow's own body in that mode gives its plan (``flows.plan``): the one declaration of the
pipeline is the flow.

Prefect's result cache is machine-wide (every run on the machine shares it), so its cache key is the
content key *plus the run's identity* — resolved artifact root and run id (:func:`prefect_cache_key`)
— and a result it hands back is used only if it names this run's attempt in use (docs/architecture.md#the-design-contract): two runs
with the same config and seed never see each other's stage references.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import polars as pl

from rla_core.config import ClusterConfig, RunConfig, TrainConfig, hash_jsonable
from rla_core.errors import ArtifactError
from rla_core.settings.base import SIDE_FILES, file_digest
from rla_core.stage_inputs import GenerationModels, Role, StageInputs, StageName
from rla_core.store import ArtifactStore, StageWriter
from rla_core.store.atomic import publish_dir
from tasks.code_closure import code_version
from tasks.context import RunContext
from tasks.progress import stage_progress
from tasks.tracking import publish_iteration_summary

if TYPE_CHECKING:
    from prefect.context import TaskRunContext

    from rla_core.models.generator import GeneratorSpec
    from rla_core.models.launch import PlacementFields

STAGE_SECONDS_KEY = "stage_compute_s"
READ_FILE_KEY = "read_file"  # manifest extra of a stage declared with reads_file: {"path", "sha256"}
InputsT = TypeVar("InputsT", bound=StageInputs)


@dataclass(frozen=True)
class StageRef:
    """A committed stage attempt: what downstream stages take as input (by content key).

    Under :func:`planning`, a stage that would still run hands back a ref with ``attempt`` 0 and a
    ``planned:`` content key, so everything downstream of it is planned to run too.
    """

    run_id: str
    iteration: int
    stage: str
    attempt: int
    content_key: str
    metrics: dict[str, float]

    @property
    def planned(self) -> bool:
        return self.content_key.startswith(PLANNED_PREFIX)


PLANNED_PREFIX = "planned:"


@dataclass
class StageContext(Generic[InputsT]):
    """Handed to a stage body: its identity, seed, typed config slice, a writer and readers for inputs.

    There is deliberately no access to the whole run config: what the body reads is ``inputs``.
    """

    _run: RunContext
    iteration: int
    stage: StageName
    seed: int  # this stage's seed (stage_seed of the run seed, iteration and name)
    run_seed: int  # the run's master seed (evaluation derives its one fixed seed from it)
    inputs: InputsT
    writer: StageWriter
    _scratch: list[Path] = field(default_factory=list)

    @property
    def log(self) -> Any:
        from prefect import get_run_logger

        return get_run_logger()

    def read(self, ref: StageRef, name: str) -> pl.DataFrame:
        """Read frame ``name`` of an input stage (schema-validated, hash-checked)."""
        return self._run.store.read_frame(ref.run_id, ref.iteration, ref.stage, name)

    def has_frame(self, ref: StageRef, name: str) -> bool:
        manifest = self._run.store.manifest(ref.run_id, ref.iteration, ref.stage)
        return manifest is not None and name in manifest.frames

    def checkpoint(self, ref: StageRef, role: Role) -> Path:
        """A local directory holding checkpoint ``role`` of an input stage (materialised once if remote)."""
        return local_checkpoint(self._run, ref, role)

    def side_files(self, ref: StageRef) -> Path:
        """A local directory that an input stage's side-file references resolve against (e.g.
        ``rollouts.observation_ref``: ``files/screenshots/…``); materialised once if the store is remote."""
        return local_checkpoint(self._run, ref, SIDE_FILES).parent

    def generator_spec(
        self, ref: StageRef, role: Role, *, models: GenerationModels, threads: int
    ) -> GeneratorSpec:
        """How to open checkpoint ``role`` of an input stage, here or on a Ray shard: served under the
        producing stage's content key and the role (vLLM), with the run's torch threads."""
        from rla_core.models.generator import GeneratorSpec
        from rla_core.models.serving import served_name

        return GeneratorSpec(
            checkpoint=self.checkpoint(ref, role), models=models, role=role,
            name=served_name(ref.content_key, role), threads=threads,
        )  # fmt: skip

    def task_specs(self, task_ids: list[str], tasks: StageRef) -> dict[str, dict[str, Any]]:
        """Specs of ``task_ids`` from the task registry written by stage ``tasks`` (in the given order)."""
        from rla_core.algo.registry import TaskRegistry

        registry = TaskRegistry.from_events(self.read(tasks, "tasks"))
        return {task_id: registry.task(task_id)["spec"] for task_id in task_ids}

    def tag(self, key: str, value: str) -> None:
        """An MLflow tag on the run (e.g. checkpoint ids); no-op without a tracker."""
        if self._run.tracker is not None:
            self._run.tracker.set_tags({key: value})

    def scratch(self, *, shared: bool = False) -> Path:
        """A fresh temporary directory, removed when the stage ends: local, or (``shared``) under the run's
        cache directory, which every node of a Ray cluster sees at the driver's path (docs/cluster.md)."""
        parent = None
        if shared:
            parent = Path(self._run.cache_dir).resolve() / "scratch"
            parent.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=f"rla-{self.stage}-", dir=parent))
        self._scratch.append(path)
        return path

    def cleanup(self) -> None:
        for path in self._scratch:
            shutil.rmtree(path, ignore_errors=True)


def local_checkpoint(run: RunContext, ref: StageRef, name: str) -> Path:
    """Local path of a checkpoint directory written by a stage with ``writer.put_dir(dir, name)``."""
    store = run.store
    manifest = store.manifest(ref.run_id, ref.iteration, ref.stage)
    if manifest is not None:
        store.require_kept(manifest, name)  # pruned by retention: say so, not "file not found" later
    if not store.remote:
        return Path(store.attempt_location(ref.run_id, ref.iteration, ref.stage, ref.attempt)) / name
    target = Path(run.cache_dir) / "checkpoints" / ref.content_key / name
    if target.is_dir():
        return target
    # Content-keyed: a copy another process published meanwhile is the same checkpoint, so it is kept.
    publish_dir(target, lambda tmp: store.get_dir(ref.run_id, ref.iteration, ref.stage, name, tmp))
    return target


def stage_seed(master: int, iteration: int, stage: str) -> int:
    """A stage's seed: a pure function of the run seed, the iteration and the stage name."""
    digest = hashlib.sha256(f"{master}:{iteration}:{stage}".encode()).hexdigest()
    return int(digest[:8], 16)


def signal_frames(
    ctx: StageContext,
    *,
    rollouts: StageRef,
    judgments: StageRef | None = None,
    unit_tests: StageRef | None = None,
    executions: StageRef | None = None,
) -> dict[str, pl.DataFrame]:
    """The frames the label and adapt stages read: rollouts plus the setting's reward-model signals.

    The one declaration of those stages' signal inputs: they take them as ``**signals`` and pass them on
    here (the flow hands both the same ones), so a name this signature does not know fails here.
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
    ctx: StageContext[Any],
    *,
    rows: pl.DataFrame,
    base: StageRef,
    role: Role,
    cfg: TrainConfig,
    placement: PlacementFields,
    threads: int,
    cluster: ClusterConfig,
    prefix: str,
    screens: StageRef | None = None,
) -> dict[str, float]:
    """One RL update of checkpoint ``role`` of stage ``base``; the result is written as checkpoint ``role``.

    ``placement``: ``training.device/dtype/processes/strategy`` — in-process, `accelerate launch` workers,
    or with ``cluster.backend=ray`` Ray Train workers, whose rank 0 writes the
    checkpoint into a scratch directory every node sees; ``threads`` caps torch's CPU threads.
    ``screens``: the rollout stage whose screenshots the rows' ``images`` reference (vision-language
    rows; the update reads the same pixels generation saw).
    """
    from rla_core.models.generator import set_torch_threads
    from rla_core.models.launch import Placement
    from rla_core.models.update import rl_update

    set_torch_threads(threads)
    rows = resolve_images(ctx, rows, screens)
    where = Placement.from_config(placement, threads=threads, cluster=cluster)
    out = ctx.scratch(shared=where.on_ray) / role
    stats = rl_update(
        ctx.checkpoint(base, role), rows, cfg=cfg, out_dir=out, seed=ctx.seed, lora=ctx.inputs.models.lora,
        placement=where,
    )  # fmt: skip
    ctx.writer.put_dir(out, role)
    ctx.tag(f"checkpoint.{role}", f"iter-{ctx.iteration:04d}/{ctx.stage}")
    return {f"{prefix}/{k}": float(v) for k, v in stats.items()}


def resolve_images(ctx: StageContext[Any], rows: pl.DataFrame, screens: StageRef | None) -> pl.DataFrame:
    """``rows`` with their ``images`` (references into stage ``screens``' side files) as local paths."""
    if "images" not in rows.columns or rows["images"].null_count() == rows.height:
        return rows
    if screens is None:
        raise ArtifactError(
            f"stage {ctx.stage}: its rows carry images but no rollout stage was given to read them from "
            "(the flow passes screens= when models.images is on)"
        )
    root = str(ctx.side_files(screens)) + "/"
    return rows.with_columns(pl.col("images").list.eval(pl.lit(root) + pl.element()))


def run_identity(run: RunContext) -> dict[str, Any]:
    """Where a run lives: its resolved artifact root (absolute local path, or URI plus endpoint) and id."""
    store = run.store
    root = store.root if store.remote else str(Path(store.root).expanduser().resolve())
    client = run.storage_options.get("client_kwargs") or {}
    endpoint = run.storage_options.get("endpoint_url") or client.get("endpoint_url")
    return {"root": root, "endpoint": endpoint, "run_id": run.run_id}


def prefect_cache_key(run: RunContext, content_key: str) -> str:
    """Prefect's cache key of a stage: the content key plus the run's identity (docs/architecture.md#the-design-contract)."""
    return hash_jsonable({"content_key": content_key, **run_identity(run)})


def _cache_key(_ctx: TaskRunContext, parameters: dict[str, Any]) -> str:
    return prefect_cache_key(parameters["run"], str(parameters["key"]))


StageBody = Callable[..., dict[str, float]]
STAGES: dict[StageName, Stage[Any]] = {}  # every declared stage, by name (filled as task modules load)


class Stage(Generic[InputsT]):
    """A declared stage: call it with (run, iteration, **inputs) to get a :class:`StageRef`."""

    def __init__(
        self,
        name: StageName,
        body: StageBody,
        *,
        inputs: type[InputsT],
        reads_file: Callable[[InputsT], str | None] | None,
    ) -> None:
        if name in STAGES and STAGES[name].body.__module__ != body.__module__:
            raise ValueError(
                f"stage {name} is declared twice: {STAGES[name].body.__module__}, {body.__module__}"
            )
        self.name = name
        self.body: StageBody = body
        self.inputs_type = inputs
        self.reads_file = reads_file
        STAGES[name] = self

    @functools.cached_property
    def task(self) -> Any:
        """The Prefect task that runs the stage, made on first use (Prefect is imported only to run)."""
        from prefect import task

        def run_stage(run: RunContext, iteration: int, key: str, inputs: dict[str, StageRef]) -> StageRef:
            return self._execute(run, iteration, key, inputs)

        run_stage.__name__ = run_stage.__qualname__ = f"stage_{self.name}"
        return task(
            name=str(self.name),
            cache_key_fn=_cache_key,
            persist_result=True,
            task_run_name=f"{self.name}-iter{{iteration}}",
        )(run_stage)

    def slice(self, cfg: RunConfig) -> InputsT:
        """The configuration this stage reads (its typed slice of ``cfg``)."""
        return self.inputs_type.from_config(cfg)

    def key(self, run: RunContext, iteration: int, inputs: dict[str, StageRef]) -> str:
        """The stage's content key (docs/architecture.md#the-design-contract)."""
        sliced = self.slice(run.config)
        return hash_jsonable(
            {
                "stage": str(self.name),
                "iteration": iteration,
                "code": code_version(self.body.__module__),
                "config": hash_jsonable(sliced.key_json()),
                "seed": stage_seed(run.config.seed, iteration, self.name),
                "inputs": {k: v.content_key for k, v in sorted(inputs.items())},
                "extra": self.file_digest(sliced),
            }
        )

    def file_digest(self, sliced: InputsT) -> str | None:
        """sha256 of the data file the stage reads (``reads_file``; part of its key), or None."""
        path = None if self.reads_file is None else self.reads_file(sliced)
        return None if path is None else file_digest(path)

    def _read_file(self, sliced: InputsT) -> dict[str, Any]:
        if self.reads_file is None or self.reads_file(sliced) is None:
            return {}
        return {READ_FILE_KEY: {"path": self.reads_file(sliced), "sha256": self.file_digest(sliced)}}

    def __call__(self, run: RunContext, iteration: int, **inputs: StageRef) -> StageRef:
        planner = _PLANNER.get()
        if planner is not None:
            return planner.visit(self, run, iteration, inputs)
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

    def _done_ref(
        self, run: RunContext, iteration: int, key: str, store: ArtifactStore | None = None
    ) -> StageRef | None:
        """The attempt in use, if it has ``key`` and intact files (the skip rule, docs/architecture.md#the-design-contract)."""
        store = store or run.store
        manifest = store.manifest(run.run_id, iteration, self.name)
        if manifest is None or manifest.stage_key != key or store.problems(manifest):
            return None
        return StageRef(
            run.run_id, iteration, self.name, manifest.attempt, manifest.content_key,
            {k: float(v) for k, v in manifest.extra.get("metrics", {}).items()},
        )  # fmt: skip

    def _execute(self, run: RunContext, iteration: int, key: str, inputs: dict[str, StageRef]) -> StageRef:
        done = self._done_ref(run, iteration, key)
        if done is not None:
            return done  # done by an earlier process whose Prefect cache we cannot see: the manifest decides
        from prefect import get_run_logger

        store = run.store
        logger = get_run_logger()
        seed = stage_seed(run.config.seed, iteration, self.name)
        with store.begin(run.run_id, iteration, self.name) as writer:
            ctx = StageContext(
                _run=run, iteration=iteration, stage=self.name, seed=seed, run_seed=run.config.seed,
                inputs=self.slice(run.config),
                writer=writer,
            )  # fmt: skip
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
                extra={
                    "metrics": metrics,
                    "seed": seed,
                    STAGE_SECONDS_KEY: elapsed,
                    **self._read_file(ctx.inputs),
                },
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


def all_stages() -> dict[StageName, Stage[Any]]:
    """Every declared stage: each :class:`StageName` is declared by the module ``tasks.<name>``."""
    import importlib

    for name in StageName:
        importlib.import_module(f"tasks.{name.value}")
    return dict(STAGES)


def stage(
    name: StageName, *, inputs: type[InputsT], reads_file: Callable[[InputsT], str | None] | None = None
) -> Callable[[StageBody], Stage[InputsT]]:
    """Declare a stage body and the configuration slice it reads (see the module docstring)."""

    def wrap(body: StageBody) -> Stage[InputsT]:
        return Stage(name, body, inputs=inputs, reads_file=reads_file)

    return wrap


# --- plan-only mode: what the flow would run, without running it -----------------------------------


@dataclass(frozen=True)
class PlannedStage:
    """One stage call of the flow under :func:`planning`.

    ``done``: the attempt in use has the key the flow computes today and intact files (a resume skips
    it). ``key`` is None when an input is itself still to run (its outputs, hence this key, are unknown).
    ``sources``: input name → (iteration, stage) that wrote it (two stages can write the same content key:
    an update that left its checkpoint unchanged).
    """

    iteration: int
    stage: StageName
    key: str | None
    done: bool
    inputs: dict[str, str]
    sources: dict[str, tuple[int, str]] = field(default_factory=dict)


class _Planner:
    def __init__(self, *, check: bool, store: ArtifactStore | None) -> None:
        self.check = check
        self.store = store
        self.stages: list[PlannedStage] = []

    def visit(
        self, stage: Stage[Any], run: RunContext, iteration: int, inputs: dict[str, StageRef]
    ) -> StageRef:
        known = self.check and not any(ref.planned for ref in inputs.values())
        key = stage.key(run, iteration, inputs) if known else None
        done = stage._done_ref(run, iteration, key, self.store) if key is not None else None
        keys = {k: v.content_key for k, v in inputs.items()}
        sources = {k: (v.iteration, v.stage) for k, v in inputs.items()}
        self.stages.append(PlannedStage(iteration, stage.name, key, done is not None, keys, sources))
        if done is not None:
            return done
        return StageRef(run.run_id, iteration, stage.name, 0, f"{PLANNED_PREFIX}{iteration}/{stage.name}", {})


_PLANNER: contextvars.ContextVar[_Planner | None] = contextvars.ContextVar("rla_stage_planner", default=None)


@contextlib.contextmanager
def planning(*, check: bool = True, store: ArtifactStore | None = None) -> Iterator[list[PlannedStage]]:
    """Stage calls inside the block record a :class:`PlannedStage` instead of running (see module doc).

    With ``check`` each stage's key is computed and compared with its manifest in ``store`` (default: the
    run's own); without, only the order and wiring are recorded (no store access).
    """
    planner = _Planner(check=check, store=store)
    token = _PLANNER.set(planner)
    try:
        yield planner.stages
    finally:
        _PLANNER.reset(token)


def is_planning() -> bool:
    return _PLANNER.get() is not None


class LazyFlow:
    """A Prefect flow made on first call; under :func:`planning` its body runs directly (no Prefect run).

    Importing Prefect costs ~0.6 s, so `rla status`, which plans the flow to know the stage order, never
    imports it; ``fn`` is the plain body.
    """

    def __init__(self, fn: Callable[..., Any], **options: Any) -> None:
        self.fn = fn
        self.options = options
        functools.update_wrapper(self, fn)

    @functools.cached_property
    def flow(self) -> Any:
        from prefect import flow

        return flow(**self.options)(self.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs) if is_planning() else self.flow(*args, **kwargs)


def prefect_flow(**options: Any) -> Callable[[Callable[..., Any]], LazyFlow]:
    """``@prefect_flow(name=…)``: a :class:`LazyFlow` with Prefect's ``flow`` options."""

    def wrap(fn: Callable[..., Any]) -> LazyFlow:
        return LazyFlow(fn, **options)

    return wrap
