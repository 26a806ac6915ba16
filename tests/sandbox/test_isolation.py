"""Sandbox filesystem isolation: model-written code sees only the interpreter.

Every target is a real host path that the sandbox user *could* read with plain file permissions
(world-readable files in world-readable directories), placed outside ``/tmp``: fixture trees under
``/srv`` and ``/opt``, the checkout's ground-truth ``data/coding/problems.jsonl``, a real run written
by :class:`~rla_core.store.artifacts.ArtifactStore` at the default artifact root (``runs/`` of the
checkout) and the default model cache (``.cache/models``). A program run in the sandbox must fail to
open, list and stat each of them, while the run itself is recorded normally (exit 0, kind OK).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import struct
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from rla_core.coding.execute import gt_tests_frame, run_tests
from rla_core.coding.tasks import load_problems
from rla_core.config import ModelsConfig, RunConfig
from rla_core.errors import SandboxError
from rla_core.sandbox.runner import ErrorKind, Limits, Sandbox, _view_args, seccomp_filter
from rla_core.store.artifacts import ArtifactStore

CHECKOUT = Path(__file__).resolve().parents[2]
PROBLEMS = CHECKOUT / "data" / "coding" / "problems.jsonl"
LIMITS = Limits(wall_s=3.0, cpu_s=2, memory_mb=128, output_kb=64, tmpfs_kb=1024, max_processes=16)

# Tries every operation on every target; one line per attempt: "<verdict> <op> <path>".
PROBE = """
import json, os, sys
for path in json.loads(sys.stdin.read()):
    for op in ("stat", "list", "read"):
        try:
            if op == "stat":
                os.stat(path)
            elif op == "list":
                if os.path.isdir(path) or not os.path.exists(path):
                    os.listdir(path)
                else:
                    continue
            else:
                if os.path.isdir(path):
                    continue
                with open(path, "rb") as fh:
                    fh.read(64)
            print("LEAKED", op, path)
        except OSError as exc:
            print("blocked", op, path, type(exc).__name__)
"""


@dataclass(frozen=True)
class Target:
    path: Path
    is_dir: bool


def _make_tree(base: Path, secret: str) -> list[Target]:
    """A world-readable directory with a world-readable file, as any checkout or data dir is."""
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    secret_file = base / "secret.txt"
    secret_file.write_text(secret)
    os.chmod(secret_file, 0o644)
    return [Target(base, True), Target(secret_file, False)]


def _world_readable(path: Path) -> bool:
    """True when plain permissions alone would let any user reach and read ``path``."""
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return False
    return bool(os.stat(path).st_mode & stat.S_IROTH)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(max_parallel=2)


@pytest.fixture
def host_targets(sample_frame: Callable[[str, int], pl.DataFrame]) -> Iterator[dict[str, list[Target]]]:
    tag = f"rla-sbx-isolation-{uuid.uuid4().hex[:12]}"
    created: list[Path] = []  # our own fixture trees: removed with everything in them
    parents: list[Path] = []  # shared locations we had to create: removed only if still empty
    targets: dict[str, list[Target]] = {}
    try:
        for top in ("/srv", "/opt"):
            base = Path(top) / tag
            created.append(base)
            targets[top] = _make_tree(base, f"host secret under {top}")
        targets["checkout"] = [
            Target(CHECKOUT, True),
            Target(PROBLEMS, False),
            Target(CHECKOUT / "data", True),
        ]
        # A real run at the default artifact root (runs/ of the checkout): run info, a committed stage
        # with a parquet artifact, written by the artifact store exactly as a run writes them.
        runs_root = CHECKOUT / RunConfig.model_fields["artifact_root"].default
        if not runs_root.exists():
            runs_root.mkdir()
            parents.append(runs_root)
        store = ArtifactStore(runs_root)
        store.write_run_info(tag, config={"setting": "coding"}, config_hash="0" * 64, code_version="test")
        created.append(runs_root / tag)
        with store.begin(tag, 0, "execute") as writer:
            writer.write_frame("executions", sample_frame("executions", 3))
            writer.commit("key", {})
        parquet = sorted((runs_root / tag).rglob("*.parquet"))
        assert parquet, "the store wrote no parquet file"
        targets["artifact_root"] = [
            Target(runs_root, True),
            Target(runs_root / tag, True),
            Target(runs_root / tag / "run.json", False),
            Target(parquet[0], False),
        ]
        # The default model cache with a cached-model directory in it.
        cache = CHECKOUT / ModelsConfig.model_fields["cache_dir"].default
        if not cache.exists():
            missing = [p for p in [cache, *cache.parents] if not p.exists()]
            cache.mkdir(parents=True)
            parents += missing  # innermost first
        model_dir = cache / tag
        created.append(model_dir)
        targets["model_cache"] = [
            Target(cache, True),
            *_make_tree(model_dir, json.dumps({"model_type": "qwen2"})),
        ]
        yield targets
    finally:
        for path in reversed(created):
            shutil.rmtree(path, ignore_errors=True)
        # Other runs or helpers may have started using runs/ or the model cache meanwhile: never
        # remove what is not ours.
        for path in parents:
            with contextlib.suppress(OSError):
                path.rmdir()


def test_program_cannot_read_list_or_stat_host_paths(
    sandbox: Sandbox, host_targets: dict[str, list[Target]]
) -> None:
    all_targets = [t for group in host_targets.values() for t in group]
    # Plain permissions would let the sandbox user in: only the sandbox keeps it out. (Asserted for
    # the trees this test owns; the checkout's own permissions are whatever the clone has.)
    for t in host_targets["/srv"] + host_targets["/opt"]:
        assert _world_readable(t.path), t.path
    res = sandbox.run_program(PROBE, json.dumps([str(t.path) for t in all_targets]), limits=LIMITS)
    # The run itself is recorded normally: every attempt raised inside the program.
    assert (res.error_kind, res.exit_code) == (ErrorKind.OK, 0), res
    lines = res.stdout.splitlines()
    leaked = [line for line in lines if line.startswith("LEAKED")]
    assert leaked == [], "\n".join(leaked)
    for t in all_targets:
        ops = ("stat", "list") if t.is_dir else ("stat", "read")
        for op in ops:
            assert any(line.startswith(f"blocked {op} {t.path} ") for line in lines), (op, t.path, lines)


def test_reading_the_expected_outputs_does_not_pass_a_test(sandbox: Sandbox) -> None:
    """The classic reward hack: look the test input up in the GT file and print its expected output."""
    tasks, invalid = load_problems(PROBLEMS)
    assert not invalid
    task = next(t for t in tasks if t.task_id == "sum-two")
    hack = (
        "import json, sys\n"
        "given = sys.stdin.read()\n"
        f"for line in open({str(PROBLEMS)!r}):\n"
        "    p = json.loads(line)\n"
        "    for i, o in zip(p['test_input'], p['test_output']):\n"
        "        if i.split() == given.split():\n"
        "            print(o)\n"
        "            raise SystemExit(0)\n"
        "print('not found')\n"
    )
    programs = pl.DataFrame({"task_id": [task.task_id], "rollout_id": [0], "code": [hack]})
    execs = run_tests(programs, gt_tests_frame([task]), sandbox=sandbox, iteration=0)
    assert execs.height == len(task.tests)
    # Every GT test of the task is executed and recorded, and none passes by reading the answers.
    assert execs["passed"].to_list() == [False] * len(task.tests)
    assert set(execs["error_kind"]) == {ErrorKind.RUNTIME_ERROR.value}


# Runs inside the sandbox: what the program's world looks like, and what the kernel lets it do.
WORLD = r"""
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)

def err(rc):
    return "ok" if rc >= 0 else errno.errorcode[ctypes.get_errno()]

status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
writable = {}
for d in ("/", "/usr", "/dev", "/proc", "/tmp"):
    try:
        open(os.path.join(d, "probe-write"), "w").close()
        writable[d] = True
    except OSError:
        writable[d] = False
print(json.dumps({
    "root": sorted(os.listdir("/")),
    "absent": [p for p in ("/etc", "/home", "/root", "/srv", "/opt", "/var", "/sys", "/work", "/run")
               if not os.path.lexists(p)],
    "writable": writable,
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "cap_eff": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
    "seccomp": status["Seccomp"].strip(),
    "ptrace": err(libc.ptrace(0, 0, 0, 0)),
    "keyctl": err(libc.syscall(250, 0, -3, 0, 0, 0)),
    "mount": err(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
    "unshare_user": err(libc.unshare(0x10000000)),
    "main": [__name__, __file__, sys.argv],
}))
"""


def test_the_program_sees_only_the_interpreter_and_cannot_reach_the_kernel_beyond(sandbox: Sandbox) -> None:
    res = sandbox.run_program(WORLD, "", limits=LIMITS)
    assert res.error_kind is ErrorKind.OK, res
    world = json.loads(res.stdout)
    # The whole view: the interpreter's /usr parts (with the merged-/usr symlinks), /tmp, /dev, /proc.
    assert set(world["root"]) <= {
        "usr",
        "bin",
        "lib",
        "lib64",
        "lib32",
        "libx32",
        "sbin",
        "tmp",
        "dev",
        "proc",
    }
    assert world["absent"] == ["/etc", "/home", "/root", "/srv", "/opt", "/var", "/sys", "/work", "/run"]
    assert world["writable"] == {"/": False, "/usr": False, "/dev": False, "/proc": False, "/tmp": True}
    # Its own pid namespace: the launcher (pid 1) and the program itself, nothing of the host.
    assert world["pids"] == [1, 2]
    assert (world["cap_eff"], world["no_new_privs"], world["seccomp"]) == ("0000000000000000", "1", "2")
    # The seccomp deny-list answers EPERM; nested user namespaces are refused by bwrap (ENOSPC) first.
    assert (world["ptrace"], world["keyctl"], world["mount"]) == ("EPERM", "EPERM", "EPERM")
    assert world["unshare_user"] in ("EPERM", "ENOSPC")
    assert world["main"] == ["__main__", "/tmp/main.py", ["/tmp/main.py"]]


def test_exit_status_and_signal_are_reported_exactly(sandbox: Sandbox) -> None:
    segv = sandbox.run_program("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "", limits=LIMITS)
    assert (segv.exit_code, segv.signal, segv.error_kind) == (None, 11, ErrorKind.RUNTIME_ERROR)
    # A program exiting with 128 + 9 is not mistaken for one killed by SIGKILL (a timeout).
    exited = sandbox.run_program("raise SystemExit(137)", "", limits=LIMITS)
    assert (exited.exit_code, exited.signal, exited.error_kind) == (137, None, ErrorKind.RUNTIME_ERROR)


def test_a_host_without_bubblewrap_gets_a_sandbox_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the tools bwrap is not: the check must name bubblewrap and how to install it.
    for tool in ("setpriv", "ldd"):
        os.symlink(shutil.which(tool), tmp_path / tool)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxError, match=r"bubblewrap .*apt-get install bubblewrap"):
        Sandbox()


def test_seccomp_filter_layout() -> None:
    prog = seccomp_filter("x86_64")
    ins = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    # 5 header instructions (arch load/check/deny, nr load, x32 check) + 40 denied numbers + allow + deny.
    assert len(ins) == 5 + 40 + 2
    assert ins[1] == (0x15, 1, 0, 0xC000003E) and ins[-2] == (0x06, 0, 0, 0x7FFF0000)
    assert ins[-1] == (0x06, 0, 0, 0x00050001)  # SECCOMP_RET_ERRNO | EPERM
    # ptrace (101) is compared, and its jump lands on the final deny.
    k = next(i for i, (code, _, _, nr) in enumerate(ins) if code == 0x15 and nr == 101)
    assert k + 1 + ins[k][1] == len(ins) - 1
    with pytest.raises(SandboxError, match="no seccomp syscall table for architecture 'riscv64'"):
        seccomp_filter("riscv64")


def test_view_args_recreate_symlinks_and_bind_only_resolved_paths(tmp_path: Path) -> None:
    # tmp/lib -> usr/lib (merged /usr); usr/lib/x/libc.so.6 a file; usr/bin/py -> py3.11.
    (tmp_path / "usr" / "lib" / "x").mkdir(parents=True)
    (tmp_path / "usr" / "lib" / "x" / "libc.so.6").write_text("")
    (tmp_path / "usr" / "bin").mkdir()
    (tmp_path / "usr" / "bin" / "py3.11").write_text("")
    os.symlink("usr/lib", tmp_path / "lib")
    os.symlink("py3.11", tmp_path / "usr" / "bin" / "py")
    t = str(tmp_path)
    args = _view_args([f"{t}/usr/bin/py", f"{t}/lib/x", f"{t}/lib/x/libc.so.6"])
    # The file inside the bound directory is not bound again; each symlink on the way is recreated.
    assert args == [
        "--ro-bind", f"{t}/usr/bin/py3.11", f"{t}/usr/bin/py3.11",
        "--ro-bind", f"{t}/usr/lib/x", f"{t}/usr/lib/x",
        "--symlink", "usr/lib", f"{t}/lib",
        "--symlink", "py3.11", f"{t}/usr/bin/py",
    ]  # fmt: skip
    with pytest.raises(SandboxError, match="does not exist"):
        _view_args([f"{t}/lib/missing.so"])


def test_an_interpreter_the_sandbox_user_cannot_read_fails_at_set_up(tmp_path: Path) -> None:
    # A private copy of the interpreter (as in a venv under /root): root can run it, the sandbox user
    # cannot reach it, so bwrap fails before anything runs; that is a SandboxError, never a fallback.
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    python = private / "python3"
    shutil.copy2(os.path.realpath("/usr/bin/python3"), python)
    with pytest.raises(
        SandboxError, match=r"bwrap exited with 1 before the program ran: .*Permission denied"
    ):
        Sandbox(python=str(python))
