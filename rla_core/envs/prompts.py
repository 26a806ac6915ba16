"""Prompt templates of the text-game setting, versioned in one place (spec §5).

Templates live in ``rla_core/envs/templates/*.txt`` (``string.Template`` syntax, so the literal
``\\boxed{}`` braces need no escaping) and are loaded through ``importlib.resources``. Their combined
:func:`template_hash` is part of every stage cache key that renders them: editing a template re-runs
rollouts, judging and rewriting.

Prompts are short on purpose (tiny CPU models): the policy prompt shows the task, the last
``history_turns`` (observation, action) pairs with observations cut to ``history_obs_chars``, the
current observation, and the 0-based numbered admissible actions.

Example:
    >>> p = render_policy_prompt(instruction="Open the box.", history=[], observation="A box.",
    ...                          actions=["look", "open box"], history_turns=2)
    >>> "1: open box" in p
    True
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from string import Template
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rla_core.envs.base import Episode

TEMPLATE_VERSION = 1
# Files this module reads rather than imports: part of the code version of every stage that uses it.
CODE_RESOURCES = ("templates/*.txt",)
# The templates in every tiny model's tokenizer corpus (their words are tokens in every setting) ...
SHARED_TEMPLATES: tuple[str, ...] = ("policy", "judge", "failure_summary", "rewrite", "gui_judge")
# ... and all of them: a setting's own prompt (OSWorld's environment model) enters only that setting's corpus,
# so adding one never changes another setting's tokenizer, hence its tiny models.
TEMPLATE_NAMES: tuple[str, ...] = (*SHARED_TEMPLATES, "osworld_rewrite")


@cache
def load_template(name: str) -> Template:
    """The template ``name`` (one of :data:`TEMPLATE_NAMES`) from the packaged templates folder."""
    if name not in TEMPLATE_NAMES:
        raise KeyError(f"unknown template '{name}'; known templates: {', '.join(TEMPLATE_NAMES)}")
    text = resources.files("rla_core.envs").joinpath("templates", f"{name}.txt").read_text(encoding="utf-8")
    return Template(text)


def template_texts(names: Sequence[str] = TEMPLATE_NAMES) -> dict[str, str]:
    """The raw text of the templates ``names`` (default: all) by name (for hashing and the tokenizer corpus)."""
    return {name: load_template(name).template for name in names}


def template_hash() -> str:
    """sha256 of the template version and every template's text: part of stage cache keys."""
    payload = json.dumps({"version": TEMPLATE_VERSION, "templates": template_texts()}, sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars].rsplit(" ", 1)[0] + " ..."


def number_actions(actions: Sequence[str]) -> str:
    """Actions as ``i: action`` lines, 0-based (the index the policy puts in ``\\boxed{}``)."""
    return "\n".join(f"{i}: {a}" for i, a in enumerate(actions))


def render_policy_prompt(
    *,
    instruction: str,
    history: Sequence[tuple[str, str]],
    observation: str,
    actions: Sequence[str],
    history_turns: int,
    history_obs_chars: int = 120,
) -> str:
    """The policy prompt of one step (spec §5 AlfWorld policy).

    ``history`` holds the earlier (observation, action taken) pairs, oldest first; only the last
    ``history_turns`` are shown, each observation cut to ``history_obs_chars`` characters.
    """
    shown = list(history)[-history_turns:] if history_turns > 0 else []
    lines = "".join(
        f"observation: {_cut(obs, history_obs_chars)}\nyou took action: {act}\n" for obs, act in shown
    )
    return load_template("policy").substitute(
        instruction=instruction, history=lines, observation=observation, actions=number_actions(actions)
    )


def render_conversation(
    *, system: str | None, instruction: str, history: Sequence[tuple[str, str]], observation: str
) -> str:
    """A free-form episode's prompt: its conversation as given, each turn on its own labelled block.

    The system prompt (when the plug-in gives one), the first user turn (the instruction and the first
    observation), then each earlier answer and the observation that followed it, and the empty assistant
    turn the policy completes. Every turn is shown (a conversation is the environment's state).

    Example:
        >>> print(render_conversation(system="Be brief.", instruction="Add.", history=[("2+2?", "4")],
        ...                           observation="Now 3+3?"))
        Be brief.
        <BLANKLINE>
        User: Add.
        2+2?
        Assistant: 4
        User: Now 3+3?
        Assistant:
    """
    observations = [obs for obs, _answer in history] + [observation]
    answers = [answer for _obs, answer in history]
    lines = [f"{system}\n"] if system else []
    lines.append(f"User: {instruction}\n{observations[0]}")
    for answer, obs in zip(answers, observations[1:], strict=True):
        lines += [f"Assistant: {answer}", f"User: {obs}"]
    lines.append("Assistant:")
    return "\n".join(lines)


def turn_prompt(episode: Episode, history: Sequence[tuple[str, str]], *, history_turns: int) -> str:
    """The policy's prompt for ``episode``'s next turn (rollouts and demonstrations alike): its conversation
    when the turn is free-form (:func:`render_conversation`), else its numbered actions
    (:func:`render_policy_prompt`, the last ``history_turns`` of ``history``)."""
    if episode.free_form:
        return render_conversation(
            system=episode.system_prompt, instruction=episode.instruction, history=history,
            observation=episode.observation,
        )  # fmt: skip
    return render_policy_prompt(
        instruction=episode.instruction, history=history, observation=episode.observation,
        actions=episode.admissible_actions, history_turns=history_turns,
    )  # fmt: skip


def _action_block(prompt: str) -> tuple[int, int]:
    """Start and end of a rendered policy prompt's numbered list, from the policy template's own text."""
    before, after = load_template("policy").template.split("${actions}")
    head = before[before.rstrip("\n").rfind("\n") + 1 :]  # "Actions:\n"
    start = prompt.rfind(head)
    end = prompt.find(after, start) if start >= 0 else -1
    if start < 0 or end < 0:
        raise ValueError(
            f"not a policy prompt (no numbered action list between {head!r} and {after[:20]!r}): {prompt[:80]!r}"
        )
    return start + len(head), end


def listed_actions(prompt: str) -> list[str]:
    """The actions of a rendered policy prompt's numbered list, in order (inverse of :func:`number_actions`)."""
    start, end = _action_block(prompt)
    return [line.split(": ", 1)[1] for line in prompt[start:end].splitlines()]


def replace_action_list(prompt: str, actions: Sequence[str]) -> str:
    """``prompt`` (a rendered policy prompt) with its numbered action list replaced by ``actions``.

    The list's boundaries come from the policy template itself: the line before ``${actions}`` and the
    text after it. Raises ValueError when ``prompt`` was not rendered from that template.

    Example:
        >>> p = render_policy_prompt(instruction="t", history=[], observation="o", actions=["a", "b"],
        ...                          history_turns=0)
        >>> "0: b" in replace_action_list(p, ["b"])
        True
    """
    start, end = _action_block(prompt)
    return prompt[:start] + number_actions(actions) + prompt[end:]


def render_judge_prompt(
    *, prompt: str, response: str, next_observation: str, template: str | Template = "judge"
) -> str:
    """The judge prompt for one step: the agent's prompt, its response and the next observation (spec §5).

    ``template`` is ``judge`` (text games, AlfWorld-style), ``gui_judge`` (GUI, OSWorld-style), or an
    environment plug-in's own :class:`string.Template` (docs/environments.md).
    """
    chosen = template if isinstance(template, Template) else load_template(template)
    return chosen.substitute(prompt=prompt, response=response, next_observation=next_observation)


def render_failure_summary_prompt(
    *,
    instruction: str,
    trajectory: Sequence[tuple[str, str]],
    high_risk_steps: Sequence[int],
    max_steps: int,
) -> str:
    """The environment model's failure-summary prompt for one failed rollout (spec §3.2, §5).

    ``trajectory`` holds (action, next observation) per step; steps are numbered from 0 like the
    ``step`` column, and ``high_risk_steps`` are those the judge scored -1 in all m judgments.
    """
    high_risk = f"High-risk steps (always -1): {list(high_risk_steps)}\n" if high_risk_steps else ""
    lines = "\n".join(f"{i}. action: {a} -> {_cut(o, 120)}" for i, (a, o) in enumerate(trajectory))
    return load_template("failure_summary").substitute(
        max_steps=max_steps, instruction=instruction, high_risk=high_risk, trajectory=lines
    )


def render_rewrite_prompt(
    *,
    root_spec: Mapping[str, Any],
    current_spec: Mapping[str, Any],
    prev_acc: float,
    feedback: Sequence[str],
    goal: str,
    bounds: Mapping[str, tuple[int, int]],
    attempt: int,
    attempts: int,
) -> str:
    """The LLM rewrite prompt, anchored to the ROOT task spec (spec §3.2, §5 env rewrite prompts)."""
    return load_template("rewrite").substitute(
        root_spec=json.dumps(dict(root_spec), sort_keys=True),
        current_spec=json.dumps(dict(current_spec), sort_keys=True),
        prev_acc=f"{prev_acc:.2f}",
        feedback=json.dumps(list(feedback)) if feedback else "none",
        goal_word=goal.upper(),
        bounds=", ".join(f"{k} {lo}..{hi}" for k, (lo, hi) in bounds.items()),
        attempt=attempt,
        attempts=attempts,
    )


def policy_demo_response(action: str, index: int) -> str:
    """The warm-start response for choosing ``action`` at ``index``: one short reason, then the box."""
    return f"I should {action}. \\boxed{{{index}}}"


def judge_demo_response(action: str, *, good: bool) -> str:
    """The warm-start judge response for a step whose action is (not) an expert action."""
    verdict = "moves the task forward" if good else "does not move the task forward"
    score = 1 if good else -1
    return f"The action {action} {verdict}. \\boxed{{{score}}}"
