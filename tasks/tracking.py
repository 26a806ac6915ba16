"""MLflow as the system of record for runs: one MLflow run per training run (docs/architecture.md#the-design-contract, house style 9).

Metrics are numeric, namespaced (``policy/…``, ``reward_model/…``, ``env/…``, ``timing_s/<stage>``)
and logged with ``step=iteration``. The MLflow run id is kept in the run's ``run.json`` extras so a
resumed run keeps logging into the same MLflow run.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rla_core.errors import RlaError

if TYPE_CHECKING:
    from rla_core.store import ArtifactStore


class TrackingError(RlaError):
    """MLflow cannot be reached or refused a request."""


@dataclass(frozen=True)
class Tracker:
    """Where one training run's metrics go."""

    uri: str
    mlflow_run_id: str

    def log_metrics(self, metrics: Mapping[str, float], *, step: int) -> None:
        """Log finite numeric metrics at ``step`` (non-finite values are skipped: MLflow rejects NaN keys poorly)."""
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        now = int(time.time() * 1000)
        batch = [
            Metric(key=k, value=float(v), timestamp=now, step=step)
            for k, v in sorted(metrics.items())
            if isinstance(v, int | float) and math.isfinite(float(v))
        ]
        if batch:
            MlflowClient(self.uri).log_batch(self.mlflow_run_id, metrics=batch)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.uri)
        for key, value in tags.items():
            client.set_tag(self.mlflow_run_id, key, value)


def check_reachable(uri: str, *, timeout_s: float = 5.0) -> None:
    """Fail fast with a one-line error when an http(s) tracking URI does not answer."""
    if not uri.startswith(("http://", "https://")):
        return
    import httpx

    try:
        httpx.get(uri.rstrip("/") + "/health", timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise TrackingError(
            f"MLflow tracking server '{uri}' is unreachable ({exc.__class__.__name__}); start it or set "
            "tracking.mlflow_uri to a reachable server or a sqlite:/// path"
        ) from None


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = str(value)[:500]


def start_or_resume(
    *, uri: str, experiment: str, run_id: str, params: Mapping[str, Any], tags: Mapping[str, str]
) -> Tracker:
    """Open the MLflow run of training run ``run_id`` (found by its ``rla.run_id`` tag) or create it.

    A new MLflow run gets the config as params; hashes and artifact URIs are tags on every (re)start.
    """
    check_reachable(uri)
    from mlflow.entities import Param, RunStatus
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    try:
        exp = client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp is not None else client.create_experiment(experiment)
        found = client.search_runs([exp_id], filter_string=f"tags.`rla.run_id` = '{run_id}'", max_results=1)
        if found:
            mlflow_run_id = found[0].info.run_id
            client.update_run(mlflow_run_id, status=RunStatus.to_string(RunStatus.RUNNING))
        else:
            mlflow_run_id = client.create_run(
                exp_id, run_name=run_id, tags={"rla.run_id": run_id}
            ).info.run_id
            flat: dict[str, str] = {}
            _flatten("", dict(params), flat)
            items = [Param(k, v) for k, v in sorted(flat.items())]
            for start in range(0, len(items), 100):
                client.log_batch(mlflow_run_id, params=items[start : start + 100])
        tracker = Tracker(uri=uri, mlflow_run_id=mlflow_run_id)
        tracker.set_tags(tags)
        return tracker
    except MlflowException as exc:
        raise TrackingError(f"MLflow at '{uri}' refused the request: {exc.message.splitlines()[0]}") from None


def finish(tracker: Tracker, *, status: str = "FINISHED") -> None:
    """Mark the MLflow run finished (or FAILED)."""
    from mlflow.tracking import MlflowClient

    MlflowClient(tracker.uri).set_terminated(tracker.mlflow_run_id, status=status)


def artifact_key(run_id: str, iteration: int) -> str:
    """Prefect artifact key of an iteration's summary: lowercase letters, digits and dashes only."""
    slug = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-") or "run"
    return f"{slug}-iter-{iteration:04d}"


def _resolved(location: str) -> str:
    from rla_core.store.uri import is_remote

    return location if is_remote(location) else str(Path(location).resolve())


def iteration_summary_markdown(store: ArtifactStore, run_id: str, iteration: int) -> str:
    """A markdown table of the committed stages of one iteration (in the order they committed)."""
    manifests = sorted(store.committed(run_id, iteration).values(), key=lambda m: m.created_at)
    lines = [
        f"### Run `{run_id}`, iteration {iteration}",
        "",
        f"Artifacts: `{_resolved(store.run_location(run_id))}`",
        "",
        "| stage | attempt | seconds | metrics |",
        "|---|---|---|---|",
    ]
    for m in manifests:
        metrics = {k: v for k, v in m.extra.get("metrics", {}).items() if not k.startswith("timing_s/")}
        shown = "<br>".join(f"`{k}` = {float(v):.6g}" for k, v in sorted(metrics.items())) or "-"
        secs = m.extra.get("stage_compute_s")
        lines.append(f"| {m.stage} | {m.attempt} | {float(secs):.1f} | {shown} |" if secs is not None
                     else f"| {m.stage} | {m.attempt} | - | {shown} |")  # fmt: skip
    return "\n".join(lines)


def publish_iteration_summary(store: ArtifactStore, run_id: str, iteration: int) -> None:
    """Create (a new version of) the iteration's Prefect markdown artifact: the flow run's Artifacts tab.

    Called after each stage, so the latest version lists every stage of the iteration done so far.
    """
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(
        key=artifact_key(run_id, iteration),
        markdown=iteration_summary_markdown(store, run_id, iteration),
        description=f"rlanything {run_id}: stages and key metrics of iteration {iteration}",
    )
