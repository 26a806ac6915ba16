"""Ray actors kept across calls (:func:`rla_core.cluster.ray_session.keep_actors`): what a run with vLLM
replicas uses to keep one server per replica (docs/gpus-and-scale.md#server-lifetime).

The Ray side runs in tests/cluster/kept_on_ray.py, inside a private network namespace with only `lo`.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.cluster.two_nodes import run_in_netns

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")

REPO = Path(__file__).resolve().parents[2]


def test_kept_actors_are_reused_by_key_replaced_when_dead_and_released_at_the_end(tmp_path: Path) -> None:
    proc, left = run_in_netns(
        [sys.executable, "-m", "tests.cluster.kept_on_ray", str(tmp_path / "report.json")],
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert left == []  # the embedded Ray stopped with the process that started it
    report = json.loads((tmp_path / "report.json").read_text())
    first, again = report["first"], report["again"]
    assert len(set(first)) == 2 and report["driver"] not in first
    assert again == first  # same key (request, shard index) → the same actor, call after call
    assert report["reward"][0] not in first  # another request: an actor of its own, kept beside them
    plain = report["plain"]  # no hold: fresh actors per call, as before
    assert not set(plain[0]) & set(plain[1]) and not set(plain[0]) & set(first)
    assert "probe 1/2" in report["lost"] and "was lost" in report["lost"]  # the same error as a stage's actor
    # What the lost actor held (a tethered group, as a replica's vLLM server) ended with its process.
    gone_s = report["lost_hold_gone_s"]
    print(f"the lost actor's tethered group was gone {gone_s} s after the call failed")
    assert gone_s is not None and gone_s < 10, gone_s
    replaced = report["replaced"]
    assert replaced[0] not in first and replaced[1] == first[1]  # only the dead one started afresh
    assert report["started"] == 4  # 2 policy + 1 reward + 1 replacement
    # A shard's Python error fails the call as itself, naming the shard; the other shard, still running,
    # ends when the release closes what it uses (well before cluster.start_timeout_s=60 s).
    assert report["failed"][0] == "shard 0 failed" and report["failed"][1].startswith("raised in probe 1/2")
    assert report["close_s"] < 30
    released = {(r["role"], r["index"]): r["state"] for r in report["released"]}
    assert set(released) == {("policy", 0), ("policy", 1), ("reward", 0)}
    assert all(state["closed"] for state in released.values())  # each hold exited in its actor
    assert released[("policy", 0)] == {"pid": replaced[0], "calls": 1, "closed": True}
    assert released[("policy", 1)] == {"pid": first[1], "calls": 3, "closed": True}
    assert report["groups"] == ["REMOVED"]  # every placement group removed
    assert report["holds_left"] == []  # every released hold stopped its group
    assert not set(report["alive"]) & {*first, *replaced, *report["reward"]}
    # No room beside the other role's kept actors: they are released (cleanly) first, and start afresh.
    turns = report["turns"]
    assert not set(turns["policy_again"]) & set(turns["policy"])
    assert turns["released"] == [
        ["policy", 0, True], ["policy", 1, True], ["reward", 0, True], ["policy", 0, True], ["policy", 1, True],
    ]  # fmt: skip
