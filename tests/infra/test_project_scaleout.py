"""benchmarks/project_scaleout.py: the projection's formula on hand-computed numbers, and the table on
docs/gpus-and-scale.md is the script's output (derived, not typed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.project_scaleout import (
    Rates,
    Workload,
    component_step_s,
    judge_s,
    project,
    rollout_s,
    table,
    weak,
    weak_table,
)

REPO = Path(__file__).resolve().parents[2]
RATES = Rates(
    cpu_step_s=0.1, start_s=10.0, single_stream=100.0, saturated=1000.0, policy_tokens=50, judge_tokens=20
)


def test_rollout_is_latency_bound_below_saturation_and_throughput_bound_above() -> None:
    # 40 episodes on 4 shards: 10 each; 10/1000 = 0.01 s per token = 1/100: the two bounds meet.
    # 10 s + 5 steps * (10 * 0.1 s + 50 tokens * 0.01 s) = 10 + 5 * 1.5 = 17.5 s
    assert rollout_s(40, 5, 4, RATES) == pytest.approx(17.5)
    # 41 episodes: 11 on the first shards (ceil), throughput-bound: 10 + 5 * (1.1 + 50 * 0.011) = 18.25
    assert rollout_s(41, 5, 4, RATES) == pytest.approx(18.25)
    # 8 episodes on 8 shards: 1 each, latency-bound: 10 + 5 * (0.1 + 50 * 0.01) = 13
    assert rollout_s(8, 5, 8, RATES) == pytest.approx(13.0)


def test_judge_runs_each_server_at_its_batch_rate() -> None:
    # in flight 4: min(1000, 4 * 100) = 400 tokens/s per server; 600 judgments * 20 tokens / (3 * 400) = 10
    assert judge_s(600, 3, 4, RATES) == pytest.approx(20.0)
    # in flight 64: saturated, 1000 tokens/s: 600 * 20 / 3000 = 4
    assert judge_s(600, 3, 64, RATES) == pytest.approx(14.0)


def test_iteration_sums_the_stages_and_amortises_evaluation() -> None:
    work = Workload(
        episodes=40, steps=5, judgments_per_step=3, eval_episodes=8, eval_steps=5, eval_every=2, in_flight=4
    )
    out = project(work, RATES, workers=4)
    # judge: 3 * 40 * 5 = 600 judgments at 400 tokens/s per server, 4 servers: 10 + 12000 / 1600 = 17.5
    # evaluate: 8 episodes on 4 shards (2 each, latency-bound): (10 + 5 * (0.2 + 0.5)) / 2 = 6.75
    assert out == pytest.approx({"rollout": 17.5, "judge": 17.5, "evaluate": 6.75, "total": 41.75})


def test_the_docs_show_the_scripts_table() -> None:
    page = (REPO / "docs" / "gpus-and-scale.md").read_text(encoding="utf-8")
    assert table() in page, "re-run `python benchmarks/project_scaleout.py` and paste its output"
    assert weak_table() in page, "re-run `python benchmarks/project_scaleout.py --weak` and paste its output"


def test_weak_scaling_grows_the_episodes_with_the_shards() -> None:
    work = Workload(
        episodes=40, steps=5, judgments_per_step=3, eval_episodes=8, eval_steps=5, eval_every=2, in_flight=4
    )
    # 2 nodes: 80 episodes (and 1200 judgments); the held-out evaluation keeps its 8 episodes.
    assert weak(work, 2) == Workload(
        episodes=80, steps=5, judgments_per_step=3, eval_episodes=8, eval_steps=5, eval_every=2, in_flight=4
    )
    out = project(weak(work, 2), RATES, workers=8)
    # rollout: 80 on 8 shards = 10 each, as 40 on 4: 17.5 s; judge: 1200 * 20 / (8 * 400) = 7.5 → 17.5 s;
    # evaluate: 8 episodes on 8 shards (1 each, latency-bound): (10 + 5 * (0.1 + 0.5)) / 2 = 6.5 s
    assert out == pytest.approx({"rollout": 17.5, "judge": 17.5, "evaluate": 6.5, "total": 41.5})


def test_component_step_cost_amortises_the_reset_over_the_episode() -> None:
    inputs = {
        "component_step_costs_under_load": {"engine_step_s": 0.1, "planner_label_s": 0.05, "reset_s": 0.4}
    }
    assert component_step_s(inputs, steps=8) == pytest.approx(0.2)  # 0.1 + 0.05 + 0.4 / 8
