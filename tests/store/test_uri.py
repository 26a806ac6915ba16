"""The path/URI helper: joins, safety checks, filesystem resolution."""

from __future__ import annotations

import os

import pytest

from rla_core.errors import ArtifactError
from rla_core.store.uri import check_relpath, filesystem, is_remote, join, relative


def test_join_local_and_s3() -> None:
    assert join("/tmp/runs/", "r1", "iter-0001") == os.path.join("/tmp/runs", "r1", "iter-0001")
    assert join("s3://bucket/runs/", "r1", "a/b.parquet") == "s3://bucket/runs/r1/a/b.parquet"
    assert join("file:///tmp/runs", "r1") == os.path.join("/tmp/runs", "r1")


@pytest.mark.parametrize("bad", ["..", "../x", "a/../b", ".hidden", "-x", "a b", ""])
def test_join_rejects_unsafe_parts(bad: str) -> None:
    with pytest.raises(ArtifactError, match=r"not a safe name|is empty"):
        join("/tmp/runs", bad)


def test_check_relpath_normalises() -> None:
    assert check_relpath("./ckpt//model/config.json") == "ckpt/model/config.json"


def test_is_remote() -> None:
    assert is_remote("s3://b/k")
    assert not is_remote("/tmp/x")
    assert not is_remote("file:///tmp/x")


def test_filesystem_local_and_relative(tmp_path: os.PathLike[str]) -> None:
    fs, path = filesystem(str(tmp_path))
    assert fs.protocol[0] == "file" or "file" in fs.protocol
    assert relative(path, join(path, "a", "b.txt")) == "a/b.txt"
    with pytest.raises(ArtifactError, match="not below"):
        relative(join(path, "a"), join(path, "b"))


def test_filesystem_unknown_protocol() -> None:
    with pytest.raises(ArtifactError, match="cannot open a filesystem"):
        filesystem("nosuchproto://x/y")
