"""A generator that replays recorded model outputs: for tests whose subject is the code around a model
(the rollout runner, the environments, parsing and fallbacks), not the model; and the rollout request those
tests play it with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rla_core.config import SamplingConfig
from rla_core.models.generator import Generation
from rla_core.stage_inputs import RolloutRequest


class RecordedGenerator:
    """Replays ``texts`` in order, one per requested sample; records call sizes and seeds."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.calls: list[int] = []
        self.seeds: list[list[int] | None] = []

    def generate(
        self,
        prompts: Sequence[str],
        *,
        n: int,
        sampling: SamplingConfig,
        seed: int,
        seeds: Sequence[int] | None = None,
    ) -> list[list[Generation]]:
        self.calls.append(len(prompts))
        self.seeds.append(None if seeds is None else list(seeds))
        return [[Generation(self.texts.pop(0), 10, 3, "stop") for _ in range(n)] for _ in prompts]

    def format_prompt(self, prompt: str) -> str:
        return prompt

    def close(self) -> None:
        return None


def rollout_request(
    tasks: Sequence[Any], *, n: int, max_steps: int, seed: int, **fields: Any
) -> RolloutRequest:
    """``n`` episodes of each of ``tasks``: default sampling, iteration 1, 2 turns of history and no replays
    unless ``fields`` say otherwise (any other field of :class:`RolloutRequest` too)."""
    defaults: dict[str, Any] = {
        "sampling": SamplingConfig(),
        "iteration": 1,
        "history_turns": 2,
        "env_retries": 0,
    }
    return RolloutRequest(tasks=tasks, n=n, max_steps=max_steps, seed=seed, **(defaults | fields))
