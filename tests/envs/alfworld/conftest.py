"""Shared data of the ALFWorld tests: a small game of each of the six task types (the session's environment,
`alfworld_env`, is in tests/envs/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"
PUBLISHED = (
    FIXTURES
    / "json_2.1.1"
    / "valid_unseen"
    / "pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-1"
    / "trial_T20190909_000000_000001"
    / "game.tw-pddl"
)

_BASE: dict[str, Any] = {
    "scene": 1,
    "light": None,
    "distractors": 4,
    "receptacles": 7,
    "target_location": "any",
    "seed": 0,
}
# One small game per task type (kitchen 1; the look task in bedroom 301, which has a desk lamp).
SPECS: dict[str, dict[str, Any]] = {
    "pick_and_place_simple": {**_BASE, "task_type": "pick_and_place_simple", "target": "Mug", "place": "CoffeeMachine"},
    "pick_two_obj_and_place": {**_BASE, "task_type": "pick_two_obj_and_place", "target": "Mug", "place": "CounterTop"},
    "look_at_obj_in_light": {
        **_BASE, "scene": 301, "task_type": "look_at_obj_in_light", "target": "Book", "place": None, "light": "DeskLamp",
    },
    "pick_clean_then_place_in_recep": {
        **_BASE, "task_type": "pick_clean_then_place_in_recep", "target": "Mug", "place": "CoffeeMachine",
    },
    "pick_heat_then_place_in_recep": {
        **_BASE, "task_type": "pick_heat_then_place_in_recep", "target": "Potato", "place": "CounterTop",
    },
    "pick_cool_then_place_in_recep": {
        **_BASE, "task_type": "pick_cool_then_place_in_recep", "target": "Apple", "place": "CounterTop",
    },
}  # fmt: skip
