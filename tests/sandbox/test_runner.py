"""Sandbox: real programs, adversarial programs, host checks (rla_core/sandbox/runner.py)."""

from __future__ import annotations

import glob
import os
import tempfile
from pathlib import Path

import pytest

from rla_core.errors import SandboxError
from rla_core.sandbox.runner import (
    PIDS_CGROUP_ROOT,
    ErrorKind,
    Job,
    Limits,
    Sandbox,
    sandbox_user_processes,
)

SHORT = Limits(wall_s=1.0, cpu_s=1, memory_mb=128, output_kb=16, tmpfs_kb=1024, max_processes=16)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(max_parallel=2)


def test_correct_wrong_crashing_slow(sandbox: Sandbox) -> None:
    ok = sandbox.run_program("a, b = map(int, input().split())\nprint(a + b)", "2 3\n", limits=SHORT)
    assert (ok.error_kind, ok.exit_code, ok.stdout) == (ErrorKind.OK, 0, "5\n")
    crash = sandbox.run_program("print(1 // 0)", "", limits=SHORT)
    assert crash.error_kind is ErrorKind.RUNTIME_ERROR and "ZeroDivisionError" in crash.stderr
    syntax = sandbox.run_program("def (:", "", limits=SHORT)
    assert syntax.error_kind is ErrorKind.RUNTIME_ERROR and "SyntaxError" in syntax.stderr
    slow = sandbox.run_program("import time\ntime.sleep(5)", "", limits=SHORT)
    assert slow.error_kind is ErrorKind.TIMEOUT and slow.wall_s < 3.0


ADVERSARIAL: dict[str, tuple[str, ErrorKind, str | None]] = {
    # name: (program, expected error kind, text its stdout must contain)
    "infinite_loop": ("while True:\n    pass", ErrorKind.TIMEOUT, None),
    "fork_bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        ErrorKind.TIMEOUT,
        None,
    ),
    "memory_hog": ("x = bytearray(1 << 31)", ErrorKind.MEMORY, None),
    "huge_output": (
        "import sys\nwhile True:\n    sys.stdout.write('x' * 4096)",
        ErrorKind.OUTPUT_LIMIT,
        None,
    ),
    "disk_fill": (
        "k = 0\nwhile True:\n    open(f'f{k}', 'wb').write(b'x' * 8000)\n    k += 1",
        ErrorKind.RUNTIME_ERROR,  # ENOSPC on the 1 MiB private tmpfs
        None,
    ),
    "write_outside": (
        "import os\nfor p in ['/tmp/rla_sbx_escape', '/root/rla_sbx_escape', '/var/tmp/rla_sbx_escape',\n"
        "          '/dev/shm/rla_sbx_escape', '/rla_sbx_escape', os.path.expanduser('~/x')]:\n"
        "    try:\n        open(p, 'w').write('x')\n    except OSError as e:\n        print('denied', p)\n",
        ErrorKind.OK,
        "denied /root/rla_sbx_escape",
    ),
    "read_secrets": (
        "import os\nprint('SECRET' if any('hunter2' in v for v in os.environ.values()) else 'clean')\n"
        "print(sorted(os.environ))",
        ErrorKind.OK,
        "clean",
    ),
    "network": (
        "import socket\nfor host, port in [('127.0.0.1', 22), ('10.0.0.1', 80), ('8.8.8.8', 53)]:\n"
        "    s = socket.socket()\n    s.settimeout(0.3)\n    try:\n        s.connect((host, port))\n"
        "        print('CONNECTED', host)\n    except OSError:\n        print('blocked', host)\n",
        ErrorKind.OK,
        "blocked 127.0.0.1",
    ),
    "kill_parent": (
        "import os, signal\nfor target in (os.getppid(), 1, -1):\n    try:\n        os.kill(target, signal.SIGKILL)\n"
        "    except OSError:\n        pass\nprint('alive')",
        ErrorKind.OK,
        "alive",
    ),
    "daemon": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n"
        "    os._exit(0)\nprint('parent done')",
        ErrorKind.OK,
        "parent done",
    ),
}


def test_adversarial_programs_are_contained(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLA_TEST_SECRET", "hunter2")
    before_dirs = set(glob.glob(os.path.join(tempfile.gettempdir(), "rla-sbx-*")))
    sibling = Job(code="print(sum(map(int, input().split())))", stdin="1 2 3\n", limits=SHORT)
    jobs: list[Job] = []
    for code, _, _ in ADVERSARIAL.values():
        # A well-behaved sibling runs next to every adversarial program.
        jobs += [Job(code=code, stdin="", limits=SHORT), sibling]
    results = sandbox.run_many(jobs)
    for (name, (_, kind, needle)), adv, sib in zip(
        ADVERSARIAL.items(), results[0::2], results[1::2], strict=True
    ):
        assert adv.error_kind is kind, (name, adv)
        if needle is not None:
            assert needle in adv.stdout, (name, adv.stdout)
        assert "CONNECTED" not in adv.stdout and "SECRET" not in adv.stdout, name
        assert (sib.error_kind, sib.stdout) == (ErrorKind.OK, "6\n"), (name, sib)
    # Nothing escaped: no process of the sandbox user, no file on the host, no run directory, no cgroup.
    assert sandbox_user_processes() == []
    for path in ("/tmp/rla_sbx_escape", "/root/rla_sbx_escape", "/var/tmp/rla_sbx_escape", "/rla_sbx_escape"):
        assert not Path(path).exists(), path
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "rla-sbx-*"))) == before_dirs
    assert [p.name for p in (PIDS_CGROUP_ROOT / "rla-sandbox").iterdir() if p.is_dir()] == []
    # The sandbox still works after all that.
    again = sandbox.run_program("print('still fine')", "", limits=SHORT)
    assert again.stdout == "still fine\n"


def test_output_is_capped_not_buffered(sandbox: Sandbox) -> None:
    res = sandbox.run_program("print('y' * 100000)", "", limits=SHORT)
    # 16 KiB allowed: the kept stdout is exactly the cap, and the run is an output-limit error.
    assert res.error_kind is ErrorKind.OUTPUT_LIMIT
    assert len(res.stdout) == 16 * 1024


def test_bad_limits_and_missing_user_fail_at_setup() -> None:
    with pytest.raises(SandboxError, match="memory_mb >= 16"):
        Limits(memory_mb=1)
    with pytest.raises(SandboxError, match="no-such-rla-user"):
        Sandbox(user="no-such-rla-user")
    with pytest.raises(SandboxError, match="interpreter"):
        Sandbox(python="/nonexistent/python3")
