"""The run lock with real processes: a live holder blocks, a dead holder's lock is taken over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rla_core.errors import RunLockedError
from rla_core.store import ArtifactStore
from rla_core.store.manifest import this_host

# The child takes the lock, announces it on stdout, then holds it until stdin closes (no sleeps).
_HOLDER = textwrap.dedent(
    """
    import os, sys
    from rla_core.store import ArtifactStore
    store = ArtifactStore(sys.argv[1], storage_options={opts})
    lock = store.lock("run-l").acquire()
    print("locked", os.getpid(), flush=True)
    if sys.argv[2] == "die":
        os._exit(0)  # exit without releasing: leaves a stale lock record behind
    sys.stdin.read()
    lock.release()
    """
)


def _spawn(root: str, mode: str, options: dict[str, object] | None = None) -> subprocess.Popen[str]:
    script = _HOLDER.replace("{opts}", repr(options or {}))
    proc = subprocess.Popen(
        [sys.executable, "-c", script, root, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("locked"), proc.stderr.read() if proc.stderr else line
    return proc


def test_second_holder_fails_fast_naming_the_holder(tmp_path: Path) -> None:
    root = str(tmp_path / "runs")
    proc = _spawn(root, "hold")
    try:
        with pytest.raises(RunLockedError) as err:
            ArtifactStore(root).lock("run-l").acquire()
        message = str(err.value)
        assert f"pid {proc.pid} on host {this_host()} since " in message
        assert "run 'run-l' is locked" in message
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    # Released cleanly: the lock file is gone and a new holder gets it without a takeover.
    assert not Path(root, "run-l", "lock.json").exists()
    with ArtifactStore(root).lock("run-l") as lock:
        assert lock.held
        assert lock.took_over is None


def test_same_process_second_lock_object_is_refused(tmp_path: Path) -> None:
    store = ArtifactStore(str(tmp_path))
    with store.lock("run-l"), pytest.raises(RunLockedError, match=f"pid {os.getpid()} "):
        store.lock("run-l").acquire()
    with store.lock("run-l") as again:
        assert again.held
    assert not again.held


def test_stale_lock_from_dead_process_is_taken_over(tmp_path: Path) -> None:
    root = str(tmp_path / "runs")
    proc = _spawn(root, "die")
    assert proc.wait(timeout=60) == 0
    # The record is still there: the process died without releasing.
    left = json.loads(Path(root, "run-l", "lock.json").read_text())
    assert left["pid"] == proc.pid
    with ArtifactStore(root).lock("run-l") as lock:
        assert lock.took_over is not None
        assert lock.took_over.pid == proc.pid
        assert json.loads(Path(root, "run-l", "lock.json").read_text())["pid"] == os.getpid()


def test_s3_lock_best_effort(s3_root: str, s3: object) -> None:
    options = s3.storage_options  # type: ignore[attr-defined]
    store = ArtifactStore(s3_root, storage_options=options)
    proc = _spawn(s3_root, "hold", options)
    try:
        with pytest.raises(RunLockedError, match=f"pid {proc.pid} .*delete the lock object"):
            store.lock("run-l").acquire()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    with store.lock("run-l") as lock:
        assert lock.took_over is None
    # A holder on this host that died without releasing is detected by its pid and replaced.
    dead = _spawn(s3_root, "die", options)
    assert dead.wait(timeout=60) == 0
    with store.lock("run-l") as lock:
        assert lock.took_over is not None and lock.took_over.pid == dead.pid
