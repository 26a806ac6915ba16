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
from enum import StrEnum
from typing import Any, Protocol


class EnvErrorKind(StrEnum):
    """Which part of our machinery failed in an ``env_error`` episode (``rollouts.error_kind``).

    Raised as :class:`~rla_core.errors.EnvironmentFault` by an episode; where each engine draws the line
    between these and the policy's own failures: docs/environment-errors.md.
    """

    DESKTOP = "desktop"  # the desktop (its VM/container or X server) did not start or died
    DESKTOP_SERVER = "desktop_server"  # the server inside the desktop stopped answering
    SETUP = "setup"  # the task's set-up steps failed before the first action
    BROWSER = "browser"  # the browser or its driver died
    BROWSER_TIMEOUT = "browser_timeout"  # a browser call exceeded its timeout (the browser was killed)
    NO_ACTIONS = "no_actions"  # the page or desktop offered no admissible action: it broke
    SANDBOX = "sandbox"  # the code sandbox died under a program (coding)
    PLUGIN = "plugin"  # an environment plug-in raised or returned something malformed (docs/environments.md)


@dataclass(frozen=True)
class StepResult:
    """What one action did: the next observation, whether the episode ended, and whether it was won."""

    observation: str
    done: bool
    won: bool


class Episode(Protocol):
    """One playable game instance; actions are plain command strings."""

    instruction: str
    observation: str
    admissible_actions: list[str]

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
