"""Setting adapters (issue 10): no rules inside, coding adapt without targets."""

from __future__ import annotations

import polars as pl

from rla_core.config import Setting, load_config
from rla_core.schemas import SCHEMAS
from rla_core.settings import ProposalRequest, adapter_for
from rla_core.stage_inputs import AdaptInputs


def test_adapters_expose_no_accuracy_or_reward_rule() -> None:
    # Task accuracy is rla_core.algo.labels.task_accuracy and rewards are rla_core.algo's: an adapter
    # has only the protocol's I/O operations.
    operations = {"seed_tasks", "eval_tasks", "warm_start", "rollout", "labels", "propose"}
    for setting in Setting:
        adapter = adapter_for(setting)
        public = {n for n in dir(adapter) if not n.startswith("_") and callable(getattr(adapter, n))}
        assert operations <= public, setting
        assert not public & {"accuracy", "reward", "rewards", "accept", "score"}, setting


def test_coding_propose_without_targets_needs_no_environment_model() -> None:
    inputs = AdaptInputs.from_config(load_config(overrides=["setting=coding"]))
    job = ProposalRequest(frames={}, targets=[], seed=0, iteration=1)
    proposals = adapter_for(Setting.CODING).propose(inputs, job, env_model=None)
    assert proposals.height == 0
    assert proposals.columns == list(SCHEMAS["proposals"].columns)
    assert proposals.schema == pl.Schema(SCHEMAS["proposals"].columns)
