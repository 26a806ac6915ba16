"""Bad input to the `rla` CLI: a one-line specific error, a non-zero exit, nothing written."""

from __future__ import annotations

import socket
from pathlib import Path

from rla_core.config import load_config
from rla_core.store import ArtifactStore
from tests.flows.conftest import invoke_cli


def _one_error_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    assert len(lines) == 1, output  # one line, no traceback
    assert lines[0].startswith("error:"), output
    return lines[0]


def test_unknown_config_key_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    code, output = invoke_cli(["run", "--set", "rollout.rollouts_per_tsk=3"], tmp_path)
    assert code != 0
    assert "unknown key 'rollout.rollouts_per_tsk'" in _one_error_line(output)
    assert list(tmp_path.iterdir()) == []


def test_out_of_range_threshold(tmp_path: Path) -> None:
    code, output = invoke_cli(["run", "--set", "adaptation.alpha_low=0.9"], tmp_path)
    assert code != 0
    assert "alpha_low=0.9 must be below alpha_high=0.8" in _one_error_line(output)


def test_missing_config_file(tmp_path: Path) -> None:
    code, output = invoke_cli(["run", "--config", "nope.yaml"], tmp_path)
    assert code != 0
    assert "config file 'nope.yaml' does not exist" in _one_error_line(output)


def test_resume_unknown_run(tmp_path: Path) -> None:
    code, output = invoke_cli(["resume", "no-such-run", "--root", str(tmp_path / "runs")], tmp_path)
    assert code != 0
    assert "no run 'no-such-run'" in _one_error_line(output)


def test_inspect_unknown_run(tmp_path: Path) -> None:
    code, output = invoke_cli(
        ["inspect", "ghost", "--iteration", "1", "--artifact", "rollouts", "--root", str(tmp_path)], tmp_path
    )
    assert code != 0
    assert "no run 'ghost'" in _one_error_line(output)


def test_inspect_unknown_artifact_name(tmp_path: Path) -> None:
    code, output = invoke_cli(["inspect", "x", "--iteration", "1", "--artifact", "rolouts"], tmp_path)
    assert code != 0
    assert "unknown artifact 'rolouts'" in _one_error_line(output)


def test_artifact_root_that_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    code, output = invoke_cli(
        [
            "run",
            "--set",
            f"artifact_root={blocker}/runs",
            "--set",
            f"tracking.mlflow_uri=sqlite:///{tmp_path}/m.db",
        ],
        tmp_path,
    )
    assert code != 0
    assert "check that the artifact root is writable" in _one_error_line(output)
    assert blocker.read_text() == "not a directory"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_mlflow(tmp_path: Path) -> None:
    uri = f"http://127.0.0.1:{_closed_port()}"
    code, output = invoke_cli(
        ["run", "--set", f"tracking.mlflow_uri={uri}", "--set", f"artifact_root={tmp_path}/runs"], tmp_path
    )
    assert code != 0
    assert f"MLflow tracking server '{uri}' is unreachable" in _one_error_line(output)
    assert not (tmp_path / "runs").exists()


def _existing_run(root: Path, run_id: str, **overrides: str) -> None:
    cfg = load_config(overrides=[f"artifact_root={root}", *[f"{k}={v}" for k, v in overrides.items()]])
    ArtifactStore(str(root)).write_run_info(
        run_id, config=cfg.model_dump(mode="json"), config_hash=cfg.config_hash(), code_version="x"
    )


def test_config_change_that_would_corrupt_a_run_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _existing_run(root, "r1")
    before = (root / "r1" / "run.json").read_bytes()
    code, output = invoke_cli(
        ["run", "--run-id", "r1", "--reconfigure", "--set", "setting=coding", "--set", f"artifact_root={root}",
         "--set", f"tracking.mlflow_uri=sqlite:///{tmp_path}/m.db"],
        tmp_path,
    )  # fmt: skip
    assert code != 0
    assert "cannot change within a run" in _one_error_line(output)
    assert (root / "r1" / "run.json").read_bytes() == before


def test_config_change_needs_reconfigure(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _existing_run(root, "r2")
    code, output = invoke_cli(
        ["run", "--run-id", "r2", "--set", "training.policy.lr=0.001", "--set", f"artifact_root={root}",
         "--set", f"tracking.mlflow_uri=sqlite:///{tmp_path}/m.db"],
        tmp_path,
    )  # fmt: skip
    assert code != 0
    line = _one_error_line(output)
    assert "changed: training.policy.lr" in line and "--reconfigure" in line


def test_resume_from_stage_needs_iteration(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _existing_run(root, "r3")
    code, output = invoke_cli(["resume", "r3", "--from-stage", "judge", "--root", str(root)], tmp_path)
    assert code != 0
    assert "--from-stage and --iteration go together" in _one_error_line(output)
