"""The batched rollout runner on real TextWorld games, with a real tiny model and recorded outputs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl
from polars.testing import assert_frame_equal

from rla_core.config import SamplingConfig
from rla_core.envs.rollout import RolloutTask, run_rollouts
from rla_core.envs.textworld_env import TextWorldEnv
from rla_core.models.generator import Generation, TransformersGenerator
from tests.envs.conftest import ONE_STEP, TWO_STEP


class RecordedGenerator:
    """Replays recorded model outputs in order (the component under test is the runner, not a model)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.calls: list[int] = []

    def generate(
        self, prompts: Sequence[str], *, n: int, sampling: SamplingConfig, seed: int
    ) -> list[list[Generation]]:
        self.calls.append(len(prompts))
        return [[Generation(self.texts.pop(0), 10, 3, "stop") for _ in range(n)] for _ in prompts]

    def close(self) -> None:
        return None


def test_invalid_answers_are_recorded_and_fallback_played(env: TextWorldEnv) -> None:
    # TWO_STEP starts with 9 admissible actions (indices 0..8); 'go east' is the walkthrough's first.
    ep = env.open(TWO_STEP, seed=0)
    go_east = ep.admissible_actions.index("go east")
    ep.close()
    gen = RecordedGenerator([r"\boxed{42}", "no box here", f"go east \\boxed{{{go_east}}}"])
    frame = run_rollouts(
        [RolloutTask("t", "s", False, TWO_STEP)],
        env=env,
        generator=gen,
        n=1,
        max_steps=3,
        sampling=SamplingConfig(),
        seed=0,
        iteration=2,
    )
    assert frame["step"].to_list() == [0, 1, 2]
    # step 0: index 42 is out of range 0..8 -> clamped to 8 (spec §5 fallback), recorded invalid
    assert frame["action_valid"][0] is False
    assert frame["invalid_reason"][0] == "index 42 out of range 0..8"
    assert frame["action"][0] == ep.admissible_actions[8]
    # step 1: no box -> fallback index 0
    assert frame["action_valid"][1] is False and frame["invalid_reason"][1] is not None
    # step 2: a valid boxed index is played as is
    assert frame["action_valid"][2] is True and frame["invalid_reason"][2] is None
    assert frame["action"][2] == frame["action"][2].strip() and frame["response"][2].startswith("go east")
    # cut at max_steps without a win: outcome -1 on every row, done only on the last
    assert frame["outcome"].to_list() == [-1.0, -1.0, -1.0]
    assert frame["done"].to_list() == [False, False, True]
    assert frame["iteration"].unique().to_list() == [2]


def test_winning_rollout_is_cut_at_the_win(env: TextWorldEnv) -> None:
    ep = env.open(TWO_STEP, seed=0)
    first = ep.admissible_actions.index("go east")
    ep.step("go east")
    second = ep.admissible_actions.index("close safe")
    ep.close()
    gen = RecordedGenerator([f"\\boxed{{{first}}}", f"\\boxed{{{second}}}"])
    frame = run_rollouts(
        [("t", "s", True, TWO_STEP)],
        env=env,
        generator=gen,
        n=1,
        max_steps=5,
        sampling=SamplingConfig(),
        seed=0,
        iteration=1,
    )
    # two steps then the game is won: no third row, outcome +1 everywhere
    assert frame["action"].to_list() == ["go east", "close safe"]
    assert frame["outcome"].to_list() == [1.0, 1.0]
    assert frame["done"].to_list() == [False, True]
    assert frame["pending"].to_list() == [True, True]
    assert json.loads(frame["expert_actions"][1]) == ["close safe"]


def test_batched_rows_equal_one_by_one_rows(env: TextWorldEnv, tiny_policy_dir: Path) -> None:
    gen = TransformersGenerator(tiny_policy_dir, device="cpu", batch_size=8)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=6)
    tasks = [RolloutTask("a", "s0", False, ONE_STEP), RolloutTask("b", "s1", False, TWO_STEP)]
    batched = run_rollouts(
        tasks, env=env, generator=gen, n=2, max_steps=2, sampling=sampling, seed=7, iteration=1
    )
    assert batched.height > 0
    single = pl.concat(
        [
            run_rollouts(
                [task],
                env=env,
                generator=gen,
                n=2,
                max_steps=2,
                sampling=sampling,
                seed=7,
                iteration=1,
                rollout_ids=[rid],
            )
            for task in tasks
            for rid in (0, 1)
        ]
    )
    assert_frame_equal(batched, single)
    # a different seed samples differently (the seed is really used)
    other = run_rollouts(
        tasks, env=env, generator=gen, n=2, max_steps=2, sampling=sampling, seed=8, iteration=1
    )
    assert other["response"].to_list() != batched["response"].to_list()
    gen.close()
