"""The published ALFWorld games (``game.tw-pddl`` files from ALFRED trajectories), for users who have them.

ALFWorld's data (``alfworld-download``) lays games out as
``$ALFWORLD_DATA/json_2.1.1/{train,valid_seen,valid_unseen}/<task>/<trial>/game.tw-pddl``; each file
is JSON with ``pddl_domain``, ``grammar`` (task sentence in place of ``UNKNOWN GOAL``), ``pddl_problem``
(ids mangled, e.g. ``Mug_bar__plus_01_dot_20_bar_...``) and ``solvable``. A task spec names one file,
``{"game_file": PATH}`` (PATH absolute or relative to the working directory), optionally with a
two-token ``goal`` rewrite. :func:`published_specs` lists a split as seed-task rows.

Example:
    >>> rows = published_specs(Path("~/alfworld/json_2.1.1"), split="valid_unseen")  # doctest: +SKIP
    >>> rows[0]["spec"]  # doctest: +SKIP
    {'game_file': '/home/me/alfworld/json_2.1.1/valid_unseen/look_at_obj_in_light-.../game.tw-pddl'}
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rla_core.envs.alfworld.pddl import (
    goal_of,
    goal_pddl,
    read_facts,
    replace_goal,
    replace_task_sentence,
    task_sentence,
)
from rla_core.envs.alfworld.spec import canonical_spec, parse_goal
from rla_core.errors import EnvironmentSpecError

PUBLISHED_KEYS: tuple[str, ...] = ("pddl_domain", "grammar", "pddl_problem")
SPLITS: tuple[str, ...] = ("train", "valid_seen", "valid_unseen")


def published_key(spec: Mapping[str, Any]) -> Path:
    """The file of a published-game spec; raises EnvironmentSpecError on other keys or a missing file."""
    unknown = sorted(set(spec) - {"game_file", "goal"})
    if unknown:
        raise EnvironmentSpecError(
            f"alfworld spec {canonical_spec(spec)}: unknown keys {unknown}; a published game is "
            '{"game_file": PATH} with an optional "goal"'
        )
    value = spec["game_file"]
    if not isinstance(value, str) or not value:
        raise EnvironmentSpecError(f"alfworld spec: 'game_file' must be a path string, got {value!r}")
    path = Path(value).expanduser()
    if not path.is_file():
        raise EnvironmentSpecError(
            f"alfworld game file '{path}' does not exist; point the spec at a game.tw-pddl of the ALFWorld data"
        )
    return path


def read_game_file(path: Path) -> dict[str, Any]:
    """A ``game.tw-pddl`` file as a dict, with a specific error for non-JSON files and missing keys."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EnvironmentSpecError(
            f"alfworld game file '{path}' is not JSON ({exc}); is it a game.tw-pddl?"
        ) from None
    if not isinstance(data, dict):
        raise EnvironmentSpecError(f"alfworld game file '{path}' must hold a JSON object")
    missing = [k for k in PUBLISHED_KEYS if not isinstance(data.get(k), str) or not data[k].strip()]
    if missing:
        raise EnvironmentSpecError(
            f"alfworld game file '{path}' lacks non-empty {missing}; a game.tw-pddl has {list(PUBLISHED_KEYS)}"
        )
    return data


def retarget(game: dict[str, Any], goal: Mapping[str, Any]) -> dict[str, Any]:
    """``game`` with its goal's two type tokens replaced (spec §3.2), after the constraint check."""
    from rla_core.envs.alfworld.goals import check_goal_tokens

    task_type, _root = goal_of(game["pddl_problem"])
    tokens = parse_goal({"goal": dict(goal)}, task_type)
    assert tokens is not None
    reason = check_goal_tokens(read_facts(game["pddl_problem"]), task_type, tokens)
    if reason is not None:
        raise EnvironmentSpecError(
            f"goal rewrite {tokens.target},{tokens.second} breaks a constraint: {reason}"
        )
    sentence = task_sentence(task_type, tokens, variant=0)
    return {
        **game,
        "pddl_problem": replace_goal(game["pddl_problem"], goal_pddl(task_type, tokens)),
        "grammar": replace_task_sentence(game["grammar"], sentence),
        "walkthrough": None,
    }


def load_published(
    spec: Mapping[str, Any], *, solver: Callable[[dict[str, Any]], list[str]]
) -> dict[str, Any]:
    """The game of a published-game spec, goal rewritten if asked, with the planner's walkthrough.

    Raises EnvironmentSpecError when the file is unreadable, the rewrite breaks a constraint, or the
    planner finds no plan (``solvable`` is then false).
    """
    path = published_key(spec)
    game = read_game_file(path)
    if spec.get("goal") is not None:
        game = retarget(game, spec["goal"])
    walkthrough = game.get("walkthrough") or solver(game)
    if not walkthrough:
        raise EnvironmentSpecError(
            f"alfworld game '{path}' (goal {spec.get('goal')}) has no plan that wins it"
        )
    return {**game, "solvable": True, "walkthrough": list(walkthrough)}


def published_specs(root: Path, *, split: str) -> list[dict[str, Any]]:
    """Seed-task rows ``{"slot_id", "spec"}`` for every ``game.tw-pddl`` under ``root/split`` (sorted)."""
    if split not in SPLITS:
        raise EnvironmentSpecError(f"unknown ALFWorld split '{split}'; choose one of {list(SPLITS)}")
    base = Path(root).expanduser() / split
    files = sorted(base.glob("*/*/game.tw-pddl"))
    if not files:
        raise EnvironmentSpecError(
            f"no game.tw-pddl under '{base}'; point at ALFWorld's json_2.1.1 directory (alfworld-download)"
        )
    return [
        {"slot_id": f"alfworld-{split}-{p.parent.parent.name}-{p.parent.name}", "spec": {"game_file": str(p)}}
        for p in files
    ]


def main(argv: list[str]) -> int:
    """``python -m rla_core.envs.alfworld.published JSON_2_1_1_DIR SPLIT OUT.jsonl``: a seed-task file of a split."""
    if len(argv) != 3:
        print(main.__doc__, file=sys.stderr)
        return 2
    root, split, out = argv
    rows = published_specs(Path(root), split=split)
    Path(out).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} {split} games to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
