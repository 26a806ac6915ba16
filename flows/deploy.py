"""Entry flow for Prefect deployments (infra/prefect.yaml): JSON-friendly parameters only.

A scheduled run continues the same run id each night: it resumes what is done and adds
``iterations_per_run`` more iterations.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows.preflight import require_ready
from flows.process_env import apply_process_defaults
from flows.runs import execute_run, load_run_config, with_iterations
from rla_core.config import load_config
from rla_core.store import ArtifactStore


@flow(name="rlanything-scheduled")
def scheduled_run(
    config: str | None = None,
    preset: str | None = "default",
    overrides: list[str] | None = None,
    run_id: str = "nightly",
    iterations_per_run: int = 1,
) -> None:
    """Start ``run_id`` from the config, or continue it with ``iterations_per_run`` more iterations."""
    apply_process_defaults()  # the worker imported Prefect already; the rest still reads them
    logger = get_run_logger()
    cfg = load_config(config, preset=preset, overrides=tuple(overrides or ()))
    store = ArtifactStore(cfg.artifact_root)
    existing = run_id in store.list_runs()
    if existing:
        done = load_run_config(store, run_id).iterations
        cfg = with_iterations(load_run_config(store, run_id), done + iterations_per_run)
    else:
        cfg = with_iterations(cfg, iterations_per_run)
    require_ready(
        cfg, warn=logger.warning, run=(store, run_id) if existing else None
    )  # before anything is written
    execute_run(cfg, run_id, reconfigure=False, existing=existing, say=logger.info)
