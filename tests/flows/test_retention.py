"""Checkpoint retention through the real `rla` CLI (docs/operations.md#checkpoint-retention): a test-preset
run with ``storage.keep_last=1`` prunes iteration 1's checkpoints once iteration 3 commits, still resumes,
re-runs a stage inside the kept window, and refuses — before writing anything — to re-run, evaluate or
export from the pruned iteration. The warm start and the shared model cache are never touched.

To stay fast it starts from a copy of the session's finished two-iteration base run (same preset) under a
root of its own, with retention switched on and its own MLflow store; only iteration 3 is computed."""

from __future__ import annotations

import time
from pathlib import Path

from rla_core.config import load_config
from rla_core.store.artifacts import INVALIDATED_NAME, PRUNED_NAME
from tasks.retention import prune_checkpoints
from tasks.stage import RunContext
from tests.flows.conftest import FlowEnv, copy_run, invoke_cli


def _files(path: Path) -> dict[str, int]:
    return {p.relative_to(path).as_posix(): p.stat().st_size for p in path.rglob("*") if p.is_file()}


def _one_error(code_output: tuple[int, str]) -> str:
    """The one error line of an in-process CLI call that failed (exit 1, no traceback)."""
    code, output = code_output
    lines = [line for line in output.strip().splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error:"), output
    return lines[0]


def test_keep_last_prunes_resumes_and_refuses_the_pruned_iteration(
    flow_env: FlowEnv, base_run: tuple[Path, str], tmp_path: Path
) -> None:
    started = time.monotonic()
    root = tmp_path / "runs"
    # the finished base run, its stored config given storage.keep_last=1
    store = copy_run(
        base_run,
        root,
        storage={"keep_last": 1, "keep_every": None},
        tracking={"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
    )
    rid = base_run[1]
    models = _files(flow_env.base / "models")
    warm = store.manifest(rid, 0, "bootstrap")
    assert warm is not None

    # A resume to 3 iterations: once iteration 3 commits, iteration 1's checkpoints go.
    step = time.monotonic()
    flow_env.rla("resume", rid, "--iterations", "3", "--root", str(root))
    print(f"resume --iterations 3: {time.monotonic() - step:.1f}s")
    pruned = {p.parent.parent.relative_to(root / rid).as_posix() for p in root.rglob(PRUNED_NAME)}
    assert pruned == {"iter-0001/train_policy", "iter-0001/train_reward"}
    for stage, role in (("train_policy", "policy"), ("train_reward", "reward")):
        manifest = store.manifest(rid, 1, stage)
        assert manifest is not None and store.problems(manifest) == []  # pruned on purpose, still done
        attempt = Path(store.attempt_location(rid, 1, stage, manifest.attempt))
        assert not (attempt / role).exists()
    # The warm start (iteration 0) and the shared model cache are untouched; iteration 2 is kept.
    assert store.manifest(rid, 0, "bootstrap") == warm and store.problems(warm) == []
    assert _files(flow_env.base / "models") == models
    kept = store.manifest(rid, 2, "train_policy")
    assert kept is not None and store.pruned(kept) is None and store.problems(kept) == []

    # Every stage still reads as done: a plain resume has nothing to do.
    code, output = invoke_cli(["resume", rid, "--root", str(root)], tmp_path)
    assert code == 0 and "nothing to do" in output, output

    # Outside the kept window: refused, naming the iteration and the setting, before anything is written.
    before = _files(root / rid)
    error = _one_error(invoke_cli(["resume", rid, "--from-stage", "rollout", "--iteration", "2",
                                   "--root", str(root)], tmp_path))  # fmt: skip
    assert (
        "(stage rollout of iteration 2) needs the policy checkpoint of iteration 1 (stage train_policy)"
        in error
    )
    assert "storage.keep_last=1" in error and "raise storage.keep_last" in error
    error = _one_error(invoke_cli(["eval", rid, "--checkpoint", "1", "--root", str(root)], tmp_path))
    assert f"rla eval {rid} --checkpoint 1 needs the policy checkpoint of iteration 1" in error
    export = tmp_path / "export"
    error = _one_error(invoke_cli(["export", rid, "--to", str(export), "--iteration", "1",
                                   "--root", str(root)], tmp_path))  # fmt: skip
    assert "checkpoint of iteration 1" in error and "storage.keep_last=1" in error
    assert not export.exists()
    assert _files(root / rid) == before and not list(root.rglob(INVALIDATED_NAME))

    # Inside the kept window: iteration 3's reward update re-runs from iteration 2's reward model. (In this
    # preset an update can leave the model unchanged, so iteration 2's files, kept, may equal iteration 1's,
    # pruned, content key and all: what is refused is reading a pruned stage, never a content key.)
    step = time.monotonic()
    flow_env.rla("resume", rid, "--from-stage", "train_reward", "--iteration", "3", "--root", str(root))
    redone = store.manifest(rid, 3, "train_reward")
    assert redone is not None and redone.attempt == 2
    print(f"--from-stage train_reward: {time.monotonic() - step:.1f}s")

    code, output = invoke_cli(["status", rid, "--root", str(root)], tmp_path)
    status = " ".join(output.split())
    assert code == 0 and "bytes per iteration" in status and "storage.keep_last=1" in status, output
    print(f"retention flow test: {time.monotonic() - started:.1f}s")


def test_prune_checkpoints_keeps_the_window_the_warm_start_and_every_frame(tmp_path: Path) -> None:
    """The task on a temporary store: four iterations of checkpoint stages, keep_last=1 after iteration 3."""
    root = tmp_path / "runs"
    cfg = load_config(overrides=[f"artifact_root={root}", "storage.keep_last=1"])
    run = RunContext(run_id="r", config=cfg)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.bin").write_bytes(b"w" * 10)
    for it, stage in ((0, "bootstrap"), (1, "train_policy"), (2, "train_policy"), (3, "train_policy")):
        with run.store.begin("r", it, stage) as writer:
            writer.put_dir(ckpt, "policy")
            writer.write_file("note.txt", b"kept")
            writer.commit(f"k{it}", inputs={})
    said: list[str] = []
    # After iteration 2 nothing goes (1 is what 2 started from); after 3, iteration 1's checkpoint.
    assert prune_checkpoints(run, 2, log=said.append) == []
    pruned = prune_checkpoints(run, 3, log=said.append)
    assert [(p.iteration, p.stage, p.dirs, p.bytes) for p in pruned] == [(1, "train_policy", ("policy",), 10)]
    assert said == ["retention (storage.keep_last=1, storage.keep_every=null) after iteration 3: pruned "
                    "1/train_policy (policy)"]  # fmt: skip
    assert prune_checkpoints(run, 3, log=said.append) == []  # idempotent
    for it, stage in ((0, "bootstrap"), (1, "train_policy"), (2, "train_policy"), (3, "train_policy")):
        manifest = run.store.manifest("r", it, stage)
        assert manifest is not None and run.store.problems(manifest) == []
        assert run.store.read_file("r", it, stage, "note.txt") == b"kept"
        assert (run.store.pruned(manifest) is not None) == (it == 1)
    # The default keeps everything.
    keep_all = RunContext(run_id="r", config=load_config(overrides=[f"artifact_root={root}"]))
    assert prune_checkpoints(keep_all, 50) == []
