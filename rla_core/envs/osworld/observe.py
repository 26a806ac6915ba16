"""What a text policy sees of a desktop, and how its numbered choice becomes pyautogui code.

OSWorld's own text agents read the accessibility tree *linearised*: one line per visible element with its
role, name, text, position and size, cut to a token budget. We do the same (:func:`linearise`) with the
elements numbered, so that the tiny CPU policy can choose among **candidate actions derived from the
tree** (:func:`candidate_actions`), in the numbered-choice shape of the other settings:

* ``click [k] <role> "<name>"`` — a left click at the centre of element k;
* ``type "<text>"`` and ``type "<text>" and press Enter`` — typing into the focused element, for every
  quoted or back-ticked string of the instruction, then every string the task supplies for typing (its
  optional ``typable`` list: most official ``os`` tasks need a command that is not in the instruction) — the
  only texts a numbered-choice policy can type;
* ``press <keys>`` for a few hotkeys (:data:`HOTKEYS`), among them the desktop's terminal shortcut
  (:data:`TERMINAL_HOTKEY`, bound by the desktop like GNOME's Ctrl+Alt+T);
* ``WAIT``, ``DONE``, ``FAIL`` — OSWorld's special actions (``DONE`` ends the episode, ``FAIL`` declares it
  infeasible).

:func:`compile_action` turns a candidate into the pyautogui code ``DesktopEnv.step`` runs (or the special
action string unchanged). Tokens are counted by :func:`count_tokens` (words and punctuation marks): the
environment does not know the policy's tokenizer, and this count is within ~1.5x of a BPE count, so a
budget in these tokens bounds the prompt for any of them.

Example:
    >>> els = parse_tree('<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state" '
    ...     'xmlns:cp="https://accessibility.ubuntu.example.org/ns/component"><push-button name="OK" '
    ...     'st:showing="true" cp:screencoord="(10, 20)" cp:size="(40, 20)"/></desktop-frame>')
    >>> compile_action('click [0] push-button "OK"', els)
    'pyautogui.click(30, 30)'
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from rla_core.envs.desktop.parity import GLOBAL_SHORTCUTS
from rla_core.errors import EnvironmentSpecError

NS_STATE = "https://accessibility.ubuntu.example.org/ns/state"
NS_COMPONENT = "https://accessibility.ubuntu.example.org/ns/component"
SPECIAL_ACTIONS = ("WAIT", "DONE", "FAIL")
# The global shortcut that opens a terminal (GNOME's Ctrl+Alt+T; the official os tasks start from it).
TERMINAL_HOTKEY: tuple[str, ...] = tuple(
    next(combo for combo, command in GLOBAL_SHORTCUTS.items() if command == "gnome-terminal").split("+")
)
# enter/escape/save, the browser's two used by the chrome tasks (focus the address bar, bookmark the page),
# and the terminal shortcut.
HOTKEYS: tuple[tuple[str, ...], ...] = (
    ("enter",), ("escape",), ("ctrl", "s"), ("ctrl", "l"), ("ctrl", "d"), TERMINAL_HOTKEY,
)  # fmt: skip
# Roles a click on makes sense for (the rest are containers, labels of others, scroll bars …).
CLICKABLE = frozenset(
    {
        "push-button", "toggle-button", "check-box", "radio-button", "menu", "menu-item", "check-menu-item",
        "radio-menu-item", "page-tab", "link", "combo-box", "entry", "text", "terminal", "list-item",
        "table-cell", "tree-item", "icon", "spin-button", "password-text", "document-text", "paragraph",
    }
)  # fmt: skip
MAX_TEXT_CHARS = 200  # per element; long texts (a terminal's scroll-back) keep their end, where new output is
MAX_STRINGS = 6  # instruction strings offered for typing
_TOKEN = re.compile(r"\w+|[^\w\s]")
_QUOTED = re.compile(r"`([^`]+)`|\"([^\"]+)\"|(?<!\w)'([^']+)'(?!\w)")


@dataclass(frozen=True)
class Element:
    """One visible element of the tree: its number in the observation, role, name, text and box."""

    index: int
    role: str
    name: str
    text: str
    x: int
    y: int
    w: int
    h: int
    focused: bool

    @property
    def centre(self) -> tuple[int, int]:
        return self.x + self.w // 2, self.y + self.h // 2


def _pair(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    numbers = re.findall(r"-?\d+", value)
    return (int(numbers[0]), int(numbers[1])) if len(numbers) == 2 else None


def parse_tree(xml: str) -> list[Element]:
    """The visible elements (showing, on screen, with a name or text) of OSWorld-format XML, in document order."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise EnvironmentSpecError(f"the desktop's accessibility tree is not XML ({exc})") from None
    out: list[Element] = []
    for node in root.iter():
        if node is root or node.get(f"{{{NS_STATE}}}showing") != "true":
            continue
        pos, size = (
            _pair(node.get(f"{{{NS_COMPONENT}}}screencoord")),
            _pair(node.get(f"{{{NS_COMPONENT}}}size")),
        )
        if pos is None or size is None or pos[0] < 0 or pos[1] < 0 or size[0] <= 0 or size[1] <= 0:
            continue
        name, text = (node.get("name") or "").strip(), (node.text or "").strip()
        if not name and not text:
            continue
        out.append(
            Element(
                index=len(out), role=str(node.tag), name=name, text=text, x=pos[0], y=pos[1], w=size[0],
                h=size[1], focused=node.get(f"{{{NS_STATE}}}focused") == "true",
            )
        )  # fmt: skip
    return out


def count_tokens(text: str) -> int:
    """Words and punctuation marks of ``text`` (the observation's budget unit; see the module docstring)."""
    return len(_TOKEN.findall(text))


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_TEXT_CHARS else "…" + flat[-MAX_TEXT_CHARS:]


def element_line(el: Element) -> str:
    """One element as the policy reads it."""
    parts = [f"[{el.index}] {el.role}"]
    if el.name:
        parts.append(json.dumps(el.name, ensure_ascii=False))
    if el.text and el.text != el.name:
        parts.append("text=" + json.dumps(_short(el.text), ensure_ascii=False))
    if el.focused:
        parts.append("(focused)")
    parts.append(f"at ({el.x}, {el.y}) size {el.w}x{el.h}")
    return " ".join(parts)


def linearise(elements: list[Element], *, max_tokens: int) -> str:
    """The elements one per line, cut to ``max_tokens`` (:func:`count_tokens`) with a note of how many were cut."""
    lines = ["Screen elements (number, role, name, text, position, size):"]
    used = count_tokens(lines[0])
    for i, el in enumerate(elements):
        line = element_line(el)
        cost = count_tokens(line)
        if used + cost > max_tokens:
            lines.append(f"[{len(elements) - i} more elements not shown]")
            break
        lines.append(line)
        used += cost
    if not elements:
        lines.append("(no visible element)")
    return "\n".join(lines)


def instruction_strings(instruction: str) -> list[str]:
    """The back-ticked and quoted strings of an instruction (hints included), in order, without repeats."""
    out: list[str] = []
    for match in _QUOTED.finditer(instruction):
        text = next(g for g in match.groups() if g is not None).strip()
        if text and text not in out:
            out.append(text)
    return out[:MAX_STRINGS]


def typed_strings(actions: list[str]) -> list[str]:
    """The texts the ``type`` actions of a scripted solution type, in order, without repeats (a task's
    ``typable`` list when its solution is all it supplies)."""
    out: list[str] = []
    for action in actions:
        if action.startswith("type ") and (text := _typed_text(action)[0]) not in out:
            out.append(text)
    return out


def click_action(el: Element) -> str:
    return f"click [{el.index}] {el.role} " + json.dumps(el.name or _short(el.text)[:40], ensure_ascii=False)


def type_action(text: str, *, enter: bool) -> str:
    return "type " + json.dumps(text, ensure_ascii=False) + (" and press Enter" if enter else "")


def hotkey_action(keys: tuple[str, ...]) -> str:
    return "press " + "+".join(keys)


def candidate_actions(elements: list[Element], *, strings: list[str], max_clicks: int) -> list[str]:
    """The numbered choices of one step: clicks on up to ``max_clicks`` clickable elements, typing of each
    instruction string (with and without Enter), :data:`HOTKEYS`, then WAIT, DONE, FAIL."""
    clicks = [click_action(el) for el in elements if el.role in CLICKABLE][:max_clicks]
    typing = [type_action(s, enter=enter) for s in strings for enter in (False, True)]
    return [*clicks, *typing, *(hotkey_action(k) for k in HOTKEYS), *SPECIAL_ACTIONS]


def _typed_text(action: str) -> tuple[str, bool]:
    """(text, whether Enter follows) of a ``type`` action; EnvironmentSpecError if it is malformed."""
    try:
        text, end = json.JSONDecoder().raw_decode(action, 5)
    except json.JSONDecodeError:
        raise EnvironmentSpecError(f"action {action!r}: the text to type is not a JSON string") from None
    rest = action[end:]
    if not isinstance(text, str) or rest not in ("", " and press Enter"):
        raise EnvironmentSpecError(f"action {action!r} is not 'type \"TEXT\"' [and press Enter]")
    return text, bool(rest)


def compile_action(action: str, elements: list[Element]) -> str:
    """pyautogui code for a candidate action (special actions unchanged); EnvironmentSpecError if not one."""
    if action in SPECIAL_ACTIONS:
        return action
    click = re.match(r"click \[(\d+)\] ", action)
    if click:
        k = int(click.group(1))
        if k >= len(elements):
            raise EnvironmentSpecError(
                f"action {action!r} names element {k}, but the screen has {len(elements)}"
            )
        x, y = elements[k].centre
        return f"pyautogui.click({x}, {y})"
    if action.startswith("type "):
        text, enter = _typed_text(action)
        code = f"pyautogui.typewrite({text!r}, interval=0.01)"
        return code + ("; pyautogui.press('enter')" if enter else "")
    if action.startswith("press "):
        keys = tuple(action[len("press ") :].split("+"))
        if keys in HOTKEYS:
            return f"pyautogui.hotkey({', '.join(repr(k) for k in keys)})"
    raise EnvironmentSpecError(f"{action!r} is not a candidate action (click, type, press, WAIT, DONE, FAIL)")
