"""The policy's view of a desktop: the linearised tree under a token budget, candidates, pyautogui code."""

from __future__ import annotations

import pytest

from rla_core.envs.osworld import observe
from rla_core.envs.osworld.tasks import TYPABLE, OsworldTaskError, check_task, normalise
from rla_core.errors import EnvironmentSpecError

ST, CP = observe.NS_STATE, observe.NS_COMPONENT
TREE = (
    f'<desktop-frame xmlns:st="{ST}" xmlns:cp="{CP}"><application name="gnome-terminal-server">'
    '<frame name="Terminal" st:showing="true" cp:screencoord="(0, 0)" cp:size="(744, 490)">'
    '<menu name="File" st:showing="true" cp:screencoord="(4, 27)" cp:size="(39, 25)"/>'
    '<menu-item name="New Tab" st:visible="true"/>'  # not showing: left out
    '<page-tab name="" st:showing="true" cp:screencoord="(-1, -1)" cp:size="(-1, -1)"/>'  # off screen
    '<filler name="" st:showing="true" cp:screencoord="(4, 52)" cp:size="(736, 434)"/>'  # no name, no text
    '<terminal name="Terminal" st:showing="true" st:focused="true" cp:screencoord="(4, 52)" '
    'cp:size="(722, 434)">user@desktop:~$ ls\nDesktop  Documents</terminal>'
    "</frame></application></desktop-frame>"
)


def test_parse_keeps_showing_on_screen_named_elements_in_order() -> None:
    els = observe.parse_tree(TREE)
    assert [(e.index, e.role, e.name) for e in els] == [
        (0, "frame", "Terminal"),
        (1, "menu", "File"),
        (2, "terminal", "Terminal"),
    ]
    assert els[2].focused and els[2].centre == (4 + 361, 52 + 217)
    with pytest.raises(EnvironmentSpecError, match="not XML"):
        observe.parse_tree("<a>")


def test_linearise_cuts_to_the_token_budget_and_says_how_much_was_cut() -> None:
    els = observe.parse_tree(TREE)
    full = observe.linearise(els, max_tokens=10_000)
    assert full.splitlines()[1] == '[0] frame "Terminal" at (0, 0) size 744x490'
    assert full.splitlines()[3].startswith(
        '[2] terminal "Terminal" text="user@desktop:~$ ls Desktop Documents" (focused)'
    )
    header, first = full.splitlines()[:2]
    budget = observe.count_tokens(header) + observe.count_tokens(first)  # room for exactly one element
    cut = observe.linearise(els, max_tokens=budget).splitlines()
    assert cut == [header, first, "[2 more elements not shown]"]
    assert observe.count_tokens("ls -l ~/x") == 6  # ls, -, l, ~, /, x


def test_candidates_and_their_pyautogui_code() -> None:
    els = observe.parse_tree(TREE)
    strings = observe.instruction_strings(
        "Create 'notes.txt'. Hint: in the terminal's prompt, run `touch 'a b'`."
    )
    assert strings == ["notes.txt", "touch 'a b'"]
    actions = observe.candidate_actions(els, strings=strings, max_clicks=12)
    assert actions == [
        'click [1] menu "File"', 'click [2] terminal "Terminal"',
        'type "notes.txt"', 'type "notes.txt" and press Enter', 'type "touch \'a b\'"',
        'type "touch \'a b\'" and press Enter', "press enter", "press escape", "press ctrl+s", "press ctrl+l", "press ctrl+d", "press ctrl+alt+t", "WAIT", "DONE",
        "FAIL",
    ]  # fmt: skip
    assert observe.candidate_actions(els, strings=[], max_clicks=1)[0] == 'click [1] menu "File"'
    assert observe.compile_action('click [1] menu "File"', els) == "pyautogui.click(23, 39)"
    assert observe.compile_action(actions[5], els) == (
        "pyautogui.typewrite(\"touch 'a b'\", interval=0.01); pyautogui.press('enter')"
    )
    assert observe.compile_action("press ctrl+s", els) == "pyautogui.hotkey('ctrl', 's')"
    assert observe.compile_action("press ctrl+alt+t", els) == "pyautogui.hotkey('ctrl', 'alt', 't')"
    assert observe.compile_action("DONE", els) == "DONE"
    for bad in ('click [9] menu "x"', 'type "x" twice', "press alt+f4", "dance"):
        with pytest.raises(EnvironmentSpecError):
            observe.compile_action(bad, els)


def test_a_solution_supplies_the_strings_it_types() -> None:
    solution = [
        "press ctrl+alt+t",
        'type "gsettings set a b true" and press Enter',
        'type "ls"',
        'type "ls"',
        "DONE",
    ]
    assert observe.typed_strings(solution) == ["gsettings set a b true", "ls"]
    with pytest.raises(EnvironmentSpecError, match="is not a JSON string"):
        observe.typed_strings(["type gsettings"])
    plain = {"id": "t", "instruction": "List the files.", "evaluator": {"func": "infeasible"}}
    check_task(normalise({**plain, TYPABLE: ["ls -l"]}))
    for bad in ("ls", [""], [1]):
        with pytest.raises(OsworldTaskError, match="field typable"):
            check_task(normalise({**plain, TYPABLE: bad}))
