"""Walk to the flag: an example environment plug-in for rlanything (docs/environments.md).

The agent starts at 0; the flag is at ``distance``. Each step it may move left, move right or stay; the
episode is won on the flag and lost when the agent walks more than ``slack`` steps left of 0. A harder
variant moves the flag further away (the rewrite space: ``distance`` in 1..8); ``seed`` names the task
family and is never rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rla_core.plugins import EnvironmentPlugin, Field, Observation, PluginOptions, RewriteSpace, Task

ACTIONS = ("move left", "move right", "stay")


class Options(PluginOptions):
    """``plugin.options`` of this plug-in."""

    train_tasks: int = Field(3, ge=1, le=8, description="Seed training tasks (flags at 1, 2, 3, 1, ...).")
    slack: int = Field(2, ge=0, le=5, description="Steps left of 0 the agent may walk before it is lost.")


@dataclass(frozen=True)
class State:
    position: int
    target: int
    lost: bool = False


class NumberLine(EnvironmentPlugin):
    """The number-line game (module docstring)."""

    Options = Options
    rewrite_space = RewriteSpace(bounds={"distance": (1, 8)}, difficulty=("distance",), anchor_radius=4)
    options: Options

    def tasks(self, split: str) -> list[Task]:
        if split == "eval":
            return [Task(f"eval-{d}", {"distance": d, "seed": 100 + d}) for d in (1, 2)]
        n = self.options.train_tasks
        return [Task(f"line-{i}", {"distance": 1 + i % 3, "seed": i}) for i in range(n)]

    def instruction(self, spec: dict[str, Any]) -> str:
        return f"Walk to the flag at {spec['distance']}."

    def _observe(self, state: State) -> Observation:
        if state.lost:
            return Observation(f"You fell off the line at {state.position}.", (), done=True)
        done = state.position == state.target
        text = f"You stand at {state.position}. The flag is at {state.target}."
        return Observation(text, () if done else ACTIONS, done=done)

    def reset(self, spec: dict[str, Any], *, seed: int) -> tuple[State, Observation]:
        del seed  # the game has no randomness
        state = State(position=0, target=int(spec["distance"]))
        return state, self._observe(state)

    def step(self, state: State, action: str) -> tuple[State, Observation]:
        move = {"move left": -1, "move right": 1, "stay": 0}[action]
        position = state.position + move
        new = State(position, state.target, lost=position < -self.options.slack)
        return new, self._observe(new)

    def score(self, state: State) -> float:
        return 1.0 if state.position == state.target and not state.lost else 0.0

    def demonstration(self, spec: dict[str, Any]) -> list[str]:
        return ["move right"] * int(spec["distance"])

    def expert_actions(self, state: State) -> list[str]:
        if state.position < state.target:
            return ["move right"]
        return ["move left"] if state.position > state.target else []

    def corpus(self) -> list[str]:
        return [*ACTIONS, "You stand at 0. The flag is at 1.", "You fell off the line."]
