"""The batched rollout runner on real TextWorld games, with a real tiny model and recorded outputs."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from polars.testing import assert_frame_equal

from rla_core.algo.curriculum import PlayTask
from rla_core.algo.seeds import derive_seed
from rla_core.config import InvalidAction, SamplingConfig
from rla_core.envs.base import StepResult
from rla_core.envs.judge import judge_steps
from rla_core.envs.rollout import (
    INVALID_ANSWER_ENDS,
    GenerationMode,
    run_rollouts,
)
from rla_core.envs.textworld_env import TextWorldEnv
from rla_core.models.generator import TransformersGenerator
from rla_core.stage_inputs import RolloutRequest
from tests.envs.conftest import ONE_STEP, TWO_STEP
from tests.recorded import RecordedGenerator, rollout_request


def _request(
    tasks: list, *, seed: int = 7, n: int = 2, max_steps: int = 2, **fields: object
) -> RolloutRequest:
    """This module's usual request: 2 episodes of 2 steps each, seed 7."""
    return rollout_request(tasks, n=n, max_steps=max_steps, seed=seed, **fields)


def _two_step_start(env: TextWorldEnv) -> list[str]:
    """TWO_STEP's first admissible actions: 9 (indices 0..8); 'go east' is the walkthrough's first."""
    ep = env.open(TWO_STEP, seed=0)
    try:
        return list(ep.admissible_actions)
    finally:
        ep.close()


def _play_answers(
    env: TextWorldEnv,
    answers: list[str],
    *,
    iteration: int,
    invalid_action: InvalidAction = InvalidAction.FALLBACK,
) -> pl.DataFrame:
    """One TWO_STEP rollout of at most 3 steps whose responses are ``answers``, in order."""
    request = _request(
        [PlayTask("t", "s", False, TWO_STEP)],
        seed=0,
        n=1,
        max_steps=3,
        iteration=iteration,
        invalid_action=invalid_action,
    )
    return run_rollouts(request, env=env, generator=RecordedGenerator(answers))


def test_invalid_answers_are_recorded_and_fallback_played(env: TextWorldEnv) -> None:
    actions = _two_step_start(env)
    go_east = actions.index("go east")
    frame = _play_answers(env, [r"\boxed{42}", "no box here", f"go east \\boxed{{{go_east}}}"], iteration=2)
    assert frame["step"].to_list() == [0, 1, 2]
    # step 0: index 42 is out of range 0..8 -> clamped to 8 (spec §5 fallback), recorded invalid
    assert frame["action_valid"][0] is False
    assert frame["invalid_reason"][0] == "index 42 out of range 0..8"
    assert frame["action"][0] == actions[8]
    # step 1: no box -> fallback index 0
    assert frame["action_valid"][1] is False and frame["invalid_reason"][1] is not None
    # step 2: a valid boxed index is played as is
    assert frame["action_valid"][2] is True and frame["invalid_reason"][2] is None
    assert frame["action"][2] == frame["action"][2].strip() and frame["response"][2].startswith("go east")
    # cut at max_steps without a win: outcome -1 on every row, done only on the last
    assert frame["outcome"].to_list() == [-1.0, -1.0, -1.0]
    assert frame["done"].to_list() == [False, False, True]
    assert frame["iteration"].unique().to_list() == [2]


def test_invalid_answer_ends_the_episode_as_a_failure_under_the_fail_rule(env: TextWorldEnv) -> None:
    # TWO_STEP: a valid first step, then an out-of-range index. Under InvalidAction.FAIL the game is not
    # stepped again: the episode ends on that row as a failure, and later answers are never asked for.
    go_east = _two_step_start(env).index("go east")
    answers = [f"\\boxed{{{go_east}}}", r"\boxed{42}", r"\boxed{0}"]
    frame = _play_answers(env, answers, iteration=1, invalid_action=InvalidAction.FAIL)
    assert frame["step"].to_list() == [0, 1]
    assert frame["action"].to_list() == ["go east", ""]
    assert frame["action_valid"].to_list() == [True, False]
    assert frame["invalid_reason"][1] == "index 42 out of range 0..8"
    assert frame["next_observation"][1] == INVALID_ANSWER_ENDS
    assert frame["done"].to_list() == [False, True]
    assert frame["outcome"].to_list() == [-1.0, -1.0]


def test_winning_rollout_is_cut_at_the_win(env: TextWorldEnv) -> None:
    ep = env.open(TWO_STEP, seed=0)
    first = ep.admissible_actions.index("go east")
    ep.step("go east")
    second = ep.admissible_actions.index("close safe")
    ep.close()
    gen = RecordedGenerator([f"\\boxed{{{first}}}", f"\\boxed{{{second}}}"])
    frame = run_rollouts(
        _request([("t", "s", True, TWO_STEP)], seed=0, n=1, max_steps=5),
        env=env,
        generator=gen,
    )
    # two steps then the game is won: no third row, outcome +1 everywhere
    assert frame["action"].to_list() == ["go east", "close safe"]
    assert frame["outcome"].to_list() == [1.0, 1.0]
    assert frame["done"].to_list() == [False, True]
    assert frame["pending"].to_list() == [True, True]
    assert json.loads(frame["expert_actions"][1]) == ["close safe"]


def test_joint_mode_is_one_call_per_turn_with_per_episode_seeds(env: TextWorldEnv) -> None:
    # Two tasks x n=2 episodes; every answer is unparsable so nobody wins and all 4 play 2 turns.
    gen = RecordedGenerator(["no box"] * 8)
    tasks = [PlayTask("a", "s0", False, ONE_STEP), PlayTask("b", "s1", False, TWO_STEP)]
    frame = run_rollouts(
        _request(tasks),
        env=env,
        generator=gen,
    )
    # default (joint): turn 0 sends all 4 live prompts in one call, turn 1 the same 4 again
    assert gen.calls == [4, 4]
    # each prompt carries its own episode's seed derive_seed(seed, task_id, rollout_id, step)
    assert gen.seeds[1] == [derive_seed(7, t, r, 1) for t in ("a", "b") for r in (0, 1)]
    assert frame.height == 8
    per_episode = RecordedGenerator(["no box"] * 8)
    run_rollouts(_request(tasks), env=env, generator=per_episode, mode=GenerationMode.PER_EPISODE)
    # reference mode: one call per live episode per turn (4 + 4), same seeds one by one
    assert per_episode.calls == [1] * 8
    assert [s[0] for s in per_episode.seeds if s is not None] == [
        s for call in gen.seeds if call for s in call
    ]


def test_batched_rows_equal_one_by_one_rows(env: TextWorldEnv, tiny_policy_dir: Path) -> None:
    # batch_size 3 splits a turn's 4 prompts into micro-batches 3 + 1, unlike the one-by-one runs.
    gen = TransformersGenerator(tiny_policy_dir, device="cpu", batch_size=3)
    sampling = SamplingConfig(temperature=1.0, top_p=0.95, max_new_tokens=6)
    tasks = [PlayTask("a", "s0", False, ONE_STEP), PlayTask("b", "s1", False, TWO_STEP)]
    batched = run_rollouts(
        _request(tasks, sampling=sampling),
        env=env,
        generator=gen,
    )
    assert batched.height > 0
    single = pl.concat(
        [
            run_rollouts(
                _request([task], sampling=sampling),
                env=env,
                generator=gen,
                rollout_ids=[rid],
            )
            for task in tasks
            for rid in (0, 1)
        ]
    )
    assert_frame_equal(batched, single)
    # a different seed samples differently (the seed is really used)
    other = run_rollouts(
        _request(tasks, seed=8, sampling=sampling),
        env=env,
        generator=gen,
    )
    assert other["response"].to_list() != batched["response"].to_list()
    gen.close()


def test_judge_sends_one_call_with_per_step_seeds(env: TextWorldEnv) -> None:
    # 1 task x n=2 episodes x 2 turns (unparsable answers, no win) = 4 steps to judge.
    rollouts = run_rollouts(
        _request([PlayTask("a", "s0", False, TWO_STEP)]), env=env, generator=RecordedGenerator(["no box"] * 4)
    )
    judge = RecordedGenerator([r"\boxed{1}", r"\boxed{-1}", "none"] * 4)
    frame = judge_steps(rollouts, generator=judge, m=3, sampling=SamplingConfig(), seed=5, iteration=1)
    # default (joint): all 4 judge prompts in ONE call, each seeded by its own step
    assert judge.calls == [4]
    assert judge.seeds == [[derive_seed(5, "judge", "a", r, s) for r in (0, 1) for s in (0, 1)]]
    # m=3 judgments per step, read in order: +1, -1, unparsable (null) for each of the 4 steps
    assert frame["score"].to_list() == [1.0, -1.0, None] * 4
    assert frame["judge_idx"].to_list() == [0, 1, 2] * 4


class _NoActionEpisode:
    """An episode whose environment offers nothing to do (as a GUI page that lost its elements)."""

    instruction = "click the button"
    observation = "an empty page"
    observation_ref = None
    free_form = False
    system_prompt = None
    admissible_actions: list[str] = []  # noqa: RUF012 - read-only protocol attribute

    def step(self, action: str) -> StepResult:
        raise AssertionError("the runner must not step an episode without admissible actions")

    def expert_actions(self) -> list[str]:
        return []

    def close(self) -> None:
        return None


class _NoActionEnv:
    name = "no-actions"

    def validate_spec(self, spec: dict[str, object]) -> None:
        return None

    def open(self, spec: dict[str, object], *, seed: int) -> _NoActionEpisode:
        return _NoActionEpisode()

    def demonstrations(self, spec: dict[str, object], *, seed: int) -> list[list[str]]:
        return []


def test_an_episode_without_admissible_actions_ends_as_an_env_error() -> None:
    frame = run_rollouts(
        _request([("t", "s", False, {})], seed=0, n=1, max_steps=3),
        env=_NoActionEnv(),
        generator=RecordedGenerator([r"\boxed{0}"]),
    )
    # One row, the episode is over, nothing was played: the page broke, not the policy (no outcome).
    assert frame.height == 1
    row = frame.row(0, named=True)
    assert row["done"] is True and row["outcome"] is None and row["action"] == ""
    assert row["status"] == "env_error" and row["error_kind"] == "no_actions"
    assert "no admissible action" in row["error_message"] and row["attempt"] == 0
