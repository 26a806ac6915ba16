"""A generator that replays recorded model outputs: for tests whose subject is the code around a model
(the rollout runner, the environments, parsing and fallbacks), not the model."""

from __future__ import annotations

from collections.abc import Sequence

from rla_core.config import SamplingConfig
from rla_core.models.generator import Generation


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
