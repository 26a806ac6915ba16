"""Run management behind the CLI: start, resume, force a stage, status, export (design §3, §6).

Everything here is orchestration glue: which run, which config, which lock, which MLflow run. The
algorithm lives in rla_core and the stages in tasks/.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rla_core.config import RunConfig, Setting, build_config, upgrade_stored_config
from rla_core.errors import ConfigError, RunNotFoundError
from rla_core.settings import ITERATION_ZERO_STAGES, iteration_stages, stage_order
from rla_core.store import ArtifactStore

# Keys a run can never change once it has started: they change what the run *is*.
IMMUTABLE_KEYS = ("setting", "seed", "artifact_root")


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
    # Where metrics go and how many iterations to run change no artifact.
    # The stored config is read through today's schema first, so fields added since (with their
    # defaults) do not count as changes.
    before = build_config(upgrade_stored_config(old)).model_dump(mode="json")
    changed = [
        k
        for k in config_diff(before, new.model_dump(mode="json"))
        if k != "iterations" and not k.startswith("tracking.")
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


def invalidate_from(
    store: ArtifactStore, run_id: str, *, setting: Setting, iteration: int, stage: str
) -> list[str]:
    """Force ``stage`` of ``iteration`` and everything downstream of it to re-run (new attempts)."""
    order = stage_order(setting)
    if iteration == 0:
        if stage not in ITERATION_ZERO_STAGES:
            raise ConfigError(
                f"iteration 0 has only the stages {', '.join(ITERATION_ZERO_STAGES)}; got '{stage}'"
            )
        first_iter, first_idx = 1, 0
        marked = [
            f"0/{name}"
            for name in ITERATION_ZERO_STAGES[ITERATION_ZERO_STAGES.index(stage) :]
            if store.invalidate(run_id, 0, name) is not None
        ]
    else:
        if stage not in order:
            raise ConfigError(
                f"unknown stage '{stage}' for the {setting} setting; choose one of: {', '.join(order)}"
            )
        first_iter, first_idx = iteration, order.index(stage)
        marked = []
    for it in store.list_iterations(run_id):
        if it < first_iter:
            continue
        for name in order[first_idx if it == first_iter else 0 :]:
            if store.invalidate(run_id, it, name) is not None:
                marked.append(f"{it}/{name}")
    return marked


def find_frame(store: ArtifactStore, run_id: str, iteration: int, name: str) -> str:
    """The stage of ``iteration`` whose attempt in use holds frame ``name`` (the last one wins)."""
    if run_id not in store.list_runs():
        raise RunNotFoundError(f"no run '{run_id}' under '{store.root}'; `rla status` lists the runs")
    found = [
        stage
        for stage in store.list_stages(run_id, iteration)
        if (m := store.manifest(run_id, iteration, stage)) is not None and name in m.frames
    ]
    if not found:
        raise ConfigError(
            f"iteration {iteration} of run '{run_id}' has no artifact '{name}' (is the iteration finished?)"
        )
    order = iteration_stages(load_run_config(store, run_id).setting, iteration)
    return max(found, key=lambda s: order.index(s) if s in order else -1)


def latest_checkpoint_stage(
    store: ArtifactStore, run_id: str, role: str, iteration: int | None
) -> tuple[int, str]:
    """(iteration, stage) of the newest committed checkpoint of ``role`` ('policy' or 'reward')."""
    trainer = {"policy": "train_policy", "reward": "train_reward"}[role]
    iterations = store.list_iterations(run_id)
    candidates = [it for it in iterations if iteration is None or it <= iteration]
    for it in sorted(candidates, reverse=True):
        stage = trainer if it > 0 else "bootstrap"
        if store.manifest(run_id, it, stage) is not None:
            return it, stage
    raise ConfigError(
        f"run '{run_id}' has no committed {role} checkpoint"
        + (f" at or before iteration {iteration}" if iteration else "")
    )


def execute_run(
    cfg: RunConfig, run_id: str, *, reconfigure: bool, existing: bool, say: Callable[[str], None] = print
) -> None:
    """Check, lock and record the run, open its MLflow run, and run the training-loop flow.

    Nothing is written before the MLflow URI and the config change have been checked.
    """
    from flows.loop import training_loop
    from flows.prefect_server import start_ephemeral_server
    from flows.status import resolve_root
    from tasks import tracking
    from tasks.stage import RunContext

    mlflow_uri = resolve_mlflow_uri(cfg.tracking.mlflow_uri)
    tracking.check_reachable(mlflow_uri)
    store = ArtifactStore(cfg.artifact_root)
    location = resolve_root(store.run_location(run_id))
    if existing:
        info = store.read_run_info(run_id)
        check_config_change(run_id, info.config, cfg, reconfigure=reconfigure)
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
        start_ephemeral_server()
        try:
            training_loop(RunContext(run_id=run_id, config=cfg, tracker=tracker))
        except BaseException:
            tracking.finish(tracker, status="FAILED")
            raise
        tracking.finish(tracker)
    say(f"done {run_id}: `rla status {run_id}` shows every stage")
