"""The append-only task registry (spec §3; artifact 'tasks', docs/data-dictionary.md)."""

from __future__ import annotations

import polars as pl
import pytest

from rla_core.algo.registry import TaskRegistry, task_id_for
from rla_core.errors import RegistryError
from rla_core.schemas import SCHEMAS, validate

SEED = [(f"s{i}", "textworld", {"seed": i, "size": "small"}) for i in range(4)]


def _seeded() -> TaskRegistry:
    return TaskRegistry.seed(SEED)


def test_seed_gives_one_active_v0_per_slot() -> None:
    reg = _seeded()
    assert reg.events.columns == list(SCHEMAS["tasks"].columns)
    active = reg.active()
    assert active["task_id"].to_list() == ["s0-v0", "s1-v0", "s2-v0", "s3-v0"]
    assert set(active["status"]) == {"active"} and set(active["version"]) == {0}
    assert reg.pending().height == 0
    assert reg.root_spec("s2") == {"seed": 2, "size": "small"}


def test_duplicate_seed_slots() -> None:
    with pytest.raises(RegistryError, match=r"duplicate slot ids \['a'\]"):
        TaskRegistry.seed([("a", "tw", {}), ("a", "tw", {})])


def test_propose_accept_lineage() -> None:
    reg0 = _seeded()
    reg1, tid = reg0.propose("s1", {"seed": 1, "size": "large"}, "harder", 1.0, 1)
    assert tid == "s1-v1" == task_id_for("s1", 1)
    assert reg0.pending().height == 0  # immutability: the old registry is unchanged
    pend = reg1.pending().row(0, named=True)
    assert (pend["parent_task_id"], pend["root_task_id"], pend["goal"], pend["prev_acc"]) == (
        "s1-v0",
        "s1-v0",
        "harder",
        1.0,
    )
    assert pend["created_iter"] == 1 and pend["accepted_iter"] is None

    reg2 = reg1.accept(tid, 0.5, 2)
    snap = reg2.snapshot().filter(pl.col("slot_id") == "s1")
    assert snap.select("task_id", "status").rows() == [("s1-v0", "retired"), ("s1-v1", "active")]
    new = reg2.task("s1-v1")
    assert new["acc_after"] == 0.5 and new["accepted_iter"] == 2 and new["spec"]["size"] == "large"
    # the anchor stays the root, never the parent
    assert reg2.root_spec("s1") == {"seed": 1, "size": "small"}
    assert reg2.history("s1")["event"].to_list() == ["seed", "propose", "retire", "accept"]
    # event ids are dense and increasing
    assert reg2.events["event_id"].to_list() == list(range(reg2.events.height))


def test_reject_keeps_history_and_versions_stay_unique() -> None:
    reg, tid = _seeded().propose("s0", {"seed": 9}, "easier", 0.0, 1)
    reg = reg.reject(tid, 0.0, 2)
    assert reg.task(tid)["status"] == "rejected"
    assert reg.active().filter(pl.col("slot_id") == "s0")["task_id"].to_list() == ["s0-v0"]
    reg, tid2 = reg.propose("s0", {"seed": 10}, "easier", 0.0, 2)
    assert tid2 == "s0-v2"  # v1 was rejected; its id is never reused


def test_snapshot_at_iteration_replays_the_events() -> None:
    reg, tid = _seeded().propose("s3", {"seed": 33}, "harder", 0.875, 1)
    reg = reg.accept(tid, 0.5, 2)
    at1 = reg.snapshot(at_iteration=1).filter(pl.col("slot_id") == "s3")
    assert at1.select("task_id", "status").rows() == [("s3-v0", "active"), ("s3-v1", "pending")]
    at0 = reg.snapshot(at_iteration=0).filter(pl.col("slot_id") == "s3")
    assert at0["task_id"].to_list() == ["s3-v0"]


def test_illegal_transitions_name_the_options() -> None:
    reg, tid = _seeded().propose("s0", {"seed": 5}, "harder", 1.0, 1)
    with pytest.raises(RegistryError, match="slot 's0' already has pending task 's0-v1'"):
        reg.propose("s0", {"seed": 6}, "harder", 1.0, 1)
    with pytest.raises(RegistryError, match="unknown slot 'nope'; known slots: s0, s1, s2, s3"):
        reg.propose("nope", {}, "harder", 1.0, 1)
    with pytest.raises(RegistryError, match="cannot accept unknown task 'x-v1'; pending tasks: s0-v1"):
        reg.accept("x-v1", 0.5, 2)
    with pytest.raises(RegistryError, match="status is 'active', only a 'pending' task can be rejected"):
        reg.reject("s1-v0", 0.5, 2)
    done = reg.accept(tid, 0.5, 2)
    with pytest.raises(RegistryError, match="status is 'active'"):
        done.accept(tid, 0.5, 3)


def test_sample_active_excludes_pending_slots_and_is_deterministic() -> None:
    reg, _ = _seeded().propose("s2", {"seed": 22}, "harder", 1.0, 1)
    draws = [reg.sample_active(2, seed=7)["slot_id"].to_list() for _ in range(3)]
    assert draws[0] == draws[1] == draws[2] and len(draws[0]) == 2
    assert "s2" not in draws[0]
    every = {s for seed in range(30) for s in reg.sample_active(2, seed=seed)["slot_id"]}
    assert every == {"s0", "s1", "s3"}  # s2 is never drawn while its rewrite is pending
    assert reg.sample_active(10, seed=0)["slot_id"].to_list() == ["s0", "s1", "s3"]  # fewer eligible than k


def test_round_trip_through_the_artifact_schema() -> None:
    reg, tid = _seeded().propose("s0", {"seed": 5}, "harder", 1.0, 1)
    reg = reg.accept(tid, 0.25, 2)
    stored = validate("tasks", reg.events)
    again = TaskRegistry.from_events(stored)
    assert again.snapshot().equals(reg.snapshot())


def test_spec_must_be_json() -> None:
    with pytest.raises(RegistryError, match="not JSON-serialisable"):
        _seeded().propose("s0", {"bad": object()}, "harder", 1.0, 1)
