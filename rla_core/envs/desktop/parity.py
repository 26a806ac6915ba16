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

``LIBREOFFICE_SETTINGS`` are the LibreOffice user settings a desktop's home starts with (written as the
profile's ``registrymodifications.xcu`` when LibreOffice is installed): keyed by (configuration path,
property), as LibreOffice's own registry names them. The official LibreOffice tasks end by pressing Ctrl+S in
the application (an evaluator ``postconfig``) and read the saved ``.xlsx``/``.docx``/``.pptx``: with
LibreOffice's default, Ctrl+S on a non-ODF file asks "Use Word/Excel/PowerPoint format or ODF?" and saves
nothing, so every such task scored 0 whatever the agent did. The tip-of-the-day dialog takes the keyboard when
LibreOffice first starts (the set-up's file opens behind it). ``ooSetupLastVersion`` (the installed version,
added when the profile is written) stops the "running this version for the first time" bar above every sheet.

``VLC_SETTINGS`` are the VLC preferences a desktop's home starts with (``~/.config/vlc/vlcrc``), keyed by
(section, key) as vlcrc names them: no "privacy and network access" dialog over the player at its first start
(OSWorld's set-ups click the middle of the screen right after launching VLC, which that dialog covers), and the
HTTP interface on port 8080 with the password ``desktop_env``'s VLC getters send (``vlc_playing_info`` reads
``/requests/status.xml`` with the password ``password``; the desktop forwards 8080 to the host).

``NOOP_PASSES`` names the official tasks (``"<domain>/<id>"``) that a local desktop scores > 0 with no
action although it matches the image where their evaluator looks, and why: a policy is rewarded there for
nothing (``benchmarks/osworld_noop_audit.py`` reports every other no-op pass as unexplained).
"""

from __future__ import annotations

GLOBAL_SHORTCUTS: dict[str, str] = {
    "ctrl+alt+t": "gnome-terminal",
    "alt+f10": "wmctrl -r :ACTIVE: -b toggle,maximized_vert,maximized_horz",
}
LIBREOFFICE_SETTINGS: dict[tuple[str, str], str] = {
    ("/org.openoffice.Office.Common/Save/Document", "WarnAlienFormat"): "false",
    ("/org.openoffice.Office.Common/Misc", "ShowTipOfTheDay"): "false",
}
VLC_SETTINGS: dict[tuple[str, str], str] = {
    ("qt", "qt-privacy-ask"): "0",
    ("core", "extraintf"): "http",
    ("lua", "http-password"): "password",
}
NOOP_PASSES: dict[str, str] = {
    "chrome/99146c54-4f37-4ab8-9327-5f3291665e1e": (
        "its getter (data_delete_automacally) only checks that profile.default_content_setting_values exists in "
        "Preferences; Chromium 156 writes that key on its first start (has_migrated_local_network_access), "
        "so no starting profile can make a fresh browser fail it"
    ),
}
