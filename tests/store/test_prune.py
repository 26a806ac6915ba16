"""Checkpoint retention in the store: the record is written before anything is deleted, the manifest stays
as committed, pruned files read as pruned (never missing, never corrupt), frames and other roles stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from rla_core.errors import ArtifactError
from rla_core.store import ArtifactStore
from rla_core.store.artifacts import PRUNED_NAME

SETTING = {"storage.keep_last": 1, "storage.keep_every": None}


def _commit_checkpoints(store: ArtifactStore, tmp_path: Path, sample_frame: object) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "model.bin").write_bytes(b"w" * 1000)
    (ckpt / "sub" / "config.json").write_bytes(b"{}")
    with store.begin("run-a", 1, "train") as writer:
        writer.put_dir(ckpt, "policy")
        writer.put_dir(ckpt, "reward")
        writer.write_frame("rollouts", sample_frame("rollouts", 3))  # type: ignore[operator]
        writer.commit("key-1", inputs={})


def test_prune_records_first_keeps_the_manifest_and_reads_as_done(
    tmp_path: Path, sample_frame: object
) -> None:
    store = ArtifactStore(str(tmp_path / "runs"))
    _commit_checkpoints(store, tmp_path, sample_frame)
    manifest = store.manifest("run-a", 1, "train")
    assert manifest is not None
    attempt = Path(store.attempt_location("run-a", 1, "train", manifest.attempt))
    manifest_bytes = (attempt / "_manifest.json").read_bytes()

    record = store.prune(manifest, ("policy", "environment"), setting=SETTING)

    assert record is not None
    # Only the held role named: 1000 + 2 bytes of policy/; 'environment' is not in the attempt.
    assert record.dirs == ("policy",)
    assert record.paths == ("policy/model.bin", "policy/sub/config.json")
    assert record.pruned_bytes == 1002
    assert (attempt / PRUNED_NAME).is_file()
    assert not (attempt / "policy").exists()
    assert (attempt / "reward" / "model.bin").is_file()
    assert (attempt / "_manifest.json").read_bytes() == manifest_bytes  # never rewritten
    assert store.manifest("run-a", 1, "train") == manifest
    # Pruned on purpose is not a problem: the stage still reads as done, its frames still read.
    assert store.problems(manifest) == []
    assert store.is_done("run-a", 1, "train", "key-1")
    assert store.read_frame("run-a", 1, "train", "rollouts").height == 3
    with pytest.raises(ArtifactError, match=r"'policy'.*was pruned on .* by checkpoint retention"):
        store.get_dir("run-a", 1, "train", "policy", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ArtifactError, match=r"was pruned"):
        store.read_file("run-a", 1, "train", "policy/model.bin")
    # A file deleted by anything else is still reported missing.
    (attempt / "reward" / "model.bin").unlink()
    assert store.problems(manifest) == ["reward/model.bin: missing"]


def test_prune_is_idempotent_and_accumulates(tmp_path: Path, sample_frame: object) -> None:
    store = ArtifactStore(str(tmp_path / "runs"))
    _commit_checkpoints(store, tmp_path, sample_frame)
    manifest = store.manifest("run-a", 1, "train")
    assert manifest is not None
    assert store.prune(manifest, ("policy",), setting=SETTING) is not None
    assert store.prune(manifest, ("policy",), setting=SETTING) is None  # nothing left to delete
    both = store.prune(manifest, ("policy", "reward"), setting=SETTING)
    assert both is not None and both.dirs == ("policy", "reward")
    assert both.pruned_bytes == 2 * 1002
    assert store.pruned(manifest) == both
    assert store.problems(manifest) == []


def test_a_crash_between_record_and_delete_leaves_a_consistent_attempt(
    tmp_path: Path, sample_frame: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ArtifactStore(str(tmp_path / "runs"))
    _commit_checkpoints(store, tmp_path, sample_frame)
    manifest = store.manifest("run-a", 1, "train")
    assert manifest is not None

    def crash(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(store._fs, "rm", crash)
    with pytest.raises(KeyboardInterrupt):
        store.prune(manifest, ("policy",), setting=SETTING)
    monkeypatch.undo()
    # Recorded, not yet deleted: still done, and the next prune (the next iteration's) finishes the job.
    attempt = Path(store.attempt_location("run-a", 1, "train", manifest.attempt))
    assert store.problems(manifest) == []
    assert (attempt / "policy" / "model.bin").is_file()
    record = store.pruned(manifest)
    assert record is not None and record.dirs == ("policy",)
    assert store.prune(manifest, ("policy",), setting=SETTING) is None  # nothing new to record ...
    assert not (attempt / "policy").exists()  # ... but the recorded directory is gone


def test_prune_on_an_s3_root(s3: object, s3_root: str, tmp_path: Path, sample_frame: object) -> None:
    store = ArtifactStore(s3_root, storage_options=s3.storage_options)  # type: ignore[attr-defined]
    _commit_checkpoints(store, tmp_path, sample_frame)
    manifest = store.manifest("run-a", 1, "train")
    assert manifest is not None
    record = store.prune(manifest, ("policy",), setting=SETTING)
    assert record is not None and record.pruned_bytes == 1002
    assert store.pruned(manifest) == record
    store._fs.invalidate_cache()
    assert not store._fs.exists(store._attempt_path(manifest, "policy/model.bin"))  # really deleted
    assert store.problems(manifest) == []  # the deleted objects read as pruned, not missing
    with pytest.raises(ArtifactError, match=r"was pruned"):
        store.get_dir("run-a", 1, "train", "policy", tmp_path / "out")
    # The other role is still there, byte for byte.
    assert (
        store.get_dir("run-a", 1, "train", "reward", tmp_path / "reward").joinpath("model.bin").stat().st_size
        == 1000
    )
    assert store.prune(manifest, ("policy",), setting=SETTING) is None
