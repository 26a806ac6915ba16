"""Properties of configuration loading, generated from the config models themselves.

For every shipped preset and every leaf of its effective configuration (tuples, lists, dicts and nulls
included; the leaves are found by walking the pydantic models, not from a hand-kept list):

- *a key set to its current value changes nothing*: ``--set KEY=<current value>`` leaves the whole
  effective configuration equal (an override that raises counts as a failure);
- *a key the preset does not declare* has the embedded default's value, or the setting's documented
  per-setting value.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from rla_core.config import (
    PRESETS,
    RunConfig,
    Setting,
    config_leaves,
    embedded_defaults,
    load_config,
    preset_dict,
    setting_defaults,
)
from rla_core.errors import ConfigError


@cache
def _effective(preset: str) -> dict[str, Any]:
    return dict(config_leaves(RunConfig, load_config(preset=preset).model_dump(mode="json")))


def _same_value_violations(preset: str) -> list[str]:
    base = load_config(preset=preset)
    found = []
    for key, value in _effective(preset).items():
        try:
            again = load_config(preset=preset, overrides=[f"{key}={json.dumps(value)}"])
        except ConfigError as exc:
            found.append(f"{preset}: {key}={value!r} raises: {exc}")
            continue
        changed = {
            k: (v, w)
            for (k, v), (_, w) in zip(
                config_leaves(RunConfig, base.model_dump(mode="json")),
                config_leaves(RunConfig, again.model_dump(mode="json")),
                strict=True,
            )
            if v != w
        }
        if changed:
            found.append(f"{preset}: {key}={value!r} changes {changed}")
    return found


@pytest.mark.parametrize("preset", PRESETS)
def test_setting_a_key_to_its_current_value_changes_nothing(preset: str) -> None:
    assert _same_value_violations(preset) == []


@pytest.mark.parametrize("preset", PRESETS)
def test_undeclared_keys_have_the_embedded_or_per_setting_default(preset: str) -> None:
    declared = dict(config_leaves(RunConfig, preset_dict(preset)))
    embedded = dict(config_leaves(RunConfig, embedded_defaults()))
    setting = Setting(_effective(preset)["setting"])
    per_setting = dict(config_leaves(RunConfig, setting_defaults(setting)))
    wrong = {
        key: (value, per_setting.get(key, embedded[key]))
        for key, value in _effective(preset).items()
        if key not in declared and value != per_setting.get(key, embedded[key])
    }
    assert wrong == {}


def test_every_preset_leaf_is_covered() -> None:
    # The walk reaches every leaf field of every section (dict-typed leaves such as cluster.resources
    # are one leaf each, not walked into), so the two properties above cover all (preset, key) pairs.
    def fields(model: type[BaseModel]) -> int:
        return sum(
            fields(f.annotation)
            if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
            else 1
            for f in model.model_fields.values()
        )

    for preset in PRESETS:
        assert len(_effective(preset)) == fields(RunConfig)


def test_one_key_set_keeps_its_section_siblings() -> None:
    # The bug this guards: setting any key of training.policy moved its lr from 1e-4 to the class's 1e-6.
    cfg = load_config(overrides=["training.policy.micro_batch_size=4"])
    assert cfg.training.policy.micro_batch_size == 4
    assert cfg.training.policy.lr == 1e-4
    assert cfg.training.reward.lr == 1e-4
    judge = load_config(overrides=["judge.sampling.temperature=0.8"]).judge.sampling
    assert (judge.top_p, judge.max_new_tokens) == (1.0, 24)
    assert load_config(overrides=["adaptation.accept_band.high=0.8"]).adaptation.accept_band.low == 0.2


def test_coding_preset_trains_at_the_documented_learning_rate() -> None:
    cfg = load_config(preset="coding")
    assert (cfg.training.policy.lr, cfg.training.reward.lr) == (1e-4, 1e-4)
    assert (cfg.training.policy.update_per_step, cfg.training.reward.update_per_step) == (2, 2)


@pytest.mark.parametrize("setting", list(Setting))
def test_per_setting_defaults_only_list_what_the_setting_changes(setting: Setting) -> None:
    # A per-setting entry equal to the declared default would be a second declaration of that default.
    embedded = dict(config_leaves(RunConfig, embedded_defaults()))
    derived = config_leaves(RunConfig, setting_defaults(setting))
    assert [key for key, value in derived if embedded[key] == value] == []
    assert {key for key, _ in derived} <= embedded.keys()


def test_a_section_given_as_a_mapping_changes_only_the_keys_it_names(tmp_path: Path) -> None:
    # --set of a whole section and a file's section both merge key by key into the preset's values.
    cfg = load_config(preset="coding", overrides=["rollout.sampling={temperature: 0.5}"])
    assert (cfg.rollout.sampling.temperature, cfg.rollout.sampling.max_new_tokens) == (0.5, 96)
    night = tmp_path / "night.yaml"
    night.write_text("preset: coding\ntraining: {policy: {lr: 0.001}}\n", encoding="utf-8")
    cfg = load_config(night)
    assert (cfg.training.policy.lr, cfg.training.policy.update_per_step) == (1e-3, 2)
    # A mapping-valued leaf is one key: a later layer replaces it whole.
    cfg = load_config(overrides=["cluster.resources={a: 1}", "cluster.resources={b: 2}"])
    assert cfg.cluster.resources == {"b": 2.0}
