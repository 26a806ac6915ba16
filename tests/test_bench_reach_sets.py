"""The `bench-reach` candidate: its three game sets and its config file (docs/bench-design.md §11)."""

from __future__ import annotations

import json
from pathlib import Path

from rla_core.config import load_config
from rla_core.envs.textworld_env import validate_textworld_spec

ROOT = Path(__file__).resolve().parents[1]
CANDIDATE = ROOT / "benchmarks" / "bench_reach_candidate.yaml"


def _specs(path: str) -> list[dict]:
    rows = [json.loads(line) for line in (ROOT / path).read_text().splitlines() if line.strip()]
    assert len({row["slot_id"] for row in rows}) == len(rows)
    return [row["spec"] for row in rows]


def test_bench_reach_sets_are_disjoint_long_quests() -> None:
    cfg = load_config(CANDIDATE)
    sets = {
        "train": _specs(cfg.textgame.tasks),
        "validation": _specs("data/textworld/bench-reach-validation.jsonl"),
        "heldout": _specs(cfg.textgame.eval_tasks),
    }
    assert {name: len(specs) for name, specs in sets.items()} == {
        "train": 32,
        "validation": 48,
        "heldout": 50,
    }
    assert cfg.textgame.eval_tasks == "data/textworld/bench-reach-heldout.jsonl"  # runs here override it
    seen: set[str] = set()
    for specs in sets.values():
        for spec in specs:
            validate_textworld_spec(spec)
            assert spec["quest_length"] in (4, 5)
            assert 1 <= spec["world_size"] <= 3 and 2 <= spec["nb_objects"] <= 4
        keys = {json.dumps(spec, sort_keys=True) for spec in specs}
        assert not keys & seen  # no game in two sets
        seen |= keys
        # quests need >= 4 steps on average (walkthroughs measured 4.06 / 4.12 on train / validation, §11)
        assert sum(spec["quest_length"] for spec in specs) / len(specs) >= 4


def test_bench_reach_candidate_keeps_bench_long_filter_and_budget() -> None:
    reach, long = load_config(CANDIDATE), load_config(preset="bench-long")
    assert (reach.reward.policy_acc_band.low, reach.reward.policy_acc_band.high) == (0.0, 1.0)
    assert reach.reward.policy_acc_band == long.reward.policy_acc_band
    assert reach.rollout.max_steps == reach.evaluation.max_steps == long.rollout.max_steps == 16
    assert reach.models.warm_start_seed == 0  # one warm start shared by every run
    assert reach.models.policy_reading_drills == long.models.policy_reading_drills
    assert (reach.models.policy_demo_noise, reach.models.warm_start_epochs) == (0.3, 2)
