"""What a local desktop does to behave like OSWorld's Ubuntu image, declared once (docs/osworld.md, desktop parity).

The desktop's window-manager configuration (:func:`rla_core.envs.desktop.desktop.jwmrc`) is written from these
declarations, and the availability check (:mod:`rla_core.envs.desktop.availability`) reads them: a task that
presses a global shortcut the desktop does not bind is unavailable, with that reason, instead of scoring 0
whatever the agent does.

``GLOBAL_SHORTCUTS`` maps a pyautogui key combination (lower-case key names joined by ``+``, in the order
a task presses them, e.g. ``"ctrl+alt+t"``) to the shell command the desktop runs for it: the GNOME
shortcuts the official tasks press in their set-up or their evaluator's post-config — Ctrl+Alt+T opens a
terminal (12 tasks, one of them in its evaluator), Alt+F10 toggles the active window's maximisation (8
Chrome set-ups). No instruction names another global shortcut.

``NOOP_PASSES`` names the official tasks (``"<domain>/<id>"``) that a local desktop scores > 0 with no
action although it matches the image where their evaluator looks, and why: a policy is rewarded there for
nothing (``benchmarks/osworld_noop_audit.py`` reports every other no-op pass as unexplained).
"""

from __future__ import annotations

GLOBAL_SHORTCUTS: dict[str, str] = {
    "ctrl+alt+t": "gnome-terminal",
    "alt+f10": "wmctrl -r :ACTIVE: -b toggle,maximized_vert,maximized_horz",
}
NOOP_PASSES: dict[str, str] = {
    "chrome/99146c54-4f37-4ab8-9327-5f3291665e1e": (
        "its getter (data_delete_automacally) only checks that profile.default_content_setting_values exists in "
        "Preferences; Chromium 156 writes that key on its first start (has_migrated_local_network_access), "
        "so no starting profile can make a fresh browser fail it"
    ),
}
