"""Setting adapters: one per (setting, engine), no rules inside, coding adapt without targets."""

from __future__ import annotations

import polars as pl
import pytest

from rla_core.config import GuiEngine, Setting, TextGameEngine, load_config
from rla_core.errors import ConfigError
from rla_core.schemas import SCHEMAS
from rla_core.settings import ADAPTERS, adapter_for, adapter_of
from rla_core.settings.base import EpisodeSetting, OneCallSetting, ProposalRequest
from rla_core.stage_inputs import AdaptInputs, JudgeInputs, LabelInputs


def test_adapters_expose_no_accuracy_or_reward_rule() -> None:
    # Task accuracy is rla_core.algo.labels.task_accuracy and rewards are rla_core.algo's: an adapter
    # has only the protocol's I/O operations, and says how its rollouts are played in exactly one way
    # (episodes in the environment it opens, or every episode in one generate call): playing them,
    # replays and side files are rla_core.dispatch's.
    operations = {
        "seed_tasks", "eval_tasks", "warm_start", "labels", "propose", "prerequisites", "check_task_file",
        "check_seed_tasks",
    }  # fmt: skip
    for setting, engine in ADAPTERS:
        adapter = adapter_for(setting, engine)
        public = {n for n in dir(adapter) if not n.startswith("_") and callable(getattr(adapter, n))}
        assert operations <= public, (setting, engine)
        assert not public & {"accuracy", "reward", "rewards", "accept", "score", "rollout"}, (setting, engine)
        assert isinstance(adapter, EpisodeSetting) != isinstance(adapter, OneCallSetting), (setting, engine)
        assert adapter.setting is setting


def test_every_engine_is_registered_as_its_own_adapter() -> None:
    names = {key: adapter_for(*key).env_name for key in ADAPTERS}
    assert names == {
        (Setting.TEXTGAME, TextGameEngine.TEXTWORLD): "textworld",
        (Setting.TEXTGAME, TextGameEngine.ALFWORLD): "alfworld",
        (Setting.CODING, None): "coding",
        (Setting.GUI, GuiEngine.MINIWOB): "miniwob",
        (Setting.GUI, GuiEngine.OSWORLD): "osworld",
    }
    with pytest.raises(ConfigError, match="registered: textgame/textworld"):
        adapter_for(Setting.GUI, None)


def test_a_slice_names_its_adapter_by_its_setting_and_engine() -> None:
    # judge and label open no environment: their slices carry the engine only, to pick the adapter.
    osworld = load_config(overrides=["setting=gui", "gui.engine=osworld"])
    assert adapter_of(JudgeInputs.from_config(osworld)).env_name == "osworld"
    alfworld = load_config(overrides=["textgame.engine=alfworld"])
    assert adapter_of(LabelInputs.from_config(alfworld)).env_name == "alfworld"
    coding = load_config(overrides=["setting=coding"])
    assert adapter_of(LabelInputs.from_config(coding)).env_name == "coding"


def test_coding_propose_without_targets_needs_no_environment_model() -> None:
    inputs = AdaptInputs.from_config(load_config(overrides=["setting=coding"]))
    job = ProposalRequest(frames={}, targets=[], seed=0, iteration=1)
    proposals = adapter_for(Setting.CODING, None).propose(inputs, job, env_model=None)
    assert proposals.height == 0
    assert proposals.columns == list(SCHEMAS["proposals"].columns)
    assert proposals.schema == pl.Schema(SCHEMAS["proposals"].columns)
