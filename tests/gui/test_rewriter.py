"""GUI task rewriting: hint levels and sibling tasks, validated by loading and solving the page."""

from __future__ import annotations

import json

from rla_core.envs.feedback import CriticFeedback, FailedRollout
from rla_core.envs.miniwob.env import MiniWobEnv
from rla_core.envs.miniwob.rewriter import GuiRewriter, check_gui_candidate, rewrite_gui_tasks
from rla_core.envs.rewriter import Goal, RewriteRequest
from tests.gui.conftest import spec


def request(parent: dict[str, object], goal: Goal, feedback: CriticFeedback | None = None) -> RewriteRequest:
    return RewriteRequest("s0", "t0", dict(parent), dict(parent), goal, prev_acc=0.0, feedback=feedback)


def test_easier_adds_a_hint_then_moves_to_the_easier_sibling(env: MiniWobEnv) -> None:
    frame = rewrite_gui_tasks(
        [request(spec("click-button"), Goal.EASIER)],
        rewriter=GuiRewriter(),
        env=env,
        known_tasks=env.known_tasks,
        k=3,
        iteration=2,
    )
    specs = [json.loads(s) for s in frame["spec"]]
    # no feedback: hint 0 -> 1, then hint 2, then the easier sibling click-test-2 without hints
    assert specs == [
        spec("click-button", hint_level=1),
        spec("click-button", hint_level=2),
        spec("click-test-2"),
    ]
    assert frame["valid"].to_list() == [True, True, True]
    assert frame["chosen"].to_list() == [True, False, False]  # first valid wins
    assert frame["goal"].unique().to_list() == ["easier"]


def test_feedback_on_late_steps_targets_the_per_step_hint() -> None:
    failed = FailedRollout(
        rollout_id=0,
        steps=3,
        high_risk_steps=(2,),
        high_risk_actions=("x",),
        summary=None,
        summary_error=None,
    )
    cands = GuiRewriter().propose(
        request(spec("click-checkboxes"), Goal.EASIER, CriticFeedback("t0", (failed,))), k=3, seed=0
    )
    # failures after step 0 -> straight to hint level 2 (the expert's next action at every step)
    assert cands[0].spec == spec("click-checkboxes", hint_level=2)
    assert cands[1].spec == spec("click-option")


def test_harder_removes_a_hint_then_moves_to_the_harder_sibling(env: MiniWobEnv) -> None:
    frame = rewrite_gui_tasks(
        [request(spec("enter-text", hint_level=1), Goal.HARDER)],
        rewriter=GuiRewriter(),
        env=env,
        known_tasks=env.known_tasks,
        k=3,
        iteration=2,
    )
    assert [json.loads(s) for s in frame["spec"]] == [
        spec("enter-text"),
        spec("enter-password", hint_level=1),
        spec("enter-password"),
    ]
    assert frame["chosen"].to_list() == [True, False, False]


def test_invalid_candidates_carry_their_reason(env: MiniWobEnv) -> None:
    req = request(spec("click-test-2"), Goal.HARDER)
    known = env.known_tasks
    assert check_gui_candidate(spec("click-test-2"), req, known_tasks=known) == "identical to the parent task"
    assert "not harder than the parent" in str(
        check_gui_candidate(spec("click-test"), req, known_tasks=known)
    )
    assert "off-anchor: task 'enter-text'" in str(
        check_gui_candidate(spec("enter-text"), req, known_tasks=known)
    )
    assert "off-anchor: changes ['seed']" in str(
        check_gui_candidate(spec("click-button", seed=4), req, known_tasks=known)
    )
    assert "unknown MiniWoB task" in str(check_gui_candidate(spec("nope"), req, known_tasks=known))
    # at the bound: the hardest task without hints has no harder variant
    frame = rewrite_gui_tasks(
        [request(spec("login-user"), Goal.HARDER)],
        rewriter=GuiRewriter(),
        env=env,
        known_tasks=known,
        k=3,
        iteration=1,
    )
    assert frame["valid"].to_list() == [False] and frame["chosen"].to_list() == [False]
    assert frame["invalid_reason"][0] == "already the family's hardest task without hints"
