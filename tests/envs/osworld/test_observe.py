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
    actions = observe.candidate_actions(els, instruction="Create it.", strings=strings, max_clicks=12)
    assert actions == [
        'click [1] menu "File"', 'click [2] terminal "Terminal"',
        'type "notes.txt"', 'type "notes.txt" and press Enter', 'type "touch \'a b\'"',
        'type "touch \'a b\'" and press Enter', "press enter", "press escape", "press ctrl+s", "press ctrl+a", "press ctrl+l",
        "press ctrl+d", "press ctrl+alt+t", "WAIT", "DONE", "FAIL",
    ]  # fmt: skip
    assert (
        observe.candidate_actions(els, instruction="", strings=[], max_clicks=1)[0] == 'click [1] menu "File"'
    )
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


def el(index: int, role: str, name: str, *, beside: bool = False) -> observe.Element:
    return observe.Element(index, role, name, "", 10 * index, 0, 10, 10, False, beside_document=beside)


def test_clicks_rank_shared_words_then_the_page_before_the_browser_frame_then_tree_order() -> None:
    # A browser: toolbar buttons beside the page (0-2), the page's sidebar (3-4) and its controls (5-6).
    els = [
        el(0, "push-button", "Back", beside=True), el(1, "push-button", "You", beside=True),
        el(2, "entry", "Address and search bar", beside=True), el(3, "menu-item", "You and Google"),
        el(4, "menu-item", "Search engine"), el(5, "push-button", "More actions for Microsoft Bing"),
        el(6, "table-cell", "Microsoft Bing search engine"),
    ]  # fmt: skip
    text = "Can you make Bing the main search engine?"
    # Task words: make, bing, main, search, engine ("can", "you", "the" are stop words).
    assert observe.task_words(text) == {"make", "bing", "main", "search", "engine"}
    ranked = observe.click_candidates(els, task_text=text, max_clicks=5)
    # 6 shares bing+search+engine (3); 4 shares search+engine (2); 5 and 2 share one each, the page's 5 first;
    # then the rest (none shared): the page's 3 before the toolbar's 0 and 1.
    assert [e.index for e in ranked] == [6, 4, 5, 2, 3]
    assert [e.index for e in observe.click_candidates(els, task_text="", max_clicks=9)] == [
        3,
        4,
        5,
        6,
        0,
        1,
        2,
    ]


def test_the_window_frame_around_a_document_and_scrolling_the_page() -> None:
    tree = (
        f'<desktop-frame xmlns:st="{ST}" xmlns:cp="{CP}"><application name="Chromium">'
        '<frame name="Settings" st:showing="true" cp:screencoord="(10, 20)" cp:size="(1000, 700)">'
        '<push-button name="Back" st:showing="true" cp:screencoord="(12, 60)" cp:size="(30, 30)"/>'
        '<document-web name="Settings" st:showing="true" cp:screencoord="(10, 100)" cp:size="(1000, 600)">'
        '<push-button name="Save" st:showing="true" cp:screencoord="(20, 120)" cp:size="(40, 20)"/>'
        "</document-web></frame>"
        '<frame name="Menu" st:showing="true" cp:screencoord="(50, 50)" cp:size="(100, 40)">'
        '<menu-item name="Make default" st:showing="true" cp:screencoord="(50, 50)" cp:size="(100, 20)"/>'
        "</frame></application></desktop-frame>"
    )
    els = observe.parse_tree(tree)
    # The toolbar's Back (and the window's frame) are beside the page; the page, its button and a popup
    # window without a document are not.
    assert [(e.name, e.beside_document) for e in els] == [
        ("Settings", True), ("Back", True), ("Settings", False), ("Save", False), ("Menu", False),
        ("Make default", False),
    ]  # fmt: skip
    actions = observe.candidate_actions(els, instruction="", strings=[], max_clicks=12)
    assert actions[:3] == [
        'click [3] push-button "Save"',
        'click [5] menu-item "Make default"',
        'click [1] push-button "Back"',
    ]
    assert actions[-5:-3] == [
        'scroll down [2] document-web "Settings"',
        'scroll up [2] document-web "Settings"',
    ]
    # The wheel over the page's centre: (10 + 500, 100 + 300).
    assert observe.compile_action(actions[-5], els) == "pyautogui.scroll(-5, x=510, y=400)"
    assert observe.compile_action(actions[-4], els) == "pyautogui.scroll(5, x=510, y=400)"
    assert observe.scroll_actions(observe.parse_tree(TREE)) == []  # a terminal: no page to scroll
