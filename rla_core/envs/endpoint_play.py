"""Episodes a plug-in plays itself, against the policy's recording endpoint (an environment written against an
OpenAI client, e.g. a verifiers taskset; docs/environments.md).

The stage's generator is put behind a :class:`~rla_core.models.endpoint.RecordingEndpoint` (loopback, a key of
its own, a thread of this process); the plug-in's :meth:`~rla_core.plugins.EnvironmentPlugin.play` gets every
episode of the request with its seed (``derive_seed(seed, task_id, rollout_id)``, as the rollout runner's) and
the loop's turn limit, and sends every chat request of an episode with that seed. Each recorded assistant turn
becomes one 'rollouts' row, as a free-form turn of the runner: ``prompt`` the conversation rendered in the
checkpoint's chat markup (what the model continued), ``response``/``action`` the turn's text,
``next_observation`` what the environment said next (the next turn's new messages; the episode's final
observation after the last turn), and the recorded ``prompt_ids``, ``response_ids`` and
``response_logprobs`` that the update trains on. The episode's raw score is on every row and its outcome is +1
from the plug-in's ``success_score``. An episode the plug-in reports failed is ``env_error`` (its turns kept,
its message naming the plug-in), replayed up to ``rollout.env_retries`` times with the same seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import polars as pl

from rla_core.algo.episodes import EpisodeStatus
from rla_core.envs.base import EnvErrorKind
from rla_core.envs.rollout import end_as_env_error, episode_seed, replay_failed
from rla_core.errors import EnvironmentFault, ModelError
from rla_core.plugins import EpisodeRequest, EpisodeResult, PolicyEndpoint
from rla_core.schemas import get_schema, validate

if TYPE_CHECKING:
    from rla_core.envs.plugin_env import GuardedPlugin
    from rla_core.models.chat import EndpointRecord
    from rla_core.models.endpoint import TokenGenerator
    from rla_core.models.generator import Generator
    from rla_core.stage_inputs import RolloutRequest

ENDPOINT_MODEL = "rla-policy"  # the one model name the endpoint serves


def play_through_endpoint(
    request: RolloutRequest, *, env: GuardedPlugin, generator: Generator
) -> dict[str, pl.DataFrame]:
    """The request's episodes played by the plug-in against the recording endpoint (module docstring): the
    frames ``rollouts`` and, when an attempt failed, ``env_errors`` (as :func:`~rla_core.envs.rollout.play_rollouts`)."""
    from rla_core.models.endpoint import RecordingEndpoint

    checkpoint = getattr(generator, "model_dir", None)
    if checkpoint is None or not hasattr(generator, "generate_tokens"):
        raise ModelError(
            f"plug-in {env.name!r} plays its own episodes through the recording endpoint, which serves the "
            "in-process transformers generator (models.serving.backend=transformers)"
        )
    sampling = request.sampling
    tokens = cast("TokenGenerator", generator)  # checked above: it samples token ids
    with RecordingEndpoint(
        tokens, checkpoint=Path(checkpoint), model=ENDPOINT_MODEL, sampling=sampling
    ) as ep:
        policy = PolicyEndpoint(
            base_url=ep.base_url, api_key=ep.api_key, model=ENDPOINT_MODEL, temperature=sampling.temperature,
            top_p=sampling.top_p, max_tokens=sampling.max_new_tokens,
        )  # fmt: skip

        def play(part: RolloutRequest) -> pl.DataFrame:
            tasks = {t.task_id: t for t in part.tasks}
            keys = part.episode_keys()
            episodes = [
                EpisodeRequest(task_id, tasks[task_id].spec, episode_seed(part.seed, task_id, rollout_id), part.max_steps)
                for task_id, rollout_id in keys
            ]  # fmt: skip
            results = env.play(episodes, policy)
            rows: list[dict[str, Any]] = []
            for (task_id, rollout_id), episode, result in zip(keys, episodes, results, strict=True):
                base = {
                    "iteration": part.iteration, "task_id": task_id, "slot_id": tasks[task_id].slot_id,
                    "pending": tasks[task_id].pending, "rollout_id": rollout_id, "attempt": 0,
                }  # fmt: skip
                rows += episode_rows(base, ep.records(episode.seed), result, env=env)
            frame = pl.DataFrame(rows, schema=get_schema("rollouts").polars_schema)
            return validate("rollouts", frame, where="play_through_endpoint")

        return replay_failed(request, play)


def episode_rows(
    base: dict[str, Any], records: list[EndpointRecord], result: EpisodeResult, *, env: GuardedPlugin
) -> list[dict[str, Any]]:
    """One episode's 'rollouts' rows from its recorded turns and the plug-in's result (module docstring).

    Example: two recorded turns and ``EpisodeResult(score=0.75, ...)`` with ``success_score`` 1 → two rows,
    steps 0 and 1, both ``score`` 0.75 and outcome -1, the second ``done``.
    """
    blank = dict.fromkeys(get_schema("rollouts").columns)
    rows: list[dict[str, Any]] = []
    for i, record in enumerate(records):
        after = records[i + 1] if i + 1 < len(records) else None
        rows.append(
            {
                **blank, **base, "step": i, "prompt": record.prompt,
                "response": record.response, "action": record.response, "action_valid": True,
                "next_observation": _said_after(record, after) if after else result.final_observation,
                "expert_actions": "[]", "done": after is None, "prompt_tokens": len(record.prompt_ids),
                "response_tokens": len(record.response_ids), "prompt_ids": list(record.prompt_ids),
                "response_ids": list(record.response_ids), "response_logprobs": list(record.logprobs),
            }
        )  # fmt: skip
    if result.error is not None or result.score is None:
        failure = f"reported the episode failed: {result.error or 'no score'}"
    elif not rows:  # the environment ended the episode before asking the policy anything
        failure = "played the episode without a single request to the policy"
    else:
        ended = env.ended(result.final_observation, result.score)
        status = EpisodeStatus.WON if ended.won else EpisodeStatus.LOST
        for row in rows:
            row.update(outcome=1.0 if ended.won else -1.0, status=status.value, score=ended.score)
        return rows
    end_as_env_error(rows, base, EnvironmentFault(EnvErrorKind.PLUGIN, f"plug-in {env.name!r} {failure}"))
    return rows


def _said_after(record: EndpointRecord, after: EndpointRecord) -> str:
    """What the environment said between two turns: the messages the later request has beyond the earlier
    request's conversation and its answer."""
    before = len(json.loads(record.messages)) + 1  # the earlier conversation and the assistant's reply
    new = json.loads(after.messages)[before:]
    return "\n".join(str(m.get("content", "")) for m in new)
