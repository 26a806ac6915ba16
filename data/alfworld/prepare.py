"""Write ALFWorld-style seed task sets (JSONL) from the floor plans shipped in the alfworld wheel.

    python data/alfworld/prepare.py --per-type 1 --receptacles 6 --distractors 2 --split train --out data/alfworld/train.jsonl

For each of the six task types, ``--per-type`` specs are drawn (seeded) from the rooms of the split
(``train`` = ALFRED's seen rooms, ``heldout`` = its unseen rooms) where ALFRED poses that task type
(kitchens for heat/cool, etc.): a target the room lists, a destination that can hold it (or a lamp),
and placement parameters. Only specs the generator accepts are written; solvability is checked by
the planner when a run first uses a task (``AlfworldEnv.game``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from rla_core.envs.alfworld import assets
from rla_core.envs.alfworld.generator import generate_game
from rla_core.envs.alfworld.spec import TaskType
from rla_core.errors import EnvironmentSpecError


def candidates(task_type: TaskType, scene: int, rng: random.Random) -> dict[str, object] | None:
    """One random spec of ``task_type`` in ``scene``, or None when the room cannot host it."""
    room = assets.load_scene(scene)
    pickable = sorted(room.object_classes & assets.pickupable_classes())
    if task_type.property_kind is not None:
        pickable = [c for c in pickable if c in assets.action_classes(task_type.property_kind)]
    if not pickable:
        return None
    target = rng.choice(pickable)
    light = place = None
    if task_type is TaskType.LOOK_IN_LIGHT:
        lamps = sorted(room.object_classes & assets.action_classes("Toggleable"))
        if not lamps:
            return None
        light = rng.choice(lamps)
    else:
        holders = sorted(
            {r.cls for r in room.receptacles if target in assets.can_contain().get(r.cls, frozenset())}
        )
        holders = [h for h in holders if h != task_type.appliance]
        if not holders:
            return None
        place = rng.choice(holders)
    return {"scene": scene, "task_type": task_type.value, "target": target, "place": place, "light": light}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=("train", "heldout"), required=True)
    parser.add_argument("--per-type", type=int, default=1)
    parser.add_argument("--receptacles", type=int, default=None, help="receptacle cap; omit for whole rooms")
    parser.add_argument("--distractors", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prefix", default="alfw")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    rooms = [s for s in assets.scene_numbers() if assets.scene_split(s) == args.split]
    rows = []
    for task_type in TaskType:
        valid_rooms = assets.constants().GOALS_VALID[task_type.value]
        scenes = [s for s in rooms if any(s in assets.constants().SCENE_TYPE[r] for r in valid_rooms)]
        made = 0
        for _ in range(200 * args.per_type):
            if made == args.per_type:
                break
            base = candidates(task_type, rng.choice(scenes), rng)
            if base is None:
                continue
            spec = {
                **base, "distractors": args.distractors, "receptacles": args.receptacles,
                "target_location": "any", "seed": rng.randrange(1000),
            }  # fmt: skip
            try:
                generate_game(spec)
            except EnvironmentSpecError:
                continue
            rows.append({"slot_id": f"{args.prefix}-{args.split}-{len(rows)}", "spec": spec})
            made += 1
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} tasks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
