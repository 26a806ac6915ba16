"""Write and read 1,000,000 'rollouts' rows (256-char prompts and responses) through the ArtifactStore.

Targets: write < 5 s, read < 5 s on the 2-core dev machine. Also prints the file size and,
with ``--compare``, the same frame written with other Parquet codecs (why the store uses zstd-1).

    .venv/bin/python benchmarks/bench_parquet.py [--rows 1000000] [--compare] [--root DIR]
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time

import numpy as np
import polars as pl

from rla_core.schemas import get_schema, validate
from rla_core.store import ArtifactStore

_WORDS = [
    "you",
    "are",
    "in",
    "a",
    "kitchen",
    "there",
    "is",
    "a",
    "fridge",
    "table",
    "knife",
    "apple",
    "take",
    "open",
    "close",
    "go",
    "north",
    "south",
    "east",
    "west",
    "the",
    "door",
    "key",
    "chest",
    "coin",
    "red",
    "blue",
    "green",
    "small",
    "large",
    "look",
    "inventory",
    "put",
    "on",
    "in",
    "from",
    "with",
    "examine",
    "action",
    "step",
    "reward",
    "score",
    "goal",
    "room",
    "corridor",
    "bedroom",
    "bathroom",
    "drawer",
    "shelf",
    "lamp",
    "book",
    "plate",
    "cup",
]


def _texts(rng: np.random.Generator, rows: int, chars: int) -> pl.Series:
    """``rows`` strings of exactly ``chars`` characters of random words (text-like entropy)."""
    # One long stream of random words, cut into fixed-width rows (no per-row Python work).
    picks = rng.integers(0, len(_WORDS), size=rows * chars // 4).tolist()
    stream = " ".join(map(_WORDS.__getitem__, picks)).encode("ascii")
    while len(stream) < rows * chars:
        stream += stream[: rows * chars - len(stream)]
    cells = np.frombuffer(stream[: rows * chars], dtype=f"S{chars}")
    return pl.Series(cells).cast(pl.String)


def make_rollouts(rows: int, *, seed: int = 0) -> pl.DataFrame:
    """A synthetic 'rollouts' frame: 8 steps per rollout, 4 rollouts per task, every episode won or lost.

    The columns are the declared schema's (``rla_core.schemas``): those modelled below get text-like or
    plausible values, every other one is null of its declared dtype (what a text game leaves empty:
    images, screenshots, error kinds), so a column added to the schema later cannot break the benchmark.
    """
    rng = np.random.default_rng(seed)
    idx = np.arange(rows)
    outcome = np.where((idx // 8) % 2 == 0, 1.0, -1.0)
    modelled = pl.DataFrame(
        {
            "iteration": np.full(rows, 3, dtype=np.int64),
            "task_id": [f"task-{i}" for i in (idx // 32)],
            "slot_id": [f"slot-{i % 64}" for i in (idx // 32)],
            "pending": (idx // 32) % 5 == 0,
            "rollout_id": (idx // 8) % 4,
            "step": idx % 8,
            "prompt": _texts(rng, rows, 256),
            "response": _texts(rng, rows, 256),
            "action": [_WORDS[i % len(_WORDS)] for i in idx],
            "action_valid": idx % 17 != 0,
            "next_observation": [_WORDS[(i * 7) % len(_WORDS)] for i in idx],
            "expert_actions": [_WORDS[(i * 3) % len(_WORDS)] for i in idx],
            "done": idx % 8 == 7,
            "outcome": outcome,
            "prompt_tokens": rng.integers(40, 80, size=rows),
            "response_tokens": rng.integers(40, 80, size=rows),
            "status": np.where(outcome > 0, "won", "lost"),
            "attempt": np.zeros(rows, dtype=np.int64),
        }
    )
    schema = get_schema("rollouts").columns
    nulls = [pl.lit(None, dtype).alias(c) for c, dtype in schema.items() if c not in modelled.columns]
    return validate("rollouts", modelled.with_columns(nulls))


def compare_codecs(df: pl.DataFrame) -> None:
    """Write/read the frame in memory with several codecs; print time and size of each."""
    print(f"{'codec':<14}{'write_s':>9}{'read_s':>9}{'MiB':>9}")
    for codec, level in [("uncompressed", None), ("snappy", None), ("lz4", None), ("zstd", 1), ("zstd", 3)]:
        buf = io.BytesIO()
        t0 = time.perf_counter()
        df.write_parquet(buf, compression=codec, compression_level=level, row_group_size=131_072)  # type: ignore[arg-type]
        t1 = time.perf_counter()
        pl.read_parquet(io.BytesIO(buf.getvalue()))
        t2 = time.perf_counter()
        name = f"{codec}-{level}" if level else codec
        print(f"{name:<14}{t1 - t0:>9.2f}{t2 - t1:>9.2f}{len(buf.getvalue()) / 2**20:>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--compare", action="store_true", help="also time other Parquet codecs")
    parser.add_argument("--root", default=None, help="artifact root (default: a temporary directory)")
    args = parser.parse_args()

    t0 = time.perf_counter()
    df = make_rollouts(args.rows)
    print(
        f"rows={df.height} build_s={time.perf_counter() - t0:.2f} in_memory_MiB={df.estimated_size() / 2**20:.1f}"
    )
    if args.compare:
        compare_codecs(df)

    with tempfile.TemporaryDirectory() as tmp:
        store = ArtifactStore(args.root or tmp)
        t0 = time.perf_counter()
        with store.begin("bench", 1, "rollout") as writer:
            entry = writer.write_frame("rollouts", df)
            writer.commit("bench", inputs={})
        write_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        back = store.read_frame("bench", 1, "rollout", "rollouts")
        read_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        store.read_frame("bench", 1, "rollout", "rollouts", verify=False)
        read_noverify_s = time.perf_counter() - t0
        assert back.height == df.height
    print(
        f"store write_s={write_s:.2f} (target < 5) read_s={read_s:.2f} (target < 5, with sha256 check) "
        f"read_noverify_s={read_noverify_s:.2f} file_MiB={entry.bytes / 2**20:.1f}"
    )


if __name__ == "__main__":
    main()
