"""Judge parsing and metrics, critic feedback, and both rewriters on real TextWorld games."""

from __future__ import annotations

import json

import polars as pl

from rla_core.algo.curriculum import PlayTask
from rla_core.algo.judging import (
    judge_outcome_agreement,
    judge_step_accuracy,
    judge_step_metrics,
    oracle_judgments,
)
from rla_core.algo.labels import policy_samples
from rla_core.config import Band, RewardConfig, SamplingConfig
from rla_core.envs.feedback import critic_feedback
from rla_core.envs.judge import judge_steps
from rla_core.envs.rewriter import (
    Goal,
    ModelRewriter,
    ParametricRewriter,
    RewriteRequest,
    TextWorldPrompts,
    rewrite_tasks,
)
from rla_core.envs.rollout import run_rollouts
from rla_core.envs.textworld_env import TextWorldEnv
from tests.envs.conftest import ONE_STEP, TWO_STEP
from tests.envs.test_rollout import RecordedGenerator
from tests.recorded import rollout_request


def _two_step_rollout(env: TextWorldEnv) -> pl.DataFrame:
    # one failed rollout of TWO_STEP: 'look' (index of look), then 'go east', cut at max_steps=2
    ep = env.open(TWO_STEP, seed=0)
    look = ep.admissible_actions.index("look")
    east = ep.admissible_actions.index("go east")
    ep.close()
    gen = RecordedGenerator([f"\\boxed{{{look}}}", f"\\boxed{{{east}}}"])
    return run_rollouts(
        rollout_request([PlayTask("t", "s", False, TWO_STEP)], n=1, max_steps=2, seed=0),
        env=env,
        generator=gen,
    )


def test_judge_scores_nulls_and_accuracy(env: TextWorldEnv) -> None:
    rollouts = _two_step_rollout(env)
    assert rollouts["action"].to_list() == ["look", "go east"]
    # m=2 samples per step, steps in order: step 0 -> ("-1", no score), step 1 -> ("+1", "+1")
    judge = RecordedGenerator(["bad \\boxed{-1}", "I cannot decide", "good \\boxed{1}", "\\boxed{+1}"])
    frame = judge_steps(rollouts, generator=judge, m=2, sampling=SamplingConfig(), seed=0, iteration=1)
    assert judge.calls == [2]  # one generate call for both steps
    assert frame["score"].to_list() == [-1.0, None, 1.0, 1.0]
    assert frame["parse_error"][1] is not None and frame["parse_error"][0] is None
    # step 0 'look' is not expert (bad), mean vote (-1 + 0)/2 = -0.5 < 0 -> correct
    # step 1 'go east' is expert (good), mean vote (1 + 1)/2 = 1 > 0 -> correct  => accuracy 2/2
    assert judge_step_accuracy(rollouts, frame) == 1.0
    # rollout mean of step means (-0.5 + 1)/2 = 0.25 > 0 predicts success, outcome is -1 -> 0/1
    assert judge_outcome_agreement(rollouts, frame) == 0.0
    # critic feedback: step 0 is not all -1 (one null), so no high-risk step
    fb = critic_feedback(rollouts, frame, max_steps=2)
    assert fb["t"].failed[0].high_risk_steps == ()
    # with an all-negative step 0 it becomes high-risk, and the env model's summary is parsed from \boxed{}
    negative = frame.with_columns(score=pl.when(pl.col("step") == 0).then(-1.0).otherwise(pl.col("score")))
    summarizer = RecordedGenerator(["It looked around. \\boxed{The agent wasted a step on look.}"])
    fb = critic_feedback(rollouts, negative, max_steps=2, summarizer=summarizer, sampling=SamplingConfig())
    failed = fb["t"].failed[0]
    assert (failed.high_risk_steps, failed.high_risk_actions) == ((0,), ("look",))
    assert fb["t"].summaries() == ["The agent wasted a step on look."]


def test_the_oracle_votes_are_the_engines_labels_and_set_the_policy_reward(env: TextWorldEnv) -> None:
    rollouts = _two_step_rollout(env)  # 'look' (not optimal), then 'go east' (optimal); lost at max_steps
    votes = oracle_judgments(rollouts, m=3)
    assert votes["score"].to_list() == [-1.0] * 3 + [1.0] * 3
    assert votes["judge_idx"].to_list() == [0, 1, 2] * 2 and votes["step"].to_list() == [0] * 3 + [1] * 3
    assert votes["parse_error"].null_count() == 6 and set(votes["response"]) == {""}
    # Against the labels it was made from, the oracle is a perfect judge.
    assert judge_step_metrics(rollouts, votes) == {
        "reward_model/step_accuracy": 1.0,
        "reward_model/step_balanced_accuracy": 1.0,
        "reward_model/good_verdict_share": 0.5,
        "reward_model/good_verdict_precision": 1.0,
        "reward_model/good_step_share": 0.5,
    }
    # R = O + mean vote: step 0: -1 + (-1) = -2; step 1: -1 + 1 = 0. One rollout: each step's group is a
    # singleton and keeps its raw value, so step 1 (advantage 0) is dropped and step 0 trains with -2.
    cfg = RewardConfig(policy_acc_band=Band(low=0.0, high=1.0))
    samples, stats = policy_samples(rollouts, votes, cfg=cfg, m=3)
    assert samples.select("step", "reward", "advantage").rows() == [(0, -2.0, -2.0)]
    assert stats["rows_zero_advantage"] == 1
    # A broken environment's episode gets no votes, as the judge stage judges none of its steps.
    broken = rollouts.with_columns(status=pl.lit("env_error"), outcome=pl.lit(None, dtype=pl.Float64))
    assert oracle_judgments(broken, m=3).height == 0


def _steps(actions_good: list[bool], votes: list[list[float | None]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One rollout whose step k played 'a' and is good iff actions_good[k]; votes[k] are its judgments."""
    n = len(actions_good)
    rollouts = pl.DataFrame(
        {
            "task_id": ["t"] * n,
            "rollout_id": [0] * n,
            "step": list(range(n)),
            "action": ["a"] * n,
            "expert_actions": [json.dumps(["a"] if good else ["b"]) for good in actions_good],
            "outcome": [-1.0] * n,
        }
    )
    judgments = pl.DataFrame(
        {
            "task_id": ["t"] * sum(map(len, votes)),
            "rollout_id": [0] * sum(map(len, votes)),
            "step": [k for k, vs in enumerate(votes) for _ in vs],
            "score": [v for vs in votes for v in vs],
        },
        schema_overrides={"score": pl.Float64},
    )
    return rollouts, judgments


def test_balanced_accuracy_by_hand() -> None:
    # steps [good, bad, good, bad], mean votes [+1, -1, -1, 0]: raw 2/4; recall on good 1/2 (step 2 called
    # bad), on bad 1/2 (step 3's 0 is no verdict, a miss) → balanced 1/2; 1 of 4 called good (step 0,
    # right: precision 1/1); 2 of 4 good.
    metrics = judge_step_metrics(*_steps([True, False, True, False], [[1.0], [-1.0], [-1.0], [1.0, -1.0]]))
    assert metrics == {
        "reward_model/step_accuracy": 0.5,
        "reward_model/step_balanced_accuracy": 0.5,
        "reward_model/good_verdict_share": 0.25,
        "reward_model/good_verdict_precision": 1.0,
        "reward_model/good_step_share": 0.5,
    }
    # A judge that calls every step bad, on mostly bad steps: raw 3/4, balanced (0 + 1)/2 = 0.5.
    constant = judge_step_metrics(*_steps([True, False, False, False], [[-1.0, -1.0]] * 4))
    assert constant["reward_model/step_accuracy"] == 0.75
    assert constant["reward_model/step_balanced_accuracy"] == 0.5
    assert constant["reward_model/good_verdict_share"] == 0.0
    assert "reward_model/good_verdict_precision" not in constant  # nothing called good: no precision
    # Mean votes (unparsable = 0): [+1/2, -1/2, +1/2] on [good, bad, bad] → recalls 1 and 1/2 → 3/4.
    mixed = judge_step_metrics(*_steps([True, False, False], [[1.0, None], [-1.0, None], [1.0, None]]))
    assert mixed["reward_model/step_balanced_accuracy"] == 0.75
    # Steps 0 and 2 are called good, step 0 rightly: precision 1/2.
    assert mixed["reward_model/good_verdict_precision"] == 0.5
    # One class only: no balanced accuracy (the recall of an empty class is undefined); nothing judged: {}.
    only_bad = judge_step_metrics(*_steps([False, False], [[-1.0], [1.0]]))
    assert (
        "reward_model/step_balanced_accuracy" not in only_bad
        and only_bad["reward_model/step_accuracy"] == 0.5
    )
    rollouts, judgments = _steps([True], [[1.0]])
    assert judge_step_metrics(rollouts, judgments.clear()) == {}


def _request(goal: Goal, parent: dict[str, int], root: dict[str, int], acc: float) -> RewriteRequest:
    return RewriteRequest("s", "t", parent, root, goal, prev_acc=acc)


def test_parametric_rewriter_makes_valid_harder_and_easier_games(env: TextWorldEnv) -> None:
    harder = rewrite_tasks(
        [_request(Goal.HARDER, ONE_STEP, ONE_STEP, 1.0)],
        rewriter=ParametricRewriter(),
        env=env,
        k=1,
        seed=0,
        iteration=3,
    )
    # too easy (acc 1.0): quest_length 1 -> 2 first
    assert harder["valid"].to_list() == [True] and harder["chosen"].to_list() == [True]
    assert json.loads(harder["spec"][0]) == {**ONE_STEP, "quest_length": 2}
    easier = rewrite_tasks(
        [_request(Goal.EASIER, TWO_STEP, TWO_STEP, 0.0)],
        rewriter=ParametricRewriter(),
        env=env,
        k=1,
        seed=0,
        iteration=3,
    )
    # too hard (acc 0.0): quest_length 2 -> 1
    assert easier["valid"].to_list() == [True]
    assert json.loads(easier["spec"][0]) == {**TWO_STEP, "quest_length": 1}
    # already minimal: every easier move is clamped -> one explaining, invalid candidate
    floor = {"world_size": 1, "nb_objects": 1, "quest_length": 1, "seed": 5}
    stuck = rewrite_tasks(
        [_request(Goal.EASIER, floor, floor, 0.0)],
        rewriter=ParametricRewriter(),
        env=env,
        k=3,
        seed=0,
        iteration=3,
    )
    assert stuck["valid"].to_list() == [False] and "lower bound" in stuck["invalid_reason"][0]


def test_llm_rewriter_rejects_bad_outputs_with_reasons(env: TextWorldEnv) -> None:
    root = ONE_STEP  # seed 11, quest_length 1
    outputs = [
        "Sure! I will make it harder.",  # malformed: no JSON
        '{"world_size": 1, "nb_objects": 3, "seed": 11}',  # incomplete
        '{"world_size": 1, "nb_objects": 3, "quest_length": 2, "seed": 99}',  # off-anchor seed
        '{"world_size": 1, "nb_objects": 3, "quest_length": 1, "seed": 11}',  # identical to parent
        '{"world_size": 1, "nb_objects": 2, "quest_length": 2, "seed": 11}',  # mixed direction
        '{"world_size": 1, "nb_objects": 3, "quest_length": 1, "seed": 11, "theme": "x"}',  # extra key
        'ok: {"world_size": 1, "nb_objects": 3, "quest_length": 2, "seed": 11}',  # valid
    ]
    rewriter = ModelRewriter(TextWorldPrompts(), RecordedGenerator(outputs), sampling=SamplingConfig())
    prompts = rewriter.form.prompts(_request(Goal.HARDER, root, root, 0.9), k=7)
    assert '"seed": 11' in prompts[0] and "(Attempt 7/7)" in prompts[6] and "HARDER" in prompts[0]
    frame = rewrite_tasks(
        [_request(Goal.HARDER, root, root, 0.9)], rewriter=rewriter, env=env, k=7, seed=0, iteration=1
    )
    reasons = frame["invalid_reason"].to_list()
    assert reasons[0] is not None and reasons[0].startswith("unparsable")
    assert reasons[1] == "incomplete: missing keys ['quest_length']"
    assert reasons[2] == "off-anchor: changes ['seed'] of the root task, which a rewrite must keep"
    assert reasons[3] == "identical to the parent task"
    assert reasons[4] is not None and reasons[4].startswith("not harder than the parent")
    assert reasons[5] is not None and reasons[5].startswith("unknown keys ['theme']")
    assert reasons[6] is None
    assert frame["chosen"].to_list() == [False] * 6 + [True]
    assert frame["spec"][0] == outputs[0]  # raw output kept when unparsable
