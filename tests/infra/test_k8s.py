"""The KubeRay cluster (infra/k8s/raycluster.yaml) and the deployment that points a run at it
(infra/prefect-ray.yaml) agree with each other and with what the project declares elsewhere: the Ray version,
the work pool's image, the custom shard resource, the shared cache path, the MLflow service, the S3 secret's
variables. No cluster runs here: KubeRay, GPUs and multi-host networking are untested (docs/gpus-and-scale.md).
The RayCluster's field names were checked once by hand against the CRD schema (ray.io/v1) of the KubeRay
repository at commit feeaf72 (ray-operator/config/crd/bases/ray.io_rayclusters.yaml) with jsonschema: no errors,
no unknown fields."""

from __future__ import annotations

import importlib.metadata
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from rla_core.config import ClusterBackend, RunConfig, load_config
from rla_core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "infra" / "k8s" / "raycluster.yaml"
DEPLOYMENTS = REPO / "infra" / "prefect-ray.yaml"


def _documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")) if d]


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in _documents() if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def _ray_cluster() -> dict[str, Any]:
    return _one("RayCluster")


def _containers() -> dict[str, dict[str, Any]]:
    spec = _ray_cluster()["spec"]
    (head,) = spec["headGroupSpec"]["template"]["spec"]["containers"]
    (group,) = spec["workerGroupSpecs"]
    (worker,) = group["template"]["spec"]["containers"]
    return {"head": head, "worker": worker}


def _deployment() -> dict[str, Any]:
    (dep,) = [d for d in yaml.safe_load(DEPLOYMENTS.read_text(encoding="utf-8"))["deployments"]]
    assert dep["name"] == "ray-textgame"
    return dep


def _run_config() -> RunConfig:
    params = _deployment()["parameters"]
    return load_config(params["config"], preset=params["preset"], overrides=tuple(params["overrides"]))


def _worker_resources() -> dict[str, float]:
    (group,) = _ray_cluster()["spec"]["workerGroupSpecs"]
    raw: str = group["rayStartParams"]["resources"]
    # KubeRay passes the value to `ray start --resources` as written: a JSON object inside double quotes.
    assert raw.startswith('"') and raw.endswith('"'), raw
    parsed: dict[str, float] = json.loads(raw[1:-1].replace('\\"', '"'))
    return parsed


def test_manifest_documents_have_the_kinds_and_api_versions_kuberay_and_kubernetes_define() -> None:
    kinds = {(d["apiVersion"], d["kind"], d["metadata"]["name"]) for d in _documents()}
    assert kinds == {
        ("ray.io/v1", "RayCluster", "rlanything"),
        ("v1", "PersistentVolumeClaim", "rla-cache"),
        ("v1", "PersistentVolumeClaim", "prefect-data"),
        ("apps/v1", "Deployment", "prefect-server"),
        ("v1", "Service", "prefect-server"),
    }
    assert {d["metadata"]["namespace"] for d in _documents()} == {"rlanything"}
    spec = _ray_cluster()["spec"]
    assert set(spec) == {"rayVersion", "authOptions", "headGroupSpec", "workerGroupSpecs"}
    assert spec["authOptions"] == {
        "mode": "token"
    }  # the driver shares the head container, so it has the token
    (group,) = spec["workerGroupSpecs"]
    assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]  # the CRD requires all three


def test_ray_version_is_the_tested_one_and_within_the_pyproject_pin() -> None:
    version = _ray_cluster()["spec"]["rayVersion"]
    assert version == importlib.metadata.version("ray")  # the Ray the cluster tests run
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = [Requirement(r) for r in extras["cluster"] if Requirement(r).name == "ray"]
    assert pin.specifier.contains(version), f"rayVersion {version} is outside pyproject's {pin}"


def test_image_is_the_kubernetes_work_pool_image_and_the_repository_root_is_shared() -> None:
    pool = json.loads((REPO / "infra" / "prefect" / "k8s-work-pool.json").read_text())
    image = pool["variables"]["properties"]["image"]["default"]
    server = _one("Deployment", "prefect-server")["spec"]["template"]["spec"]["containers"][0]
    assert {c["image"] for c in _containers().values()} | {server["image"]} == {image}
    # The worker's working directory (the deployment's pull step) is the containers' working directory, and
    # the shared volume sits at its `.cache` (the driver's cache_dir: scratch, checkpoints, model caches).
    (step,) = _deployment()["pull"]
    workdir = step["prefect.deployments.steps.set_working_directory"]["directory"]
    for container in _containers().values():
        assert container["workingDir"] == workdir
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["rla-cache"] == f"{workdir}/.cache"
    assert _one("PersistentVolumeClaim", "rla-cache")["spec"]["accessModes"] == ["ReadWriteMany"]


def test_shard_resource_and_gpus_agree_with_the_deployment() -> None:
    cfg = _run_config()
    assert cfg.cluster.backend is ClusterBackend.RAY and cfg.cluster.address == "auto"
    offered = _worker_resources()
    assert set(cfg.cluster.resources) == set(offered), "the shard resource has one name on both sides"
    (name,) = offered
    containers = _containers()
    gpus = int(containers["worker"]["resources"]["limits"]["nvidia.com/gpu"])
    # One shard per GPU: the resource fills a node exactly when its GPUs do.
    assert offered[name] / cfg.cluster.resources[name] == gpus / cfg.cluster.gpus_per_worker
    (group,) = _ray_cluster()["spec"]["workerGroupSpecs"]
    assert cfg.cluster.workers == cfg.training.processes == group["replicas"] * offered[name]
    head = _ray_cluster()["spec"]["headGroupSpec"]["rayStartParams"]
    assert head["num-gpus"] == "0" and head["num-cpus"] == "0" and "resources" not in head
    # The head (the driver) holds no GPU: every generating stage, adapt's environment model included, runs on
    # the shards, one GPU each, and updates leave the driver (more than one process, so Ray Train).
    head = containers["head"]["resources"]
    assert "nvidia.com/gpu" not in head["limits"] and "nvidia.com/gpu" not in head["requests"]
    assert cfg.training.processes > 1
    tensor_parallel = cfg.models.serving.tensor_parallel.model_dump()
    assert all(
        tensor_parallel.get(r) == cfg.cluster.gpus_per_worker for r in ("policy", "reward", "environment")
    )


def test_head_runs_the_deployments_work_pool_worker_with_the_servers_api() -> None:
    head = _containers()["head"]
    script = " ".join(head["args"])
    pool = _deployment()["work_pool"]["name"]
    assert "$KUBERAY_GEN_RAY_START_CMD" in script and f"prefect worker start --pool {pool} " in script
    assert _ray_cluster()["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
    service = _one("Service", "prefect-server")
    (port,) = service["spec"]["ports"]
    env = {e["name"]: e["value"] for e in head["env"]}
    assert env["PREFECT_API_URL"] == f"http://prefect-server.rlanything.svc:{port['port']}/api"


def test_artifacts_on_s3_and_metrics_on_the_mlflow_service() -> None:
    cfg = _run_config()
    run_s3 = yaml.safe_load((REPO / "infra" / "mlflow" / "run-s3.yaml").read_text())
    assert cfg.artifact_root == run_s3["artifact_root"] and cfg.artifact_root.startswith("s3://")
    mlflow = [d for d in yaml.safe_load_all((REPO / "infra" / "k8s" / "mlflow.yaml").read_text()) if d]
    (service,) = [d for d in mlflow if d["kind"] == "Service"]
    (port,) = service["spec"]["ports"]
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert cfg.tracking.mlflow_uri == f"http://{name}.{namespace}.svc:{port['port']}"
    # The S3 credentials come from one secret made from s3.env.example's variables; the manifest names no
    # variable of its own for them (our code reads none: s3fs reads these).
    for container in _containers().values():
        assert container["envFrom"] == [{"secretRef": {"name": "rla-s3"}}]
    text = MANIFEST.read_text()
    assert "create secret generic rla-s3 --from-env-file=" in text and "infra/mlflow/s3.env.example" in text
    assert "AWS_ACCESS_KEY_ID" in (REPO / "infra" / "mlflow" / "s3.env.example").read_text()


def test_deployment_file_pins_prefect_and_uses_the_shared_entry_flow() -> None:
    spec = yaml.safe_load(DEPLOYMENTS.read_text())
    assert str(spec["prefect-version"]).split(".")[:2] == importlib.metadata.version("prefect").split(".")[:2]
    nightly = yaml.safe_load((REPO / "infra" / "prefect.yaml").read_text())
    assert {d["entrypoint"] for d in nightly["deployments"]} == {_deployment()["entrypoint"]}
    assert "{{ $" not in DEPLOYMENTS.read_text()


@pytest.mark.parametrize(
    ("typo", "named"),
    [("cluster.backnd=ray", "cluster.backnd"), ("cluster.resorces={rla_shard: 1}", "cluster.resorces")],
)
def test_a_typo_in_the_overrides_fails_naming_the_key(typo: str, named: str) -> None:
    params = _deployment()["parameters"]
    with pytest.raises(ConfigError, match=f"unknown key '{named}'"):
        load_config(None, preset=params["preset"], overrides=(*params["overrides"], typo))
