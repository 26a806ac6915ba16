"""The MiniWoB++ environment: web tasks in headless Chromium behind the shared Environment protocol.

``MiniWobEnv.open(spec)`` loads the task page in a tab of the :class:`BrowserPool`, seeds the
instance with ``spec["seed"]`` and starts the episode. The episode exposes

* ``instruction``: the task's utterance (plus a hint at ``hint_level`` >= 1);
* ``observation``: the compact element list of :mod:`rla_core.envs.miniwob.dom`;
* ``admissible_actions``: concrete candidate actions built from the DOM, so the shared rollout runner
  shows them numbered and parses the chosen index from ``\\boxed{}`` as in the text games;
* ``expert_actions()``: the scripted solver's next action (judge ground truth), empty without one.

What GUI episodes share (numbered candidates, screenshots, the outcome rule, scripted next actions,
environment errors) is :class:`~rla_core.envs.gui_episode.GuiEpisode`'s, over this engine's
:class:`MiniWobPage`: won when the task's raw reward (``score``) gives any credit (spec §2.1). MiniWoB's 10 s wall-clock episode limit is raised to ``episode_ms`` so a slow CPU policy is cut by
the runner's ``max_steps``, not by time. A browser call that fails or times out kills the browser and
raises :class:`~rla_core.errors.EnvironmentFault` (``browser`` / ``browser_timeout``): the runner records
an environment error and replays the episode in a new browser; it never hangs a stage and never counts as
the policy's failure (docs/environment-errors.md).

Example:
    >>> with MiniWobEnv(browsers=BrowserOptions(size=1)) as env:  # doctest: +SKIP
    ...     ep = env.open({"task": "click-test", "seed": 0, "hint_level": 0}, seed=0)
    ...     ep.step(ep.expert_actions()[0]).won
    True
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from rla_core.envs.base import EnvErrorKind
from rla_core.envs.gui_episode import (
    GuiEpisode,
    GuiScreen,
    episode_name,
    play_actions,
    screenshot_folder,
    scripted_demonstrations,
)
from rla_core.envs.miniwob.dom import (
    Element,
    candidate_actions,
    instruction_strings,
    parse_action,
    parse_dom,
    render_observation,
)
from rla_core.envs.miniwob.pool import BrowserOptions, BrowserPool, Tab
from rla_core.envs.miniwob.solvers import has_solver, next_action
from rla_core.envs.miniwob.tasks import available_tasks, check_spec, default_html_dir
from rla_core.errors import BrowserError, BrowserStartError, BrowserTimeoutError, EnvironmentFault

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

_READY_POLLS = 40  # x 50 ms: some pages build their problem asynchronously (WOB_TASK_READY)
_STATE_JS = (
    "return {dom: core.getDOMInfo(), done: WOB_DONE_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL,"
    " reason: WOB_REWARD_REASON};"
)


def _fields(task: str, utterance: str) -> list[tuple[str, str]]:
    from miniwob.fields import get_field_extractor

    try:
        extractor = get_field_extractor(task)
    except KeyError:  # pages without an extractor: quoted tokens are used instead
        return []
    return [(str(k), str(v)) for k, v in extractor(utterance)]


class MiniWobPage:
    """One MiniWoB++ episode's page in one browser tab: the engine's side of a
    :class:`~rla_core.envs.gui_episode.GuiEpisode` (implements ``GuiPlay``), recording on ``screen``."""

    def __init__(self, pool: BrowserPool, screen: GuiScreen, *, url: str, episode_ms: int) -> None:
        spec = screen.spec
        self.screen = screen
        self.task: str = spec["task"]
        self.hint_level: int = spec["hint_level"]
        self.pool = pool
        self.elements: list[Element] = []
        self.fields: list[tuple[str, str]] = []
        self.strings: list[str] = []
        self.utterance = ""
        self._tab: Tab | None = None
        try:
            self._tab = self.pool.open_tab(url)
        except BrowserStartError:
            raise  # no browser at all: a setup problem, not a failed episode
        except BrowserError as exc:
            raise self._fail(exc) from exc
        seed = json.dumps(int(spec["seed"]))
        try:
            self._tab.call(
                lambda d: d.execute_script(
                    f"core.EPISODE_MAX_TIME = {int(episode_ms)}; Math.seedrandom({seed});"
                    " core.setDataMode('train'); core.startEpisodeReal();"
                )
            )
            for _ in range(_READY_POLLS):
                if self._tab.call(lambda d: d.execute_script("return WOB_TASK_READY;")):
                    break
                time.sleep(0.05)
            self.utterance = str(self._tab.call(lambda d: d.execute_script("return core.getUtterance();")))
            self.fields = _fields(self.task, self.utterance)
            self.strings = instruction_strings(self.utterance, self.fields)
            self._refresh()
        except BrowserError as exc:
            raise self._fail(exc) from exc
        screen.instruction = self.utterance
        expert = screen.listed(self.scripted_next())
        if self.hint_level >= 1 and expert:
            screen.instruction += f" Hint: start with: {expert[0]}."

    # -- state -------------------------------------------------------------------------------
    def _refresh(self) -> None:
        assert self._tab is not None
        state = self._tab.call(lambda d: d.execute_script(_STATE_JS))
        if state["done"]:
            score = float(state["raw"])
            reason = f" ({state['reason']})." if state["reason"] else "."
            self.screen.end(score, f"The episode is over: reward {score:g}" + reason)
            self._screenshot()  # the end screen: the judge's "after" image of the last step
            return
        self.elements = parse_dom(state["dom"])
        self.screen.show(
            render_observation(self.elements), candidate_actions(self.elements, strings=self.strings)
        )
        if self.hint_level >= 2:
            expert = self.screen.listed(self.scripted_next())
            if expert:
                self.screen.observation += f"\nHint: next do: {expert[0]}"
        self._screenshot()

    def _screenshot(self) -> None:
        tab = self._tab
        assert tab is not None
        self.screen.keep_screenshot(lambda path: tab.call(lambda d: d.save_screenshot(str(path))))

    def _fail(self, exc: BrowserError) -> EnvironmentFault:
        """End the episode on a browser failure (ours, not the policy's); the fault for the runner to record."""
        self.screen.end_failed(str(exc))
        if not self.screen.instruction:
            self.screen.instruction = f"MiniWoB task {self.task} (the page did not load)."
        self.close()
        kind = EnvErrorKind.BROWSER_TIMEOUT if isinstance(exc, BrowserTimeoutError) else EnvErrorKind.BROWSER
        return EnvironmentFault(kind, f"MiniWoB task {self.task}: {exc}")

    # -- GuiPlay ------------------------------------------------------------------------------
    def ready(self) -> None:
        """The page starts in the constructor: nothing to wait for."""

    def playable(self, action: str) -> bool:
        """A listed action that parses (an element reference, optionally a text to type)."""
        return parse_action(action) is not None

    def after_step(self, action: str) -> None:
        """A MiniWoB page scores itself (read in :meth:`_refresh`): nothing to do after a step."""

    def act(self, action: str) -> None:
        parsed = parse_action(action)
        assert self._tab is not None and parsed is not None
        ref, text = parsed.ref, parsed.text

        def act(driver: WebDriver) -> None:
            from selenium.common.exceptions import (
                ElementNotInteractableException,
                MoveTargetOutOfBoundsException,
            )
            from selenium.webdriver.common.action_chains import ActionChains

            element = driver.execute_script(f"return core.previousDOMInfo[{ref}];")
            if text is not None:
                driver.execute_script("arguments[0].value = '';", element)
            try:
                # a real pointer click: it also focuses the element and the page (focus-text checks it)
                ActionChains(driver, duration=0).move_to_element(element).click().perform()
            except (MoveTargetOutOfBoundsException, ElementNotInteractableException):
                driver.execute_script(f"return core.elementClick({ref});")  # MiniWoB's synthetic click
            if text is not None:
                chain = ActionChains(driver, duration=0)
                for key in text:
                    chain.key_down(key).key_up(key)
                chain.perform()

        try:
            self._tab.call(act)
            self._refresh()
        except BrowserError as exc:
            raise self._fail(exc) from exc

    def scripted_next(self) -> str | None:
        """The scripted solver's next action from the current state."""
        return next_action(self.task, fields=self.fields, elements=self.elements, history=self.screen.history)

    def close(self) -> None:
        """Close the tab (the browser stays in the pool)."""
        if self._tab is not None:
            tab, self._tab = self._tab, None
            self.pool.close_tab(tab)


class MiniWobEnv:
    """MiniWoB++ tasks (implements ``rla_core.envs.base.Environment``); owns its pool unless given one.

    ``browsers``: the options of the pool it starts when it is given none."""

    name = "miniwob"
    max_open: int | None = None  # any number of episodes at once

    def __init__(
        self,
        pool: BrowserPool | None = None,
        *,
        html_dir: Path | None = None,
        browsers: BrowserOptions | None = None,
        episode_ms: int = 3_600_000,
        screenshot_dir: Path | None = None,
        solver_max_steps: int = 12,
    ) -> None:
        self.html_dir = html_dir if html_dir is not None else default_html_dir()
        self.known_tasks = available_tasks(self.html_dir)
        self._own_pool = pool is None
        self.pool = pool if pool is not None else BrowserPool(browsers)
        self.episode_ms = episode_ms
        self.screenshot_dir = screenshot_folder(screenshot_dir)
        self.solver_max_steps = solver_max_steps

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Shut the pool down if this environment created it."""
        if self._own_pool:
            self.pool.close()

    def validate_spec(self, spec: dict[str, Any]) -> None:
        """Raise EnvironmentSpecError unless ``spec`` names a known task with valid seed and hint level."""
        check_spec(spec, known_tasks=self.known_tasks)

    def url(self, task: str) -> str:
        """The ``file://`` URL of a task page."""
        return (self.html_dir / "miniwob" / f"{task}.html").resolve().as_uri()

    def open(self, spec: dict[str, Any], *, seed: int) -> GuiEpisode:
        """Start an episode in a new tab; ``seed`` (the runner's per-episode seed) only names its screenshots
        (:func:`~rla_core.envs.gui_episode.episode_name`): the page's instance is fixed by ``spec["seed"]``."""
        self.validate_spec(spec)
        name = episode_name(f"{spec['task']}-{spec['seed']}", seed)
        screen = GuiScreen(
            dict(spec), episode_id=name, screenshot_dir=self.screenshot_dir, machinery="browser"
        )
        page = MiniWobPage(self.pool, screen, url=self.url(spec["task"]), episode_ms=self.episode_ms)
        return GuiEpisode(screen, page)

    def demonstrations(self, spec: dict[str, Any], *, seed: int) -> list[list[str]]:
        """The scripted solver's winning actions (none when it does not win); the instance is fixed by the spec."""
        del seed
        return scripted_demonstrations(self.scripted_solution(spec))

    def play(self, spec: dict[str, Any], actions: Sequence[str]) -> GuiEpisode:
        """Open ``spec`` and play ``actions`` until done (the caller closes the episode)."""
        return play_actions(self.open(spec, seed=0), actions)

    def solve(self, spec: dict[str, Any]) -> tuple[list[str], bool, str | None]:
        """Play the scripted solver from the start: (actions, won, why not when it did not win)."""
        if not has_solver(spec["task"]):
            return [], False, f"no scripted solver for task '{spec['task']}'"
        try:
            episode = self.open(spec, seed=0)
        except EnvironmentFault as fault:
            return [], False, f"the page did not load: {fault}"
        try:
            for _ in range(self.solver_max_steps):
                expert = episode.expert_actions()
                if not expert:
                    break
                try:
                    if episode.step(expert[0]).done:
                        break
                except EnvironmentFault:
                    break  # episode.failure says why
            if episode.won:
                return list(episode.history), True, None
            why = episode.failure or (
                f"reward {episode.score:g}" if episode.done else "the solver found no next action"
            )
            return list(episode.history), False, f"the scripted solver did not win: {why}"
        finally:
            episode.close()

    def scripted_solution(self, spec: dict[str, Any]) -> list[str] | None:
        """The scripted solver's winning action sequence (None when there is no winning solver)."""
        actions, won, _ = self.solve(spec)
        return actions if won else None

    def check_winnable(self, spec: dict[str, Any]) -> str | None:
        """Rewrite validation (spec §3.3): None when the page loads and the solver wins, else why not."""
        _actions, won, why = self.solve(spec)
        return None if won else why
