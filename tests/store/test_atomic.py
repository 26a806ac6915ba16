"""The one atomic publish helper (issue 25): files and directories appear whole or not at all."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest

from rla_core.store import publish_dir, publish_file


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
