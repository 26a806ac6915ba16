"""Prompt templates and warm-start demonstrations."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from rla_core.envs import prompts
from rla_core.envs.demos import corpus_texts, judge_demos, noisy_policy_demos, policy_demos, reading_drills
from rla_core.envs.prompts import render_policy_prompt, replace_action_list, template_hash
from rla_core.envs.textworld_env import TextWorldEnv
from tests.envs.conftest import TWO_STEP


def test_policy_prompt_shows_last_k_turns_and_numbered_actions() -> None:
    history = [("obs A", "act A"), ("obs B", "act B"), ("obs C", "act C")]
    prompt = render_policy_prompt(
        instruction="Do it.", history=history, observation="now", actions=["look", "go east"], history_turns=2
    )
    # k=2: only the last two turns (B, C) are shown
    assert "obs A" not in prompt and "you took action: act B" in prompt and "act C" in prompt
    assert "0: look\n1: go east" in prompt and "\\boxed{}" in prompt


def test_template_hash_covers_every_template_file_and_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    # every template file on disk is a declared template (a new file cannot escape the cache key) ...
    folder = Path(prompts.__file__).with_name("templates")
    on_disk = {p.stem: p.read_text(encoding="utf-8") for p in folder.glob("*.txt")}
    assert set(on_disk) == set(prompts.TEMPLATE_NAMES)
    # ... and the hash is sha256 of exactly the declared inputs: the version and each file's text
    payload = json.dumps({"version": prompts.TEMPLATE_VERSION, "templates": on_disk}, sort_keys=True)
    assert template_hash() == hashlib.sha256(payload.encode("utf-8")).hexdigest()
    before = template_hash()
    # editing one template changes it (so the stages that render it re-run) ...
    edited = {**on_disk, "judge": on_disk["judge"] + " "}
    monkeypatch.setattr(prompts, "template_texts", lambda: edited)
    assert template_hash() != before
    # ... and so does bumping the template version with the texts unchanged
    monkeypatch.setattr(prompts, "template_texts", lambda: on_disk)
    assert template_hash() == before
    monkeypatch.setattr(prompts, "TEMPLATE_VERSION", prompts.TEMPLATE_VERSION + 1)
    assert template_hash() != before


def test_demos_follow_the_walkthrough_and_label_by_policy_commands(env: TextWorldEnv) -> None:
    policy = policy_demos(env, [TWO_STEP])
    # walkthrough ['go east', 'close safe'] -> two rows; responses box the action's index
    assert policy.height == 2
    assert policy["response"][0].startswith("I should go east.")
    index = policy["response"][0].split("\\boxed{")[1].rstrip("}")
    assert f"{index}: go east" in policy["prompt"][0]
    judge = judge_demos(env, [TWO_STEP], random_rollouts=2, max_steps=3, seed=0)
    labels = [r.endswith("\\boxed{1}") for r in judge["response"].to_list()]
    # the two expert steps come first and are good; random steps include bad ones
    assert labels[:2] == [True, True] and not all(labels)
    assert any("close safe" in t for t in corpus_texts(env, [TWO_STEP]))


def _boxed_action(prompt: str, response: str) -> str:
    """The action a demo row answers: the prompt's action line numbered with the response's boxed index."""
    index = response.split("\\boxed{")[1].rstrip("}")
    line = next(x for x in prompt.splitlines() if x.startswith(f"{index}: "))
    return line.split(": ", 1)[1]


def test_noisy_policy_demos_follow_the_expert_at_noise_0_and_are_seeded(env: TextWorldEnv) -> None:
    # noise 0: every episode is the expert's two steps (go east, close safe), then the game is won
    expert = noisy_policy_demos(env, [TWO_STEP], noise=0.0, episodes=3, max_steps=6, seed=0)
    assert expert.height == 6
    answered = [_boxed_action(p, r) for p, r in expert.select("prompt", "response").rows()]
    assert answered == ["go east", "close safe"] * 3
    # noise 1: uniformly random admissible actions for all 4 steps (the game is not won by chance here),
    # each row still boxing the index of the action it names; the same seed gives the same rows
    noisy = noisy_policy_demos(env, [TWO_STEP], noise=1.0, episodes=2, max_steps=4, seed=5)
    assert noisy.height == 8
    for prompt, response in noisy.select("prompt", "response").rows():
        assert response.startswith(f"I should {_boxed_action(prompt, response)}.")
    assert noisy.equals(noisy_policy_demos(env, [TWO_STEP], noise=1.0, episodes=2, max_steps=4, seed=5))
    assert not noisy.equals(noisy_policy_demos(env, [TWO_STEP], noise=1.0, episodes=2, max_steps=4, seed=6))


def _prompt(actions: list[str]) -> str:
    return render_policy_prompt(
        instruction="Find the key.", history=[], observation="A hall.", actions=actions, history_turns=0
    )


def test_replace_action_list_renumbers_only_the_list() -> None:
    prompt = _prompt(["look", "take key", "go east"])
    assert replace_action_list(prompt, ["go east", "take key"]) == _prompt(["go east", "take key"])
    with pytest.raises(ValueError, match="not a policy prompt"):
        replace_action_list("Is this step good?", ["look"])


def test_reading_drills_answer_a_listed_action_with_its_number() -> None:
    prompts = [_prompt(["look", "take key", "go east"]), _prompt(["open door", "inventory"])]
    drills = reading_drills(prompts, n=200, seed=3)
    assert drills.height == 200 and drills.equals(reading_drills(prompts, n=200, seed=3))
    kinds = {"same": 0, "subset": 0, "made-up": 0}
    for prompt, response in drills.select("prompt", "response").rows():
        listed = [line.split(": ", 1)[1] for line in prompt.split("Actions:\n")[1].splitlines()[:-1]]
        # every drill keeps the rest of its source prompt and boxes the index of the action it names
        assert prompt.startswith(_prompt(["x"]).split("Actions:")[0])
        answered = _boxed_action(prompt, response)
        assert answered in listed and response == f"I should {answered}. \\boxed{{{listed.index(answered)}}}"
        if listed in (["look", "take key", "go east"], ["open door", "inventory"]):
            kinds["same"] += 1
        elif set(listed) <= {"look", "take key", "go east", "open door", "inventory"}:
            kinds["subset"] += 1
        else:
            kinds["made-up"] += 1
            assert (
                {"look", "inventory"} <= set(listed) and listed == sorted(listed) and 5 <= len(listed) <= 13
            )
    # DRILL_MIX is 0.3 / 0.3 / 0.4; a subset that keeps every action counts as "same" here
    assert 40 <= kinds["subset"] <= 70 and 60 <= kinds["made-up"] <= 100 and kinds["same"] >= 45
    with pytest.raises(ValueError, match="at least one prompt"):
        reading_drills([], n=1, seed=0)
    with pytest.raises(ValueError, match="no numbered action list"):
        reading_drills(["Is this step good?"], n=1, seed=0)
