"""What a local desktop does to behave like OSWorld's Ubuntu image, declared once.

The desktop's window-manager configuration is written from these declarations, and the availability check
(:mod:`rla_core.envs.desktop.availability`) reads them: a task that presses a global shortcut the desktop
does not bind is unavailable, with that reason, instead of scoring 0 whatever the agent does.

``GLOBAL_SHORTCUTS`` maps a pyautogui key combination (lower-case key names joined by ``+``, in the order
a task presses them, e.g. ``"ctrl+alt+t"``) to the shell command the desktop runs for it.
"""

from __future__ import annotations

GLOBAL_SHORTCUTS: dict[str, str] = {}
