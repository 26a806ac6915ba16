"""`rla config show`: the effective configuration a run would use, and where each changed value came from."""

from __future__ import annotations

from pathlib import Path

import yaml

from flows.runs import load_run_config
from rla_core.config import build_config, load_config
from rla_core.store import ArtifactStore
from tests.flows.conftest import invoke_cli


def test_show_prints_the_config_a_run_would_use(tmp_path: Path) -> None:
    code, output = invoke_cli(["config", "show", "--preset", "coding", "--set", "judge.m=5"], tmp_path)
    assert code == 0, output
    shown = build_config(yaml.safe_load(output))
    assert shown == load_config(preset="coding", overrides=["judge.m=5"])
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_diff_names_each_changed_key_with_its_origin(tmp_path: Path) -> None:
    (tmp_path / "night.yaml").write_text("preset: coding\nseed: 7\n", encoding="utf-8")
    code, output = invoke_cli(
        ["config", "show", "--config", "night.yaml", "--set", "training.policy.micro_batch_size=4", "--diff"],
        tmp_path,
    )
    assert code == 0, output
    lines = output.strip().splitlines()
    assert 'setting: "coding"  # preset coding' in lines
    assert "seed: 7  # file night.yaml" in lines
    assert 'models.environment: "tiny:environment"  # setting coding' in lines
    assert "training.policy.update_per_step: 2  # preset coding" in lines
    assert "training.policy.micro_batch_size: 4  # --set" in lines
    # Only changed keys: the lr the section kept is the default, so it is not listed.
    assert not any(line.startswith("training.policy.lr") for line in lines)
    # One line per changed key: the preset's 14, the file's seed and the --set.
    assert len(lines) == 16
    code, output = invoke_cli(["config", "show", "--diff"], tmp_path)
    assert (code, output.strip()) == (0, "# same as the embedded default")


def test_a_bad_config_is_one_line_exit_1(tmp_path: Path) -> None:
    code, output = invoke_cli(["config", "show", "--set", "training.policy.lr=2"], tmp_path)
    assert code == 1
    assert output.startswith("error: invalid config: 'training.policy.lr'"), output
    assert list(tmp_path.iterdir()) == []


def test_resume_keeps_a_stored_config_whatever_the_defaults_are_now(tmp_path: Path) -> None:
    # A coding run started before defaults were declared once trained at lr 1e-6: its run.json holds
    # the full dump, so reading it back (what `rla resume` does) keeps 1e-6 and the same config hash.
    stored = load_config(preset="coding").model_dump(mode="json")
    stored["training"]["policy"]["lr"] = stored["training"]["reward"]["lr"] = 1e-6
    store = ArtifactStore(str(tmp_path / "runs"))
    old_hash = build_config(stored).config_hash()
    store.write_run_info("old-coding", config=stored, config_hash=old_hash, code_version="before")
    cfg = load_run_config(store, "old-coding")
    assert (cfg.training.policy.lr, cfg.training.reward.lr) == (1e-6, 1e-6)
    assert cfg.config_hash() == old_hash
    assert cfg.model_dump(mode="json") == stored
