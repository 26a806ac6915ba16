"""Setting adapters (issue 10): one stage-order declaration, no rules inside, coding adapt without targets."""

from __future__ import annotations

import polars as pl

from rla_core.config import Setting, load_config
from rla_core.schemas import SCHEMAS
from rla_core.settings import SETUP_STAGES, adapter_for, signal_stages, stage_order


def test_stage_order_is_declared_once_per_setting() -> None:
    tail = ("label", "adapt", "train_policy", "train_reward", "evaluate")
    assert stage_order(Setting.TEXTGAME) == ("rollout", "judge", *tail)
    assert stage_order(Setting.GUI) == ("rollout", "judge", *tail)
    assert stage_order(Setting.CODING) == ("rollout", "write_tests", "execute", *tail)
    assert SETUP_STAGES == ("seed_tasks", "bootstrap")
    assert all(stage_order(s)[1 : 1 + len(signal_stages(s))] == signal_stages(s) for s in Setting)


def test_adapters_expose_no_accuracy_or_reward_rule() -> None:
    for setting in Setting:
        adapter = adapter_for(setting)
        assert not hasattr(adapter, "accuracy"), setting  # task accuracy: rla_core.algo.labels.task_accuracy


def test_coding_propose_without_targets_needs_no_environment_model() -> None:
    cfg = load_config(overrides=["setting=coding"])
    proposals = adapter_for(Setting.CODING).propose(cfg, {}, [], env_model=None, seed=0, iteration=1)
    assert proposals.height == 0
    assert proposals.columns == list(SCHEMAS["proposals"].columns)
    assert proposals.schema == pl.Schema(SCHEMAS["proposals"].columns)


def test_stage_runs_follows_the_ablation_switches_and_the_evaluation_schedule() -> None:
    from rla_core.config import load_config
    from rla_core.settings import stage_runs

    cfg = load_config(overrides=["iterations=5", "evaluation.every=2"])
    assert [it for it in range(1, 6) if stage_runs(cfg, it, "evaluate")] == [
        2,
        4,
        5,
    ]  # every 2nd and the last
    assert stage_runs(cfg, 1, "adapt") and stage_runs(cfg, 1, "train_reward") and stage_runs(cfg, 1, "judge")
    frozen = load_config(overrides=["adaptation.enabled=false", "training.reward.enabled=false"])
    assert not stage_runs(frozen, 1, "adapt") and not stage_runs(frozen, 1, "train_reward")
    assert stage_runs(frozen, 1, "train_policy")
