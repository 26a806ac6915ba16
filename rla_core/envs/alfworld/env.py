"""ALFWorld games through TextWorld's PDDL engine: the :class:`~rla_core.envs.base.Environment` adapter.

A task spec is either a generated-game spec (:mod:`rla_core.envs.alfworld.spec`) or a published game
``{"game_file": ".../game.tw-pddl"}`` (:mod:`rla_core.envs.alfworld.published`); either may carry a
two-token ``goal`` rewrite. Generated games are written to ``<cache_dir>/<spec_hash>/game.tw-pddl``
(temporary directory + atomic rename) after the planner confirmed them solvable.

**Expert labels at the current state (docs/architecture.md#cross-module-interfaces).** :meth:`AlfworldEpisode.expert_actions` is the
first action of a Fast Downward plan *from the episode's current state* — not the initial walkthrough,
which stops being right once the agent leaves it. Planning costs from milliseconds (a handful of
receptacles) to ~10 s (pick_two in a full kitchen), so plans are

* computed lazily: only when ``expert_actions()`` is called, never by ``step()``;
* cached by state: the key is the set of true facts without the bookkeeping predicates ``checked`` /
  ``examined`` (which no goal reads), shared by every episode of the same game in this environment,
  so the n rollouts of a task plan their common start once;
* reused along the plan: after the expert's own action the successor's plan is the rest of the plan
  (its tail is a plan from there, optimal when the planner's is), so an agent that follows the expert
  never triggers a new search.

:class:`PlanStats` counts searches, cache hits and seconds (``benchmarks/bench_alfworld.py`` reports
the label cost per step).

**Engine cost.** A PddlEnv copies and loads its own Fast Downward library (~0.25 s) and translates
the problem to SAS twice per load *and* per reset (~0.7 s in a full kitchen), and parses the grammar
on every load (~0.3 s). Engines are therefore pooled per process (a closed episode's engine serves the
next one, as TextWorld's gym envs reuse one engine for many games), and translation and grammar
parsing are memoised by their texts for the process (:func:`_memoised_engine`).

Example:
    >>> env = AlfworldEnv(cache_dir=Path(".cache/alfworld"))  # doctest: +SKIP
    >>> ep = env.open(spec, seed=0)  # doctest: +SKIP
    >>> ep.step(ep.expert_actions()[0]).done  # doctest: +SKIP
    False
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from rla_core.envs.alfworld.generator import generate_game
from rla_core.envs.alfworld.published import load_published, published_key
from rla_core.envs.alfworld.spec import canonical_spec, parse_generated
from rla_core.envs.base import StepResult
from rla_core.envs.textworld_env import TextLimits
from rla_core.errors import EnvironmentSpecError
from rla_core.store import publish_dir

_GAME_FILE = "game.tw-pddl"
_BOOKKEEPING = ("checked", "examined")
_BANNER = re.compile(r"^\s*-=.*=-\s*$", re.MULTILINE)  # "-= Welcome to TextWorld, ALFRED! =-"
_INSTALL_HINT = (
    "the ALFWorld engine needs TextWorld's PDDL support: pip install textworld==1.7.0 fast-downward-textworld "
    "(scripts/setup.sh does)"
)


@contextmanager
def _argv_kept() -> Iterator[None]:
    # fast_downward.pddl2sas overwrites sys.argv (its translator reads options from it); put it back.
    saved = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = saved


@cache
def _memoised_engine() -> None:
    """Route textworld's PDDL engine through memoised translation and grammar parsing (once per process).

    ``textworld.envs.pddl.logic.PddlState`` calls ``fast_downward.pddl2sas`` twice on every load and
    every reset, and ``PddlEnv.load`` parses the ~13 kB grammar with TatSu on every load (~0.3 s, several
    seconds on a busy machine). Both depend only on their texts and are only read afterwards, so one
    translation and one parse per game serve every episode. The proxy module delegates every other
    attribute; the memoised ``GameLogic`` factory keeps the class's constructor signature.
    """
    try:
        import fast_downward
        import textworld.envs.pddl.logic as logic
    except ImportError as exc:
        raise EnvironmentSpecError(f"{_INSTALL_HINT} ({exc})") from None

    @lru_cache(maxsize=128)
    def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        with _argv_kept():
            return fast_downward.pddl2sas(domain, problem, verbose=verbose, optimize=optimize)

    game_logic = lru_cache(maxsize=64)(logic.GameLogic)
    proxy = types.ModuleType("fast_downward_memoised")
    proxy.__dict__.update({**vars(fast_downward), "pddl2sas": pddl2sas})
    logic.fast_downward = proxy
    logic.GameLogic = game_logic


@dataclass
class PlanStats:
    """Label bookkeeping of one environment: searches run, cache hits, plan tails reused, search seconds."""

    searches: int = 0
    hits: int = 0
    tails: int = 0
    seconds: float = 0.0


class PlanCache:
    """Plans (command tuples) by (game key, state key); thread-safe; shared by a game's episodes."""

    def __init__(self) -> None:
        self._plans: dict[tuple[str, str], tuple[str, ...]] = {}
        self._lock = threading.Lock()
        self.stats = PlanStats()

    def get(self, key: tuple[str, str]) -> tuple[str, ...] | None:
        """The cached plan of a state, or None."""
        with self._lock:
            return self._plans.get(key)

    def put(self, key: tuple[str, str], plan: tuple[str, ...]) -> None:
        """Remember a plan (an existing entry is kept: the first plan found for a state stays its label)."""
        with self._lock:
            self._plans.setdefault(key, plan)


def game_key(game: dict[str, Any]) -> str:
    """sha256 of a game's problem and grammar (what the engine's behaviour depends on)."""
    text = json.dumps([game["pddl_problem"], game["grammar"]])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class _Engine:
    """One PddlEnv with its own Fast Downward library; reused across episodes (see the module docstring)."""

    def __init__(self) -> None:
        _memoised_engine()
        import textworld
        from textworld.envs.pddl import PddlEnv

        self.env = PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True, extras=["walkthrough"]))

    def load(self, game: dict[str, Any]) -> Any:
        """Load ``game`` and reset it, with entities named as ALFWorld's demangler names them ("mug 1")."""
        from alfworld.agents.utils.misc import Demangler

        with _argv_kept():
            self.env.load(game)
            # AlfredDemangler's rule, applied to the engine's entity table (textworld keeps it private).
            infos = self.env._entity_infos
            demangler = Demangler(game_infos=infos)
            for info in infos.values():
                info.name = demangler.demangle_alfred_name(info.id)
            return self.env.reset()

    def state_key(self) -> str:
        """The current state's facts (bookkeeping predicates left out) as a short hash."""
        facts = sorted(str(f) for f in self.env._pddl_state.facts if f.name not in _BOOKKEEPING)
        return hashlib.sha256("\n".join(facts).encode("utf-8")).hexdigest()[:20]

    def plan(self) -> tuple[str, ...]:
        """A Fast Downward plan from the current state (empty when the goal holds or is unreachable)."""
        with _argv_kept():
            return tuple(self.env._pddl_state.replan(self.env._entity_infos))


# Idle engines of this process. Engines hold no state between loads, so every environment shares them;
# plan caches stay per environment (a stage's labels must not depend on what ran before it).
_POOL: list[_Engine] = []
_POOL_LOCK = threading.Lock()


class AlfworldEpisode:
    """One running ALFWorld game (implements :class:`rla_core.envs.base.Episode`)."""

    observation_ref: str | None = None  # text observations only
    free_form = False  # every turn lists its commands
    system_prompt = None  # the policy prompt is the engine's own template

    def __init__(
        self,
        game: dict[str, Any],
        *,
        engine: _Engine,
        plans: PlanCache,
        release: Callable[[_Engine], None],
        limits: TextLimits,
    ) -> None:
        self._engine = engine
        self._plans = plans
        self._release = release
        self._game = game_key(game)
        self._limits = limits
        state = engine.load(game)
        text = _BANNER.sub("", str(state.feedback))
        head, sep, task = text.rpartition("Your task is to:")
        self.instruction: str = limits.instruction(task.strip() if sep else "")
        self.observation: str = limits.observation(head if sep else text)
        self.walkthrough: list[str] = list(game.get("walkthrough") or [])
        self.admissible_actions: list[str] = sorted(set(state.get("admissible_commands") or []))
        self.won = bool(state.get("won"))
        self.done = self.won
        self._state_key: str | None = None
        self._closed = False

    def _key(self) -> tuple[str, str]:
        if self._state_key is None:
            self._state_key = self._engine.state_key()
        return (self._game, self._state_key)

    def step(self, action: str) -> StepResult:
        """Apply ``action``; the episode is done once the goal holds (ALFWorld games are never lost)."""
        if self.done:
            raise EnvironmentSpecError("step() called on a finished ALFWorld episode; open a new episode")
        known = self._plans.get(self._key()) if self._state_key is not None else None
        state, _score, _done = self._engine.env.step(action)
        self._state_key = None
        if known and known[0] == action:
            # The expert's own move: the rest of its plan is a plan from the new state (no search).
            self._plans.put(self._key(), known[1:])
            self._plans.stats.tails += 1
        self.won = bool(state.get("won"))
        self.done = self.won
        self.observation = self._limits.observation(str(state.feedback)) or "Nothing happens."
        self.admissible_actions = [] if self.done else sorted(set(state.get("admissible_commands") or []))
        return StepResult(observation=self.observation, done=self.done, won=self.won)

    def plan(self) -> list[str]:
        """The expert plan from the current state (cached by state; searched only on a miss)."""
        if self.done:
            return []
        key = self._key()
        cached = self._plans.get(key)
        if cached is not None:
            self._plans.stats.hits += 1
            return list(cached)
        started = time.perf_counter()
        plan = self._engine.plan()
        self._plans.stats.seconds += time.perf_counter() - started
        self._plans.stats.searches += 1
        self._plans.put(key, plan)
        return list(plan)

    def expert_actions(self) -> list[str]:
        """The expert's next action at the current state (first plan step), [] when won or hopeless."""
        plan = self.plan()
        return plan[:1]

    def close(self) -> None:
        """Hand the engine back to the environment's pool."""
        if not self._closed:
            self._closed = True
            self._release(self._engine)


ALFWORLD_LIMITS = TextLimits(observation_chars=400, instruction_chars=200)


class AlfworldEnv:
    """ALFWorld-style games (implements :class:`rla_core.envs.base.Environment`)."""

    name = "alfworld"
    max_open: int | None = None  # any number of episodes at once

    def __init__(self, cache_dir: Path, *, limits: TextLimits = ALFWORLD_LIMITS) -> None:
        self.cache_dir = Path(cache_dir)
        self.limits = limits
        self.plans = PlanCache()
        self._games: dict[str, dict[str, Any]] = {}

    # ---- specs and games ----

    def validate_spec(self, spec: dict[str, Any]) -> None:
        """Raise EnvironmentSpecError when ``spec`` has wrong keys or types, or its published file is unreadable."""
        if isinstance(spec, dict) and "game_file" in spec:
            published_key(spec)
            return
        parse_generated(spec)

    def game(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The solvable game dict of ``spec`` (generated and planned on a cache miss; published: loaded)."""
        self.validate_spec(spec)
        key = canonical_spec(spec)
        if key in self._games:
            return self._games[key]
        game = load_published(spec, solver=self._solve) if "game_file" in spec else self._generated(spec)
        self._games[key] = game
        return game

    def _generated(self, spec: dict[str, Any]) -> dict[str, Any]:
        digest = hashlib.sha256(canonical_spec(spec).encode("utf-8")).hexdigest()[:16]
        final_dir = self.cache_dir / digest
        path = final_dir / _GAME_FILE
        if path.is_file():
            loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return loaded
        game = generate_game(spec)
        walkthrough = self._solve(game)
        if not walkthrough:
            raise EnvironmentSpecError(
                f"alfworld spec {canonical_spec(spec)}: the planner finds no plan for the generated game; "
                "try another seed, target or place"
            )
        game = {**game, "solvable": True, "walkthrough": walkthrough}

        def write(tmp_dir: Path) -> None:
            (tmp_dir / _GAME_FILE).write_text(json.dumps(game, sort_keys=True), encoding="utf-8")
            (tmp_dir / "spec.json").write_text(canonical_spec(spec), encoding="utf-8")

        # Another writer that finished first wrote the same game: its entry is kept.
        publish_dir(final_dir, write, marker=_GAME_FILE)
        return game

    def _solve(self, game: dict[str, Any]) -> list[str]:
        """The planner's plan from the start of ``game`` that really wins it; [] when there is none."""
        engine = self._acquire()
        try:
            state = engine.load(game)
            if state.get("won"):
                return []
            plan = list(engine.plan())
            for action in plan:
                state, _, _ = engine.env.step(action)
            return plan if plan and bool(state.get("won")) else []
        finally:
            self._give_back(engine)

    # ---- engines ----

    def _acquire(self) -> _Engine:
        with _POOL_LOCK:
            if _POOL:
                return _POOL.pop()
        return _Engine()

    def _give_back(self, engine: _Engine) -> None:
        with _POOL_LOCK:
            _POOL.append(engine)

    # ---- the Environment protocol ----

    def open(self, spec: dict[str, Any], *, seed: int) -> AlfworldEpisode:
        """Start an episode. The game is fixed by the spec, so ``seed`` does not change it."""
        del seed  # placement is fixed by spec["seed"]; the policy's sampling carries the episode seed
        game = self.game(spec)
        engine = self._acquire()
        try:
            return AlfworldEpisode(
                game,
                engine=engine,
                plans=self.plans,
                release=self._give_back,
                limits=self.limits,
            )
        except BaseException:
            self._give_back(engine)
            raise

    def demonstrations(self, spec: dict[str, Any], *, seed: int) -> list[list[str]]:
        """The planner's plan from the start (one winning command sequence)."""
        del seed
        return [list(self.game(spec)["walkthrough"])]

    def check_winnable(self, spec: dict[str, Any]) -> str | None:
        """None when the game builds and its plan wins it; otherwise the reason (rewrite validation, spec §3.2)."""
        try:
            walkthrough = self.game(spec)["walkthrough"]
        except EnvironmentSpecError as exc:
            return str(exc)
        return None if walkthrough else "the planner finds no winning plan"
