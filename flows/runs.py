"""Run management behind the CLI: start, resume, force a stage, status, export (docs/architecture.md#the-design-contract, docs/operations.md).

Everything here is orchestration glue: which run, which config, which lock, which MLflow run. The
algorithm lives in rla_core and the stages in tasks/.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rla_core.config import RunConfig, build_config, diff_from_defaults, speed_only, upgrade_stored_config
from rla_core.errors import ConfigError, RunNotFoundError
from rla_core.stage_inputs import Role, StageName
from rla_core.store import ArtifactStore

# Keys a run can never change once it has started: they change what the run *is*.
IMMUTABLE_KEYS = ("setting", "seed", "artifact_root")


def resolve_root(root: str) -> str:
    """An artifact root as an absolute path (local) or unchanged (a URI): what an operator can find."""
    from rla_core.store.uri import is_remote

    if is_remote(root):
        return root
    return str(Path(root.removeprefix("file://")).expanduser().resolve())


def resolve_mlflow_uri(uri: str) -> str:
    """A tracking URI an operator can find from anywhere: relative sqlite/file paths made absolute.

    ``sqlite:///mlflow.db`` → ``sqlite:////abs/cwd/mlflow.db``; servers (http, databricks) unchanged.
    """
    for scheme in ("sqlite:///", "file://"):
        if uri.startswith(scheme):
            path = uri[len(scheme) :]
            if path and not path.startswith("/"):
                return scheme + str(Path(path).expanduser().resolve())
            return uri
    if "://" not in uri and uri:
        return str(Path(uri).expanduser().resolve())
    return uri


def new_run_id() -> str:
    return "run-" + dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")


def package_code_version() -> str:
    """Hash of the project's own sources (rla_core, tasks, flows): recorded in run.json."""
    import flows
    import rla_core
    import tasks

    hasher = hashlib.sha256()
    for pkg in (rla_core, tasks, flows):
        root = Path(pkg.__file__ or "").parent
        for path in sorted(root.rglob("*.py")):
            hasher.update(str(path.relative_to(root)).encode())
            hasher.update(path.read_bytes())
    return hasher.hexdigest()[:16]


def config_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dicts."""
    keys = sorted(set(old) | set(new))
    out: list[str] = []
    for key in keys:
        a, b = old.get(key), new.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(config_diff(a, b, name + "."))
        elif a != b:
            out.append(name)
    return out


def check_config_change(run_id: str, old: dict[str, Any], new: RunConfig, *, reconfigure: bool) -> None:
    """Refuse config changes that would corrupt a run; require --reconfigure for the others."""
    # Where metrics go, how many iterations to run, checkpoint retention and speed-only keys (where work
    # runs) change no artifact.
    # The stored config is read through today's schema first, so fields added since (with their
    # defaults) do not count as changes.
    before = build_config(upgrade_stored_config(old)).model_dump(mode="json")
    changed = [
        k
        for k in config_diff(before, new.model_dump(mode="json"))
        if k != "iterations" and not k.startswith(("tracking.", "storage.")) and not speed_only(k)
    ]
    if not changed:
        return
    fixed = [k for k in changed if k.split(".")[0] in IMMUTABLE_KEYS]
    if fixed:
        raise ConfigError(
            f"run '{run_id}' was started with different {', '.join(fixed)}; these cannot change within a run "
            "(its artifacts would mix settings or seeds): start a new run with another --run-id"
        )
    if not reconfigure:
        raise ConfigError(
            f"run '{run_id}' exists with a different config (changed: {', '.join(changed[:6])}"
            f"{' …' if len(changed) > 6 else ''}); pass --reconfigure to re-run the affected stages in new "
            "attempts, `rla resume` to continue it unchanged, or choose a new --run-id"
        )


def load_run_config(store: ArtifactStore, run_id: str) -> RunConfig:
    """The config a run was started with (from its run.json)."""
    info = store.read_run_info(run_id)
    return build_config(upgrade_stored_config(info.config))


def with_iterations(cfg: RunConfig, iterations: int | None) -> RunConfig:
    if iterations is None:
        return cfg
    if iterations < 1:
        raise ConfigError(f"--iterations {iterations} must be at least 1")
    return build_config({**cfg.model_dump(mode="json"), "iterations": iterations})


def _stage_order(cfg: RunConfig, run_id: str) -> dict[int, tuple[StageName, ...]]:
    from flows.loop import stage_order
    from tasks.stage import RunContext

    return stage_order(RunContext(run_id=run_id, config=cfg))


def _iteration_order(order: dict[int, tuple[StageName, ...]], iteration: int) -> tuple[StageName, ...]:
    """The stages the flow runs in ``iteration``; past the configured iterations, those of the last one."""
    return order.get(iteration) or order[max(order)]


def invalidate_from(
    store: ArtifactStore, run_id: str, *, cfg: RunConfig, iteration: int, stage: str
) -> list[str]:
    """Force ``stage`` of ``iteration`` and everything downstream of it to re-run (new attempts).

    Downstream is :func:`from_stage_targets`; returns ``iteration/stage`` of each attempt marked.
    """
    marked: list[str] = []
    for it, name in from_stage_targets(store, run_id, cfg=cfg, iteration=iteration, stage=stage):
        if store.invalidate(run_id, it, name) is not None:
            marked.append(f"{it}/{name}")
    return marked


def from_stage_targets(
    store: ArtifactStore, run_id: str, *, cfg: RunConfig, iteration: int, stage: str
) -> list[tuple[int, StageName]]:
    """``stage`` of ``iteration`` and everything downstream of it, in the flow's own order
    (:func:`flows.loop.stage_order`): the rest of that iteration, then every later iteration on disk."""
    from flows.loop import iteration_stages

    order = _stage_order(cfg, run_id)
    first = order[0] if iteration == 0 else iteration_stages(order)
    if stage not in first and iteration == 0:
        raise ConfigError(f"iteration 0 has only the stages {', '.join(first)}; got '{stage}'")
    if stage not in first:
        raise ConfigError(
            f"unknown stage '{stage}' for the {cfg.setting} setting; choose one of: {', '.join(first)}"
        )
    targets: list[tuple[int, StageName]] = []
    for it in sorted({iteration, *store.list_iterations(run_id)}):
        if it < iteration:
            continue
        names = first[first.index(StageName(stage)) :] if it == iteration else _iteration_order(order, it)
        targets.extend((it, name) for name in names)
    return targets


def _in_flow_order(store: ArtifactStore, run_id: str, iteration: int, stages: list[str]) -> list[str]:
    """``stages`` of ``iteration`` sorted as the flow runs them (names the flow does not run first)."""
    order = _iteration_order(_stage_order(load_run_config(store, run_id), run_id), iteration)
    return sorted(stages, key=lambda s: order.index(StageName(s)) if s in order else -1)


def find_frame(store: ArtifactStore, run_id: str, iteration: int, name: str) -> str:
    """The stage of ``iteration`` whose attempt in use holds frame ``name`` (the last one wins)."""
    require_run(store, run_id)
    found = [stage for (_, stage), m in store.committed(run_id, iteration).items() if name in m.frames]
    if not found:
        raise ConfigError(
            f"iteration {iteration} of run '{run_id}' has no artifact '{name}' (is the iteration finished?)"
        )
    return _in_flow_order(store, run_id, iteration, found)[-1]


def latest_checkpoint_stage(
    store: ArtifactStore, run_id: str, role: Role, iteration: int | None, *, doing: str
) -> tuple[int, str]:
    """(iteration, stage) of the newest committed checkpoint of ``role``: the last stage, in flow order,
    of the latest iteration (at or before ``iteration``) whose attempt in use holds that checkpoint.

    A checkpoint deleted by retention is a CheckpointPrunedError saying what ``doing`` needed (never a
    silent fall back to an older one)."""
    from flows.retention import require_kept_checkpoint

    candidates = [it for it in store.list_iterations(run_id) if iteration is None or it <= iteration]
    for it in sorted(candidates, reverse=True):
        holding = [stage for (_, stage), m in store.committed(run_id, it).items() if _holds_dir(m, role)]
        if holding:
            stage = _in_flow_order(store, run_id, it, holding)[-1]
            require_kept_checkpoint(store, run_id, it, stage, role, doing=doing)
            return it, stage
    raise ConfigError(
        f"run '{run_id}' has no committed {role} checkpoint"
        + (f" at or before iteration {iteration}" if iteration else "")
    )


def _holds_dir(manifest: Any, name: str) -> bool:
    return any(entry.path.split("/", 1)[0] == name for entry in manifest.artifacts)


def require_run(store: ArtifactStore, run_id: str, *, where: str | None = None) -> None:
    """A :class:`RunNotFoundError` naming the root and how to list runs, unless ``run_id`` exists there.

    ``where``: how to name the root (default ``'<root>'``). The one "does this run exist" check of ``flows``.
    """
    if run_id not in store.list_runs():
        shown = where or f"'{store.root}'"
        raise RunNotFoundError(
            f"no run '{run_id}' under {shown}; `rla status --root {store.root}` lists the runs"
        )


def non_default_line(cfg: RunConfig, origins: Mapping[str, str] | None = None) -> str:
    """One line naming every key of ``cfg`` that differs from the embedded default (``rla config show --diff``)."""
    changed = diff_from_defaults(cfg)
    if not changed:
        return "config: the embedded default (`rla config show` prints it)"
    where = origins or {}
    keys = ", ".join(
        f"{key}={json.dumps(value)}" + (f" ({where[key]})" if key in where else "") for key, value in changed
    )
    return f"config: {len(changed)} keys differ from the embedded default: {keys}"


def execute_run(
    cfg: RunConfig,
    run_id: str,
    *,
    reconfigure: bool,
    existing: bool,
    say: Callable[[str], None] = print,
    origins: Mapping[str, str] | None = None,
) -> None:
    """Check, lock and record the run, open its MLflow run, and run the training-loop flow.

    Nothing is written before the MLflow URI and the config change have been checked. The first line
    said names the run, its artifacts and its MLflow store; the second the keys that differ from the
    embedded default (with where each came from, when ``origins`` tells it).
    """
    from flows.loop import training_loop
    from flows.prefect_server import start_ephemeral_server
    from rla_core.models.server_pool import run_servers
    from tasks import tracking
    from tasks.stage import RunContext

    mlflow_uri = resolve_mlflow_uri(cfg.tracking.mlflow_uri)
    tracking.check_reachable(mlflow_uri)
    store = ArtifactStore(cfg.artifact_root)
    location = resolve_root(store.run_location(run_id))
    if existing:
        info = store.read_run_info(run_id)
        check_config_change(run_id, info.config, cfg, reconfigure=reconfigure)
        from flows.retention import require_kept_inputs

        require_kept_inputs(store, cfg, run_id, doing=f"continuing run '{run_id}'")
    with store.lock(run_id):
        store.write_run_info(
            run_id,
            config=cfg.model_dump(mode="json"),
            config_hash=cfg.config_hash(),
            code_version=package_code_version(),
        )
        # MLflow refuses to change a logged param, so the iteration count of an extended run is a tag.
        tracker = tracking.start_or_resume(
            uri=mlflow_uri,
            experiment=cfg.tracking.experiment,
            run_id=run_id,
            params=cfg.model_dump(mode="json"),
            tags={
                "rla.config_hash": cfg.config_hash(),
                "rla.artifact_uri": location,
                "rla.mlflow_uri": mlflow_uri,
                "rla.iterations": str(cfg.iterations),
                "rla.setting": str(cfg.setting),
            },
        )
        say(
            f"run {run_id}: setting={cfg.setting} iterations={cfg.iterations} "
            f"artifacts={location} mlflow={mlflow_uri} (MLflow run {tracker.mlflow_run_id})"
        )
        say(non_default_line(cfg, origins))
        start_ephemeral_server()
        try:
            # One vLLM server per role for the whole run (models.serving.lifetime), and one per Ray replica
            # when stages are sharded, stopped at its end.
            with run_servers(cfg.models.serving) as pool:
                training_loop(RunContext(run_id=run_id, config=cfg, tracker=tracker))
            if pool is not None and (pool.counts or pool.replicas):
                say(pool.summary())
        except BaseException:
            tracking.finish(tracker, status="FAILED")
            raise
        tracking.finish(tracker)
    say(f"done {run_id}: `rla status {run_id}` shows every stage")
