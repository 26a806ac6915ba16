"""Write a task set of the long-horizon `bench-long` distribution (issue 26; docs/bench-design.md §10).

The `bench-long` games are TextWorld quests of 3-5 steps (the engine's upper bound is 5,
``rla_core/envs/textworld_env.py::SPEC_BOUNDS``) over 1-3 rooms with 3-4 objects: a winning episode has to
take, open, put or walk several steps in order, where the `bench` games need 1-3. (A first draw of 4-6
objects over 2-4 rooms was out of reach: a random policy won 2-4 % of its episodes even with 16-24 steps.) Specs are drawn with an RNG
seeded by ``--first-seed``, game seeds run from ``--first-seed`` on, and every game is compiled and checked
to be won by its own walkthrough (unwinnable draws are skipped), so the same arguments always write the same
file. Compiled games land in the game cache for later runs.

The three sets (each drawn once; the held-out one is never read while designing the preset):

    .venv/bin/python benchmarks/make_bench_long_set.py --prefix tw-long-train --count 32 --first-seed 3000 \
        --out data/textworld/bench-long-train.jsonl
    .venv/bin/python benchmarks/make_bench_long_set.py --prefix tw-long-val --count 48 --first-seed 6000 \
        --out data/textworld/bench-long-validation.jsonl
    .venv/bin/python benchmarks/make_bench_long_set.py --prefix tw-long-heldout --count 50 --first-seed 9000 \
        --out data/textworld/bench-long-heldout.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from rla_core.envs.textworld_env import TextWorldEnv


def draw_spec(rng: random.Random, seed: int) -> dict[str, int]:
    """One `bench-long` spec: quest 3-5 steps (2:2:1), 1-3 rooms, 3-4 objects (docs/bench-design.md §10)."""
    return {
        "world_size": rng.choice([1, 2, 3]),
        "nb_objects": rng.choice([3, 4]),
        "quest_length": rng.choice([3, 3, 4, 4, 5]),
        "seed": seed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", required=True, help="slot id prefix, e.g. tw-long-train")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--first-seed", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--game-cache", type=Path, default=Path(".cache/games"))
    args = parser.parse_args()
    env = TextWorldEnv(args.game_cache)
    rng = random.Random(args.first_seed)
    lines: list[str] = []
    seed = args.first_seed
    while len(lines) < args.count:
        spec = draw_spec(rng, seed)
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
