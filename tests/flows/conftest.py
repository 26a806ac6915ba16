"""Flow tests run the real `rla` CLI in subprocesses: real Prefect, real MLflow (SQLite), real TextWorld
games and tiny models. One model/game cache, one Prefect home and one real Prefect server (on loopback)
are shared across the session, so only the first run pays for the bootstrap and no run pays for an
ephemeral Prefect server's start (~10 s of CPU each on this machine kind, measured: a 20-task flow took
13.2 s with an ephemeral server and 3.4 s against a running one). Tests of the ephemeral server's own
lifecycle (SIGKILL, SIGTERM) and of runs in a private network namespace use :meth:`FlowEnv.ephemeral`."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
from typer.testing import CliRunner

from flows.runs import load_run_config
from rla_core.config import build_config
from rla_core.store import ArtifactStore

REPO = Path(__file__).resolve().parents[2]
PREFECT_SERVER_HOME = "prefect-server-home"  # under the session's base: the shared server's database


@dataclass
class FlowEnv:
    """Where the session's runs, caches and tracking live, and how to call the CLI there."""

    base: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def mlflow_uri(self) -> str:
        return f"sqlite:///{self.base / 'mlflow.db'}"

    def settings(self, root: str | Path) -> list[str]:
        return [
            "--set", f"artifact_root={root}",
            "--set", f"models.cache_dir={self.base / 'models'}",
            "--set", f"textgame.game_cache_dir={self.base / 'games'}",
            "--set", f"tracking.mlflow_uri={self.mlflow_uri}",
        ]  # fmt: skip

    def rla(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "flows.cli", *args],
            cwd=self.base, env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(
                f"rla {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
            )
        return proc

    @property
    def prefect_db(self) -> Path:
        """The Prefect database the `rla` runs write to: the session server's, or an ephemeral one's."""
        if "PREFECT_API_URL" in self.env:
            return self.base / PREFECT_SERVER_HOME / "prefect.db"
        return Path(self.env["PREFECT_HOME"]) / "prefect.db"

    def ephemeral(self) -> FlowEnv:
        """The same place, with no Prefect server named: each `rla` starts Prefect's ephemeral server."""
        return FlowEnv(base=self.base, env={k: v for k, v in self.env.items() if k != "PREFECT_API_URL"})

    def popen(self, *args: str, stderr: IO[str] | None = None) -> subprocess.Popen[str]:
        """Start ``rla *args`` in its own process group; its stderr goes to ``stderr`` (default: nowhere)."""
        return subprocess.Popen(
            [sys.executable, "-m", "flows.cli", *args],
            cwd=self.base, env=self.env, stdout=subprocess.DEVNULL, text=True, start_new_session=True,
            stderr=subprocess.DEVNULL if stderr is None else stderr,
        )  # fmt: skip


def flow_env_vars(base: Path) -> dict[str, str]:
    """The environment of an `rla` subprocess: this machine's, minus Prefect/MLflow settings, with a private
    Prefect home under ``base``, offline model loading and the checkout on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    env |= {
        "PREFECT_HOME": str(base / "prefect-home"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
    }
    return env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def flow_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlowEnv]:
    """The session's place for runs, with one Prefect server (API only) on a free loopback port."""
    base = tmp_path_factory.mktemp("flows")
    env = flow_env_vars(base)
    port = _free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    server_env = env | {"PREFECT_HOME": str(base / PREFECT_SERVER_HOME)}
    with open(base / "prefect-server.log", "w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
             "--port", str(port), "--no-services", "--no-ui",
             "--analytics-off"],
            cwd=base, env=server_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, text=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while True:  # readiness: the health endpoint answers
            assert server.poll() is None, (
                f"the Prefect server exited: {(base / 'prefect-server.log').read_text()}"
            )
            try:
                with urllib.request.urlopen(f"{api_url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the Prefect server did not answer /api/health within 180 s"
            time.sleep(0.25)
        yield FlowEnv(base=base, env=env | {"PREFECT_API_URL": api_url})
    finally:
        kill_group(server)


@pytest.fixture(scope="session")
def base_run(flow_env: FlowEnv) -> tuple[Path, str]:
    """One uninterrupted test-preset run ('base' under <base>/runs), made once per session and never changed
    by the tests that read it (test_loop compares against it, test_operator reads it)."""
    root = flow_env.base / "runs"
    proc = flow_env.rla("run", "--preset", "test", *flow_env.settings(root), "--run-id", "base")
    (flow_env.base / "base-run.log").write_text(proc.stdout + proc.stderr)  # what the operator saw
    return root, "base"


def copy_run(base: tuple[Path, str], root: Path, **sections: dict[str, Any]) -> ArtifactStore:
    """The finished run ``base`` copied under ``root`` (the original stays untouched): its stored config points
    at ``root`` (a run cannot change its artifact_root) with each of ``sections``' keys set in that section."""
    base_root, rid = base
    shutil.copytree(base_root / rid, root / rid)
    store = ArtifactStore(str(root))
    info = store.read_run_info(rid)
    config = load_run_config(store, rid).model_dump(mode="json") | {"artifact_root": str(root)}
    for name, values in sections.items():
        config[name] = {**config[name], **values}
    cfg = build_config(config)
    store.write_run_info(rid, config=config, config_hash=cfg.config_hash(), code_version=info.code_version)
    return store


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL a CLI process and everything it started (its Prefect server too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait(timeout=30)
    time.sleep(0.2)


# One iteration's stages, in flow order, as the tests expect them (hand-written, not derived).
ITERATION = ("rollout", "judge", "label", "adapt", "train_policy", "train_reward", "evaluate")
CODING_ITERATION = (
    "rollout",
    "write_tests",
    "execute",
    "label",
    "adapt",
    "train_policy",
    "train_reward",
    "evaluate",
)


def planned(store: ArtifactStore, run_id: str) -> set[tuple[int, str]]:
    """(iteration, stage) of every stage the flow's plan runs for the run's own stored config."""
    from flows.loop import plan
    from flows.runs import load_run_config
    from tasks.stage import RunContext

    cfg = load_run_config(store, run_id)
    return {(p.iteration, str(p.stage)) for p in plan(RunContext(run_id=run_id, config=cfg), check=False)}


def run_preset_two_iterations(
    flow_env: FlowEnv, preset: str, run_id: str, *overrides: str, timeout: int
) -> ArtifactStore:
    """``rla run --preset <preset>`` (its own two iterations, ``overrides`` as ``--set``) under ``flow_env``:
    every planned stage committed, each iteration the whole loop. Returns the run's store."""
    root = flow_env.base / f"runs-{run_id}"
    sets = [arg for o in overrides for arg in ("--set", o)]
    flow_env.rla(
        "run", "--preset", preset, *flow_env.settings(root), *sets, "--run-id", run_id, timeout=timeout
    )
    store = ArtifactStore(str(root))
    done = set(store.committed(run_id))
    assert done == planned(store, run_id)
    for it in (1, 2):
        assert {s for i, s in done if i == it} == set(ITERATION)
    return store


def invoke_cli(args: list[str], cwd: Path) -> tuple[int, str]:
    """The `rla` CLI run in-process (typer's CliRunner) from ``cwd``: its exit code and its output."""
    from flows.cli import app

    old = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, args)
    finally:
        os.chdir(old)
    return result.exit_code, result.output
