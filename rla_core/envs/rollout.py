"""The batched rollout runner: the policy plays n episodes of every task, all concurrently (spec §1.2(a)).

All episodes advance in lock-step. Each turn, the prompts of every live episode are rendered and sent
to the generator, the action index is parsed from the last ``\\boxed{}`` (spec §5), an invalid answer
is recorded (``action_valid=False`` plus the reason) and replaced by the spec's fallback (index 0,
clamped), and every episode steps its own game. An episode ends at the win, at a loss, or after
``max_steps`` actions; successful trajectories are therefore cut at the winning step. The outcome
(+1 won / -1 otherwise) is written on every row of the rollout.

Seeds: episode ``(task_id, rollout_id)`` samples turn ``step`` with
``derive_seed(seed, task_id, rollout_id, step)``, passed per prompt as ``generate(..., seeds=...)``;
a backend samples each prompt from its own seeded stream (see :mod:`rla_core.models.generator`), so
a row does not depend on which other episodes were live with it. How prompts reach the generator is
a :class:`GenerationMode`:

* ``JOINT`` (default): ONE generate call per turn for all live episodes (one padded batch).
* ``PER_EPISODE``: one generate call per live episode per turn, with the same seeds — the same rows,
  ~4x slower on CPU; kept as the plain reference that the joint mode is tested against.

Either way the batched runner's rows equal playing each episode alone (``rollout_ids=[i]``) with the
same seed (design §3 determinism).

Example:
    >>> request = RolloutRequest(tasks=(PlayTask("t0", "s0", False, spec),), n=4, max_steps=8,
    ...                          sampling=SamplingConfig(), seed=1, iteration=1, history_turns=2)
    >>> frame = run_rollouts(request, env=env, generator=gen)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core import progress
from rla_core.algo.curriculum import PlayTask
from rla_core.algo.parsing import Parsed, fallback_action_index, parse_action_index
from rla_core.config import InvalidAction
from rla_core.envs.base import StepResult
from rla_core.envs.prompts import render_policy_prompt
from rla_core.errors import EnvironmentSpecError
from rla_core.models.multimodal import ImagePrompt, Prompt
from rla_core.schemas import get_schema, validate

if TYPE_CHECKING:
    from rla_core.config import SamplingConfig
    from rla_core.envs.base import Environment, Episode
    from rla_core.models.generator import Generation, Generator
    from rla_core.stage_inputs import RolloutRequest


class GenerationMode(StrEnum):
    """How the runner batches the policy's prompts (see the module docstring)."""

    PER_EPISODE = "per_episode"
    JOINT = "joint"


def derive_seed(seed: int, *parts: object) -> int:
    """A 63-bit seed from ``seed`` and key parts (sha256 of their JSON), independent of call order."""
    payload = json.dumps([seed, *[str(p) for p in parts]])
    return int.from_bytes(hashlib.sha256(payload.encode("utf-8")).digest()[:8], "big") >> 1


@dataclass
class RolloutTimings:
    """Wall seconds spent in generation vs. the game engine during one :func:`run_rollouts` call."""

    generation_s: float = 0.0
    engine_s: float = 0.0
    steps: int = 0


@dataclass
class _Live:
    task: PlayTask
    rollout_id: int
    episode: Episode
    history: list[tuple[str, str]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)


def run_rollouts(
    request: RolloutRequest,
    *,
    env: Environment,
    generator: Generator,
    mode: GenerationMode = GenerationMode.JOINT,
    timings: RolloutTimings | None = None,
    rollout_ids: Sequence[int] | None = None,
) -> pl.DataFrame:
    """Play ``request.n`` rollouts of every task concurrently; return the 'rollouts' artifact (spec §1.2(a)).

    Writes every 'rollouts' column: iteration, task_id, slot_id, pending, rollout_id (0..n-1), step
    (0-based), prompt, response, action (the command played), action_valid, invalid_reason (null when
    valid), next_observation, expert_actions (JSON list of the engine's optimal next commands before
    the action), done (True on the last row of a rollout), outcome (+1 won / -1, on every row), score
    (null: text games have no partial score), prompt_tokens, response_tokens. The prompt shows the last
    ``request.history_turns`` turns (``models.history_turns``) and is passed through
    ``generator.format_prompt`` (chat markup when ``models.serving.chat_template`` is on). Rows are
    ordered by task order, rollout_id, step. ``timings``, when given, accumulates generation vs. engine
    time. ``rollout_ids`` plays only those rollouts of each task (default ``range(n)``), e.g. to replay
    one; ``request.episodes`` (a shard, :mod:`rla_core.cluster.shards`) plays only those episodes. ``request.invalid_action``: ``FALLBACK`` plays the spec's fallback action for an invalid answer;
    ``FAIL`` ends the episode there as a failure (the row's ``action`` is empty and the game is not
    stepped). ``env`` is the environment already opened for ``request.env``.
    """
    n, max_steps, seed, iteration = request.n, request.max_steps, request.seed, request.iteration
    sampling, history_turns, invalid_action = request.sampling, request.history_turns, request.invalid_action
    images = request.images
    if n < 1 or max_steps < 1:
        raise ValueError(f"n={n} and max_steps={max_steps} must both be at least 1")
    timer = timings if timings is not None else RolloutTimings()
    parsed_tasks = [PlayTask(*t) for t in request.tasks]
    for task in parsed_tasks:
        env.validate_spec(task.spec)
    live: list[_Live] = []
    finished: list[_Live] = []
    started = time.perf_counter()
    by_id = {task.task_id: task for task in parsed_tasks}
    if rollout_ids is not None:
        episodes = [(task.task_id, rollout_id) for task in parsed_tasks for rollout_id in rollout_ids]
    else:
        episodes = request.episode_keys()  # a shard's episodes (rla_core.cluster), else every one
    for task_id, rollout_id in episodes:
        task = by_id[task_id]
        episode = env.open(task.spec, seed=derive_seed(seed, task.task_id, rollout_id))
        live.append(_Live(task=task, rollout_id=rollout_id, episode=episode))
    timer.engine_s += time.perf_counter() - started
    try:
        with progress.track("", total=len(live), unit="episodes", rate="steps") as counter:
            for step in range(max_steps):
                if not live:
                    break
                # In the model's chat markup when configured: the recorded prompt is what the model saw.
                prompts = [
                    generator.format_prompt(_policy_prompt(ep, history_turns=history_turns, images=images))
                    for ep in live
                ]
                seeds = [derive_seed(seed, ep.task.task_id, ep.rollout_id, step) for ep in live]
                started = time.perf_counter()
                outputs = _generate(generator, prompts, seeds, sampling=sampling, mode=mode)
                timer.generation_s += time.perf_counter() - started
                started = time.perf_counter()
                still: list[_Live] = []
                for ep, prompt, out in zip(live, prompts, outputs, strict=True):
                    _play_turn(
                        ep, step=step, prompt=prompt, out=out, max_steps=max_steps, iteration=iteration,
                        invalid_action=invalid_action,
                    )  # fmt: skip
                    (still if not ep.rows[-1]["done"] else finished).append(ep)
                timer.engine_s += time.perf_counter() - started
                timer.steps += len(live)
                tokens = sum(out.completion_tokens for out in outputs)
                counter.advance(len(live) - len(still), steps=len(live), tokens=tokens)
                live = still
    finally:
        for ep in live + finished:
            ep.episode.close()
    order = {t.task_id: i for i, t in enumerate(parsed_tasks)}
    done_eps = sorted(finished, key=lambda e: (order[e.task.task_id], e.rollout_id))
    rows = [row for ep in done_eps for row in ep.rows]
    return validate(
        "rollouts", pl.DataFrame(rows, schema=get_schema("rollouts").polars_schema), where="run_rollouts"
    )


def _policy_prompt(ep: _Live, *, history_turns: int, images: int) -> Prompt:
    """The policy's prompt for the episode's next step: text, plus its last ``images`` screens when > 0."""
    text = render_policy_prompt(
        instruction=ep.episode.instruction,
        history=ep.history,
        observation=ep.episode.observation,
        actions=ep.episode.admissible_actions,
        history_turns=history_turns,
    )
    if images == 0:
        return text
    current = ep.episode.observation_ref
    if current is None:
        raise EnvironmentSpecError(
            f"models.images.policy={images} shows the policy its screen, but task {ep.task.task_id} "
            f"(rollout {ep.rollout_id}, step {len(ep.rows)}) has no screenshot: this environment keeps "
            "none (only the gui setting does, with gui.screenshots=true)"
        )
    earlier = [row["observation_ref"] for row in ep.rows[-(images - 1) :]] if images > 1 else []
    return ImagePrompt(text, (*earlier, current))


def _generate(
    generator: Generator,
    prompts: list[Prompt],
    seeds: list[int],
    *,
    sampling: SamplingConfig,
    mode: GenerationMode,
) -> list[Generation]:
    # ``seed`` is required by the Protocol but unused once ``seeds`` is given; pass the first for clarity.
    if mode is GenerationMode.JOINT:
        outputs = generator.generate(prompts, n=1, sampling=sampling, seed=seeds[0], seeds=seeds)
        return [samples[0] for samples in outputs]
    return [
        generator.generate([prompt], n=1, sampling=sampling, seed=s, seeds=[s])[0][0]
        for prompt, s in zip(prompts, seeds, strict=True)
    ]


# The next observation recorded when an invalid answer ends an episode (InvalidAction.FAIL).
INVALID_ANSWER_ENDS = "Invalid answer (no valid action index in \\boxed{}): the episode ends."


def _play_turn(
    ep: _Live,
    *,
    step: int,
    prompt: Prompt,
    out: Generation,
    max_steps: int,
    iteration: int,
    invalid_action: InvalidAction,
) -> None:
    episode = ep.episode
    actions = list(episode.admissible_actions)
    expert = episode.expert_actions()
    observation_before = episode.observation
    ref_before = episode.observation_ref
    if not actions:
        # Nothing can be played (e.g. a page that lost its elements): the episode ends as a recorded
        # failure instead of crashing the stage.
        parsed: Parsed[int] = Parsed.fail("the environment offered no admissible action; the episode ends")
        action = ""
        result = StepResult(observation=observation_before, done=True, won=False)
    else:
        parsed = parse_action_index(out.text, len(actions))
        if parsed.valid or invalid_action is InvalidAction.FALLBACK:
            action = actions[fallback_action_index(parsed, len(actions))]
            result = episode.step(action)
        else:
            action = ""
            result = StepResult(observation=INVALID_ANSWER_ENDS, done=True, won=False)
    # The screen after the step (GUI): the environment's latest screenshot once an action was played; the
    # screen before it when none was (nothing changed). A judge that sees images gets both (spec §1.3).
    ref_after = episode.observation_ref if action else ref_before
    done = result.done or step + 1 >= max_steps
    ep.history.append((observation_before, action))
    ep.rows.append(
        {
            "iteration": iteration,
            "task_id": ep.task.task_id,
            "slot_id": ep.task.slot_id,
            "pending": ep.task.pending,
            "rollout_id": ep.rollout_id,
            "step": step,
            "prompt": prompt.text if isinstance(prompt, ImagePrompt) else prompt,
            "images": list(prompt.images) if isinstance(prompt, ImagePrompt) else None,
            "response": out.text,
            "action": action,
            "action_valid": parsed.valid,
            "invalid_reason": None if parsed.valid else parsed.reason,
            "next_observation": result.observation,
            "expert_actions": json.dumps(expert),
            "observation_ref": ref_before,
            "next_observation_ref": ref_after,
            "done": done,
            "outcome": None,
            "score": None,
            "prompt_tokens": out.prompt_tokens,
            "response_tokens": out.completion_tokens,
        }
    )
    if done:
        outcome = 1.0 if result.won else -1.0
        for row in ep.rows:
            row["outcome"] = outcome
