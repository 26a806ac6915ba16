"""Rewrite direction and acceptance rule (spec §3)."""

from __future__ import annotations

import pytest

from rla_core.algo.adaptation import Decision, Goal, accept_variant, goal_from_acc
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
