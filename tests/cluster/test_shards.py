"""Shards of a stage's work (rla_core.cluster.shards) and the keys of cluster configs (no Ray started)."""

from __future__ import annotations

import pytest

from rla_core.algo.curriculum import PlayTask
from rla_core.cluster.shards import episode_shards, split_even
from rla_core.config import load_config
from tasks.context import RunContext
from tasks.stage import StageRef, all_stages
from tests.recorded import rollout_request


def test_split_even_cuts_contiguous_slices_whose_sizes_differ_by_at_most_one() -> None:
    assert [list(r) for r in split_even(7, 3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [list(r) for r in split_even(6, 3)] == [[0, 1], [2, 3], [4, 5]]
    assert [list(r) for r in split_even(2, 3)] == [[0], [1]]  # never an empty shard
    assert split_even(0, 3) == []
    with pytest.raises(ValueError, match="at least 1"):
        split_even(4, 0)


def test_episode_shards_cover_every_episode_once_in_canonical_order() -> None:
    tasks = tuple(PlayTask(f"t{i}", f"s{i}", False, {}) for i in range(3))
    request = rollout_request(tasks, n=2, max_steps=4, seed=1)
    shards = episode_shards(request, 4)
    assert [s.episodes for s in shards] == [
        (("t0", 0), ("t0", 1)),
        (("t1", 0), ("t1", 1)),
        (("t2", 0),),
        (("t2", 1),),
    ]
    assert all(s.tasks == tasks for s in shards)  # each shard validates the same specs
    assert [e for s in shards for e in s.episode_keys()] == request.episode_keys()


def test_no_cluster_key_enters_any_stage_key() -> None:
    refs = {name: StageRef("keys", 0, name, 1, f"ck-{name}", {}) for name in ("tasks", "policy", "rollouts")}
    local = load_config(preset="test")
    ray = load_config(
        preset="test",
        overrides=[
            "cluster.backend=ray", "cluster.workers=3", "cluster.address=auto", "cluster.cpus_per_worker=0.5",
            "cluster.resources={rla_worker: 1}",
        ],
    )  # fmt: skip
    for name, stage in all_stages().items():
        keys = {stage.key(RunContext(run_id="keys", config=cfg), 1, refs) for cfg in (local, ray)}
        assert len(keys) == 1, name
