"""What the policy is shown: ``models.history_turns`` reaches the runner through the setting adapter, and
the chat markup (``models.serving.chat_template``) is applied and recorded when the tokenizer has one."""

from __future__ import annotations

import shutil
from pathlib import Path

from rla_core.algo.curriculum import PlayTask
from rla_core.config import SamplingConfig, load_config
from rla_core.dispatch import play_episodes
from rla_core.envs.rollout import run_rollouts
from rla_core.envs.textworld_env import TextWorldEnv
from rla_core.models.generator import TransformersGenerator
from rla_core.settings.textgame import TEXTWORLD
from rla_core.stage_inputs import RolloutInputs, RolloutRequest, WriteTestsInputs
from tests.envs.conftest import TWO_STEP
from tests.recorded import RecordedGenerator, rollout_request

CHAT = (
    "{% for m in messages %}<|user|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _prompts(game_cache: Path, history_turns: int) -> list[str]:
    cfg = load_config(
        overrides=[f"textgame.game_cache_dir={game_cache}", f"models.history_turns={history_turns}"]
    )
    inputs = RolloutInputs.from_config(cfg)
    request = RolloutRequest(
        tasks=(PlayTask("t", "s", False, TWO_STEP),), n=1, max_steps=3, sampling=SamplingConfig(), seed=0,
        iteration=1, history_turns=inputs.models.history_turns, env=inputs.env(), env_retries=0,
    )  # fmt: skip
    frames = play_episodes(TEXTWORLD, request, generator=RecordedGenerator(["no box"] * 3))
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
        frame = run_rollouts(RolloutRequest(tasks=[PlayTask("t", "s", False, TWO_STEP)], n=1, max_steps=1, sampling=SamplingConfig(max_new_tokens=4), seed=0, iteration=1, history_turns=2, env_retries=0), env=env, generator=on)  # fmt: skip
        prompt = frame["prompt"][0]
        # The recorded prompt is the marked-up text the model saw (the trainer reads it as is).
        assert prompt.startswith("<|user|>") and prompt.endswith("\n<|assistant|>")
        assert "you took action:" not in prompt and "0: " in prompt
    finally:
        for g in (plain, off, on):
            g.close()


class _MarkupRecorded(RecordedGenerator):
    """Recorded outputs from a model with a chat template: prompts are marked up, and what it saw is kept."""

    def __init__(self, texts: list[str]) -> None:
        super().__init__(texts)
        self.seen: list[str] = []

    def format_prompt(self, prompt: str) -> str:
        return f"<|user|>{prompt}\n<|assistant|>"

    def generate(self, prompts, *, n, sampling, seed, seeds=None):  # type: ignore[no-untyped-def]
        self.seen.extend(prompts)
        return super().generate(prompts, n=n, sampling=sampling, seed=seed, seeds=seeds)


def test_judge_and_coding_prompts_are_marked_up_and_recorded_as_seen(env: TextWorldEnv) -> None:
    import json

    from rla_core.envs.judge import judge_steps
    from rla_core.settings.coding import CodingSetting, coding_task

    rollouts = run_rollouts(RolloutRequest(tasks=[PlayTask("t", "s", False, TWO_STEP)], n=1, max_steps=2, sampling=SamplingConfig(), seed=0, iteration=1, history_turns=2, env_retries=0), env=env, generator=RecordedGenerator(["no box"] * 2))  # fmt: skip
    judge = _MarkupRecorded([r"\boxed{1}"] * 4)
    judgments = judge_steps(rollouts, generator=judge, m=2, sampling=SamplingConfig(), seed=0, iteration=1)
    assert judgments["prompt"].unique(maintain_order=True).to_list() == judge.seen  # recorded as seen
    assert all(p.startswith("<|user|>") and p.endswith("<|assistant|>") for p in judge.seen)

    spec = json.loads(Path("data/coding/problems.jsonl").read_text().splitlines()[0])
    task = PlayTask("sum-two", "sum-two", False, spec)
    cfg = load_config(preset="coding", overrides=["coding.unit_tests_per_task=2"])
    policy = _MarkupRecorded(["```python\nprint(3)\n```"] * 2)
    request = rollout_request(
        (task,), n=2, max_steps=1, seed=0, history_turns=0, env=RolloutInputs.from_config(cfg).env()
    )
    frames = CodingSetting().sample_rollouts(request, generator=policy)
    assert frames["rollouts"]["prompt"].unique().to_list() == policy.seen
    tester = _MarkupRecorded(["<input>1 2</input><output>3</output>"] * 2)
    section = WriteTestsInputs.from_config(cfg).coding
    assert section is not None
    tests = CodingSetting().write_tests(
        section, [coding_task("sum-two", spec)], generator=tester, seed=0, iteration=1
    )
    assert tests["prompt"].unique().to_list() == tester.seen
    assert all(p.startswith("<|user|>") for p in policy.seen + tester.seen)
