"""What the GUI engines' episodes share: MiniWoB++ pages in a browser, OSWorld tasks on a desktop.

A GUI episode shows the policy numbered candidate actions built from what is on the screen; an action
that is not one of them is a no-op step that still uses the budget. It keeps each step's screenshot as
``<episode id>-<step>.png`` (``observation_ref`` is the latest: what vision-language policies and judges
see), ends won iff the task's score is > 0 (the reference code's OSWorld rule: partial credit counts),
answers the judge with the scripted solution's next action while that is one of the candidates, and ends
as an environment error when our machinery (the browser, the desktop) fails, never as the policy's loss
(docs/environment-errors.md). :class:`GuiEpisode` holds that bookkeeping; an engine's episode says how
it acts, observes, scores and fails. :class:`GuiEnvironment` holds what their environments share: the
screenshot folder, episode names that depend only on the spec and the runner's seed, demonstrations from
a scripted solution, and replaying a fixed action list.

Example:
    >>> NOT_LISTED.format(action="click ref=99")
    "'click ref=99' is not one of the listed actions; nothing happened.\\n"
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, Self, TypeVar

from rla_core.envs.base import StepResult
from rla_core.errors import EnvironmentFault

NOT_LISTED = "'{action}' is not one of the listed actions; nothing happened.\n"


class GuiEpisode(ABC):
    """One GUI episode's state and step bookkeeping (implements ``rla_core.envs.base.Episode``).

    An engine implements :meth:`_act` (play a listed action and observe the screen after it),
    :meth:`_scripted_next` and :meth:`close`; it records what it sees with :meth:`_show`,
    :meth:`_keep_screenshot`, :meth:`_end` and :meth:`_end_failed`.
    """

    machinery: ClassVar[str]  # what stopped responding in a failed episode's observation ("browser")

    def __init__(self, spec: dict[str, Any], *, episode_id: str, screenshot_dir: Path | None) -> None:
        self.spec = spec
        self.instruction = ""
        self.history: list[str] = []  # every action played, listed or not
        self.screenshots: list[str] = []  # PNG paths (artifact references, not stored in Parquet)
        self.done = False
        self.won = False
        self.score: float | None = None  # the task's score once the episode is over
        self.failure: str | None = None  # why our machinery ended the episode
        self._episode_id = episode_id
        self._screenshot_dir = screenshot_dir
        self._observation = ""
        self._actions: list[str] = []

    # -- what an engine implements ------------------------------------------------------------
    @abstractmethod
    def _act(self, action: str) -> None:
        """Play the listed ``action`` and observe the screen after it (raise the episode's fault on failure)."""

    @abstractmethod
    def _scripted_next(self) -> str | None:
        """The scripted solution's next action from the current state, if it has one."""

    @abstractmethod
    def close(self) -> None:
        """Release the browser tab or desktop."""

    def _wait(self) -> None:  # noqa: B027 (a hook: most engines start at once)
        """Wait until the episode has started (an engine that starts it in the background); raise its fault."""

    def _playable(self, action: str) -> bool:
        """Whether ``action`` is played (else it is a no-op step)."""
        return action in self._actions

    def _after_step(self, action: str) -> None:  # noqa: B027 (a hook: MiniWoB pages score themselves)
        """After every step that did not find the episode over, listed action or not (OSWorld scores here)."""

    # -- state an engine records --------------------------------------------------------------
    def _show(self, observation: str, actions: list[str]) -> None:
        """The current screen as the policy reads it: its observation text and the candidate actions."""
        self._observation = observation
        self._actions = actions

    def _keep_screenshot(self, write: Callable[[Path], object]) -> None:
        """With a screenshot folder, ``write`` the current screen there as this step's PNG and keep its path."""
        if self._screenshot_dir is not None:
            path = self._screenshot_dir / f"{self._episode_id}-{len(self.history)}.png"
            write(path)
            self.screenshots.append(str(path))

    def _end(self, score: float, observation: str) -> None:
        """The task is over with ``score``: won iff it is > 0."""
        self.score = score
        self.done, self.won = True, score > 0
        self._show(observation, [])

    def _end_failed(self, reason: str) -> None:
        """Our machinery failed: the episode is over, neither won nor lost by the policy."""
        self.failure = reason
        self.done, self.won = True, False
        self._show(f"The {self.machinery} stopped responding. ({reason})", [])

    # -- Episode protocol ---------------------------------------------------------------------
    @property
    def observation(self) -> str:
        self._wait()
        return self._observation

    @observation.setter
    def observation(self, value: str) -> None:  # the Episode protocol's attribute is settable
        self._wait()
        self._observation = value

    @property
    def admissible_actions(self) -> list[str]:
        self._wait()
        return list(self._actions)

    @admissible_actions.setter
    def admissible_actions(self, value: list[str]) -> None:
        self._wait()
        self._actions = list(value)

    @property
    def observation_ref(self) -> str | None:
        """The latest screenshot (when screenshots are kept): the current screen, or the one after the last
        action once the episode is over."""
        self._wait()
        return self.screenshots[-1] if self.screenshots else None

    def step(self, action: str) -> StepResult:
        """Play ``action`` when it is one of ``admissible_actions``; any other is a no-op step."""
        self._wait()
        if self.done:
            return StepResult(observation=self._observation, done=True, won=self.won)
        self.history.append(action)
        note = ""
        if self._playable(action):
            self._act(action)
        else:
            note = NOT_LISTED.format(action=action)
        self._after_step(action)
        return StepResult(observation=note + self._observation, done=self.done, won=self.won)

    def expert_actions(self) -> list[str]:
        """The scripted solution's next action while it is one of the candidates (empty when done or none)."""
        self._wait()
        if self.done:
            return []
        action = self._scripted_next()
        return [action] if action is not None and action in self._actions else []


EpisodeT = TypeVar("EpisodeT", bound=GuiEpisode)


class GuiEnvironment(ABC, Generic[EpisodeT]):
    """What the GUI environments share (each implements ``rla_core.envs.base.Environment``)."""

    name: str  # the engine's name (an instance variable for the Environment protocol)

    def __init__(self, *, screenshot_dir: Path | None) -> None:
        self.screenshot_dir = screenshot_dir
        if screenshot_dir is not None:
            screenshot_dir.mkdir(parents=True, exist_ok=True)

    @abstractmethod
    def validate_spec(self, spec: dict[str, Any]) -> None:
        """Raise a specific error unless ``spec`` is a task this environment can run."""

    @abstractmethod
    def _instance(self, spec: dict[str, Any]) -> str:
        """The task instance a spec plays (the first part of its episodes' names)."""

    @abstractmethod
    def _start(self, spec: dict[str, Any], *, episode_id: str) -> EpisodeT:
        """Start an episode of a valid ``spec``."""

    @abstractmethod
    def scripted_solution(self, spec: dict[str, Any]) -> list[str] | None:
        """The actions that win ``spec`` from its start (None when there is no winning script)."""

    @abstractmethod
    def close(self) -> None:
        """Release the browsers or desktops this environment holds."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, spec: dict[str, Any], *, seed: int) -> EpisodeT:
        """Start an episode. ``seed`` (the runner's per-episode seed) only names its screenshots, so that their
        names do not depend on which other episodes this environment opened (a Ray shard opens only its own)."""
        self.validate_spec(spec)
        return self._start(spec, episode_id=f"{self._instance(spec)}-{seed:016x}")

    def demonstrations(self, spec: dict[str, Any], *, seed: int) -> list[list[str]]:
        """The scripted solution (none when there is no winning one); the instance is fixed by the spec."""
        del seed
        solution = self.scripted_solution(spec)
        return [solution] if solution is not None else []

    def play(self, spec: dict[str, Any], actions: Sequence[str]) -> EpisodeT:
        """Open ``spec`` and play ``actions`` until done (the caller closes the episode); a failure of our
        machinery stops the replay (``episode.failure`` says why)."""
        episode = self.open(spec, seed=0)
        for action in actions:
            try:
                if episode.step(action).done:
                    break
            except EnvironmentFault:
                break
        return episode
