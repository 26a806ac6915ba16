"""Free-form turns in the plug-in contract: an observation without an action list means the policy writes free
text, which the plug-in's ``step`` receives as written; its raw score is kept in the rows and the ±1 outcome is
derived from it by the plug-in's ``success_score``; a plug-in may declare no rewrite space.

The plug-ins here are written as a user would write one (a two-turn arithmetic chat with partial credit); they run
through the real rollout runner, warm-start demonstrations, preflight and rewrite stage (the policy's answers are
recorded: the subject is the code around the plug-in, not the model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl
import pytest

from rla_core.algo.curriculum import PlayTask
from rla_core.config import load_config
from rla_core.envs.demos import judge_demos, policy_demos
from rla_core.envs.plugin_env import GuardedPlugin
from rla_core.envs.rollout import play_rollouts
from rla_core.errors import ConfigError
from rla_core.plugins import EnvironmentPlugin, InstalledPlugin, NoOptions, Observation, RewriteSpace, Task
from rla_core.preflight import Severity, plugin_declarations
from rla_core.schemas import empty_frame
from rla_core.settings.base import ProposalRequest
from rla_core.settings.plugin import PluginSetting
from rla_core.stage_inputs import AdaptInputs
from tests.recorded import RecordedGenerator, rollout_request


@dataclass(frozen=True)
class Chat:
    spec: dict[str, int]
    answers: tuple[str, ...] = ()


class TwoSums(EnvironmentPlugin):
    """Turn 1: a + b; turn 2: that plus c. The score is the share of right answers (partial credit)."""

    free_form = True
    system_prompt = "Answer with a number."
    rewrite_space = RewriteSpace(bounds={"a": (0, 99), "b": (0, 99), "c": (0, 99)}, difficulty=("a",))

    def tasks(self, split: str) -> list[Task]:
        return [Task(f"{split}-{i}", {"a": i + 1, "b": 2, "c": 3}) for i in range(2)]

    def instruction(self, spec: dict[str, Any]) -> str:
        return "Add the numbers."

    def reset(self, spec: dict[str, Any], *, seed: int) -> tuple[Chat, Observation]:
        return Chat(spec), Observation(f"What is {spec['a']} + {spec['b']}?")

    def step(self, state: Chat, action: str) -> tuple[Chat, Observation]:
        chat = Chat(state.spec, (*state.answers, action))
        if len(chat.answers) == 1:
            return chat, Observation(f"Now add {state.spec['c']}.")
        return chat, Observation("Thanks.", done=True)

    def truth(self, spec: dict[str, Any]) -> list[str]:
        return [str(spec["a"] + spec["b"]), str(spec["a"] + spec["b"] + spec["c"])]

    def score(self, state: Chat) -> float:
        right = [a.strip() == t for a, t in zip(state.answers, self.truth(state.spec), strict=False)]
        return sum(right) / 2

    def demonstration(self, spec: dict[str, Any]) -> list[str]:
        return self.truth(spec)


class HalfWins(TwoSums):
    success_score = 0.5


class NoRewrites(TwoSums):
    rewrite_space = None


class Raising(TwoSums):
    def step(self, state: Chat, action: str) -> tuple[Chat, Observation]:
        raise RuntimeError("the grader's service is down")


def env_of(cls: type[EnvironmentPlugin], name: str = "two-sums") -> GuardedPlugin:
    return GuardedPlugin(InstalledPlugin(name, cls, "tests", "0", NoOptions()))


def play(env: GuardedPlugin, answers: list[str], *, n: int = 1) -> pl.DataFrame:
    task = PlayTask("t0", "t0", False, {"a": 1, "b": 2, "c": 3})
    request = rollout_request((task,), n=n, max_steps=4, seed=1, env_retries=1)
    return play_rollouts(request, env=env, generator=RecordedGenerator(answers))["rollouts"]


def test_free_text_reaches_step_as_written_and_the_prompt_is_the_plugins_conversation() -> None:
    rollouts = play(env_of(TwoSums), ["3", " 6 "])
    assert rollouts["action"].to_list() == ["3", " 6 "]  # unparsed: the plug-in reads its own answers
    assert rollouts["action_valid"].all() and rollouts["expert_actions"].to_list() == ["[]", "[]"]
    first, second = rollouts["prompt"].to_list()
    assert first == "Answer with a number.\n\nUser: Add the numbers.\nWhat is 1 + 2?\nAssistant:"
    assert second == first.removesuffix("Assistant:") + "Assistant: 3\nUser: Now add 3.\nAssistant:"
    assert rollouts["next_observation"].to_list() == ["Now add 3.", "Thanks."]
    assert rollouts["score"].to_list() == [1.0, 1.0] and rollouts["outcome"].to_list() == [1.0, 1.0]


def test_partial_credit_is_kept_and_the_outcome_follows_the_success_score() -> None:
    lost = play(env_of(TwoSums), ["3", "7"])
    assert lost["score"].to_list() == [0.5, 0.5] and lost["outcome"].to_list() == [-1.0, -1.0]
    assert set(lost["status"]) == {"lost"}
    won = play(env_of(HalfWins), ["3", "7"])
    assert won["score"].to_list() == [0.5, 0.5] and set(won["status"]) == {"won"}


def test_an_empty_or_malformed_answer_is_scored_by_the_plugin_not_a_crash() -> None:
    rollouts = play(env_of(TwoSums), ["", "\\boxed{"])
    assert rollouts.height == 2 and set(rollouts["status"]) == {"lost"} and rollouts["score"][0] == 0.0


def test_a_plugin_raising_in_step_is_an_env_error_naming_it_never_a_loss() -> None:
    rollouts = play(env_of(Raising, "raising"), ["3"] * 4)
    assert set(rollouts["status"]) == {"env_error"} and rollouts["outcome"].is_null().all()
    assert (
        "plug-in 'raising' raised in step: RuntimeError: the grader's service is down"
        in (rollouts["error_message"][0])
    )


def test_a_menu_plugin_without_actions_is_still_a_fault_and_bad_declarations_are_config_errors() -> None:
    class Menu(TwoSums):
        free_form = False

    rollouts = play(env_of(Menu, "menu"), ["3"] * 4)
    assert set(rollouts["status"]) == {"env_error"}
    assert "declares free_form = True" in rollouts["error_message"][0]

    class BadScore(TwoSums):
        success_score = 0.0

    with pytest.raises(ConfigError, match=r"success_score is 0\.0; it is the lowest winning score"):
        env_of(BadScore)


def test_free_form_warm_start_demonstrates_the_answers_and_labels_judge_turns_by_outcome() -> None:
    env = env_of(TwoSums)
    specs = [t.spec for t in env.tasks("train")]  # a = 1 and a = 2
    policy = policy_demos(env, specs)
    assert policy["response"].to_list() == ["3", "6", "4", "7"]
    judge = judge_demos(env, specs, free_form=True)
    # Per task: its own demonstration (won: good), then the other task's played on it (lost: bad).
    verdicts = ["\\boxed{1}" in r for r in judge["response"]]
    assert verdicts == [True, True, False, False, True, True, False, False]


def _inputs(name: str, *overrides: str) -> Any:
    return load_config(overrides=["setting=plugin", f"plugin.name={name}", *overrides])


def test_the_preflight_refuses_expert_labels_for_free_text_and_says_adaptation_is_off() -> None:
    oracle = ("judge.source=oracle", "training.reward.enabled=false", "adaptation.enabled=false")
    cfg = _inputs("two-sums", *oracle, "evaluation.judge_steps=steps.parquet")
    setting = PluginSetting(InstalledPlugin("two-sums", TwoSums, "tests", "0", NoOptions()))
    problems = {p.key: p for p in plugin_declarations(cfg, setting)}
    assert set(problems) == {"judge.source", "evaluation.judge_steps"}
    assert "free-form turns" in problems["judge.source"].message
    bare = PluginSetting(InstalledPlugin("two-sums", NoRewrites, "tests", "0", NoOptions()))
    (warning,) = plugin_declarations(_inputs("two-sums"), bare)
    assert warning.key == "adaptation.enabled" and warning.severity is Severity.WARNING
    assert "declares no rewrite space" in warning.message
    assert not plugin_declarations(_inputs("two-sums", "adaptation.enabled=false"), bare)


def test_a_plugin_without_a_rewrite_space_proposes_nothing() -> None:
    cfg = _inputs("two-sums")
    setting = PluginSetting(InstalledPlugin("two-sums", NoRewrites, "tests", "0", NoOptions()))
    job = ProposalRequest(frames={}, targets=[], seed=0, iteration=1)
    proposals = setting.propose(AdaptInputs.from_config(cfg), job, env_model=None)
    assert proposals.height == 0 and proposals.columns == empty_frame("proposals").columns


def test_config_show_says_adaptation_is_off_for_a_plugin_without_rewrites(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.cli import _plugin_notes

    # Resolved as a stage resolves it; the entry point stands in for an installed package of this class.
    monkeypatch.setattr(
        "rla_core.settings.plugin.find_plugin", lambda name: InstalledPlugin(name, NoRewrites, "tests", "0")
    )
    (note,) = _plugin_notes(_inputs("two-sums"))
    assert note.startswith("adaptation.enabled: plug-in 'two-sums' declares no rewrite space")
    assert _plugin_notes(load_config()) == []  # another setting: nothing to say


def test_judge_metrics_against_expert_labels_are_absent_for_free_text() -> None:
    from rla_core.algo.judging import judge_step_metrics

    rollouts = play(env_of(TwoSums), ["3", "6"])
    judgments = rollouts.select("task_id", "rollout_id", "step").with_columns(score=pl.lit(1.0))
    assert judge_step_metrics(rollouts, judgments) == {}  # no step is "bad" for want of an expert list
