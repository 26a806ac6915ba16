"""What the policy is shown: ``models.history_turns`` reaches the runner through the setting adapter, and
the chat markup (``models.serving.chat_template``) is applied and recorded when the tokenizer has one."""

from __future__ import annotations

import shutil
from pathlib import Path

from rla_core.algo.curriculum import PlayTask
from rla_core.config import SamplingConfig, load_config
from rla_core.envs.rollout import RolloutTask, run_rollouts
from rla_core.envs.textworld_env import TextWorldEnv
from rla_core.models.generator import TransformersGenerator
from rla_core.settings.textgame import TextGameSetting
from tests.envs.conftest import TWO_STEP
from tests.recorded import RecordedGenerator

CHAT = (
    "{% for m in messages %}<|user|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _prompts(game_cache: Path, history_turns: int) -> list[str]:
    cfg = load_config(
        overrides=[f"textgame.game_cache_dir={game_cache}", f"models.history_turns={history_turns}"]
    )
    frames = TextGameSetting().rollout(
        cfg, [PlayTask("t", "s", False, TWO_STEP)], generator=RecordedGenerator(["no box"] * 3), n=1,
        max_steps=3, sampling=SamplingConfig(), seed=0, iteration=1,
    )  # fmt: skip
    return list(frames["rollouts"]["prompt"])


def test_history_turns_setting_changes_the_prompt(env: TextWorldEnv, game_cache: Path) -> None:
    none, one, two = (_prompts(game_cache, k) for k in (0, 1, 2))
    # Step 0 has no history, so the setting changes nothing there.
    assert none[0] == one[0] == two[0]
    # At step 2 two turns were played: 0, 1 and 2 of them are shown.
    assert [p.count("you took action:") for p in (none[2], one[2], two[2])] == [0, 1, 2]
    assert none[2] != one[2] != two[2]


def test_chat_markup_applied_and_recorded(env: TextWorldEnv, tiny_policy_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    chat_dir = tmp_path / "chat-model"
    shutil.copytree(tiny_policy_dir, chat_dir)
    tok = AutoTokenizer.from_pretrained(chat_dir)
    tok.chat_template = CHAT
    tok.save_pretrained(chat_dir)

    plain = TransformersGenerator(tiny_policy_dir, device="cpu", chat_template=True)
    off = TransformersGenerator(chat_dir, device="cpu", chat_template=False)
    on = TransformersGenerator(chat_dir, device="cpu", chat_template=True)
    try:
        assert plain.format_prompt("go north") == "go north"  # no template: unchanged
        assert off.format_prompt("go north") == "go north"  # switched off: unchanged
        assert on.format_prompt("go north") == "<|user|>go north\n<|assistant|>"
        frame = run_rollouts(
            [RolloutTask("t", "s", False, TWO_STEP)], env=env, generator=on, n=1, max_steps=1,
            sampling=SamplingConfig(max_new_tokens=4), seed=0, iteration=1,
        )  # fmt: skip
        prompt = frame["prompt"][0]
        # The recorded prompt is the marked-up text the model saw (the trainer reads it as is).
        assert prompt.startswith("<|user|>") and prompt.endswith("\n<|assistant|>")
        assert "you took action:" not in prompt and "0: " in prompt
    finally:
        for g in (plain, off, on):
            g.close()
