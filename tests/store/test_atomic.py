"""The one atomic publish helper: files and directories appear whole or not at all."""

from __future__ import annotations

import ast
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest

from rla_core.store import publish_copy, publish_dir, publish_file


class Boom(RuntimeError):
    pass


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_publish_file_writes_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "report.html"
    assert publish_file(target, "héllo") == target  # the missing parent is created
    assert target.read_bytes() == "héllo".encode()  # str is written as UTF-8
    publish_file(target, b"\x00new", fsync=True)  # an existing file is replaced
    assert target.read_bytes() == b"\x00new"
    assert _entries(target.parent) == ["report.html"]  # no temporary left next to it


def test_publish_file_keeps_umask_permissions(tmp_path: Path) -> None:
    # The temporary is opened like a plain open() (not mkstemp's 0600), so the published mode is the
    # umask's, as with the write_text + rename it replaces.
    old = os.umask(0o022)
    try:
        publish_file(tmp_path / "a.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644


def test_publish_file_failure_leaves_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "pid.json"
    target.write_text("old")

    def failing_replace(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        publish_file(target, "new")
    assert target.read_text() == "old"
    assert _entries(tmp_path) == ["pid.json"]


def test_publish_copy_streams_a_file_into_place_and_a_failure_leaves_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"x" * (3 << 20))  # three 1 MiB chunks
    target = tmp_path / "cache" / "task" / "file.bin"
    assert publish_copy(target, source) == target and target.read_bytes() == source.read_bytes()
    target.write_bytes(b"old")

    def failing_replace(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        publish_copy(target, source)
    assert target.read_bytes() == b"old" and _entries(target.parent) == ["file.bin"]


def test_publish_dir_renames_a_filled_temporary(tmp_path: Path) -> None:
    seen: list[Path] = []

    def write(tmp: Path) -> None:
        seen.append(tmp)
        assert tmp.parent == tmp_path / "cache" and tmp.is_dir() and not any(tmp.iterdir())
        (tmp / "config.json").write_text("{}")

    assert publish_dir(tmp_path / "cache" / "model", write) is True
    assert _entries(tmp_path / "cache") == ["model"]
    assert (tmp_path / "cache" / "model" / "config.json").read_text() == "{}"
    assert seen[0].name.startswith(".tmp-model-")


def test_publish_dir_writer_failure_leaves_no_target_and_no_temporary(tmp_path: Path) -> None:
    def write(tmp: Path) -> None:
        (tmp / "half.bin").write_bytes(b"12")
        raise Boom("killed half-way")

    with pytest.raises(Boom):
        publish_dir(tmp_path / "model", write)
    assert _entries(tmp_path) == []

    # A KeyboardInterrupt (a BaseException, as a signal gives) cleans up the same way.
    def interrupted(tmp: Path) -> None:
        (tmp / "half.bin").write_bytes(b"12")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        publish_dir(tmp_path / "model", interrupted)
    assert _entries(tmp_path) == []


def _concurrent_writer(target: Path, content: str, marker: str = "game.json") -> Callable[[Path], None]:
    """A writer that, while writing, lets 'another process' publish ``target`` first."""

    def write(tmp: Path) -> None:
        (tmp / marker).write_text("mine")
        target.mkdir()
        (target / marker).write_text(content)

    return write


def test_publish_dir_keeps_a_complete_target_that_appeared_meanwhile(tmp_path: Path) -> None:
    target = tmp_path / "abc"
    assert publish_dir(target, _concurrent_writer(target, "theirs"), marker="game.json") is False
    assert (target / "game.json").read_text() == "theirs"  # the first writer's copy stays
    assert _entries(tmp_path) == ["abc"]  # and this writer's copy is gone
    # With no marker, any directory counts as complete (fetched checkpoints).
    other = tmp_path / "ckpt"
    assert publish_dir(other, _concurrent_writer(other, "theirs")) is False
    assert (other / "game.json").read_text() == "theirs"


def test_publish_dir_raises_on_an_incomplete_target_that_appeared_meanwhile(tmp_path: Path) -> None:
    target = tmp_path / "abc"

    def write(tmp: Path) -> None:
        (tmp / "game.json").write_text("mine")
        target.mkdir()
        (target / "stray.txt").write_text("not a game")

    with pytest.raises(OSError):
        publish_dir(target, write, marker="game.json")
    assert _entries(target) == ["stray.txt"]  # a foreign entry is neither trusted nor clobbered
    assert _entries(tmp_path) == ["abc"]


def test_publish_dir_fail_mode(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with pytest.raises(FileExistsError, match="appeared while it was being written"):
        publish_dir(target, _concurrent_writer(target, "theirs"), exists="fail")
    assert (target / "game.json").read_text() == "theirs"
    assert _entries(tmp_path) == ["out"]


@pytest.mark.parametrize("exists", ["keep", "fail"])
def test_publish_dir_replaces_an_empty_directory(tmp_path: Path, exists: Literal["keep", "fail"]) -> None:
    target = tmp_path / "out"
    target.mkdir()
    assert publish_dir(target, lambda tmp: (tmp / "w.bin").write_bytes(b"1"), exists=exists) is True
    assert _entries(target) == ["w.bin"]
    assert _entries(tmp_path) == ["out"]


def test_importing_the_helper_stays_light() -> None:
    # rla_core.procs and the environments import it: the store package must not drag polars in.
    import subprocess

    code = "import sys, rla_core.store, rla_core.procs; print('polars' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- the helper is the only place that renames into place ----------------------------------------

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("rla_core", "tasks", "flows")
HELPER = ROOT / "rla_core" / "store" / "atomic.py"
# Renames that publish no file or directory, each with why it cannot use the helper.
NOT_PUBLISHING = {
    # The in-desktop server binds its UNIX socket under a temporary name and renames it once it listens
    # (readiness without a connect-retry loop); it runs under Debian's python3, which has no rla_core.
    ROOT / "rla_core" / "envs" / "desktop" / "server.py": 1,
}
_MODULE_RENAMES = {("os", "replace"), ("os", "rename"), ("os", "renames"), ("shutil", "move")}


def _is_mapping(node: ast.expr) -> bool:
    return isinstance(node, ast.Dict | ast.DictComp)


def renames_into_place(source: str) -> list[int]:
    """Line numbers of calls in ``source`` that rename a file or directory into place.

    The rule (static, AST): flagged are

    * ``os.replace`` / ``os.rename`` / ``os.renames`` / ``shutil.move`` — called, or imported by name
      (``from os import replace``);
    * any ``<x>.rename(...)`` call, unless its one argument is a dict literal (a polars column
      rename, ``df.rename({"a": "b"})``): ``Path.rename``, ``fs.rename(a, b)``;
    * ``<x>.replace(arg)`` with exactly one positional argument and no keywords — the shape of
      ``Path.replace(target)`` — unless ``arg`` is a dict literal (polars ``Expr.replace({...})``) or
      ``x`` is ``dataclasses``; and ``Path.replace(a, b)`` / ``Path.rename(a, b)`` called unbound.

    Not flagged: ``str.replace(old, new[, count])`` (two or more arguments) and
    ``dataclasses.replace(obj, field=...)`` (keywords). A call the rule misses would still need a
    temp-then-rename dance that reviewers look for; a false positive is fixed by using the helper.
    """
    return sorted(
        {
            node.lineno
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.stmt | ast.expr) and _renames(node)
        }
    )


def _renames(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return any((node.module, alias.name) in _MODULE_RENAMES for alias in node.names)
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    attr, receiver = node.func.attr, node.func.value
    receiver_name = receiver.id if isinstance(receiver, ast.Name) else None
    if (receiver_name, attr) in _MODULE_RENAMES or (
        receiver_name == "Path" and attr in ("rename", "replace")
    ):
        return True
    one_mapping = len(node.args) == 1 and _is_mapping(node.args[0])
    if attr == "rename":
        return not one_mapping
    if attr == "replace":
        one_positional = len(node.args) == 1 and not node.keywords
        return one_positional and not one_mapping and receiver_name != "dataclasses"
    return False


def test_the_rule_flags_renames_and_spares_string_replace() -> None:
    flagged = """
import os, shutil
from os import replace
os.replace(tmp, path)
os.rename(tmp_dir, final_dir)
shutil.move(a, b)
tmp.replace(target)
Path(tmp).rename(target)
fs.rename(a, b)
Path.replace(tmp, target)
"""
    assert renames_into_place(flagged) == [3, 4, 5, 6, 7, 8, 9, 10]
    spared = """
s.replace("|", "\\\\|").replace("<", "\\\\<")
text.replace(old, new, 1)
dataclasses.replace(spec, task_id=task_id)
df.rename({"a": "b"})
pl.col("x").replace({"a": "b"})
when.replace(year=2000)
"""
    assert renames_into_place(spared) == []


def test_the_atomic_helper_is_the_only_place_that_renames_into_place() -> None:
    found = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == HELPER:
                continue
            lines = renames_into_place(path.read_text(encoding="utf-8"))
            if len(lines) == NOT_PUBLISHING.get(path):
                continue
            found.extend(f"{path.relative_to(ROOT)}:{line}" for line in lines)
    assert found == [], f"use rla_core.store.publish_file / publish_dir instead of renaming at {found}"
    assert renames_into_place(HELPER.read_text(encoding="utf-8"))  # the scan does see the helper's own
