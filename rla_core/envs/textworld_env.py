"""TextWorld text games: task specs, locally compiled games cached by spec hash, and episodes.

A task spec is a dict of TextWorld game-generation parameters (docs/settings.md: we use TextWorld, the engine
ALFWorld is built on; spec §1.2 for the episode rules):

=============  =======================================================  ==========
key            meaning                                                  range
=============  =======================================================  ==========
world_size     number of rooms                                          1..6
nb_objects     objects in the world (quest objects + distractors)       1..12
quest_length   actions on the shortest winning path                     1..5
seed           generation seed (the "world identity" of a task family)  0..2**31-1
=============  =======================================================  ==========

Games are generated and compiled in-process (``textworld.generator.make_game`` / ``compile_game``,
~2-4 s per game) into ``<cache_dir>/<spec_hash>/`` via a temporary directory and an atomic rename, so
a half-written game is never visible and concurrent writers do not collide.

Episodes report ``won`` from the engine, present admissible commands in sorted order (seeds reproduce),
compact observations for tiny models (no ASCII banner, no status line, at most
``limits.observation_chars``: :class:`TextLimits`), and expose ``policy_commands`` as :meth:`TextWorldEpisode.expert_actions`.

Example:
    >>> env = TextWorldEnv(cache_dir=Path(".cache/games"))  # doctest: +SKIP
    >>> ep = env.open({"world_size": 1, "nb_objects": 3, "quest_length": 1, "seed": 1}, seed=0)  # doctest: +SKIP
    >>> ep.step(env.demonstrations(spec, seed=0)[0][0]).won  # doctest: +SKIP
    True
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rla_core.envs.base import StepResult, canonical_spec
from rla_core.errors import EnvironmentSpecError
from rla_core.store import publish_dir

# Inclusive ranges per spec key. Small on purpose: tiny CPU models must win sometimes.
SPEC_BOUNDS: dict[str, tuple[int, int]] = {
    "world_size": (1, 6),
    "nb_objects": (1, 12),
    "quest_length": (1, 5),
    "seed": (0, 2**31 - 1),
}
# The keys that make a game harder when they grow (used by the rewriters' direction checks).
DIFFICULTY_KEYS: tuple[str, ...] = ("quest_length", "nb_objects", "world_size")

_GAME_FILE = "game.z8"
_STATUS_LINE = re.compile(r"^\s*>")
_END_LINES = re.compile(r"(\*\*\* The End \*\*\*|Would you like to RESTART|You scored \d+ out of)")


def spec_hash(spec: Mapping[str, Any]) -> str:
    """A short stable hash of a spec (the compiled game's cache key)."""
    return hashlib.sha256(canonical_spec(spec).encode("utf-8")).hexdigest()[:16]


def validate_textworld_spec(spec: Any) -> None:
    """Check keys, types and ranges of a TextWorld task spec; raise EnvironmentSpecError otherwise."""
    if not isinstance(spec, Mapping):
        raise EnvironmentSpecError(
            f"textworld spec must be a JSON object, got {type(spec).__name__}; "
            f"pass a dict with keys {sorted(SPEC_BOUNDS)}"
        )
    unknown = sorted(set(spec) - set(SPEC_BOUNDS))
    missing = sorted(set(SPEC_BOUNDS) - set(spec))
    if unknown or missing:
        raise EnvironmentSpecError(
            f"textworld spec {canonical_spec(spec)} has unknown keys {unknown} and missing keys {missing}; "
            f"use exactly {sorted(SPEC_BOUNDS)}"
        )
    for key, (low, high) in SPEC_BOUNDS.items():
        value = spec[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise EnvironmentSpecError(
                f"textworld spec key '{key}' must be an integer, got {value!r}; set it to an int in [{low}, {high}]"
            )
        if not low <= value <= high:
            raise EnvironmentSpecError(
                f"textworld spec key '{key}'={value} is outside [{low}, {high}]; choose a value inside the range"
            )


def compact_text(text: str, *, max_chars: int) -> str:
    """Strip TextWorld's ASCII banner, prompt/status lines and end-of-game boilerplate; cap the length.

    Lines that are mostly punctuation (the banner) are dropped, whitespace is collapsed to single
    spaces, and the result is cut at a word boundary to at most ``max_chars`` characters.
    """
    kept: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or _STATUS_LINE.match(line) or _END_LINES.search(line):
            continue
        letters = sum(ch.isalpha() for ch in line)
        if letters < 0.5 * len(line.replace(" ", "")):
            continue  # banner art: mostly $, |, \ and _
        kept.append(line)
    out = " ".join(" ".join(kept).split())
    if len(out) > max_chars:
        cut = out[:max_chars].rsplit(" ", 1)[0]
        out = cut + " ..."
    return out


@dataclass(frozen=True, kw_only=True)
class TextLimits:
    """How much prose a text-game episode shows a tiny model (TextWorld and ALFWorld, each with its own
    defaults): its instruction and every observation are compacted (:func:`compact_text`) to these caps.

    Example:
        >>> TextLimits(observation_chars=8, instruction_chars=100).observation("aaa bbb ccc")
        'aaa bbb ...'
    """

    observation_chars: int
    instruction_chars: int

    def observation(self, text: str) -> str:
        """``text`` compacted to at most ``observation_chars`` (plus " ..." when cut)."""
        return compact_text(text, max_chars=self.observation_chars)

    def instruction(self, text: str) -> str:
        """``text`` compacted to at most ``instruction_chars`` (plus " ..." when cut)."""
        return compact_text(text, max_chars=self.instruction_chars)


TEXTWORLD_LIMITS = TextLimits(observation_chars=240, instruction_chars=400)


class TextWorldEpisode:
    """One running TextWorld game (implements :class:`rla_core.envs.base.Episode`)."""

    observation_ref: str | None = None  # text observations only
    free_form = False  # every turn lists its commands
    system_prompt = None  # the policy prompt is the engine's own template

    def __init__(self, game_file: Path, *, limits: TextLimits) -> None:
        import textworld

        infos = textworld.EnvInfos(
            admissible_commands=True,
            policy_commands=True,
            won=True,
            lost=True,
            score=True,
            objective=True,
            extras=["walkthrough"],
        )
        self._limits = limits
        self._env = textworld.start(str(game_file), infos)
        state = self._env.reset()
        objective = str(state.get("objective") or "")
        self.instruction: str = limits.instruction(objective)
        # The opening text repeats the objective; the instruction already carries it.
        opening = str(state.feedback).replace(objective, " ")
        self.observation: str = limits.observation(opening)
        self.walkthrough: list[str] = list(state.get("extra.walkthrough") or [])
        self.won = False
        self.done = False
        self._absorb(state)

    def _absorb(self, state: Any) -> None:
        self.admissible_actions: list[str] = sorted(set(state.get("admissible_commands") or []))
        self._expert: list[str] = list(state.get("policy_commands") or [])

    def step(self, action: str) -> StepResult:
        """Apply ``action``; the episode is done once the game is won or lost."""
        if self.done:
            raise EnvironmentSpecError(
                "step() called on a finished TextWorld episode; open a new episode to play again"
            )
        state, _score, done = self._env.step(action)
        self.won = bool(state.get("won"))
        self.done = bool(done or self.won or state.get("lost"))
        self.observation = self._limits.observation(str(state.feedback)) or "Nothing happens."
        self._absorb(state)
        if self.done:
            self.admissible_actions = []
            self._expert = []
        return StepResult(observation=self.observation, done=self.done, won=self.won)

    def expert_actions(self) -> list[str]:
        """TextWorld's ``policy_commands``: the optimal remaining commands; the first one is the next."""
        return list(self._expert)

    def close(self) -> None:
        """Close the underlying game process."""
        self._env.close()


class TextWorldEnv:
    """TextWorld games from generation-parameter specs (implements :class:`rla_core.envs.base.Environment`)."""

    name = "textworld"
    max_open: int | None = None  # any number of episodes at once

    def __init__(self, cache_dir: Path, *, limits: TextLimits = TEXTWORLD_LIMITS) -> None:
        self.cache_dir = Path(cache_dir)
        self.limits = limits

    def validate_spec(self, spec: dict[str, Any]) -> None:
        """Raise EnvironmentSpecError when ``spec`` has wrong keys, types or out-of-range values."""
        validate_textworld_spec(spec)

    def game_file(self, spec: dict[str, Any]) -> Path:
        """Path of the compiled game for ``spec``, generating and compiling it on a cache miss."""
        self.validate_spec(spec)
        final_dir = self.cache_dir / spec_hash(spec)
        game = final_dir / _GAME_FILE
        if game.is_file():
            return game

        def write(tmp_dir: Path) -> None:
            _compile_into(spec, tmp_dir)
            (tmp_dir / "spec.json").write_text(canonical_spec(spec), encoding="utf-8")

        # Another writer that finished first compiled an identical game (same spec, same seed): kept.
        publish_dir(final_dir, write, marker=_GAME_FILE)
        return game

    def open(self, spec: dict[str, Any], *, seed: int) -> TextWorldEpisode:
        """Start an episode. TextWorld games are deterministic, so ``seed`` does not change the game."""
        del seed  # the game is fixed by spec["seed"]; the policy's sampling carries the episode seed
        return TextWorldEpisode(self.game_file(spec), limits=self.limits)

    def demonstrations(self, spec: dict[str, Any], *, seed: int) -> list[list[str]]:
        """The game's walkthrough (one winning command sequence)."""
        episode = self.open(spec, seed=seed)
        try:
            return [list(episode.walkthrough)]
        finally:
            episode.close()

    def check_winnable(self, spec: dict[str, Any]) -> str | None:
        """None when the game compiles and its own walkthrough wins it; otherwise the reason why not."""
        try:
            episode = self.open(spec, seed=0)
        except EnvironmentSpecError as exc:
            return str(exc)
        try:
            if not episode.walkthrough:
                return "the compiled game has no walkthrough"
            for action in episode.walkthrough:
                if episode.done:
                    break
                episode.step(action)
            if not episode.won:
                return f"following the walkthrough {episode.walkthrough} does not win the game"
            return None
        finally:
            episode.close()


def _compile_into(spec: Mapping[str, Any], out_dir: Path) -> None:
    """Generate and compile the game of ``spec`` into ``out_dir/game.z8`` (TextWorld generator)."""
    import textworld.generator
    from textworld import GameOptions
    from textworld.generator.chaining import QuestGenerationError

    options = GameOptions()
    options.nb_rooms = int(spec["world_size"])
    options.nb_objects = int(spec["nb_objects"])
    options.quest_length = int(spec["quest_length"])
    options.seeds = int(spec["seed"])
    options.path = str(out_dir / _GAME_FILE)
    options.force_recompile = True
    try:
        game = textworld.generator.make_game(options)
        textworld.generator.compile_game(game, options)
    except (QuestGenerationError, ValueError, AssertionError) as exc:
        raise EnvironmentSpecError(
            f"TextWorld cannot generate a game for spec {canonical_spec(spec)}: {type(exc).__name__}: {exc}; "
            "try a shorter quest_length, more rooms or objects, or another seed"
        ) from exc
