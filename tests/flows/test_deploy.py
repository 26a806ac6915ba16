"""infra/prefect.yaml end to end: a real local Prefect server, a process work pool, `prefect
deploy` of the shipped yaml from the repository root (no hidden variables), a process worker, and a
deployment run of the real flow that completes, writes the run and publishes its Prefect artifacts."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from rla_core.store import ArtifactStore
from tests.flows.conftest import REPO, FlowEnv

PREFECT = str(Path(sys.executable).with_name("prefect"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (a Prefect worker ignores SIGTERM), then SIGKILL the group if it lingers."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


@dataclass
class PrefectServer:
    api_url: str
    env: dict[str, str]
    log: Path

    def prefect(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [PREFECT, *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert proc.returncode == 0, (
            f"prefect {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
        return proc

    def api(self, method: str, path: str, body: dict[str, object] | None = None) -> object:
        resp = httpx.request(method, self.api_url + path, json=body, timeout=30)
        resp.raise_for_status()
        return resp.json()


@pytest.fixture(scope="module")
def prefect_server(flow_env: FlowEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    home = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    env = flow_env.env | {
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_WORKER_PREFETCH_SECONDS": "1",
    }
    log = home / "server.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            cwd=home, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while True:  # probe for readiness (no fixed sleeps)
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "Prefect server did not become healthy in 180 s"
            time.sleep(0.5)
        yield PrefectServer(api_url=env["PREFECT_API_URL"], env=env, log=log)
    finally:
        _stop(proc)


def test_prefect_yaml_pins_the_installed_prefect_and_needs_no_hidden_variables() -> None:
    import prefect

    spec = yaml.safe_load((REPO / "infra" / "prefect.yaml").read_text())
    installed = prefect.__version__.split(".")[:2]
    assert str(spec["prefect-version"]).split(".")[:2] == installed
    assert "{{ $" not in (REPO / "infra" / "prefect.yaml").read_text()  # no environment templates
    for dep in spec["deployments"]:
        assert (REPO / dep["entrypoint"].split(":")[0]).is_file()


@pytest.mark.slow
def test_deployment_runs_through_a_process_worker(flow_env: FlowEnv, prefect_server: PrefectServer) -> None:
    server = prefect_server
    server.prefect("work-pool", "create", "rla-local", "--type", "process")
    server.prefect("--no-prompt", "deploy", "--all", "--prefect-file", "infra/prefect.yaml")
    deployments = server.api("POST", "/deployments/filter", {})
    assert isinstance(deployments, list)
    by_name = {d["name"]: d for d in deployments}
    assert {"nightly-textgame", "nightly-coding"} <= set(by_name)
    nightly = by_name["nightly-textgame"]
    # The worker's working directory is the repository root, recorded absolute at deploy time.
    (step,) = nightly["pull_steps"]
    assert step["prefect.deployments.steps.set_working_directory"]["directory"] == str(REPO)
    assert [s["schedule"]["cron"] for s in nightly["schedules"]] == ["0 2 * * *"]

    root = flow_env.base / "deployed-runs"
    worker_log = flow_env.base / "worker.log"
    with worker_log.open("wb") as fh:
        worker = subprocess.Popen(
            [PREFECT, "worker", "start", "--pool", "rla-local", "--type", "process"],
            cwd=flow_env.base, env=server.env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        overrides = [s for s in flow_env.settings(root) if s != "--set"]
        params = {"preset": "test", "overrides": overrides, "run_id": "deployed", "iterations_per_run": 1}
        run = server.prefect(
            "deployment", "run", "rlanything-scheduled/nightly-textgame", "--params", json.dumps(params),
            "--watch", "--watch-interval", "2", "--watch-timeout", "900", timeout=960,
        )  # fmt: skip
    finally:
        _stop(worker)
    assert "Completed" in run.stdout, run.stdout[-3000:] + worker_log.read_text()[-5000:]
    store = ArtifactStore(str(root))
    assert store.manifest("deployed", 1, "train_policy") is not None
    # The flow run's Artifacts tab: one markdown summary per iteration, keyed by run and iteration, with a
    # new version after each stage. Newest first: the API's default order is by (random) id.
    artifacts = server.api(
        "POST",
        "/artifacts/filter",
        {"artifacts": {"key": {"any_": ["deployed-iter-0001"]}}, "sort": "CREATED_DESC"},
    )
    assert isinstance(artifacts, list) and artifacts
    assert "train_policy" in artifacts[0]["data"] and "policy/success_rate" in artifacts[0]["data"]
    # The worker's log says where the run's artifacts and metrics went, resolved.
    assert f"artifacts={root / 'deployed'}" in worker_log.read_text()
