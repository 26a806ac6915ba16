"""ArtifactStore on a real local directory and a real S3 endpoint (moto server on loopback)."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from rla_core.errors import ArtifactError, RunNotFoundError, SchemaError
from rla_core.schemas import SCHEMA_VERSION, SCHEMAS, get_schema
from rla_core.store import ArtifactStore, EntryKind

FrameFactory = Callable[..., pl.DataFrame]


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    """The same tests on a local root and on an s3:// root."""
    if request.param == "local":
        return ArtifactStore(str(tmp_path / "runs"))
    s3 = request.getfixturevalue("s3")
    return ArtifactStore(request.getfixturevalue("s3_root"), storage_options=s3.storage_options)


def _file_bytes(store: ArtifactStore, uri: str) -> bytes:
    from rla_core.store.uri import filesystem

    fs, path = filesystem(uri, store.storage_options)
    fs.invalidate_cache()
    data: bytes = fs.cat_file(path)
    return data


def _overwrite(store: ArtifactStore, uri: str, data: bytes) -> None:
    from rla_core.store.uri import filesystem

    fs, path = filesystem(uri, store.storage_options)
    fs.pipe_file(path, data)
    fs.invalidate_cache()


def test_every_schema_round_trips(store: ArtifactStore, sample_frame: FrameFactory) -> None:
    frames = {name: sample_frame(name, 7) for name in SCHEMAS}
    with store.begin("run-a", 1, "all") as writer:
        for name, df in frames.items():
            writer.write_frame(name, df)
        committed = writer.commit("key-1", inputs={"upstream": "abc"}, extra={"note": 1})
    manifest = store.manifest("run-a", 1, "all")
    assert manifest == committed
    assert manifest.attempt == 1
    assert manifest.schema_version == SCHEMA_VERSION
    assert manifest.inputs == {"upstream": "abc"}
    assert sorted(manifest.frames) == sorted(SCHEMAS)
    for name, df in frames.items():
        back = store.read_frame("run-a", 1, "all", name)
        assert_frame_equal(back, df)
        entry = manifest.entry(f"{name}.parquet")
        assert entry is not None
        assert entry.kind is EntryKind.FRAME
        assert entry.rows == 7
        assert entry.fingerprint == get_schema(name).fingerprint()
        # The manifest's hash is the sha256 of the exact bytes stored.
        raw = _file_bytes(store, store.attempt_location("run-a", 1, "all", 1) + f"/{name}.parquet")
        assert entry.bytes == len(raw)
        assert entry.sha256 == hashlib.sha256(raw).hexdigest()
    assert store.is_done("run-a", 1, "all", "key-1", verify_hashes=True)
    assert not store.is_done("run-a", 1, "all", "key-2")


def test_write_frame_rejects_wrong_columns(store: ArtifactStore, sample_frame: FrameFactory) -> None:
    bad = sample_frame("eval").drop("steps").with_columns(pl.lit("x").alias("outcome"))
    writer = store.begin("run-a", 1, "evaluate")
    with pytest.raises(SchemaError) as err:
        writer.write_frame("eval", bad)
    assert "missing columns ['steps']" in str(err.value)
    assert "outcome is String, expected Float64" in str(err.value)


def test_read_with_missing_column_raises_schema_error(
    store: ArtifactStore, sample_frame: FrameFactory
) -> None:
    # An externally written (or older) file lacking 'score': the read-side check names the column.
    buf = io.BytesIO()
    sample_frame("rollouts").drop("score").write_parquet(buf)
    with store.begin("run-a", 2, "rollout") as writer:
        writer.write_file("rollouts.parquet", buf.getvalue())
        writer.commit("k", inputs={})
    with pytest.raises(SchemaError, match=r"missing columns \['score'\]"):
        store.read_frame("run-a", 2, "rollout", "rollouts")


def test_exception_before_commit_leaves_previous_attempt(
    store: ArtifactStore, sample_frame: FrameFactory
) -> None:
    first = sample_frame("eval", 3)
    with store.begin("run-a", 1, "evaluate") as writer:
        writer.write_frame("eval", first)
        writer.commit("k1", inputs={})
    with pytest.raises(RuntimeError, match="boom"), store.begin("run-a", 1, "evaluate") as writer:
        writer.write_frame("eval", sample_frame("eval", 9))
        raise RuntimeError("boom")
    manifest = store.manifest("run-a", 1, "evaluate")
    assert manifest is not None and manifest.attempt == 1
    assert_frame_equal(store.read_frame("run-a", 1, "evaluate", "eval"), first)
    # The crashed attempt 2 holds data but no manifest; the next attempt is 3 and never reuses it.
    assert store.begin("run-a", 1, "evaluate").attempt == 3


def test_killed_process_between_write_and_commit(tmp_path: Path, sample_frame: FrameFactory) -> None:
    root = str(tmp_path / "runs")
    store = ArtifactStore(root)
    first = sample_frame("eval", 3)
    with store.begin("run-k", 4, "evaluate") as writer:
        writer.write_frame("eval", first)
        writer.commit("k1", inputs={})
    # A real process writes attempt 2's data, then is SIGKILLed before it can commit.
    script = textwrap.dedent(
        f"""
        import os, signal
        import polars as pl
        from rla_core.store import ArtifactStore
        from rla_core.schemas import empty_frame
        w = ArtifactStore({root!r}).begin("run-k", 4, "evaluate")
        df = pl.concat([empty_frame("eval"), pl.DataFrame({{"iteration": [4], "task_id": ["t"],
              "rollout_id": [0], "outcome": [1.0], "steps": [2], "invalid_actions": [0], "status": ["won"],
              "attempt": [0]}})], how="diagonal")
        w.write_frame("eval", df)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    partial = Path(store.attempt_location("run-k", 4, "evaluate", 2))
    assert (partial / "eval.parquet").is_file()  # the data did reach the disk...
    assert not (partial / "_manifest.json").exists()  # ...but was never committed
    manifest = store.manifest("run-k", 4, "evaluate")
    assert manifest is not None and manifest.attempt == 1
    assert_frame_equal(store.read_frame("run-k", 4, "evaluate", "eval"), first)
    assert store.is_done("run-k", 4, "evaluate", "k1")


def test_forced_rerun_writes_new_attempt(store: ArtifactStore, sample_frame: FrameFactory) -> None:
    old, new = sample_frame("decisions", 2), sample_frame("decisions", 4)
    with store.begin("run-a", 3, "label") as writer:
        writer.write_frame("decisions", old)
        writer.commit("k", inputs={})
    old_uri = store.attempt_location("run-a", 3, "label", 1) + "/decisions.parquet"
    old_bytes = _file_bytes(store, old_uri)
    assert store.invalidate("run-a", 3, "label") == 1
    assert store.manifest("run-a", 3, "label") is None
    assert not store.is_done("run-a", 3, "label", "k")
    assert store.invalidate("run-a", 3, "label") is None  # nothing in use any more
    with store.begin("run-a", 3, "label") as writer:
        assert writer.attempt == 2
        writer.write_frame("decisions", new)
        writer.commit("k", inputs={})
    assert store.manifest("run-a", 3, "label").attempt == 2  # type: ignore[union-attr]
    assert_frame_equal(store.read_frame("run-a", 3, "label", "decisions"), new)
    assert _file_bytes(store, old_uri) == old_bytes  # the earlier attempt's data is untouched


def test_corrupt_and_missing_outputs_are_detected(store: ArtifactStore, sample_frame: FrameFactory) -> None:
    with store.begin("run-a", 1, "judge") as writer:
        writer.write_frame("judgments", sample_frame("judgments", 6))
        writer.commit("k", inputs={})
    uri = store.attempt_location("run-a", 1, "judge", 1) + "/judgments.parquet"
    raw = _file_bytes(store, uri)
    # Same size, one byte flipped: only the hash check sees it.
    flipped = raw[:100] + bytes([raw[100] ^ 0xFF]) + raw[101:]
    _overwrite(store, uri, flipped)
    assert store.is_done("run-a", 1, "judge", "k")
    assert not store.is_done("run-a", 1, "judge", "k", verify_hashes=True)
    with pytest.raises(ArtifactError, match="corrupt"):
        store.read_frame("run-a", 1, "judge", "judgments")
    # Truncated: the cheap size check sees it.
    _overwrite(store, uri, raw[:-10])
    assert not store.is_done("run-a", 1, "judge", "k")
    assert store.problems(store.manifest("run-a", 1, "judge")) == [  # type: ignore[arg-type]
        f"judgments.parquet: {len(raw) - 10} bytes, manifest says {len(raw)}"
    ]


def test_missing_things_raise_specific_errors(store: ArtifactStore, sample_frame: FrameFactory) -> None:
    with pytest.raises(RunNotFoundError, match="no run 'ghost'"):
        store.read_frame("ghost", 1, "rollout", "rollouts")
    with pytest.raises(RunNotFoundError):
        store.read_run_info("ghost")
    with pytest.raises(RunNotFoundError):
        store.list_iterations("ghost")
    with store.begin("run-a", 1, "rollout") as writer:
        writer.write_frame("rollouts", sample_frame("rollouts"))
        writer.commit("k", inputs={})
    with pytest.raises(ArtifactError, match="no committed attempt"):
        store.read_frame("run-a", 1, "judge", "judgments")
    with pytest.raises(ArtifactError, match="has no frame 'judgments'; it has: rollouts"):
        store.read_frame("run-a", 1, "rollout", "judgments")


def test_missing_file_on_local_disk(tmp_path: Path, sample_frame: FrameFactory) -> None:
    store = ArtifactStore(str(tmp_path))
    with store.begin("run-a", 1, "rollout") as writer:
        writer.write_frame("rollouts", sample_frame("rollouts"))
        writer.commit("k", inputs={})
    Path(store.attempt_location("run-a", 1, "rollout", 1), "rollouts.parquet").unlink()
    assert not store.is_done("run-a", 1, "rollout", "k")
    with pytest.raises(ArtifactError, match="listed in the manifest is missing"):
        store.read_frame("run-a", 1, "rollout", "rollouts")


def test_writer_misuse(store: ArtifactStore, sample_frame: FrameFactory) -> None:
    writer = store.begin("run-a", 1, "x")
    with pytest.raises(ArtifactError, match="reserved"):
        writer.write_file("_manifest.json", b"{}")
    writer.write_file("notes.json", b"{}")
    with pytest.raises(ArtifactError, match="already written"):
        writer.write_file("notes.json", b"{}")
    writer.commit("k", inputs={})
    with pytest.raises(ArtifactError, match="already committed"):
        writer.write_frame("eval", sample_frame("eval"))
    with pytest.raises(ArtifactError, match="already committed"):
        writer.commit("k", inputs={})
    assert store.read_file("run-a", 1, "x", "notes.json") == b"{}"


def test_root_not_writable_local(tmp_path: Path) -> None:
    # Tests run as root, which ignores permission bits; a root below a regular file is unwritable
    # for everyone.
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    store = ArtifactStore(str(blocker / "runs"))
    with pytest.raises(ArtifactError, match="check that the root is a writable directory"):
        store.begin("run-a", 1, "rollout")
    with pytest.raises(ArtifactError, match="writable directory"):
        store.write_run_info("run-a", config={}, config_hash="h", code_version="c")


def test_root_not_writable_s3_missing_bucket(s3_root: str, s3: object) -> None:
    options = s3.storage_options  # type: ignore[attr-defined]
    store = ArtifactStore("s3://no-such-bucket-rla/runs", storage_options=options)
    with pytest.raises(ArtifactError, match="bucket exists"):
        store.begin("run-a", 1, "rollout")


def test_checkpoint_dir_round_trip(store: ArtifactStore, tmp_path: Path) -> None:
    src = tmp_path / "ckpt-src"
    (src / "tokenizer").mkdir(parents=True)
    weights = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4 bytes of binary data
    (src / "model.safetensors").write_bytes(weights)
    (src / "config.json").write_text('{"hidden_size": 8}')
    (src / "tokenizer" / "tokenizer.json").write_text('{"v": 1}')
    with store.begin("run-a", 2, "train_policy") as writer:
        entries = writer.put_dir(src, "policy")
        writer.commit("k", inputs={})
    assert [e.path for e in entries] == [
        "policy/config.json",
        "policy/model.safetensors",
        "policy/tokenizer/tokenizer.json",
    ]
    out = store.get_dir("run-a", 2, "train_policy", "policy", tmp_path / "ckpt-out")
    assert (out / "model.safetensors").read_bytes() == weights
    assert (out / "config.json").read_text() == '{"hidden_size": 8}'
    assert (out / "tokenizer" / "tokenizer.json").read_text() == '{"v": 1}'
    with pytest.raises(ArtifactError, match="no directory 'reward'"):
        store.get_dir("run-a", 2, "train_policy", "reward", tmp_path / "x")
    # A corrupted checkpoint file is refused while it is materialised.
    _overwrite(store, store.attempt_location("run-a", 2, "train_policy", 1) + "/policy/config.json", b"{}")
    with pytest.raises(ArtifactError, match="corrupt"):
        store.get_dir("run-a", 2, "train_policy", "policy", tmp_path / "ckpt-bad")


def test_put_dir_rejects_missing_or_empty(tmp_path: Path) -> None:
    writer = ArtifactStore(str(tmp_path / "runs")).begin("run-a", 1, "train_policy")
    with pytest.raises(ArtifactError, match="does not exist"):
        writer.put_dir(tmp_path / "nope", "policy")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArtifactError, match="holds no files"):
        writer.put_dir(tmp_path / "empty", "policy")


def test_run_info_and_listings(store: ArtifactStore, sample_frame: FrameFactory) -> None:
    assert store.list_runs() == []
    first = store.write_run_info("run-b", config={"seed": 1}, config_hash="h1", code_version="c1")
    store.write_run_info("run-a", config={"seed": 2}, config_hash="h2", code_version="c2")
    for iteration, stage in [(0, "warm_start"), (1, "rollout"), (1, "judge"), (12, "rollout")]:
        with store.begin("run-b", iteration, stage) as writer:
            writer.write_frame("eval", sample_frame("eval"))
            writer.commit("k", inputs={})
    assert store.list_runs() == ["run-a", "run-b"]
    assert store.list_iterations("run-b") == [0, 1, 12]
    assert store.list_stages("run-b", 1) == ["judge", "rollout"]
    info = store.read_run_info("run-b")
    assert info == first
    assert (info.config, info.config_hash, info.code_version) == ({"seed": 1}, "h1", "c1")
    again = store.write_run_info("run-b", config={"seed": 1}, config_hash="h3", code_version="c1")
    assert again.created_at == first.created_at  # a rewrite keeps when the run started
    assert store.read_run_info("run-b").config_hash == "h3"


def test_committed_lists_the_attempts_in_use_only(store: ArtifactStore, sample_frame: FrameFactory) -> None:
    """A committed stage, a stage re-run (attempt 2 in use), an uncommitted one and an invalidated one."""
    store.write_run_info("run-c", config={}, config_hash="h", code_version="c")
    for iteration, stage, key in [
        (0, "bootstrap", "a"),
        (1, "rollout", "b"),
        (1, "rollout", "c"),
        (1, "judge", "d"),
    ]:
        with store.begin("run-c", iteration, stage) as writer:
            writer.write_frame("eval", sample_frame("eval"))
            writer.commit(key, inputs={})
    with pytest.raises(RuntimeError), store.begin("run-c", 2, "rollout") as writer:
        writer.write_frame("eval", sample_frame("eval"))
        raise RuntimeError("crashed before its commit")
    store.invalidate("run-c", 1, "judge")

    everything = store.committed("run-c")
    assert {where: (m.attempt, m.stage_key) for where, m in everything.items()} == {
        (0, "bootstrap"): (1, "a"),
        (1, "rollout"): (2, "c"),
    }
    assert list(store.committed("run-c", 1)) == [(1, "rollout")]
    assert store.committed("run-c", 2) == {} == store.committed("run-c", 7)
    with pytest.raises(RunNotFoundError):
        store.committed("no-such-run")


def test_content_key_depends_only_on_content(store: ArtifactStore, sample_frame: FrameFactory) -> None:
    keys = []
    for stage in ("a", "b"):
        with store.begin("run-a", 1, stage) as writer:
            writer.write_frame("eval", sample_frame("eval", 4))
            keys.append(writer.commit(f"key-{stage}", inputs={}).content_key)
    assert keys[0] == keys[1]
    with store.begin("run-a", 1, "c") as writer:
        writer.write_frame("eval", sample_frame("eval", 5))
        assert writer.commit("key-c", inputs={}).content_key != keys[0]


def test_local_commit_leaves_no_temp_files(tmp_path: Path, sample_frame: FrameFactory) -> None:
    store = ArtifactStore(str(tmp_path))
    with store.begin("run-a", 1, "evaluate") as writer:
        writer.write_frame("eval", sample_frame("eval"))
        writer.commit("k", inputs={})
    names = sorted(os.listdir(store.attempt_location("run-a", 1, "evaluate", 1)))
    assert names == ["_begun.json", "_manifest.json", "eval.parquet"]
