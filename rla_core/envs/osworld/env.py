"""OSWorld tasks as an :class:`~rla_core.envs.base.Environment`: OSWorld's own ``DesktopEnv`` on local desktops.

``OsworldEnv.open(spec)`` takes a desktop of its :class:`~rla_core.envs.desktop.pool.DesktopPool` and runs
``DesktopEnv.reset(task)`` (revert to a fresh home when the desktop was used, then the task's set-up by
OSWorld's ``SetupController``) in a background thread, so that the runner's opening of all episodes of a wave
resets their desktops in parallel; the episode's observation waits for it. The episode exposes

* ``instruction``: the current variant's instruction (``current_task``);
* ``observation``: the accessibility tree linearised and cut to ``a11y_max_tokens``
  (:mod:`~rla_core.envs.osworld.observe`); each step's screenshot is a PNG under ``screenshot_dir``
  (``observation_ref``);
* ``admissible_actions``: the candidate actions derived from the tree, the instruction's quoted strings and
  the task's optional ``typable`` strings (texts it supplies for typing: a command the instruction does not
  quote), compiled to pyautogui code for ``DesktopEnv.step``;
* ``expert_actions()``: the next action of the task's scripted solution while the episode follows it.

**Outcome** as OSWorld's: ``DesktopEnv.evaluate()`` runs when the policy says ``DONE`` or ``FAIL`` or after
``max_steps`` actions (the runner's budget, given to the environment so that the last step is scored), and
the episode is won when the score gives any credit (spec §2.1: partial credit counts). An evaluator that raises while
the desktop is healthy (e.g. a getter whose file the agent deleted) scores 0 — the state the agent left is the
policy's outcome, as OSWorld scores it. Failures of our machinery raise
:class:`~rla_core.errors.EnvironmentFault` (docs/environment-errors.md): a set-up that fails before the first
action (``setup``), a desktop whose processes died (``desktop``: its X server, its init) or whose in-desktop
server stops answering (``desktop_server``), during the set-up, a step or the evaluation. The runner records
the episode as ``env_error`` and replays it; the desktop is reset (or replaced by the pool) when it closes.

At most ``pool.size`` episodes may be open at once (one desktop each: ``max_open``); the rollout path plays a
request's episodes in waves of that size (:func:`rla_core.envs.rollout.waves`).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

from rla_core.envs.base import EnvErrorKind
from rla_core.envs.desktop.desktop import Desktop
from rla_core.envs.desktop.pool import DesktopOptions, DesktopPool
from rla_core.envs.gui_episode import (
    GuiEpisode,
    GuiScreen,
    episode_name,
    play_actions,
    screenshot_folder,
    scripted_demonstrations,
)
from rla_core.envs.osworld import observe
from rla_core.envs.osworld.tasks import (
    TYPABLE,
    OsworldTaskError,
    check_task,
    current_key,
    desktop_task,
    instruction,
    missing_files,
)
from rla_core.errors import EnvironmentFault, RlaError

log = logging.getLogger(__name__)
SETTLE_STABLE_S = 1.0  # after a set-up that starts programs: the window list unchanged this long ...
SETTLE_MAX_S = 20.0  # ... or this long at most
# The window manager's client list less splash screens (run by the desktop's python3, which has python3-xlib):
# GIMP shows its "GIMP Startup" splash for ~3 s and LibreOffice its own for ~1 s before their main windows, so
# a list that counted them looked settled while the application was still starting.
LIST_WINDOWS = """
import Xlib.display
d = Xlib.display.Display()
atom = d.intern_atom
root = d.screen().root
splash = atom("_NET_WM_WINDOW_TYPE_SPLASH")
clients = root.get_full_property(atom("_NET_CLIENT_LIST"), 0)
for wid in clients.value if clients is not None else []:
    w = d.create_resource_object("window", wid)
    kind = w.get_full_property(atom("_NET_WM_WINDOW_TYPE"), 0)
    if kind is None or splash not in kind.value:
        name = w.get_full_property(atom("_NET_WM_NAME"), 0)
        print(wid, name.value.decode(errors="replace") if name else "")
"""
ACQUIRE_TIMEOUT_S = 600.0


class OsworldDesktop:
    """One OSWorld episode on one local desktop: the engine's side of a
    :class:`~rla_core.envs.gui_episode.GuiEpisode` (implements ``GuiPlay``), recording on ``screen``."""

    def __init__(self, env: OsworldEnv, screen: GuiScreen) -> None:
        spec = screen.spec
        self.screen = screen
        self.spec = spec
        self.env = env
        self.key = current_key(spec)
        screen.instruction = instruction(spec)
        self.solution: list[str] = list(spec.get("solutions", {}).get(self.key, []))
        self.strings = observe.instruction_strings(screen.instruction)
        self.strings += [s for s in spec.get(TYPABLE, []) if s not in self.strings]
        self.elements: list[observe.Element] = []
        self.fault: EnvironmentFault | None = None  # set when our machinery failed (the episode is env_error)
        self.desktop: Desktop | None = env.pool.acquire(ACQUIRE_TIMEOUT_S)
        self._denv = env.desktop_env(self.desktop)
        self._ready: Future[None] | None = env.executor.submit(self._reset)

    # -- state -------------------------------------------------------------------------------
    def _reset(self) -> None:
        try:
            obs = self._denv.reset(task_config=desktop_task(self.spec))
        except RlaError:
            raise  # ours, on purpose (a bad task): fails the stage through _wait
        except (
            Exception
        ) as exc:  # OSWorld's set-up raises anything; before the first action it is never the policy's
            self._fail(f"set-up failed: {exc}", EnvErrorKind.SETUP)
            return
        if not self._desktop_healthy():
            self._fail("the desktop broke during the set-up", EnvErrorKind.SETUP)
            return
        try:
            if self._settle():
                obs = self._denv._get_obs()  # the screen with the set-up's windows
        except OSError as exc:  # the in-desktop server stopped answering
            self._fail(f"the desktop stopped answering after the set-up: {exc}", EnvErrorKind.SETUP)
            return
        self._observe(obs)  # our code: a bug here fails the stage through _wait

    def _windows(self) -> str:
        """The desktop's application windows, one ``<id> <title>`` line each (splash screens left out), through
        its server."""
        assert self.desktop is not None
        body = json.dumps({"command": ["python3", "-c", LIST_WINDOWS], "shell": False}).encode()
        request = urllib.request.Request(
            self.desktop.url + "/execute", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(json.loads(response.read()).get("output") or "")

    def _settle(self) -> bool:
        """After a set-up that starts programs, wait until a window is open and the window list (splash screens
        left out) has not changed for :data:`SETTLE_STABLE_S` (at most :data:`SETTLE_MAX_S`); whether it waited.

        OSWorld's own runner sleeps 60 s after the set-up before its first observation, and the official
        tasks' set-ups launch their application and return at once: observed at once, the policy would see
        (and act on) a screen without it."""
        if not any(step.get("type") in ("launch", "open") for step in self.spec.get("config") or []):
            return False
        deadline = time.monotonic() + SETTLE_MAX_S
        last, since = None, time.monotonic()
        while time.monotonic() < deadline:
            windows = self._windows()
            if windows != last:
                last, since = windows, time.monotonic()
            elif windows.strip() and time.monotonic() - since >= SETTLE_STABLE_S:
                break
            time.sleep(0.2)
        return True

    def ready(self) -> None:
        """Wait for the set-up; raise the episode's EnvironmentFault once the environment failed."""
        if self._ready is not None:
            ready, self._ready = self._ready, None
            ready.result()
        if self.fault is not None:
            raise self.fault

    def _desktop_healthy(self) -> bool:
        return self.desktop is not None and self.desktop.healthy()

    def _check_desktop(self, when: str) -> None:
        """Raise the episode's fault unless the desktop is healthy. Needed around every call to it: OSWorld's
        controller answers a dead X server with retries, then empty screens and trees, not an exception (a
        step would take ~15 s and the evaluation would score the broken desktop 0)."""
        if not self._desktop_healthy():
            raise self._fail(f"the desktop broke {when}", EnvErrorKind.DESKTOP)

    def _machinery(self, kind: EnvErrorKind) -> EnvErrorKind:
        """The kind of a failure: ``kind`` while the desktop is healthy, else what of it broke."""
        if self.desktop is None or not self.desktop.running():
            return EnvErrorKind.DESKTOP
        return kind if self.desktop.healthy() else EnvErrorKind.DESKTOP_SERVER

    def _observe(self, obs: dict[str, Any]) -> None:
        tree = obs.get("accessibility_tree") or ""
        self.elements = observe.parse_tree(tree) if tree else []
        self.screen.show(
            observe.linearise(self.elements, max_tokens=self.env.a11y_max_tokens),
            observe.candidate_actions(
                self.elements,
                instruction=self.screen.instruction,
                strings=self.strings,
                max_clicks=self.env.max_clicks,
            ),
        )
        shot = obs.get("screenshot")
        if isinstance(shot, bytes | bytearray):
            self.screen.keep_screenshot(lambda path: path.write_bytes(bytes(shot)))

    def _fail(self, reason: str, kind: EnvErrorKind) -> EnvironmentFault:
        """Our machinery failed: end the episode as an environment error (the desktop is reset on close)."""
        log.warning("OSWorld task %s: %s", self.spec["id"], reason)
        self.screen.end_failed(reason)
        self.fault = EnvironmentFault(self._machinery(kind), f"OSWorld task {self.spec['id']}: {reason}")
        return self.fault

    # -- GuiPlay ------------------------------------------------------------------------------
    def playable(self, action: str) -> bool:
        """Every listed action is played (the desktop decides what it does)."""
        return True

    def act(self, action: str) -> None:
        code = observe.compile_action(action, self.elements)
        self._check_desktop("before the step")
        try:
            obs, _reward, _done, _info = self._denv.step(code, pause=self.env.step_pause_s)
        except RlaError:
            raise
        except Exception as exc:  # the desktop (X server, in-desktop server) failed under the action
            raise self._fail(f"step failed: {exc}", EnvErrorKind.DESKTOP_SERVER) from exc
        self._check_desktop("during the step")
        self._observe(obs)

    def after_step(self, action: str) -> None:
        """OSWorld scores the episode when the policy says ``DONE`` or ``FAIL`` or its budget is used."""
        if action in ("DONE", "FAIL") or len(self.screen.history) >= self.env.max_steps:
            self._evaluate()

    def _evaluate(self) -> None:
        self._check_desktop("before the evaluation")
        try:
            score = float(self._denv.evaluate())
        except RlaError:
            raise
        except Exception as exc:
            # The rule (docs/environment-errors.md): on a healthy desktop a getter or metric that cannot read
            # its state reads the state the agent left (a file it deleted or never wrote): the policy's 0, as
            # OSWorld scores it; else a policy could escape -1 by breaking what the evaluator reads. On a
            # desktop that died or stopped answering, the evaluation measured nothing: ours.
            if not self._desktop_healthy():
                raise self._fail(f"evaluation failed: {exc}", EnvErrorKind.DESKTOP_SERVER) from exc
            log.warning("OSWorld task %s: evaluation raised %r; scored 0", self.spec["id"], exc)
            score = 0.0
        # Getters answer a desktop that broke under them with nothing (scored 0): that score measured nothing.
        self._check_desktop("during the evaluation")
        self.screen.end(score, f"The episode is over: the evaluator scored {score:g}.")

    def scripted_next(self) -> str | None:
        """The scripted solution's next action while the episode has followed it."""
        history = self.screen.history
        n = len(history)
        if n >= len(self.solution) or history != self.solution[:n]:
            return None
        return self.solution[n]

    def close(self) -> None:
        """Give the desktop back: ``DesktopEnv.reset`` reverts it before its next task (a failed one now)."""
        try:
            if self._ready is not None:  # the set-up records its failures; what it raises is a bug of ours
                ready, self._ready = self._ready, None
                ready.result()
        finally:
            if self.desktop is not None:
                desktop, self.desktop = self.desktop, None
                self.env.release(desktop, reset=self.screen.failure is not None)


class OsworldEnv:
    """OSWorld-format tasks on a pool of local desktops (implements ``rla_core.envs.base.Environment``)."""

    name = "osworld"

    def __init__(
        self,
        *,
        desktops: int | None,
        cache_dir: Path,
        max_steps: int,
        a11y_max_tokens: int = 600,
        max_clicks: int = 12,
        step_pause_s: float = 0.5,
        screenshot_dir: Path | None = None,
        runtime_dir: Path | None = None,
    ) -> None:
        from rla_core.envs.desktop.provider import install

        install()
        self.cache_dir = cache_dir
        self.max_steps = max_steps
        self.a11y_max_tokens = a11y_max_tokens
        self.max_clicks = max_clicks
        self.step_pause_s = step_pause_s
        self.screenshot_dir = screenshot_folder(screenshot_dir)
        self.pool = DesktopPool(DesktopOptions(size=desktops or None, runtime_dir=runtime_dir))
        self.max_open: int | None = self.pool.size  # one desktop per open episode
        self.executor = ThreadPoolExecutor(max_workers=self.pool.size, thread_name_prefix="osworld-reset")
        self._envs: dict[int, Any] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def desktop_env(self, desktop: Desktop) -> Any:
        """The one ``DesktopEnv`` of a desktop (it tracks whether the desktop was used since its revert)."""
        from rla_core.envs.desktop.provider import make_env

        if id(desktop) not in self._envs:
            self._envs[id(desktop)] = make_env(
                desktop, stop_on_close=False, action_space="pyautogui", cache_dir=str(self.cache_dir),
                require_a11y_tree=True, require_terminal=False,
            )  # fmt: skip
        return self._envs[id(desktop)]

    def release(self, desktop: Desktop, *, reset: bool) -> None:
        if reset:
            self._envs.pop(id(desktop), None)  # a fresh DesktopEnv: the reset desktop starts clean
        self.pool.release(desktop, reset=reset)

    def close(self) -> None:
        """Stop every desktop of the pool."""
        self.executor.shutdown(wait=True)
        for denv in self._envs.values():
            try:
                denv.close()  # unregisters it from the provider; the pool stops the desktop
            except (
                Exception
            ) as exc:  # kept broad: closing after the episodes were recorded; nothing to record
                # any more, and one desktop that cannot close must not keep the pool from stopping the others
                log.warning("closing a DesktopEnv raised %r", exc)
        self._envs.clear()
        self.pool.close()

    def validate_spec(self, spec: dict[str, Any]) -> None:
        """:class:`OsworldTaskError` unless ``spec`` is valid and every file it downloads is in the cache."""
        check_task(spec)
        missing = missing_files(spec, self.cache_dir)
        if missing:
            raise OsworldTaskError(
                f"OSWorld task {spec['id']!r} cannot run: {'; '.join(missing)}; fill the cache with "
                f"python -m rla_core.envs.osworld.cache fill (docs/osworld.md)"
            )

    def open(self, spec: dict[str, Any], *, seed: int) -> GuiEpisode:
        """Start an episode on a desktop of the pool (its set-up runs in the background); ``seed`` (the
        runner's per-episode seed) only names its screenshots (:func:`~rla_core.envs.gui_episode.episode_name`)."""
        self.validate_spec(spec)
        name = episode_name(f"{spec['id']}-{current_key(spec)}", seed)
        screen = GuiScreen(spec, episode_id=name, screenshot_dir=self.screenshot_dir, machinery="desktop")
        return GuiEpisode(screen, OsworldDesktop(self, screen))

    def demonstrations(self, spec: dict[str, Any], *, seed: int) -> list[list[str]]:
        """The task's scripted solution for the current key (none without one)."""
        del seed
        return scripted_demonstrations(self.scripted_solution(spec))

    def play(self, spec: dict[str, Any], actions: Sequence[str]) -> GuiEpisode:
        """Open ``spec`` and play ``actions`` until done (the caller closes the episode)."""
        return play_actions(self.open(spec, seed=0), actions)

    def scripted_solution(self, spec: dict[str, Any]) -> list[str] | None:
        """The task's scripted solution for the current key (None when the task has none)."""
        solution = spec.get("solutions", {}).get(current_key(spec))
        return list(solution) if solution else None
