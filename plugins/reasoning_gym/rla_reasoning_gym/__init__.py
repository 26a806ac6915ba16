"""Reasoning Gym's procedural tasks as an rlanything environment plug-in (single-turn, verifiable).

One generator of the library (``plugin.options.dataset``) makes every task: a task's spec is the seed of
the item and the generator's difficulty config (the lower and upper field of each curriculum attribute,
e.g. ``min_terms``/``max_terms`` of ``chain_sum``). The rewrite space is declared by the library: each field
lies between the lowest and the highest level of its curriculum attribute, and a rewrite moves one field to
the neighbouring level. A candidate is valid only when the library accepts the config and generates from it.

An episode is one question, played in one of two ways (``plugin.options.answer``):

- ``choice`` (the default): the admissible actions are the item's answer and answers of other items of the
  same config (shuffled by the episode's seed; none that the library scores as correct), and the library's
  ``score_answer`` of the chosen one is the score. The demonstration and expert action is the generated answer.
- ``free``: as the library intends, a free-form turn: the policy writes its answer under the library's
  ``direct`` system prompt (``<answer>...</answer>``), the library's ``extract_answer`` reads it and
  ``score_answer`` scores it (no answer found scores 0). The demonstration is the generated answer in those tags.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import reasoning_gym
from pydantic import field_validator
from reasoning_gym.coaching.attributes import RangeAttributeDefinition
from reasoning_gym.factory import CURRICULA, DATASETS
from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer

from rla_core.plugins import EnvironmentPlugin, Field, Observation, PluginOptions, RewriteSpace, Task

DEFAULT_DATASET = "chain_sum"
EVAL_SEED = 1_000_000  # held-out items use seeds from here on; training items count up from 0
DISTRACTOR_TRIES = 64  # other items drawn to find distractor answers the library scores as wrong


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def attributes(dataset: str) -> dict[str, RangeAttributeDefinition]:
    """The curriculum attributes of ``dataset``: each a pair of config fields and its declared levels."""
    found = CURRICULA[dataset]().attributes
    return {k: a for k, a in found.items() if isinstance(a, RangeAttributeDefinition)}


def supported() -> list[str]:
    """The generators this plug-in plays: a curriculum whose attributes are all ranges of integer levels."""
    out = []
    for name, curriculum in sorted(CURRICULA.items()):
        attrs = curriculum().attributes
        if name in DATASETS and all(
            isinstance(a, RangeAttributeDefinition) and all(_is_int(v) for v in a.levels)
            for a in attrs.values()
        ):
            out.append(name)
    return out


def space_of(dataset: str) -> RewriteSpace:
    """The rewrite space of ``dataset``: every lower/upper field bounded by its attribute's declared levels;
    raising any of them makes the task harder."""
    bounds: dict[str, tuple[int, int]] = {}
    for attr in attributes(dataset).values():
        for name in (attr.lower_field_name, attr.upper_field_name):
            bounds[name] = (min(attr.levels), max(attr.levels))
    return RewriteSpace(bounds=bounds, difficulty=tuple(bounds))


class ReasoningGymOptions(PluginOptions):
    dataset: str = Field(DEFAULT_DATASET, description="The Reasoning Gym generator (its registered name).")
    level: int = Field(
        1, ge=0, le=8, description="Curriculum level of the upper fields of the seed tasks (lower: level 0)."
    )
    train_tasks: int = Field(4, ge=1, le=64, description="Seed training tasks (seeds 0, 1, ...).")
    eval_tasks: int = Field(4, ge=1, le=64, description="Held-out tasks (their own seeds, the seed config).")
    choices: int = Field(
        4, ge=2, le=8, description="Admissible answers per question (the item's and others; answer=choice)."
    )
    answer: Literal["choice", "free"] = Field(
        "choice",
        description="choice: pick one of the listed answers; free: write the answer (a free-form turn).",
    )

    @field_validator("dataset")
    @classmethod
    def _known(cls, value: str) -> str:
        names = supported()
        if value not in names:
            raise ValueError(f"{value!r} is not a Reasoning Gym generator this plug-in plays; choose one of: "
                             f"{', '.join(names)}")  # fmt: skip
        return value


def _config(spec: dict[str, Any], fields: tuple[str, ...]) -> dict[str, int]:
    return {k: int(spec[k]) for k in fields}


@lru_cache(maxsize=4096)
def _item(dataset: str, seed: int, config: tuple[tuple[str, int], ...]) -> dict[str, Any]:
    """Item 0 of ``dataset`` generated with ``seed`` and ``config`` (the library validates the config)."""
    data = reasoning_gym.create_dataset(dataset, size=1, seed=seed, **dict(config))
    return dict(data[0])


@lru_cache(maxsize=4096)
def _choices(dataset: str, seed: int, config: tuple[tuple[str, int], ...], k: int) -> tuple[str, ...]:
    """The item's answer first, then up to ``k - 1`` distinct answers of other items of the same config that
    the library's ``score_answer`` gives less than 1 for this item."""
    entry = _item(dataset, seed, config)
    scorer = reasoning_gym.create_dataset(dataset, size=1, seed=seed, **dict(config))
    out = [str(entry["answer"])]
    for i in range(1, DISTRACTOR_TRIES + 1):
        if len(out) == k:
            break
        other = str(_item(dataset, seed * 7919 + i + EVAL_SEED * 3, config)["answer"])
        if other.strip() and other not in out and scorer.score_answer(other, entry) < 1.0:
            out.append(other)
    return tuple(out)


@dataclass(frozen=True)
class State:
    entry: dict[str, Any]
    actions: tuple[str, ...]
    answer: str | None = None


class ReasoningGym(EnvironmentPlugin):
    Options = ReasoningGymOptions

    def __init__(self, options: ReasoningGymOptions) -> None:
        super().__init__(options)
        self.opts = options
        self.dataset = options.dataset
        self.rewrite_space = space_of(options.dataset)
        self.attributes = attributes(options.dataset)
        self.fields = tuple(self.rewrite_space.bounds)
        self.scorer = reasoning_gym.create_dataset(self.dataset, size=1, seed=0)
        self.free_form = options.answer == "free"
        self.system_prompt = SYSTEM_PROMPTS["direct"] if self.free_form else None

    def _key(self, spec: dict[str, Any]) -> tuple[tuple[str, int], ...]:
        return tuple(sorted(_config(spec, self.fields).items()))

    def _seed_spec(self, seed: int) -> dict[str, Any]:
        spec: dict[str, Any] = {"seed": seed}
        for attr in self.attributes.values():
            spec[attr.lower_field_name] = attr.levels[0]
            spec[attr.upper_field_name] = attr.levels[min(self.opts.level, len(attr.levels) - 1)]
        return spec

    def tasks(self, split: str) -> list[Task]:
        opts = self.opts
        if split == "eval":
            return [Task(f"eval-{i}", self._seed_spec(EVAL_SEED + i)) for i in range(opts.eval_tasks)]
        return [Task(f"{self.dataset}-{i}", self._seed_spec(i)) for i in range(opts.train_tasks)]

    def instruction(self, spec: dict[str, Any]) -> str:
        if self.free_form:
            return "Answer the question."
        return "Answer the question: choose the correct answer."

    def reset(self, spec: dict[str, Any], *, seed: int) -> tuple[State, Observation]:
        key = self._key(spec)
        entry = _item(self.dataset, int(spec["seed"]), key)
        if self.free_form:
            return State(entry, ()), Observation(str(entry["question"]))
        actions = list(_choices(self.dataset, int(spec["seed"]), key, self.opts.choices))
        random.Random(seed).shuffle(actions)
        state = State(entry, tuple(actions))
        return state, Observation(str(entry["question"]), state.actions)

    def step(self, state: State, action: str) -> tuple[State, Observation]:
        answer = extract_answer(action) if self.free_form else action
        shown = "no answer in <answer></answer> tags" if answer is None else answer
        return State(state.entry, state.actions, answer), Observation(f"You answered: {shown}", done=True)

    def score(self, state: State) -> float:
        if state.answer is None:
            return 0.0
        return float(self.scorer.score_answer(state.answer, state.entry))

    def demonstration(self, spec: dict[str, Any]) -> list[str]:
        answer = str(_item(self.dataset, int(spec["seed"]), self._key(spec))["answer"])
        return [f"<answer>{answer}</answer>" if self.free_form else answer]

    def expert_actions(self, state: State) -> list[str]:
        return [] if state.answer is not None else [str(state.entry["answer"])]

    def variants(self, spec: dict[str, Any], *, harder: bool) -> list[dict[str, Any]]:
        """For each attribute: its upper field to the next level (harder) or the previous one (easier);
        then its lower field the same way (never past the upper one)."""
        out = []
        for field_of in ("upper_field_name", "lower_field_name"):
            for attr in self.attributes.values():
                name = getattr(attr, field_of)
                levels = sorted(attr.levels)
                now = int(spec[name])
                moved = [v for v in levels if v > now] if harder else [v for v in levels if v < now][::-1]
                if moved:
                    out.append({**spec, name: moved[0]})
        return out

    def check_variant(self, spec: dict[str, Any]) -> str | None:
        """The lower field of each attribute at most its upper one; the library accepts the config and
        generates the task's item from it."""
        for attr in self.attributes.values():
            low, high = spec[attr.lower_field_name], spec[attr.upper_field_name]
            if low > high:
                return f"{attr.lower_field_name}={low} is above {attr.upper_field_name}={high}"
        try:
            _item(self.dataset, int(spec["seed"]), self._key(spec))
        except Exception as exc:  # the library's own check of the config, whatever it raises
            return f"reasoning-gym rejects the config: {type(exc).__name__}: {exc}"
        return None
