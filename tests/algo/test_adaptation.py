"""Rewrite direction and acceptance rule (spec §3)."""

from __future__ import annotations

import pytest

from rla_core.algo.adaptation import (
    Decision,
    Goal,
    VariantSpace,
    accept_variant,
    goal_from_acc,
    variant_problem,
)
from rla_core.algo.episodes import WinRule, is_won
from rla_core.config import AdaptationConfig, Band
from rla_core.errors import RegistryError

TEXT = AdaptationConfig()  # alpha_low 0.2 inclusive, alpha_high 0.8
CODE = AdaptationConfig(low_inclusive=False)  # coding: easier only when acc < 0.2


@pytest.mark.parametrize(
    ("acc", "text_goal", "code_goal"),
    [
        (1.0, Goal.HARDER, Goal.HARDER),
        (4 / 5, Goal.HARDER, Goal.HARDER),  # 0.8 exactly: inclusive
        (7 / 8, Goal.HARDER, Goal.HARDER),
        (0.79, Goal.KEEP, Goal.KEEP),
        (0.5, Goal.KEEP, Goal.KEEP),
        (1 / 5, Goal.EASIER, Goal.KEEP),  # 0.2 exactly: <= for text games, not < for coding
        (1 / 8, Goal.EASIER, Goal.EASIER),
        (0.0, Goal.EASIER, Goal.EASIER),
    ],
)
def test_goal_from_acc(acc: float, text_goal: Goal, code_goal: Goal) -> None:
    assert goal_from_acc(acc, cfg=TEXT) is text_goal
    assert goal_from_acc(acc, cfg=CODE) is code_goal


def test_float_summed_accuracy_still_hits_the_threshold() -> None:
    acc = sum([0.1] * 8)  # 0.7999999999999999, an accuracy that "is" 0.8
    assert goal_from_acc(acc, cfg=TEXT) is Goal.HARDER


def test_goal_rejects_non_rates() -> None:
    with pytest.raises(ValueError, match="success rate"):
        goal_from_acc(1.5, cfg=TEXT)


@pytest.mark.parametrize(
    ("new_acc", "prev_acc", "goal", "accepted", "reason_part"),
    [
        (0.5, 7 / 8, Goal.HARDER, True, "accepted: harder"),
        (0.2, 1.0, Goal.HARDER, True, "accepted: harder"),  # new_acc = band low: inclusive
        (1 / 8, 1.0, Goal.HARDER, False, "too hard"),
        (7 / 8, 7 / 8, Goal.HARDER, False, "not harder"),  # equal is not harder
        (1.0, 7 / 8, Goal.HARDER, False, "not harder"),
        (0.0, 1.0, Goal.HARDER, False, "new_acc=0"),
        (0.5, 0.125, Goal.EASIER, True, "accepted: easier"),
        (0.8, 0.0, Goal.EASIER, True, "accepted: easier"),  # new_acc = band high: inclusive
        (7 / 8, 0.125, Goal.EASIER, False, "too easy"),
        (0.125, 0.125, Goal.EASIER, False, "not easier"),
        (0.0, 0.0, Goal.EASIER, False, "new_acc=0"),  # a pending variant whose new accuracy is 0
        (0.0, 0.125, "easier", False, "new_acc=0"),  # string goals from the artifact are accepted
    ],
)
def test_accept_variant(
    new_acc: float, prev_acc: float, goal: Goal | str, accepted: bool, reason_part: str
) -> None:
    decision = accept_variant(new_acc, prev_acc, goal, cfg=TEXT)
    assert isinstance(decision, Decision)
    assert decision.accepted is accepted
    assert reason_part in decision.reason


def test_accept_band_is_configurable() -> None:
    cfg = AdaptationConfig(accept_band=Band(low=0.4, high=0.6))
    assert not accept_variant(0.3, 1.0, Goal.HARDER, cfg=cfg).accepted  # 0.3 < 0.4
    assert accept_variant(0.4, 1.0, Goal.HARDER, cfg=cfg).accepted
    assert not accept_variant(0.7, 0.0, Goal.EASIER, cfg=cfg).accepted  # 0.7 > 0.6


def test_keep_and_unknown_goals_cannot_be_decided() -> None:
    with pytest.raises(RegistryError, match="goal 'keep'"):
        accept_variant(0.5, 0.5, Goal.KEEP, cfg=TEXT)
    with pytest.raises(RegistryError, match="choose one of: harder, easier, keep"):
        accept_variant(0.5, 0.5, "hard", cfg=TEXT)


# ---- the one rewrite rule (hand-computed: every row's arithmetic in its comment) --------------------

LINE = VariantSpace(bounds={"d": (1, 8), "w": (0, 3)}, difficulty=("d",), anchor_radius=2)
ROOT = {"d": 3, "w": 1, "seed": 0}


@pytest.mark.parametrize(
    ("parent", "goal", "spec", "reason"),
    [
        (ROOT, Goal.HARDER, {"d": 4, "w": 1, "seed": 0}, None),  # d 3 -> 4: harder; |4 - 3| = 1 <= 2
        (ROOT, Goal.HARDER, {"d": 4, "w": 3, "seed": 0}, None),  # w is bounded but not difficulty: free
        (ROOT, Goal.HARDER, {"d": 9, "w": 1, "seed": 0}, "'d'=9 is outside [1, 8]"),  # 9 > 8
        (ROOT, Goal.HARDER, {"d": True, "w": 1, "seed": 0}, "'d' must be an integer, got True"),
        (ROOT, Goal.HARDER, {"w": 1, "seed": 0}, "missing key 'd'"),
        (ROOT, Goal.HARDER, {"d": 4, "w": 1, "seed": 1},  # seed is outside the bounds: kept as the root's
         "off-anchor: changes ['seed'] of the root task, which a rewrite must keep"),
        (ROOT, Goal.HARDER, {"d": 4, "w": 1}, "off-anchor: changes ['seed'] of the root task, which a rewrite must keep"),
        (ROOT, Goal.HARDER, {"d": 3, "w": 1, "seed": 0}, "identical to the parent task"),
        (ROOT, Goal.HARDER, {"d": 3, "w": 2, "seed": 0},  # d unchanged: nothing moved up
         "not harder than the parent: changes {'d': 0}"),
        (ROOT, Goal.EASIER, {"d": 4, "w": 1, "seed": 0}, "not easier than the parent: changes {'d': 1}"),
        (ROOT, Goal.EASIER, {"d": 2, "w": 1, "seed": 0}, None),  # 3 -> 2: easier
        ({"d": 5, "w": 1, "seed": 0}, Goal.HARDER, {"d": 6, "w": 1, "seed": 0},  # |6 - 3| = 3 > 2
         "off-anchor: d=6 is more than 2 from the root's 3"),
    ],
)  # fmt: skip
def test_the_rewrite_rule_names_the_first_rule_a_candidate_breaks(
    parent: dict[str, int], goal: Goal, spec: dict[str, int], reason: str | None
) -> None:
    assert variant_problem(spec, parent=parent, root=ROOT, goal=goal, space=LINE) == reason


def test_a_measured_space_and_one_without_direction() -> None:
    # measure: (rank, -hints); harder means a larger measure than the parent's
    measured = VariantSpace(changes=frozenset({"rank", "hints"}), measure=lambda s: (s["rank"], -s["hints"]))
    root = {"rank": 0, "hints": 1, "seed": 4}
    assert (
        variant_problem({**root, "hints": 0}, parent=root, root=root, goal=Goal.HARDER, space=measured)
        is None
    )
    assert variant_problem(
        {**root, "hints": 2}, parent=root, root=root, goal=Goal.HARDER, space=measured
    ) == ("not harder than the parent: difficulty (0, -1) -> (0, -2)")
    free = VariantSpace(changes=frozenset({"goal"}))  # no direction rule: either way is valid
    assert (
        variant_problem({**root, "goal": "x"}, parent=root, root=root, goal=Goal.EASIER, space=free) is None
    )
    owned = VariantSpace(bounds={"d": (1, 2)}, difficulty=("d",), owner="plug-in 'p'")
    assert variant_problem({"d": 3}, parent={"d": 1}, root={"d": 1}, goal=Goal.HARDER, space=owned) == (
        "outside plug-in 'p''s rewrite space: 'd'=3 is outside [1, 2]"
    )
    with pytest.raises(ValueError, match="no bounds"):
        VariantSpace(difficulty=("d",))


def test_one_success_rule_per_kind_of_score() -> None:
    # a plug-in's score: 1 is won, anything less is lost; a GUI task's reward: any credit counts
    assert [is_won(s, WinRule.FULL_SCORE) for s in (0.0, 0.99, 1.0)] == [False, False, True]
    assert [is_won(s, WinRule.ANY_CREDIT) for s in (-1.0, 0.0, 0.01, 1.0)] == [False, False, True, True]
