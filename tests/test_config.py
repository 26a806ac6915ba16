"""Run config: loading, validation errors, presets, hashing, per-setting defaults, reference doc."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from rla_core.config import PRESETS, Backend, Band, Setting, load_config, parse_override
from rla_core.config_reference import REFERENCE_BEGIN, REFERENCE_END, config_reference_markdown
from rla_core.errors import ConfigError

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_unknown_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'rollout\.rollout_per_task'"):
        load_config(_write(tmp_path, "rollout: {rollout_per_task: 4}\n"))
    with pytest.raises(ConfigError, match=r"unknown key 'bogus'"):
        load_config(overrides=["bogus=1"])


def test_wrong_type_is_named() -> None:
    with pytest.raises(ConfigError, match=r"'rollout\.max_steps'.*got 'many'"):
        load_config(overrides=["rollout.max_steps=many"])
    with pytest.raises(ConfigError, match=r"'models\.serving\.backend'"):
        load_config(overrides=["models.serving.backend=tensorrt"])


def test_all_problems_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["rollout.max_steps=0", "judge.m=-1"])
    assert "'rollout.max_steps'" in str(err.value)
    assert "'judge.m'" in str(err.value)


def test_alpha_low_must_be_below_alpha_high() -> None:
    with pytest.raises(ConfigError, match=r"alpha_low=0\.8 must be below alpha_high=0\.8"):
        load_config(overrides=["adaptation.alpha_low=0.8"])
    with pytest.raises(ConfigError, match=r"alpha_low=0\.9 must be below alpha_high=0\.5"):
        load_config(overrides=["adaptation.alpha_low=0.9", "adaptation.alpha_high=0.5"])


def test_band_low_above_high_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"reward\.policy_acc_band.*low=0\.9 is above high=0\.1"):
        load_config(overrides=["reward.policy_acc_band={low: 0.9, high: 0.1}"])
    with pytest.raises(ValidationError):
        Band(low=0.5, high=0.4)
    # Both ends are inclusive: 0.2 and 0.8 are inside [0.2, 0.8], 0.19 is not.
    band = Band(low=0.2, high=0.8)
    assert band.contains(0.2) and band.contains(0.8) and not band.contains(0.19)


def test_negative_lambda_and_out_of_range_values_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"'reward\.lam'.*greater than or equal to 0"):
        load_config(overrides=["reward.lam=-0.5"])
    with pytest.raises(ConfigError, match=r"'adaptation\.alpha_high'"):
        load_config(overrides=["adaptation.alpha_high=1.5"])
    with pytest.raises(ConfigError, match=r"'reward\.invalid_judgment_penalty'"):
        load_config(overrides=["reward.invalid_judgment_penalty=1.0"])


@pytest.mark.parametrize("bad", ["rollout.max_steps", "=4", " =4", "rollout.max_steps:4"])
def test_bad_override_syntax(bad: str) -> None:
    with pytest.raises(ConfigError, match="is not of the form key=value"):
        load_config(overrides=[bad])


def test_override_into_a_value_and_bad_yaml() -> None:
    # 'iterations' is set by the default preset: walking into it is refused at once...
    with pytest.raises(ConfigError, match="'iterations' is a value, not a section"):
        load_config(overrides=["iterations.x=1"])
    # ...and a key left to the model's default becomes a mapping the validator refuses by name.
    with pytest.raises(ConfigError, match=r"'seed': Input should be a valid integer"):
        load_config(overrides=["seed.x=1"])
    with pytest.raises(ConfigError, match="value is not valid YAML"):
        parse_override("rollout.sampling.stop=[unclosed")


def test_a_key_inside_a_mapping_leaf_changes_that_key_alone() -> None:
    # The preset's options {dataset, train_tasks, eval_tasks} stay; each dotted key adds or changes one.
    cfg = load_config(
        preset="reasoning-gym", overrides=["plugin.options.answer=free", "plugin.options.train_tasks=8"]
    )
    assert cfg.plugin.options == {"dataset": "chain_sum", "train_tasks": 8, "eval_tasks": 2, "answer": "free"}
    # The whole mapping given is the value (a leaf replaces whole, as in a file).
    assert load_config(preset="reasoning-gym", overrides=["plugin.options={level: 2}"]).plugin.options == {
        "level": 2
    }
    assert load_config(overrides=["cluster.resources.gpu=2"]).cluster.resources == {"gpu": 2.0}


def test_override_values_are_yaml() -> None:
    cfg = load_config(
        overrides=[
            "rollout.rollouts_per_task=8",
            "rollout.sampling.stop=['\\n', END]",
            "models.environment=null",
            "models.serving.backend=vllm",
        ]
    )
    assert cfg.rollout.rollouts_per_task == 8
    assert cfg.rollout.sampling.stop == ("\\n", "END")
    assert cfg.models.environment is None
    assert cfg.models.serving.backend is Backend.VLLM
    assert parse_override("a.b=") == ("a.b", "")


def test_missing_and_malformed_config_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file '.*nope\.yaml' does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(_write(tmp_path, "rollout: {max_steps: [\n"))
    with pytest.raises(ConfigError, match="must contain a mapping"):
        load_config(_write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="unknown preset 'paper'; choose one of: default, coding"):
        load_config(preset="paper")


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads(name: str) -> None:
    cfg = load_config(preset=name)
    assert cfg.adaptation.alpha_low < cfg.adaptation.alpha_high
    assert len(cfg.config_hash()) == 64


def test_file_names_its_preset_and_overrides_win(tmp_path: Path) -> None:
    path = _write(tmp_path, "preset: coding\niterations: 7\n")
    cfg = load_config(path, overrides=["iterations=9"])
    assert cfg.setting is Setting.CODING
    assert cfg.iterations == 9  # file says 7, the override comes last


def test_config_hash_stable_and_sensitive(tmp_path: Path) -> None:
    path = _write(tmp_path, "iterations: 5\nrollout: {max_steps: 6}\n")
    first, second = load_config(path), load_config(path)
    assert first.config_hash() == second.config_hash()
    # The same values given another way (override instead of file) hash the same.
    assert load_config(overrides=["iterations=5", "rollout.max_steps=6"]).config_hash() == first.config_hash()
    changed = load_config(path, overrides=["rollout.max_steps=7"])
    assert changed.config_hash() != first.config_hash()
    # A stage's slice only moves when a field it reads changes (tests/flows/test_plan.py: every field).
    from rla_core.stage_inputs import JudgeInputs, RolloutInputs

    assert JudgeInputs.from_config(changed).key_json() == JudgeInputs.from_config(first).key_json()
    assert RolloutInputs.from_config(changed).key_json() != RolloutInputs.from_config(first).key_json()


def test_per_setting_defaults() -> None:
    text = load_config()
    assert (text.reward.policy_acc_band.low, text.reward.policy_acc_band.high) == (0.125, 0.875)
    assert (text.reward.rm_acc_band.low, text.reward.rm_acc_band.high) == (0.2, 0.8)
    assert text.adaptation.low_inclusive is True
    coding = load_config(overrides=["setting=coding"])
    assert (coding.reward.policy_acc_band.low, coding.reward.policy_acc_band.high) == (0.2, 0.8)
    assert (coding.reward.rm_acc_band.low, coding.reward.rm_acc_band.high) == (0.2, 0.8)  # spec §2.4
    assert coding.adaptation.low_inclusive is False
    assert coding.rollout.max_steps == 1
    # A user's explicit value beats the setting default.
    mine = load_config(overrides=["setting=coding", "adaptation.low_inclusive=true"])
    assert mine.adaptation.low_inclusive is True


def test_config_is_frozen() -> None:
    cfg = load_config()
    with pytest.raises(ValidationError):
        cfg.seed = 1  # type: ignore[misc]


def test_configuration_doc_is_up_to_date() -> None:
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(REFERENCE_BEGIN), text.index(REFERENCE_END) + len(REFERENCE_END)
    assert text[start:end] == config_reference_markdown(), (
        "docs/configuration.md is stale; run: .venv/bin/python -m rla_core.config_reference docs/configuration.md"
    )


def test_reference_lists_every_leaf_field() -> None:
    reference = config_reference_markdown()
    dumped = load_config().model_dump(mode="json")

    def leaves(data: dict[str, object], prefix: str = "") -> list[str]:
        out: list[str] = []
        for key, value in data.items():
            out += leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"]
        return out

    for key in leaves(dumped):
        assert f"| `{key}` |" in reference, key


def test_stored_configs_drop_retired_keys_but_new_configs_reject_them() -> None:
    from rla_core.config import RETIRED_KEYS, build_config, upgrade_stored_config

    stored = load_config().model_dump(mode="json")
    stored["training"]["keep_checkpoints"] = 2  # written by an earlier version
    assert "training.keep_checkpoints" in RETIRED_KEYS
    upgraded = upgrade_stored_config(stored)
    assert "keep_checkpoints" not in upgraded["training"] and "keep_checkpoints" in stored["training"]
    assert build_config(upgraded).config_hash() == load_config().config_hash()
    with pytest.raises(ConfigError, match=r"unknown key 'training\.keep_checkpoints'"):
        build_config(stored)


def test_images_need_a_gui_run_with_screenshots_and_vision_language_models() -> None:
    vl = ["models.policy=tiny-vl:policy", "models.reward=tiny-vl:reward"]
    on = load_config(preset="gui", overrides=[*vl, "models.images.policy=2", "models.images.reward=true"])
    assert (on.models.images.policy, on.models.images.reward) == (2, True)
    with pytest.raises(ConfigError, match=r"models\.images\.policy=1: only the gui setting has screenshots"):
        load_config(overrides=[*vl, "models.images.policy=1"])
    with pytest.raises(ConfigError, match=r"models\.images\.reward=True needs .* set gui\.screenshots=true"):
        load_config(preset="gui", overrides=[*vl, "models.images.reward=true", "gui.screenshots=false"])
    with pytest.raises(
        ConfigError, match=r"models\.reward='tiny:reward' is a tiny text-only model.*tiny-vl:reward"
    ):
        load_config(preset="gui", overrides=["models.reward=tiny:reward"])
    with pytest.raises(ConfigError, match=r"'models\.images\.policy'.*less than or equal to 8"):
        load_config(preset="gui", overrides=[*vl, "models.images.policy=9"])
    # The GUI presets show both roles their screens.
    for preset in ("gui", "paper-gui"):
        images = load_config(preset=preset).models.images
        assert (images.policy, images.reward) == (1, True)
