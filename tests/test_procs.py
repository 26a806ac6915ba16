"""The shared process-group lifecycle (rla_core.procs): start, readiness, stop, reap after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rla_core import procs
from rla_core.errors import ProcessError

# A leader that forks a grandchild into its own group: stopping must end both.
TREE = "import subprocess,time; subprocess.Popen(['sleep','300']); print('up', flush=True); time.sleep(300)"


def _wait_for(predicate, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_stop_kills_the_whole_tree_and_removes_the_pidfile(tmp_path: Path) -> None:
    group = procs.ProcessGroup.start([sys.executable, "-c", TREE], kind="t", runtime_dir=tmp_path)
    group.wait_ready(lambda: "up" in group.log_tail(), timeout_s=20)
    _wait_for(lambda: len(procs.group_members(group.pgid)) == 2)  # leader + grandchild
    record = json.loads(group.pidfile.read_text())
    assert record["groups"] == [[group.pgid, group.leader_start]]
    group.stop()
    assert procs.group_members(group.pgid) == []
    assert not group.pidfile.exists()
    group.stop()  # idempotent


def test_context_manager_stops_on_exception(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError),
        procs.ProcessGroup.start(["sleep", "300"], kind="t", runtime_dir=tmp_path) as g,
    ):
        pgid = g.pgid
        raise RuntimeError("stage failed")
    assert procs.group_members(pgid) == []


def test_leader_dying_before_ready_raises_with_its_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('bad flag --x'); sys.exit(3)"]
    group = procs.ProcessGroup.start(argv, kind="t", runtime_dir=tmp_path, what="demo server")
    with pytest.raises(
        ProcessError, match=r"demo server exited with code 3 before it was ready(?s:.*)bad flag --x"
    ):
        group.wait_ready(lambda: False, timeout_s=20)
    assert not group.pidfile.exists()


def test_readiness_timeout_kills_the_group(tmp_path: Path) -> None:
    group = procs.ProcessGroup.start(["sleep", "300"], kind="t", runtime_dir=tmp_path, what="slow server")
    with pytest.raises(ProcessError, match="slow server was not ready after 0s"):
        group.wait_ready(lambda: False, timeout_s=0.2, interval_s=0.05)
    assert procs.group_members(group.pgid) == []


def test_wait_returns_exit_code_and_kills_leftovers(tmp_path: Path) -> None:
    script = "import subprocess,sys; subprocess.Popen(['sleep','300']); sys.exit(7)"
    group = procs.ProcessGroup.start([sys.executable, "-c", script], kind="t", runtime_dir=tmp_path)
    assert group.wait(timeout_s=30) == 7
    assert procs.group_members(group.pgid) == []


def test_groups_of_a_sigkilled_owner_are_reaped_by_the_next_start(tmp_path: Path) -> None:
    # The owner is a separate python process that starts a group and is then SIGKILLed: nothing of
    # its own cleanup runs, so only the pidfile tells the next start what to kill.
    owner_code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from rla_core import procs
        g = procs.ProcessGroup.start(["sleep", "300"], kind="t", runtime_dir=Path({str(tmp_path)!r}))
        print(g.pgid, flush=True)
        time.sleep(300)
    """)
    owner = subprocess.Popen([sys.executable, "-c", owner_code], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    orphan_pgid = int(owner.stdout.readline())
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    assert procs.group_members(orphan_pgid)  # the orphan outlived its owner
    with procs.ProcessGroup.start(["sleep", "300"], kind="t", runtime_dir=tmp_path):
        assert procs.group_members(orphan_pgid) == []
        assert len(list(tmp_path.glob("t-*.json"))) == 1  # only the live one's pidfile is left


def test_a_tethered_group_ends_with_its_owner_scratch_and_pidfile_removed(tmp_path: Path) -> None:
    # The owner is SIGKILLed as above, but its group was started tethered: the group's leader sees the
    # owner die and ends the group (the command and the command's own child) without any later start.
    scratch = tmp_path / "scratch"
    owner_code = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from rla_core import procs
        scratch = Path({str(scratch)!r}); scratch.mkdir(); (scratch / "socket").write_text("")
        g = procs.ProcessGroup.start({[sys.executable, "-c", TREE]!r}, kind="t",
                                     runtime_dir=Path({str(tmp_path)!r}), scratch=scratch, tethered=True)
        g.wait_ready(lambda: "up" in g.log_tail(), timeout_s=20)
        print(g.pgid, flush=True)
        time.sleep(300)
    """)
    owner = subprocess.Popen([sys.executable, "-c", owner_code], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    pgid = int(owner.stdout.readline())
    _wait_for(lambda: len(procs.group_members(pgid)) == 3)  # tether, command, command's child
    assert scratch.is_dir() and len(list(tmp_path.glob("t-*.json"))) == 1
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    _wait_for(lambda: procs.group_members(pgid) == [])
    _wait_for(lambda: not scratch.exists() and not list(tmp_path.glob("t-*.json")))


def test_a_tethered_group_passes_on_its_command_exit_code_and_is_stopped_whole(tmp_path: Path) -> None:
    script = "import sys; print('ran', flush=True); sys.exit(7)"
    group = procs.ProcessGroup.start(
        [sys.executable, "-c", script], kind="t", runtime_dir=tmp_path, tethered=True
    )
    assert group.wait(timeout_s=30) == 7
    assert "ran" in group.log_tail()
    with procs.ProcessGroup.start(
        [sys.executable, "-c", TREE], kind="t", runtime_dir=tmp_path, tethered=True
    ) as g:
        g.wait_ready(lambda: "up" in g.log_tail(), timeout_s=20)
        _wait_for(lambda: len(procs.group_members(g.pgid)) == 3)
    assert procs.group_members(g.pgid) == [] and not g.pidfile.exists()


def test_a_reused_group_id_is_left_alone(tmp_path: Path) -> None:
    with procs.ProcessGroup.start(["sleep", "300"], kind="t", runtime_dir=tmp_path) as g:
        # a record claiming the same group id but another leader start time: not ours to kill
        assert procs.kill_group(g.pgid, leader_start="0") is False
        assert procs.group_members(g.pgid) == [g.pgid]


def test_a_recorded_child_of_a_sigkilled_owner_is_reaped_alone(tmp_path: Path) -> None:
    # A library's child in the owner's own group (Prefect's API server) is recorded by pid: the reap stops
    # that process, not the group it shares with the (dead) owner.
    owner_code = textwrap.dedent(f"""
        import subprocess, time
        from pathlib import Path
        from rla_core import procs
        child = subprocess.Popen(["sleep", "300"])
        procs.record_process(Path({str(tmp_path)!r}), kind="srv", pid=child.pid, what="sleep")
        print(child.pid, flush=True)
        time.sleep(300)
    """)
    owner = subprocess.Popen([sys.executable, "-c", owner_code], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    child = int(owner.stdout.readline())
    started = procs.start_time(child)
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    assert started is not None and procs.start_time(child) == started  # the orphan outlived its owner
    [record] = procs.reap_stale(tmp_path, kind="srv")
    assert record["pids"] == [[child, started]] and record["what"] == "sleep"
    assert not procs.kill_process(child, started=started)  # gone (or a zombie of init: exited either way)
    assert list(tmp_path.glob("srv-*.json")) == []


def test_a_reused_pid_is_left_alone() -> None:
    with subprocess.Popen(["sleep", "300"]) as proc:
        assert procs.kill_process(proc.pid, started="0") is False  # another start time: not ours
        assert proc.poll() is None
        assert procs.kill_process(proc.pid, started=procs.start_time(proc.pid)) is True
        assert proc.wait(timeout=10) == -signal.SIGTERM


def test_machine_slots_is_the_smaller_of_cores_and_memory_at_least_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    meminfo = {"text": "MemTotal: 8000000 kB\nMemAvailable: 1228800 kB\n"}  # 1200 MiB available
    monkeypatch.setattr(procs.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(procs.Path, "read_text", lambda self, *a, **k: meminfo["text"])
    assert procs.machine_slots(300) == 4  # 1200 // 300 = 4 < 8 cores
    assert procs.machine_slots(100) == 8  # 12 by memory, 8 cores
    assert procs.machine_slots(2000) == 1  # 0 by memory: at least one
    meminfo["text"] = "MemTotal: 8000000 kB\n"  # no MemAvailable line: the cores decide
    assert procs.machine_slots(300) == 8


def test_pool_options_resolve_size_and_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(procs, "machine_slots", lambda mib_each: 1200 // mib_each)
    assert procs.PoolOptions().members(mib_each=300) == 4  # unset: what the machine holds
    assert procs.PoolOptions(size=2).members(mib_each=300) == 2  # set: as given
    assert procs.PoolOptions(runtime_dir=tmp_path).directory("demo") == tmp_path
    assert procs.PoolOptions().directory("demo") == procs.default_runtime_dir("demo")
    with pytest.raises(ValueError, match="pool size 0 must be at least 1"):
        procs.PoolOptions(size=0)
