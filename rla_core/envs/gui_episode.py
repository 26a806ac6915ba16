"""What the GUI engines' episodes share: MiniWoB++ pages in a browser, OSWorld tasks on a desktop.

A GUI episode shows the policy numbered candidate actions built from what is on the screen; an action
that is not one of them is a no-op step that still uses the budget. It keeps each step's screenshot as
``<episode id>-<step>.png`` (``observation_ref`` is the latest: what vision-language policies and judges
see), ends won when the task's score gives any credit (:data:`~rla_core.algo.episodes.WinRule.ANY_CREDIT`,
the reference code's OSWorld rule: partial credit counts), answers the judge with the scripted solution's
next action while that is one of the candidates, and ends as an environment error when our machinery (the
browser, the desktop) fails, never as the policy's loss (docs/environment-errors.md).

By composition, not inheritance: :class:`GuiEpisode` implements ``rla_core.envs.base.Episode`` once, over
a :class:`GuiScreen` (what the policy sees, the screenshots kept, how the episode ended) and an engine's
:class:`GuiPlay` (how it acts, observes, scores and fails: a browser tab, a desktop), which records what it
sees on that same screen. What the GUI environments share are the functions below: the screenshot
folder, episode names that depend only on the spec and the runner's seed (:func:`episode_name`),
demonstrations from a scripted solution and replaying a fixed action list (:func:`play_actions`).

Example:
    >>> NOT_LISTED.format(action="click ref=99")
    "'click ref=99' is not one of the listed actions; nothing happened.\\n"
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rla_core.algo.episodes import WinRule, is_won
from rla_core.envs.base import StepResult
from rla_core.errors import EnvironmentFault

NOT_LISTED = "'{action}' is not one of the listed actions; nothing happened.\n"


class GuiPlay(Protocol):
    """An engine's side of one GUI episode (a MiniWoB++ page in a tab, an OSWorld task on a desktop); it
    records what it sees on the episode's :class:`GuiScreen`."""

    def ready(self) -> None:
        """Wait until the episode has started (an engine may start it in the background); raise its fault."""
        ...

    def playable(self, action: str) -> bool:
        """Whether ``action`` is played (else it is a no-op step)."""
        ...

    def act(self, action: str) -> None:
        """Play the listed ``action`` and observe the screen after it (raise the episode's fault on failure)."""
        ...

    def after_step(self, action: str) -> None:
        """After every step that did not find the episode over, listed action or not (OSWorld scores here)."""
        ...

    def scripted_next(self) -> str | None:
        """The scripted solution's next action from the current state, if it has one."""
        ...

    def close(self) -> None:
        """Release the browser tab or desktop."""
        ...


@dataclass
class GuiScreen:
    """One GUI episode's state as the policy and the runner see it; the engine records into it.

    ``machinery`` names what stopped responding in a failed episode's observation ("browser", "desktop").
    """

    spec: dict[str, Any]
    episode_id: str
    screenshot_dir: Path | None
    machinery: str
    instruction: str = ""
    history: list[str] = field(default_factory=list)  # every action played, listed or not
    screenshots: list[str] = field(default_factory=list)  # PNG paths (artifact references)
    done: bool = False
    won: bool = False
    score: float | None = None  # the task's score once the episode is over
    failure: str | None = None  # why our machinery ended the episode
    observation: str = ""
    actions: list[str] = field(default_factory=list)

    def show(self, observation: str, actions: list[str]) -> None:
        """The current screen as the policy reads it: its observation text and the candidate actions."""
        self.observation = observation
        self.actions = actions

    def keep_screenshot(self, write: Callable[[Path], object]) -> None:
        """With a screenshot folder, ``write`` the current screen there as this step's PNG and keep its path."""
        if self.screenshot_dir is not None:
            path = self.screenshot_dir / f"{self.episode_id}-{len(self.history)}.png"
            write(path)
            self.screenshots.append(str(path))

    def end(self, score: float, observation: str) -> None:
        """The task is over with ``score``: won when it gives any credit."""
        self.score = score
        self.done, self.won = True, is_won(score, WinRule.ANY_CREDIT)
        self.show(observation, [])

    def end_failed(self, reason: str) -> None:
        """Our machinery failed: the episode is over, neither won nor lost by the policy."""
        self.failure = reason
        self.done, self.won = True, False
        self.show(f"The {self.machinery} stopped responding. ({reason})", [])

    def listed(self, action: str | None) -> list[str]:
        """``[action]`` while the episode goes on and ``action`` is one of the candidates, else ``[]``."""
        return [action] if not self.done and action is not None and action in self.actions else []


class GuiEpisode:
    """One GUI episode (implements ``rla_core.envs.base.Episode``): the bookkeeping of the module docstring
    over ``screen``, the engine's ``play`` doing the acting."""

    free_form = False  # every turn lists its actions
    system_prompt = None  # the policy prompt is the engine's own template

    def __init__(self, screen: GuiScreen, play: GuiPlay) -> None:
        self.screen = screen
        self.play = play

    @property
    def instruction(self) -> str:
        return self.screen.instruction

    @instruction.setter
    def instruction(self, value: str) -> None:  # the Episode protocol's attributes are settable
        self.screen.instruction = value

    @property
    def observation(self) -> str:
        self.play.ready()
        return self.screen.observation

    @observation.setter
    def observation(self, value: str) -> None:
        self.play.ready()
        self.screen.observation = value

    @property
    def admissible_actions(self) -> list[str]:
        self.play.ready()
        return list(self.screen.actions)

    @admissible_actions.setter
    def admissible_actions(self, value: list[str]) -> None:
        self.play.ready()
        self.screen.actions = list(value)

    @property
    def observation_ref(self) -> str | None:
        """The latest screenshot (when screenshots are kept): the current screen, or the one after the last
        action once the episode is over."""
        self.play.ready()
        return self.screen.screenshots[-1] if self.screen.screenshots else None

    # What callers read once the episode is over (a replayed solution: won, why not).
    @property
    def done(self) -> bool:
        return self.screen.done

    @property
    def won(self) -> bool:
        return self.screen.won

    @property
    def score(self) -> float | None:
        return self.screen.score

    @property
    def failure(self) -> str | None:
        return self.screen.failure

    @property
    def history(self) -> list[str]:
        return self.screen.history

    @property
    def screenshots(self) -> list[str]:
        return self.screen.screenshots

    def step(self, action: str) -> StepResult:
        """Play ``action`` when it is one of ``admissible_actions``; any other is a no-op step."""
        self.play.ready()
        screen = self.screen
        if screen.done:
            return StepResult(observation=screen.observation, done=True, won=screen.won)
        screen.history.append(action)
        note = ""
        if action in screen.actions and self.play.playable(action):
            self.play.act(action)
        else:
            note = NOT_LISTED.format(action=action)
        self.play.after_step(action)
        return StepResult(observation=note + screen.observation, done=screen.done, won=screen.won)

    def expert_actions(self) -> list[str]:
        """The scripted solution's next action while it is one of the candidates (empty when done or none)."""
        self.play.ready()
        return self.screen.listed(None if self.screen.done else self.play.scripted_next())

    def close(self) -> None:
        self.play.close()


def screenshot_folder(path: Path | None) -> Path | None:
    """``path``, created when given: where an environment's episodes keep their screenshots."""
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
    return path


def episode_name(instance: str, seed: int) -> str:
    """An episode's name (its screenshots' prefix): the task instance a spec plays and the runner's seed, so
    that it does not depend on which other episodes the environment opened (a Ray shard opens only its own)."""
    return f"{instance}-{seed:016x}"


def scripted_demonstrations(solution: list[str] | None) -> list[list[str]]:
    """The demonstrations of a task with a scripted solution (none without a winning one)."""
    return [solution] if solution is not None else []


def play_actions(episode: GuiEpisode, actions: Sequence[str]) -> GuiEpisode:
    """Play ``actions`` on an opened ``episode`` until done (the caller closes it); a failure of our
    machinery stops the replay (``episode.failure`` says why)."""
    for action in actions:
        try:
            if episode.step(action).done:
                break
        except EnvironmentFault:
            break
    return episode
