"""Scripted solvers: the expert next action of a MiniWoB++ task from the current page state.

A solver reads the instruction's fields (``miniwob.fields``), the current elements and the actions
already played, and returns the next candidate action that wins (or None when it cannot tell). It
is state-based, so it also answers after the agent deviated: it is the judge's ground truth for step
accuracy (spec §7 "Process Acc") and, played from the start, the task's demonstration (warm start,
rewrite validation "solvable by a scripted solver", spec §3.3).

Example:
    >>> from rla_core.envs.miniwob.dom import Element
    >>> el = Element(ref=4, tag="button", text="ONE", value=None, left=0, top=0, classes="")
    >>> next_action("click-test-2", fields=[("target", "ONE")], elements=[el], history=[])
    'click ref=4 (button "ONE")'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rla_core.envs.miniwob.dom import Element, click_action, type_action

Solver = Callable[[dict[str, str], Sequence[Element], Sequence[str]], str | None]


def _by_text(elements: Sequence[Element], text: str, *, tags: tuple[str, ...] = ()) -> Element | None:
    for el in elements:
        if el.text == text and (not tags or el.tag.startswith(tags)):
            return el
    return None


def _submit(elements: Sequence[Element], label: str = "submit") -> str | None:
    for el in elements:
        if el.tag == "button" and el.text.lower() == label:
            return click_action(el)
    return None


def _click_test(f: dict[str, str], els: Sequence[Element], hist: Sequence[str]) -> str | None:
    buttons = [el for el in els if el.tag == "button"]
    return click_action(buttons[0]) if buttons else None


def _click_target(tags: tuple[str, ...]) -> Solver:
    def solve(f: dict[str, str], els: Sequence[Element], hist: Sequence[str]) -> str | None:
        el = _by_text(els, f.get("target", ""), tags=tags)
        return click_action(el) if el is not None else None

    return solve


def _click_tab(f: dict[str, str], els: Sequence[Element], hist: Sequence[str]) -> str | None:
    el = _by_text(els, f"Tab #{f.get('target', '')}", tags=("a",))
    return click_action(el) if el is not None else None


def _click_button_sequence(f: dict[str, str], els: Sequence[Element], hist: Sequence[str]) -> str | None:
    one, two = _by_text(els, "ONE", tags=("button",)), _by_text(els, "TWO", tags=("button",))
    if one is None or two is None:
        return None
    return click_action(two) if click_action(one) in hist else click_action(one)


def _select(kind: str) -> Solver:
    """click-option (radios) and click-checkboxes: set exactly the targets, then Submit."""

    def solve(f: dict[str, str], els: Sequence[Element], hist: Sequence[str]) -> str | None:
        targets = {v for k, v in f.items() if k.startswith("target")}
        for el in els:
            if el.tag == kind and bool(el.value) != (el.text in targets):
                return click_action(el)
        return _submit(els)

    return solve


def _focus(index: int | None) -> Solver:
    def solve(f: dict[str, str], els: Sequence[Element], hist: Sequence[str]) -> str | None:
        inputs = [el for el in els if el.is_text_input]
        i = index if index is not None else int(f.get("target", "1")) - 1
        return click_action(inputs[i]) if 0 <= i < len(inputs) else None

    return solve


def _fill(pairs: Callable[[dict[str, str], list[Element]], list[tuple[Element, str]]], button: str) -> Solver:
    """Type each (input, text) pair whose value differs, then click the button."""

    def solve(f: dict[str, str], els: Sequence[Element], hist: Sequence[str]) -> str | None:
        inputs = [el for el in els if el.is_text_input]
        todo = pairs(f, inputs)
        if not todo:
            return None
        for el, text in todo:
            if el.value != text:
                return type_action(el, text)
        return _submit(els, button)

    return solve


def _enter_text(f: dict[str, str], inputs: list[Element]) -> list[tuple[Element, str]]:
    return [(inputs[0], f["target"])] if inputs and "target" in f else []


def _enter_password(f: dict[str, str], inputs: list[Element]) -> list[tuple[Element, str]]:
    return [(el, f["target"]) for el in inputs[:2]] if len(inputs) >= 2 and "target" in f else []


def _login(f: dict[str, str], inputs: list[Element]) -> list[tuple[Element, str]]:
    if len(inputs) < 2 or "username" not in f or "password" not in f:
        return []
    return [(inputs[0], f["username"]), (inputs[1], f["password"])]


SOLVERS: dict[str, Solver] = {
    "click-test": _click_test,
    "click-test-2": _click_target(("button",)),
    "click-button": _click_target(("button",)),
    "click-button-sequence": _click_button_sequence,
    "click-link": _click_target(("span", "a")),
    "click-tab": _click_tab,
    "click-option": _select("input_radio"),
    "click-checkboxes": _select("input_checkbox"),
    "focus-text": _focus(0),
    "focus-text-2": _focus(None),
    "enter-text": _fill(_enter_text, "submit"),
    "enter-password": _fill(_enter_password, "submit"),
    "login-user": _fill(_login, "login"),
}


def has_solver(task: str) -> bool:
    """Whether a scripted solver exists for ``task``."""
    return task in SOLVERS


def next_action(
    task: str, *, fields: Sequence[tuple[str, str]], elements: Sequence[Element], history: Sequence[str]
) -> str | None:
    """The solver's next action for ``task`` (None: no solver, or the page does not match it)."""
    solver = SOLVERS.get(task)
    if solver is None:
        return None
    return solver(dict(fields), elements, history)
