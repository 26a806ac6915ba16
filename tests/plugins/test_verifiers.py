"""verifiers environments run unmodified (plugins/verifiers): two environments written as users write them
(tests/plugins/verifiers_envs: a taskset of sums with weighted rewards, a multi-turn guessing Env), played by
verifiers itself — its null harness in the subprocess runtime, offline from the pre-synced wheels — against
the stage's recording endpoint in front of the tiny policy; and the rows built from the recorded turns."""

from __future__ import annotations

import json

import polars as pl
import pytest
from rla_vf_sum import expected_reward

from rla_core.algo.curriculum import PlayTask
from rla_core.config import SamplingConfig, load_config
from rla_core.envs.endpoint_play import episode_rows, play_through_endpoint
from rla_core.envs.plugin_env import GuardedPlugin
from rla_core.models.bootstrap import ensure_tiny_model
from rla_core.models.chat import EndpointRecord
from rla_core.models.generator import TransformersGenerator
from rla_core.plugins import EpisodeResult, load_plugin
from rla_core.preflight import preflight
from tests.recorded import rollout_request

SAMPLING = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=12)


def _record(turn: int, messages: list[dict[str, str]], response: str) -> EndpointRecord:
    return EndpointRecord(
        episode_seed=5, turn=turn, seed=turn, messages=json.dumps(messages), prompt=f"<prompt {turn}>",
        prompt_ids=(1, 2, 3), response=response, response_ids=(7, 8), logprobs=(-0.5, -1.5),
        finish_reason="stop", temperature=1.0, top_p=1.0, max_tokens=12, checkpoint="abc",
    )  # fmt: skip


def test_rows_of_an_endpoint_played_episode_are_its_recorded_turns() -> None:
    env = GuardedPlugin(load_plugin("verifiers", {"environment": "rla-vf-sum", "success_score": 0.5}))
    first = [{"role": "user", "content": "Guess."}]
    second = [*first, {"role": "assistant", "content": "3"}, {"role": "user", "content": "higher"}]
    records = [_record(0, first, "3"), _record(1, second, "7")]
    base = {"iteration": 1, "task_id": "t", "slot_id": "t", "pending": False, "rollout_id": 0, "attempt": 0}
    rows = episode_rows(base, records, EpisodeResult(0.75, 4, final_observation="found"), env=env)
    # Hand-computed: one row per turn; what the environment said next; the raw score on every row, won at
    # 0.75 >= 0.5; the recorded token ids and log-probabilities as they were.
    assert [r["step"] for r in rows] == [0, 1] and [r["done"] for r in rows] == [False, True]
    assert [r["next_observation"] for r in rows] == ["higher", "found"]
    assert [(r["score"], r["outcome"], r["status"]) for r in rows] == [(0.75, 1.0, "won")] * 2
    assert rows[0]["response_ids"] == [7, 8] and rows[0]["response_logprobs"] == [-0.5, -1.5]
    failed = episode_rows(base, records[:1], EpisodeResult(None, 4, error="timeout"), env=env)
    assert failed[0]["status"] == "env_error" and failed[0]["outcome"] is None
    assert failed[0]["error_message"] == "plug-in 'verifiers' reported the episode failed: timeout"


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> TransformersGenerator:
    """A tiny policy bootstrapped from the sums' words (random weights: its replies are whatever they are)."""
    corpus = [
        "What is 1 + 2? Answer with \\boxed{3}.",
        "You add numbers.",
        "higher lower digit 0 1 2 3 4 5 6 7 8 9",
    ]
    model = ensure_tiny_model("policy", corpus=corpus * 4, cache_dir=tmp_path_factory.mktemp("models"))
    return TransformersGenerator(model, device="cpu", batch_size=4)


def _play(policy: TransformersGenerator, options: dict[str, object], *, n: int = 2) -> pl.DataFrame:
    env = GuardedPlugin(load_plugin("verifiers", options))
    tasks = tuple(PlayTask(t.task_id, t.task_id, False, t.spec) for t in env.tasks("train"))
    request = rollout_request(tasks, n=n, max_steps=4, seed=3, sampling=SAMPLING, env_retries=1)
    return play_through_endpoint(request, env=env, generator=policy)["rollouts"]


def test_a_taskset_scores_the_recorded_completions_as_verifiers_does(policy: TransformersGenerator) -> None:
    options = {"environment": "rla-vf-sum", "train": {"limit": 2}, "success_score": 0.25}
    rollouts = _play(policy, options)
    assert rollouts.height == 4 and rollouts["done"].all() and set(rollouts["status"]) <= {"won", "lost"}
    answers = {"sum-0-0-0": "0", "sum-1-3-1": "4"}
    for row in rollouts.iter_rows(named=True):  # the rewards recomputed by hand from the recorded reply
        assert row["score"] == pytest.approx(expected_reward(row["response"], answers[row["task_id"]]))
        assert row["outcome"] == (1.0 if row["score"] >= 0.25 else -1.0)
        assert len(row["response_ids"]) == row["response_tokens"] == len(row["response_logprobs"])
    # Same seed, same artifacts: the endpoint samples each turn from (episode seed, turn), never arrival order.
    assert _play(policy, options).drop("prompt").equals(rollouts.drop("prompt"))


def test_a_multi_turn_env_gives_a_row_per_assistant_turn(policy: TransformersGenerator) -> None:
    rollouts = _play(policy, {"environment": "rla-vf-guess", "train": {"limit": 1}}, n=1)
    turns = rollouts.height
    assert 1 <= turns <= 4 and rollouts["step"].to_list() == list(range(turns))  # min(4, the env's 6) turns
    assert set(rollouts["next_observation"][:-1]) <= {"higher", "lower", "Give one digit."}


def test_a_broken_reward_is_an_env_error_naming_the_plugin(policy: TransformersGenerator) -> None:
    options = {"environment": "rla-vf-sum", "train": {"limit": 1}, "taskset": {"broken_reward": True}}
    rollouts = _play(policy, options, n=1)
    assert set(rollouts["status"]) == {"env_error"} and rollouts["outcome"].is_null().all()
    assert rollouts["error_message"][0].startswith("plug-in 'verifiers' reported the episode failed")
    assert "the grader is broken" in rollouts["error_message"][0]


def test_an_unknown_environment_is_a_preflight_error_listing_the_installed() -> None:
    cfg = load_config(
        overrides=["setting=plugin", "plugin.name=verifiers", "plugin.options.environment=nope"]
    )
    (problem,) = [p for p in preflight(cfg) if p.key == "plugin"]
    assert "'nope' is not an installed verifiers taskset" in problem.message
    assert "rla-vf-sum" in problem.message and "rla-vf-guess" in problem.message
