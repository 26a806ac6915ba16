"""The environment interfaces every setting's games implement (docs/architecture.md#cross-module-interfaces).

Protocols only (no inheritance): an :class:`Environment` turns a task spec (a JSON-able dict) and a
seed into an :class:`Episode`; an episode exposes the goal text, the current observation, the
admissible actions shown to the policy, and the engine's expert next actions (the judge's ground
truth for step accuracy, spec §7 "Process Acc").

Example:
    >>> from rla_core.envs.base import StepResult
    >>> StepResult(observation="You take the key.", done=False, won=False).done
    False
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rla_core.algo.episodes import EnvErrorKind as EnvErrorKind  # the kinds an engine's faults carry


@dataclass(frozen=True)
class StepResult:
    """What one action did: the next observation, whether the episode ended, whether it was won, and the
    episode's raw score once it ended (an environment plug-in's :meth:`score`; None where the engine keeps none)."""

    observation: str
    done: bool
    won: bool
    score: float | None = None


class Episode(Protocol):
    """One playable game instance; actions are plain command strings."""

    instruction: str
    observation: str
    admissible_actions: list[str]

    @property
    def free_form(self) -> bool:
        """The policy answers this turn in free text (no action list; environment plug-ins that declare it)."""
        ...

    @property
    def system_prompt(self) -> str | None:
        """A free-form episode's system prompt, shown above its conversation (None: none)."""
        ...

    @property
    def observation_ref(self) -> str | None:
        """An image of the current observation (GUI: a screenshot path); None for text-only environments."""
        ...

    def step(self, action: str) -> StepResult:
        """Apply ``action`` and return its result; updates ``observation`` and ``admissible_actions``."""
        ...

    def expert_actions(self) -> list[str]:
        """Optimal next actions from the current state (empty once won)."""
        ...

    def close(self) -> None:
        """Release the engine's resources."""
        ...


class Environment(Protocol):
    """A family of tasks given by specs; creates episodes and expert demonstrations."""

    name: str
    # How many episodes may be open at once (an OSWorld desktop pool's size: one desktop each); None: any
    # number. The rollout path plays a request in waves of it.
    max_open: int | None

    def validate_spec(self, spec: dict[str, Any]) -> None:
        """Raise EnvironmentSpecError (what, where, how to fix) when ``spec`` is not a valid task."""
        ...

    def open(self, spec: dict[str, Any], *, seed: int) -> Episode:
        """Start an episode of the task ``spec``."""
        ...

    def demonstrations(self, spec: dict[str, Any], *, seed: int) -> list[list[str]]:
        """Expert action sequences that win the task (e.g. TextWorld's walkthrough)."""
        ...


def canonical_spec(spec: Mapping[str, Any]) -> str:
    """A task spec as canonical JSON (sorted keys, no spaces): the form stored in artifacts and hashed."""
    return json.dumps(dict(spec), sort_keys=True, separators=(",", ":"))
