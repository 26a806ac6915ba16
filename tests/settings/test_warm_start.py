"""Warm start with reading drills (docs/bench-design.md §8): trained once, cached, refused where it cannot apply."""

from __future__ import annotations

from pathlib import Path

import pytest

from rla_core.config import load_config
from rla_core.errors import ConfigError
from rla_core.settings.warm_start import READING_BATCH_SIZE, warm_start_models
from rla_core.stage_inputs import BootstrapInputs


def test_reading_drills_train_first_once_and_then_come_from_the_cache(tmp_path: Path) -> None:
    cfg = load_config(
        preset="test",
        overrides=[
            f"models.cache_dir={tmp_path}/models",
            "models.policy_reading_drills=40",
            "models.warm_start_epochs=1",
            "models.reward_warm_start_epochs=0",
        ],
    )
    first = warm_start_models(BootstrapInputs.from_config(cfg), out_dir=tmp_path / "a", seed=0)
    # one pass over 40 drills in batches of 16, then the demonstrations on top of the read-first policy
    assert first.metrics["policy/reading_rows_used"] == 40.0
    assert first.metrics["policy/reading_optimizer_steps"] == -(-40 // READING_BATCH_SIZE)
    assert first.metrics["policy/warm_start_optimizer_steps"] > 0
    entries = sorted(p.name for p in (tmp_path / "models" / "warm").iterdir())
    assert len(entries) == 3  # policy-reading-*, policy-*, reward-*
    assert sum(e.startswith("policy-reading-") for e in entries) == 1
    second = warm_start_models(BootstrapInputs.from_config(cfg), out_dir=tmp_path / "b", seed=0)
    assert second.metrics == first.metrics
    assert sorted(p.name for p in (tmp_path / "models" / "warm").iterdir()) == entries
    assert (tmp_path / "a" / "policy" / "model.safetensors").read_bytes() == (
        tmp_path / "b" / "policy" / "model.safetensors"
    ).read_bytes()
    # other drills make another reading entry and another policy warm start (the key follows the drills)
    more = cfg.model_copy(update={"models": cfg.models.model_copy(update={"policy_reading_drills": 24})})
    warm_start_models(BootstrapInputs.from_config(more), out_dir=tmp_path / "c", seed=0)
    after = sorted(p.name for p in (tmp_path / "models" / "warm").iterdir())
    assert sum(e.startswith("policy-reading-") for e in after) == 2
    assert sum(e.startswith("policy-") and not e.startswith("policy-reading-") for e in after) == 2


def test_reading_drills_are_refused_outside_tiny_text_game_policies(tmp_path: Path) -> None:
    # A rule of the config (its setting and policy), refused when it is loaded, before any stage.
    with pytest.raises(ConfigError, match=r"policy_reading_drills .*setting=coding"):
        load_config(overrides=["setting=coding", "models.policy_reading_drills=8"])
    with pytest.raises(ConfigError, match=r"policy_reading_drills .*policy=org/model"):
        load_config(overrides=["models.policy=org/model", "models.policy_reading_drills=8"])
    assert load_config(overrides=["models.policy_reading_drills=8"]).models.policy_reading_drills == 8
