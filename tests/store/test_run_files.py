"""Run files (progress record, saved evaluations): atomic, and never inside stage or run records."""

from __future__ import annotations

from pathlib import Path

import pytest

from rla_core.errors import ArtifactError
from rla_core.store import ArtifactStore


def test_run_files_round_trip_outside_iterations(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    assert store.read_run_file("r", "progress.json") is None and store.list_run_files("r", "evals") == []
    location = store.write_run_file("r", "evals/eval-0001/_manifest.json", b"{}")
    assert location == str(tmp_path / "r" / "evals" / "eval-0001" / "_manifest.json")
    store.write_run_file("r", "progress.json", b"1")
    store.write_run_file("r", "progress.json", b"2")  # replaced whole, no temp files left beside it
    assert store.read_run_file("r", "progress.json") == b"2"
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["evals", "progress.json"]
    assert store.list_run_files("r", "evals") == ["eval-0001"]


@pytest.mark.parametrize(
    "relpath", ["iter-0001/judge/x.json", "run.json", "lock.json", "../escape", ".hidden"]
)
def test_run_files_refuse_stage_dirs_run_records_and_escapes(tmp_path: Path, relpath: str) -> None:
    with pytest.raises(ArtifactError):
        ArtifactStore(tmp_path).write_run_file("r", relpath, b"x")
