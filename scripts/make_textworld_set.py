"""Write a TextWorld task set (JSONL of slot ids and game specs) drawn from a benchmark distribution.

``--distribution bench`` (default): small household games, 1-2 rooms, 3-5 objects, quests of 1-3 steps
(2-3 when there are two rooms). ``--distribution bench-long`` (docs/bench-design.md §10): quests
of 3-5 steps (the engine's upper bound is 5) drawn 2:2:1 over 1-3 rooms with 3-4 objects.
``--distribution bench-reach`` (§11): quests of 4-5 steps drawn 3:1 over 1-3 rooms (one room half the
time) with 2-4 objects. Specs are drawn with a seeded RNG, game seeds run from ``--first-seed`` on, and every game is compiled and checked to be won
by its own walkthrough (unwinnable draws are skipped), so the same arguments always write the same file.
Compiled games land in the game cache for later runs.

Run: ``.venv/bin/python scripts/make_textworld_set.py --prefix tw-bench-val --count 48 --first-seed 5000
--out data/textworld/bench-val.jsonl`` (the commands of every shipped set: data/textworld/README.md)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from rla_core.envs.textworld_env import TextWorldEnv


def draw_spec(rng: random.Random, seed: int) -> dict[str, int]:
    """One `bench` spec."""
    world_size = rng.choice([1, 2])
    quest_length = rng.choice([1, 1, 2, 3] if world_size == 1 else [2, 3])
    return {
        "world_size": world_size,
        "nb_objects": rng.choice([3, 4, 5]),
        "quest_length": quest_length,
        "seed": seed,
    }


def draw_long_spec(rng: random.Random, seed: int) -> dict[str, int]:
    """One `bench-long` spec: quest 3-5 steps (2:2:1), 1-3 rooms, 3-4 objects (docs/bench-design.md §10)."""
    return {
        "world_size": rng.choice([1, 2, 3]),
        "nb_objects": rng.choice([3, 4]),
        "quest_length": rng.choice([3, 3, 4, 4, 5]),
        "seed": seed,
    }


def draw_reach_spec(rng: random.Random, seed: int) -> dict[str, int]:
    """One `bench-reach` spec: quest 4-5 steps (3:1), 1-3 rooms (one room half the time), 2-4 objects (docs/bench-design.md §11)."""
    return {
        "world_size": rng.choice([1, 1, 2, 3]),
        "nb_objects": rng.choice([2, 3, 4]),
        "quest_length": rng.choice([4, 4, 4, 5]),
        "seed": seed,
    }


DISTRIBUTIONS = {"bench": draw_spec, "bench-long": draw_long_spec, "bench-reach": draw_reach_spec}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", required=True, help="slot id prefix, e.g. tw-bench-val")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--first-seed", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--game-cache", type=Path, default=Path(".cache/games"))
    parser.add_argument("--distribution", choices=sorted(DISTRIBUTIONS), default="bench")
    args = parser.parse_args()
    draw = DISTRIBUTIONS[args.distribution]
    env = TextWorldEnv(args.game_cache)
    rng = random.Random(args.first_seed)
    lines: list[str] = []
    seed = args.first_seed
    while len(lines) < args.count:
        spec = draw(rng, seed)
        seed += 1
        reason = env.check_winnable(spec)
        if reason is not None:
            print(f"skipped {spec}: {reason}", file=sys.stderr)
            continue
        lines.append(json.dumps({"slot_id": f"{args.prefix}-{len(lines)}", "spec": spec}))
        print(f"{len(lines)}/{args.count} {spec}", file=sys.stderr, flush=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} specs to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
