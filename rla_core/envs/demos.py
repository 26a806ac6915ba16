"""Warm-start data for tiny models: policy and judge demonstrations, and the tokenizer corpus.

* Policy demos: the walkthrough of each task, each step's prompt rendered exactly as the rollout
  runner renders it, response = a short reason + ``\\boxed{i}`` (i = the walkthrough action's index).
* Judge demos: steps of expert (walkthrough) and random-action trajectories, judge prompt as in
  :mod:`rla_core.envs.judge`, labelled from TextWorld's ``policy_commands`` (good → ``\\boxed{1}``,
  otherwise ``\\boxed{-1}``), the same ground truth as the judge's step accuracy.
* :func:`corpus_texts`: templates, prompts and responses, for the tiny tokenizer's BPE.

Example:
    >>> demos = policy_demos(env, [spec])  # doctest: +SKIP
    >>> demos.columns
    ['prompt', 'response']
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.envs.prompts import (
    judge_demo_response,
    policy_demo_response,
    render_judge_prompt,
    render_policy_prompt,
    template_texts,
)
from rla_core.envs.rollout import derive_seed

if TYPE_CHECKING:
    from rla_core.envs.base import Environment

_COLUMNS = {"prompt": pl.String, "response": pl.String}


def _play(
    env: Environment,
    spec: dict[str, Any],
    *,
    choose: Any,
    max_steps: int,
    history_turns: int,
) -> list[tuple[str, str, str, bool, str]]:
    """Play one episode; per step (policy prompt, response, next observation, action is expert, action)."""
    episode = env.open(spec, seed=0)
    steps: list[tuple[str, str, str, bool, str]] = []
    history: list[tuple[str, str]] = []
    try:
        for step in range(max_steps):
            actions = list(episode.admissible_actions)
            action = choose(step, actions)
            if action is None or not actions:
                break
            prompt = render_policy_prompt(
                instruction=episode.instruction,
                history=history,
                observation=episode.observation,
                actions=actions,
                history_turns=history_turns,
            )
            good = action in episode.expert_actions()
            before = episode.observation
            result = episode.step(action)
            if action in actions:
                response = policy_demo_response(action, actions.index(action))
                steps.append((prompt, response, result.observation, good, action))
            history.append((before, action))
            if result.done:
                break
    finally:
        episode.close()
    return steps


def policy_demos(
    env: Environment, specs: Sequence[dict[str, Any]], *, history_turns: int = 2
) -> pl.DataFrame:
    """Policy SFT rows (prompt, response) from each task's walkthrough (warm start, design §5 Trainer)."""
    rows: list[dict[str, str]] = []
    for spec in specs:
        for walkthrough in env.demonstrations(spec, seed=0):
            plan = list(walkthrough)

            def choose(step: int, actions: list[str], plan: list[str] = plan) -> str | None:
                return plan[step] if step < len(plan) else None

            for prompt, response, _obs, _good, _action in _play(
                env, spec, choose=choose, max_steps=len(plan), history_turns=history_turns
            ):
                rows.append({"prompt": prompt, "response": response})
    return pl.DataFrame(rows, schema=_COLUMNS)


def judge_demos(
    env: Environment,
    specs: Sequence[dict[str, Any]],
    *,
    random_rollouts: int = 2,
    max_steps: int = 4,
    seed: int = 0,
    history_turns: int = 2,
    judge_template: str = "judge",
) -> pl.DataFrame:
    """Judge SFT rows (prompt, response) from expert and random trajectories, labelled by policy_commands.

    ``judge_template`` is the judge prompt the rows are rendered with (``gui_judge`` for GUI tasks).

    Each task contributes its walkthrough steps (good) and ``random_rollouts`` trajectories of
    uniformly random admissible actions (seeded by ``derive_seed(seed, spec, i)``), each step labelled
    good iff its action was one of the engine's optimal next commands.

    Random trajectories stop after ``max_steps`` (default 4): their later steps are nearly all bad and
    each costs a long judge prompt in SFT, so 4 keeps the labels more balanced and the warm start
    within its time budget (``benchmarks/bench_warmstart_textgame.py``: judge step accuracy > 0.5).
    """
    rows: list[dict[str, str]] = []
    for spec in specs:
        plans = env.demonstrations(spec, seed=0)
        trajectories = []
        for plan in plans:

            def expert(step: int, actions: list[str], plan: list[str] = plan) -> str | None:
                return plan[step] if step < len(plan) else None

            trajectories.append(
                _play(env, spec, choose=expert, max_steps=len(plan), history_turns=history_turns)
            )
        for i in range(random_rollouts):
            rng = random.Random(derive_seed(seed, sorted(spec.items()), i))

            def pick(step: int, actions: list[str], rng: random.Random = rng) -> str | None:
                return rng.choice(actions) if actions else None

            trajectories.append(
                _play(env, spec, choose=pick, max_steps=max_steps, history_turns=history_turns)
            )
        for trajectory in trajectories:
            for prompt, response, next_obs, good, action in trajectory:
                rows.append(
                    {
                        "prompt": render_judge_prompt(
                            prompt=prompt,
                            response=response,
                            next_observation=next_obs,
                            template=judge_template,
                        ),
                        "response": judge_demo_response(action, good=good),
                    }
                )
    return pl.DataFrame(rows, schema=_COLUMNS)


def corpus_texts(
    env: Environment, specs: Sequence[dict[str, Any]], *, history_turns: int = 2, seed: int = 0
) -> list[str]:
    """Texts for the tiny tokenizer's BPE: every template, and the demo prompts and responses."""
    texts = list(template_texts().values())
    for frame in (
        policy_demos(env, specs, history_turns=history_turns),
        judge_demos(env, specs, seed=seed, history_turns=history_turns),
    ):
        texts.extend(frame["prompt"].to_list())
        texts.extend(frame["response"].to_list())
    return texts
