"""TextArena's single-player games as an rlanything environment plug-in (multi-step).

One game of the library (``plugin.options.game``) makes every task; a task's spec is the keyword arguments
of one of the library's registered variants of that game (``TowerOfHanoi-v0-medium`` is ``num_disks=4,
max_turns=30``) and the seed TextArena resets it with. The rewrite space is those variants: each varying
argument is bounded by its lowest and highest registered value, the game's difficulty arguments are
declared here (more disks, a larger range of numbers), and a variant must be one the library registers.

An episode is a game: the observation is the text TextArena shows since the last move, the admissible
actions are the legal moves in TextArena's own syntax (``[A C]``, ``[17]``), the outcome is TextArena's
reward (1: won; a partial reward when the turn limit ends the game counts as a loss). The expert action is
an optimal move (Hanoi's recursive solution, Guess the Number's bisection); the demonstration plays it.
Games that fetch NLTK or other data at run time are not offered (the loop runs offline).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationInfo, field_validator
from textarena.envs.registration import ENV_REGISTRY

from rla_core.plugins import EnvironmentPlugin, Field, Observation, PluginOptions, RewriteSpace, Task

EVAL_SEED = 1_000_000  # held-out games reset with seeds from here on; training games count up from 0


def _hanoi_moves(env: Any) -> list[str]:
    towers = env.state.game_state["towers"]
    return [
        f"[{src} {dst}]"
        for src in towers
        for dst in towers
        if src != dst and towers[src] and (not towers[dst] or towers[dst][-1] > towers[src][-1])
    ]


def _hanoi_expert(env: Any) -> list[str]:
    """The first move of the optimal solution from any position: bring the largest misplaced disk to its
    peg after moving every smaller disk to the third peg."""
    towers = env.state.game_state["towers"]
    peg = {disk: name for name, disks in towers.items() for disk in disks}

    def first(disk: int, target: str) -> str | None:
        if disk == 0:
            return None
        if peg[disk] == target:
            return first(disk - 1, target)
        spare = next(p for p in towers if p not in (peg[disk], target))
        return first(disk - 1, spare) or f"[{peg[disk]} {target}]"

    move = first(env.num_disks, "C")
    return [move] if move else []


def _guess_range(env: Any) -> tuple[int, int]:
    low, high = env.min_number, env.max_number
    for guess, hint in env.state.game_state["guess_history"]:
        if hint == "higher":
            low = max(low, guess + 1)
        else:
            high = min(high, guess - 1)
    return low, high


def _guess_moves(env: Any) -> list[str]:
    return [f"[{n}]" for n in range(env.min_number, env.max_number + 1) if n not in env.guessed_numbers]


def _guess_expert(env: Any) -> list[str]:
    low, high = _guess_range(env)
    return sorted({f"[{(low + high) // 2}]", f"[{(low + high + 1) // 2}]"}) if low <= high else []


@dataclass(frozen=True)
class Game:
    """What the plug-in knows of one TextArena game beyond the library: its moves, an optimal move, and which
    of its registered arguments make it harder."""

    difficulty: tuple[str, ...]
    moves: Callable[[Any], list[str]]
    expert: Callable[[Any], list[str]]


GAMES: dict[str, Game] = {
    "TowerOfHanoi": Game(("num_disks",), _hanoi_moves, _hanoi_expert),
    "GuessTheNumber": Game(("max_number",), _guess_moves, _guess_expert),
}
DEFAULT_GAME = "TowerOfHanoi"


def registered(game: str) -> dict[str, dict[str, Any]]:
    """The library's registered variants of ``game`` (``<game>-v0...``), their keyword arguments by id;
    wrapper-only aliases (``-raw``, ``-train``) left out."""
    out: dict[str, dict[str, Any]] = {}
    for env_id, spec in ENV_REGISTRY.items():
        if env_id.startswith(f"{game}-v0") and not env_id.endswith(("-raw", "-train")):
            out[env_id] = dict(spec.kwargs)
    return out


def space_of(game: str) -> RewriteSpace:
    """Every integer argument that differs between the registered variants, bounded by its registered values;
    the game's difficulty arguments raise its difficulty."""
    variants = list(registered(game).values())
    bounds: dict[str, tuple[int, int]] = {}
    for key in variants[0]:
        values = {v[key] for v in variants}
        if len(values) > 1 and all(isinstance(x, int) and not isinstance(x, bool) for x in values):
            bounds[key] = (min(values), max(values))
    return RewriteSpace(bounds=bounds, difficulty=GAMES[game].difficulty)


class TextArenaOptions(PluginOptions):
    game: str = Field(
        DEFAULT_GAME, description="The TextArena single-player game (one of the plug-in's GAMES)."
    )
    variant: str = Field("", description="The registered variant of the seed tasks (default: <game>-v0).")
    train_tasks: int = Field(4, ge=1, le=64, description="Seed training games (reset seeds 0, 1, ...).")
    eval_tasks: int = Field(2, ge=1, le=64, description="Held-out games (their own seeds, the seed variant).")

    @field_validator("game")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in GAMES:
            raise ValueError(
                f"{value!r} is not a TextArena game this plug-in plays; choose one of: {', '.join(GAMES)}"
            )
        return value

    @field_validator("variant")
    @classmethod
    def _registered(cls, value: str, info: ValidationInfo) -> str:
        game = info.data.get("game")
        if value and game is not None and value not in registered(game):
            raise ValueError(f"{value!r} is not a registered {game} variant; TextArena registers: "
                             f"{', '.join(registered(game))}")  # fmt: skip
        return value


@dataclass
class State:
    env: Any  # the TextArena environment of this episode, played in place
    shown: int  # observation messages already shown


class TextArena(EnvironmentPlugin):
    Options = TextArenaOptions

    def __init__(self, options: TextArenaOptions) -> None:
        super().__init__(options)
        self.opts = options
        self.game = GAMES[options.game]
        self.variants_by_id = registered(options.game)
        variant = options.variant or f"{options.game}-v0"
        self.root = self.variants_by_id[variant]
        self.rewrite_space = space_of(options.game)
        module, _, attr = str(ENV_REGISTRY[variant].entry_point).partition(":")
        self.entry_point = getattr(importlib.import_module(module), attr)  # the game's class

    def tasks(self, split: str) -> list[Task]:
        if split == "eval":
            return [
                Task(f"eval-{i}", {**self.root, "seed": EVAL_SEED + i}) for i in range(self.opts.eval_tasks)
            ]
        return [Task(f"{self.opts.game}-{i}", {**self.root, "seed": i}) for i in range(self.opts.train_tasks)]

    def instruction(self, spec: dict[str, Any]) -> str:
        return f"Win the game of {self.opts.game}: choose one legal move each turn."

    def _observe(self, state: State) -> Observation:
        _, messages = state.env.get_observation()
        text = "\n".join(str(m[1]).strip() for m in messages[state.shown :])
        state.shown = len(messages)
        if state.env.state.done:
            reason = state.env.state.game_info.get(0, {}).get("reason") or "The game is over."
            return Observation("\n".join(t for t in (text, str(reason)) if t), (), done=True)
        return Observation(text, tuple(self.game.moves(state.env)))

    def reset(self, spec: dict[str, Any], *, seed: int) -> tuple[State, Observation]:
        env = self.entry_point(**{k: v for k, v in spec.items() if k != "seed"})
        env.reset(num_players=1, seed=int(spec["seed"]))  # the task is the game this seed deals
        state = State(env, 0)
        return state, self._observe(state)

    def step(self, state: State, action: str) -> tuple[State, Observation]:
        state.env.step(action)
        return state, self._observe(state)

    def score(self, state: State) -> float:
        rewards = state.env.state.rewards or {}
        return (
            1.0
            if state.env.state.done and rewards.get(0) == 1
            else max(0.0, min(1.0, float(rewards.get(0, 0))))
        )

    def demonstration(self, spec: dict[str, Any]) -> list[str]:
        state, obs = self.reset(spec, seed=0)
        actions: list[str] = []
        while not obs.done:
            (move, *_) = self.game.expert(state.env)
            actions.append(move)
            state, obs = self.step(state, move)
        return actions

    def expert_actions(self, state: State) -> list[str]:
        return [] if state.env.state.done else self.game.expert(state.env)

    def variants(self, spec: dict[str, Any], *, harder: bool) -> list[dict[str, Any]]:
        """The library's registered variants that are harder (easier) on the difficulty arguments, nearest
        first; the seed kept."""
        keys = self.rewrite_space.difficulty
        now = tuple(int(spec[k]) for k in keys)
        moves = []
        for kwargs in self.variants_by_id.values():
            new = tuple(int(kwargs[k]) for k in keys)
            sign = 1 if harder else -1
            if new != now and all(sign * (n - o) >= 0 for n, o in zip(new, now, strict=True)):
                moves.append((sum(abs(n - o) for n, o in zip(new, now, strict=True)), {**spec, **kwargs}))
        moves.sort(key=lambda m: m[0])
        return [m[1] for m in moves]

    def check_variant(self, spec: dict[str, Any]) -> str | None:
        """A variant is one of the library's registered ones (same arguments), and it resets."""
        kwargs = {k: v for k, v in spec.items() if k != "seed"}
        if kwargs not in self.variants_by_id.values():
            return f"not a registered TextArena {self.opts.game} variant; TextArena registers: " + ", ".join(
                f"{i} {a}" for i, a in self.variants_by_id.items()
            )
        try:
            self.reset(spec, seed=0)
        except Exception as exc:  # the library's own failure to set the game up
            return f"TextArena cannot reset it: {type(exc).__name__}: {exc}"
        return None
