"""MiniWoB++ page state as text: interactive elements, candidate actions, and the action grammar.

A text-only policy sees the instruction and a compact numbered list of the interactive DOM elements
(``ref``, tag, text or label, value, position). It acts by choosing one of the concrete candidate
actions built from that list (shown as the runner's numbered admissible actions, spec §5):

* ``click ref=4 (button "Submit")`` — click the element with MiniWoB ref 4;
* ``type "Bob" into ref=5 (input_text)`` — focus ref 5, clear it, type the text with real keystrokes.
  The strings come from the task's field extractor (``miniwob.fields``) or, failing that, the quoted
  tokens of the instruction.

Example:
    >>> els = parse_dom({"tag": "BODY", "ref": 1, "left": 0, "top": 0, "width": 160, "height": 210,
    ...     "children": [{"tag": "BUTTON", "ref": 4, "text": "OK", "left": 5, "top": 60, "width": 40,
    ...     "height": 20, "children": []}]})
    >>> candidate_actions(els, strings=[])
    ['click ref=4 (button "OK")']
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Tags a user can act on; other leaves are listed only when they carry short text (links, tabs, labels).
_ACTIONABLE = ("button", "a", "input_", "textarea", "select", "option")
_TEXT_INPUTS = ("input_text", "input_password", "input_number", "input_email", "input_search", "textarea")
_TEXT_CHARS = 30
MAX_ELEMENTS = 14

_CLICK = re.compile(r"^click ref=(-?\d+)(?: \(.*\))?$")
_TYPE = re.compile(r'^type "(.*)" into ref=(-?\d+)(?: \(.*\))?$')


@dataclass(frozen=True)
class Element:
    """One visible leaf element of the task area."""

    ref: int
    tag: str  # lower case; inputs carry their type, e.g. "input_checkbox"
    text: str  # own text, or for checkboxes/radios the label text next to them
    value: str | bool | None
    left: int
    top: int
    classes: str

    @property
    def is_text_input(self) -> bool:
        """Whether typing into it makes sense."""
        return self.tag in _TEXT_INPUTS

    def describe(self) -> str:
        """Short description used in actions: ``button "Submit"``, ``input_checkbox "abc"``."""
        return f'{self.tag} "{_cut(self.text)}"' if self.text else self.tag

    def line(self) -> str:
        """One observation line: ref, tag, text, value, position."""
        value = ""
        if isinstance(self.value, bool):
            value = " [x]" if self.value else " [ ]"
        elif self.value is not None and self.is_text_input:
            value = f' value="{_cut(self.value)}"'
        return f"ref={self.ref} {self.describe()}{value} @({self.left},{self.top})"


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _TEXT_CHARS else text[: _TEXT_CHARS - 3] + "..."


def _leaves(node: dict[str, Any], out: list[dict[str, Any]]) -> None:
    children = node.get("children") or []
    if children and all(str(c["tag"]).lower() == "t" for c in children):
        # miniwob.dom's fix-up: a node whose children are all text pieces is one text leaf
        node = {**node, "text": " ".join(str(c.get("text", "")) for c in children), "children": []}
        children = []
    if not children:
        out.append(node)
    for child in children:
        _leaves(child, out)


def parse_dom(raw: dict[str, Any]) -> list[Element]:
    """The actionable visible leaves of ``core.getDOMInfo()``, in document order, at most MAX_ELEMENTS.

    Checkboxes and radios take the text of the next leaf as their label. Off-screen elements
    (negative position) and empty decorative leaves are dropped.
    """
    leaves: list[dict[str, Any]] = []
    _leaves(raw, leaves)
    out: list[Element] = []
    for i, leaf in enumerate(leaves):
        tag = str(leaf["tag"]).lower()
        text = str(leaf.get("text") or "").strip()
        left, top = int(leaf["left"]), int(leaf["top"])
        if tag == "t" or left < 0 or top < 0:
            continue
        actionable = tag.startswith(_ACTIONABLE) or tag in _TEXT_INPUTS
        if tag in ("input_checkbox", "input_radio") and i + 1 < len(leaves):
            text = str(leaves[i + 1].get("text") or "").strip()
        if not actionable and not text:
            continue
        if not actionable and len(text) > 2 * _TEXT_CHARS:
            continue  # paragraphs of filler text: noise for a small model
        classes = leaf.get("classes")
        out.append(
            Element(
                ref=int(leaf["ref"]),
                tag=tag,
                text=text,
                value=leaf.get("value"),
                left=left,
                top=top,
                classes=classes if isinstance(classes, str) else "",
            )
        )
    return out[:MAX_ELEMENTS]


def instruction_strings(instruction: str, fields: Sequence[tuple[str, str]]) -> list[str]:
    """Strings worth typing: the field values, else the quoted tokens of the instruction (deduped)."""
    values = [v for _, v in fields if v and v.lower() not in ("submit",)]
    if not values:
        values = re.findall(r'"([^"]+)"', instruction)
    seen: list[str] = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def click_action(el: Element) -> str:
    """The candidate action that clicks ``el``."""
    return f"click ref={el.ref} ({el.describe()})"


def type_action(el: Element, text: str) -> str:
    """The candidate action that types ``text`` into ``el``."""
    return f'type "{text}" into ref={el.ref} ({el.tag})'


def candidate_actions(elements: Sequence[Element], *, strings: Sequence[str]) -> list[str]:
    """Every click on an element, then every (string, text input) typing action."""
    actions = [click_action(el) for el in elements]
    for el in elements:
        if el.is_text_input:
            actions.extend(type_action(el, s) for s in strings)
    return actions


@dataclass(frozen=True)
class ParsedAction:
    """An action string decoded: kind ("click" / "type"), target ref, and text to type."""

    kind: str
    ref: int
    text: str | None = None


def parse_action(action: str) -> ParsedAction | None:
    """Decode a candidate action string; None when it is not in the grammar."""
    if m := _CLICK.match(action):
        return ParsedAction("click", int(m.group(1)))
    if m := _TYPE.match(action):
        return ParsedAction("type", int(m.group(2)), m.group(1))
    return None


def render_observation(elements: Sequence[Element]) -> str:
    """The observation text: one line per element (the instruction is shown separately)."""
    if not elements:
        return "The page shows no interactive element."
    return "Page elements:\n" + "\n".join(el.line() for el in elements)
