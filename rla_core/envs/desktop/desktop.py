"""One isolated local desktop: Xvfb + D-Bus + AT-SPI + jwm + our protocol server, in a bubblewrap sandbox.

Why a sandbox and not a VM: OSWorld's tasks need an X desktop, a session bus and an HTTP server speaking its
protocol — not a kernel of their own. Each desktop therefore runs as

* an **unprivileged host user** (``rla-desktop``, created by ``scripts/setup.sh``; when not run as root, the
  current user), seen inside as ``user`` (uid 1000) with home ``/home/user``;
* in its own **bubblewrap** sandbox: user, pid, mount, IPC, UTS and **network** namespaces (only its own
  loopback: no route to the host, the internet, or another desktop), a private ``/tmp`` (hence a private
  X socket, display ``:0``), a private ``/run/user/1000`` (session bus ``/run/user/1000/bus``), the host's
  ``/usr`` and ``/etc`` read-only, and a home that is a fresh copy of a template;
* reachable from the host only through UNIX sockets in its channel directory, offered on the host's loopback
  by :class:`~rla_core.envs.desktop.channel.Forward` threads: the protocol server, and the in-sandbox ports
  9222 (browser debugging) and 8080 (VLC) — :attr:`Desktop.address` is ``desktop_env``'s
  ``ip:server:chromium:vnc:vlc`` form (no VNC: 0).

``google-chrome`` inside is a wrapper around Debian's Chromium (:data:`CHROME_WRAPPER`: OSWorld's profile path,
offline flags, ``--no-sandbox`` — the desktop is the sandbox — and debugging port 9222 unless one is given).
``sudo`` inside is a stub that fails with a message: tasks that need root (installing packages, systemd) are
unavailable, never run. Lifecycle is :class:`rla_core.procs.ProcessGroup`'s (pidfile, kill the group, reap
after SIGKILL of the owner); every process of a desktop lives in its pid namespace, so killing the group's
namespace init ends them all, including those that left the process group.

**Reset** (:meth:`Desktop.reset`) kills the desktop, replaces its home with a fresh copy of the template and
starts it again; the host ports stay the same. Template settings that match the OSWorld Ubuntu image where
tasks depend on them (GSettings through GLib's keyfile backend, ``~/.config/glib-2.0/settings/keyfile``):
``org.gnome.desktop.screensaver lock-enabled=false`` (Debian's default ``true`` would make the auto-lock task
``a4d98375`` score 1 with no actions), ``org.gnome.desktop.interface toolkit-accessibility=true`` and
``monospace-font-name='Monospace 9'`` (the image's terminal font, Ubuntu Mono 13 on a 1920x1080 screen, scaled
to our 1280x720 one: a terminal of 132x43 characters fits, as ``13584542`` needs; Debian's 11 pt gives 36
rows at most); the XDG folders ``Desktop Documents Downloads Music Pictures Videos`` exist. jwm runs our own configuration
(:func:`jwmrc`: no root menu, click-to-focus, the global shortcuts of
:data:`~rla_core.envs.desktop.parity.GLOBAL_SHORTCUTS`), not Debian's ``system.jwmrc``.

Example:
    >>> with Desktop.start() as d:  # doctest: +SKIP
    ...     d.url
    'http://127.0.0.1:...'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import re
import shutil
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from xml.sax.saxutils import escape

from rla_core import procs
from rla_core.envs.desktop.channel import Forward
from rla_core.envs.desktop.parity import GLOBAL_SHORTCUTS, LIBREOFFICE_SETTINGS, VLC_SETTINGS
from rla_core.errors import ProcessError
from rla_core.store.atomic import publish_dir

PIDFILE_KIND = "desktop"
SERVER = Path(__file__).with_name("server.py")
DESKTOP_PYTHON = "/usr/bin/python3"  # Debian's: python3-pil, python3-pyatspi, python3-xlib are its packages
NEEDED = ("Xvfb", "jwm", "bwrap", "dbus-daemon", "wmctrl", DESKTOP_PYTHON)
HOST_USER = "rla-desktop"
UID = 1000  # the user inside, like the OSWorld image's `user`
FORWARDED_PORTS = (9222, 8080)  # browser debugging, VLC HTTP: forwarded into the namespace
# pyautogui & co. for the desktop's python (not in Debian): `pip install --target` by scripts/setup.sh.
DESKTOP_SITE = Path(os.environ.get("RLA_DESKTOP_SITE", str(Path(sys.prefix) / "desktop-site")))
DEFAULT_STATE_ROOT = Path(os.environ.get("RLA_DESKTOP_STATE", "/tmp/rlanything-desktops"))
TEMPLATE_SETTINGS = """\
[org/gnome/desktop/screensaver]
lock-enabled=false

[org/gnome/desktop/interface]
toolkit-accessibility=true
monospace-font-name='Monospace 9'
"""
XDG_DIRS = ("Desktop", "Documents", "Downloads", "Music", "Pictures", "Videos")
LIBREOFFICE_BOOTSTRAP = Path(
    "/usr/lib/libreoffice/program/bootstraprc"
)  # Debian's; "ProductKey=LibreOffice 7.4"
LIBREOFFICE_PROFILE = Path(".config/libreoffice/4/user/registrymodifications.xcu")  # in the home


def libreoffice_registry() -> str | None:
    """The LibreOffice profile's ``registrymodifications.xcu`` of the template home (parity's
    ``LIBREOFFICE_SETTINGS`` and the installed version as ``ooSetupLastVersion``); None without LibreOffice."""
    try:
        bootstrap = LIBREOFFICE_BOOTSTRAP.read_text(encoding="utf-8")
    except OSError:
        return None
    found = re.search(r"^ProductKey=LibreOffice\s+(\S+)\s*$", bootstrap, re.M)
    settings = dict(LIBREOFFICE_SETTINGS)
    if found:
        settings[("/org.openoffice.Setup/Product", "ooSetupLastVersion")] = found.group(1)
    items = "".join(
        f'<item oor:path="{path}"><prop oor:name="{prop}" oor:op="fuse"><value>{value}</value></prop></item>\n'
        for (path, prop), value in settings.items()
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
        'xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
        f"{items}</oor:items>\n"
    )


def vlcrc() -> str:
    """The template home's ``~/.config/vlc/vlcrc``: parity's ``VLC_SETTINGS``, by section."""
    sections: dict[str, list[str]] = {}
    for (section, key), value in VLC_SETTINGS.items():
        sections.setdefault(section, []).append(f"{key}={value}\n")
    return "".join(f"[{section}]\n" + "".join(lines) + "\n" for section, lines in sections.items())


TEMPLATE_LIBREOFFICE = libreoffice_registry()
TEMPLATE_VLCRC = vlcrc()
VLCRC = Path(".config/vlc/vlcrc")  # in the home
# The template's folder name carries a digest of its content: a changed template is a new folder.
TEMPLATE_NAME = (
    "template-home-"
    + hashlib.sha256(
        (TEMPLATE_SETTINGS + " ".join(XDG_DIRS) + (TEMPLATE_LIBREOFFICE or "") + TEMPLATE_VLCRC).encode()
    ).hexdigest()[:10]
)
SUDO_STUB = """#!/bin/sh
echo "sudo: not available in an rlanything local desktop (no root inside the sandbox); tasks that need root are unavailable" >&2
exit 1
"""
# OSWorld's Chrome tasks run `google-chrome` (and `socat` to expose its debugging port as 9222); here it is
# Debian's Chromium behind this wrapper (in /opt/rla/bin, first on the sandbox's PATH). Its profile is where
# desktop_env's Chrome getters read it (~/.config/google-chrome/Default/{Preferences,Bookmarks,...}).
# --no-sandbox: Chromium's own sandbox (setuid helper or nested user namespaces) is not available inside
# bubblewrap; the whole desktop already runs unprivileged in its own user/pid/mount/net namespaces with a
# read-only root, so a renderer escaping Chromium's sandbox reaches only this desktop (which has no network
# and is thrown away on reset). Offline flags: no background networking, component updates, sync, first-run
# or default-browser prompts; --force-renderer-accessibility puts page content in the AT-SPI tree, as on the
# OSWorld image; --test-type drops the "unsupported command-line flag: --no-sandbox" info bar (it would sit in
# every observation). Without --remote-debugging-port, the port is 9222 (forwarded to the host). The server
# reports Chromium's AT-SPI application as "Google Chrome" (server.APP_NAMES).
# The browser process is named `chrome`, as Google Chrome's is on OSWorld's image: 12 official evaluators end
# it with `pkill chrome` (run inside the desktop's own pid namespace, so it reaches that desktop's browser
# only) before reading the profile (Chromium writes Preferences on exit, ~10 s after a change otherwise),
# and Debian's /usr/bin/chromium would exec it as `chromium`, which `pkill chrome` misses.
# Chromium names itself after the file /proc/self/exe resolves to (so that `killall` of a symlink's target
# works), so a link is not enough: the sandbox shows Chromium's directory as CHROME_DIR (links to its files)
# with the binary bound there as `chrome`, and the wrapper does what Debian's script does (its flags from
# /etc/chromium.d) and execs that.
CHROME = "/usr/bin/chromium"
CHROME_LIB = Path("/usr/lib/chromium")
CHROME_DIR = "/opt/rla/chromium"
CHROME_AS = f"{CHROME_DIR}/chrome"
CHROME_WRAPPER = f"""#!/bin/sh
# google-chrome in an rlanything local desktop: Debian's Chromium (rla_core/envs/desktop/desktop.py)
port=--remote-debugging-port=9222
for arg in "$@"; do
  case "$arg" in --remote-debugging-port=*) port= ;; esac
done
CHROMIUM_FLAGS=""
for file in /etc/chromium.d/*; do
  case "$file" in */README|*.dpkg*) ;; *) . "$file" ;; esac
done
export CHROME_WRAPPER=/opt/rla/bin/google-chrome CHROME_DESKTOP=chromium.desktop
exec {CHROME_AS} $CHROMIUM_FLAGS --no-sandbox --user-data-dir="$HOME/.config/google-chrome" \\
  --disable-background-networking --disable-component-update --disable-sync --no-first-run \\
  --no-default-browser-check --password-store=basic --disable-gpu --force-renderer-accessibility --test-type \\
  $port "$@"
"""
# Commands the sandbox provides that the host need not have under that name (for availability checks).
SANDBOX_COMMANDS = {"google-chrome": CHROME}
# Inside the sandbox: X server, session bus, window manager, then the server (it replaces the shell).
_LAUNCH = (
    'geometry="$1"; shift; Xvfb :0 -screen 0 "$geometry" -nolisten tcp >/tmp/xvfb.log 2>&1 & '
    "while [ ! -S /tmp/.X11-unix/X0 ]; do sleep 0.02; done; "
    'dbus-daemon --session --address="$DBUS_SESSION_BUS_ADDRESS" --nofork --nopidfile >/dev/null 2>&1 & '
    "while [ ! -S /run/user/1000/bus ]; do sleep 0.02; done; "
    "jwm -f /opt/rla/jwmrc >/dev/null 2>&1 & "
    'exec /usr/bin/python3 /opt/rla/server/server.py --socket /run/rla/server.sock "$@"'
)


# jwm's modifier letters and X key names for pyautogui's names (GLOBAL_SHORTCUTS' keys).
JWM_MASKS = {"ctrl": "C", "alt": "A", "shift": "S", "win": "4", "super": "4"}
# Our own jwm configuration, instead of Debian's system.jwmrc (whose root menu opens on a click on the empty
# desktop and grabs the keyboard; on GNOME that click does nothing): no root menu, no tray, one workspace,
# click-to-focus (GNOME's: with sloppy focus the pointer moving over a window would steal the keyboard), the
# window decorations' usual mouse actions, and GLOBAL_SHORTCUTS as key bindings.
JWMRC_HEAD = """<?xml version="1.0"?>
<JWM>
    <Desktops width="1" height="1"><Background type="solid">#2C001E</Background></Desktops>
    <FocusModel>click</FocusModel>
    <Mouse context="title" button="1">move</Mouse>
    <Mouse context="title" button="11">maximize</Mouse>
    <Mouse context="border" button="1">resize</Mouse>
    <Mouse context="close" button="-1">close</Mouse>
    <Mouse context="maximize" button="-1">maximize</Mouse>
    <Mouse context="minimize" button="-1">minimize</Mouse>
"""


def jwm_key(combo: str) -> str:
    """A jwm ``<Key>`` binding's attributes for a pyautogui combination (``"ctrl+alt+t"``)."""
    *mods, key = combo.split("+")
    unknown = [m for m in mods if m not in JWM_MASKS]
    if unknown or not key:
        raise ValueError(
            f"global shortcut {combo!r}: modifiers {unknown} are not among {sorted(JWM_MASKS)} (or no key); "
            "fix GLOBAL_SHORTCUTS in rla_core/envs/desktop/parity.py"
        )
    name = key.upper() if len(key) > 1 and key[0] == "f" and key[1:].isdigit() else key
    return f'mask="{"".join(JWM_MASKS[m] for m in mods)}" key="{name}"'


def jwmrc(shortcuts: dict[str, str] = GLOBAL_SHORTCUTS) -> str:
    """The desktop's jwm configuration (see :data:`JWMRC_HEAD`) with ``shortcuts`` bound to their commands."""
    keys = "".join(f"    <Key {jwm_key(k)}>exec:{escape(cmd)}</Key>\n" for k, cmd in shortcuts.items())
    return JWMRC_HEAD + keys + "</JWM>\n"


def missing_programs() -> list[str]:
    """The programs of :data:`NEEDED` this machine does not have on ``PATH``."""
    return [name for name in NEEDED if shutil.which(name) is None]


def missing_prerequisites() -> list[str]:
    """What this machine lacks to start a desktop, one line each: programs of :data:`NEEDED`, and (as root)
    the sandbox user :data:`HOST_USER` (the preflight's check, the one :meth:`Desktop.start` makes)."""
    problems = []
    missing = missing_programs()
    if missing:
        problems.append(
            f"the local desktops need {', '.join(missing)}, not found on PATH; install the Debian packages "
            "scripts/setup.sh lists (docs/osworld.md)"
        )
    try:
        _host_ids()
    except ProcessError as exc:
        problems.append(str(exc).strip().splitlines()[0])
    return problems


def _host_ids() -> tuple[int, int]:
    """(uid, gid) the sandbox runs as on the host: ``rla-desktop`` when we are root, else ourselves."""
    if os.getuid() != 0:
        return os.getuid(), os.getgid()
    try:
        entry = pwd.getpwnam(HOST_USER)
    except KeyError as exc:
        raise ProcessError(
            f"desktops run as the unprivileged user {HOST_USER!r}, which does not exist; create it with "
            f"`useradd --system --no-create-home --shell /usr/sbin/nologin {HOST_USER}` (scripts/setup.sh does)"
        ) from exc
    return entry.pw_uid, entry.pw_gid


def _check_traversable(root: Path, uid: int, gid: int) -> None:
    """bwrap runs as the sandbox user and must reach the state directory: every ancestor needs ``x`` for it."""
    for d in [root.resolve(), *root.resolve().parents]:
        st = d.stat()
        bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid == gid else 0o001
        if not st.st_mode & bit:
            raise ProcessError(
                f"the desktop state directory {root} is not reachable by the sandbox user (uid {uid}): "
                f"{d} has mode {oct(st.st_mode & 0o777)}; pick a state_root under /tmp (the default is "
                f"{DEFAULT_STATE_ROOT}) or `chmod o+x {d}`"
            )


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    if os.getuid() != 0:
        return
    os.chown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, gid)


def make_template(directory: Path) -> Path:
    """Write the home template (idempotent): XDG folders, the OSWorld-matching GSettings keyfile, VLC's
    preferences (:func:`vlcrc`) and, when LibreOffice is installed, its profile's settings
    (:func:`libreoffice_registry`)."""

    def write(tmp: Path) -> None:
        for name in XDG_DIRS:
            (tmp / name).mkdir(parents=True)
        settings = tmp / ".config" / "glib-2.0" / "settings"
        settings.mkdir(parents=True)
        (settings / "keyfile").write_text(TEMPLATE_SETTINGS)
        if TEMPLATE_LIBREOFFICE is not None:
            (tmp / LIBREOFFICE_PROFILE).parent.mkdir(parents=True)
            (tmp / LIBREOFFICE_PROFILE).write_text(TEMPLATE_LIBREOFFICE)
        (tmp / VLCRC).parent.mkdir(parents=True)
        (tmp / VLCRC).write_text(TEMPLATE_VLCRC)
        (tmp / ".rla-template").write_text("home template of rlanything local desktops\n")

    if not (directory / ".rla-template").exists():  # another desktop may publish it first: then theirs stays
        publish_dir(directory, write, marker=".rla-template")
    return directory


def reap_state(state_root: Path) -> list[Path]:
    """Remove the state directories (home, channel) of desktops whose owner process is gone."""
    removed: list[Path] = []
    if not state_root.is_dir():
        return removed
    for d in state_root.glob("desk-*"):
        try:
            owner = json.loads((d / "owner.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if procs.start_time(int(owner["pid"])) != owner["start"]:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def reap_stale_desktops(runtime_dir: Path, state_root: Path = DEFAULT_STATE_ROOT) -> None:
    """Kill the desktops of dead owners (their process groups) and remove their state directories."""
    procs.reap_stale(runtime_dir, kind=PIDFILE_KIND)
    reap_state(state_root)


def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def namespace_members(ns: str) -> list[int]:
    """Live processes in pid namespace ``ns`` (``pid:[inode]``)."""
    return [p["pid"] for p in procs.live_processes() if pid_namespace(p["pid"]) == ns]


class Desktop:
    """A running sandboxed desktop, its state directory and its host-side channel."""

    def __init__(self, *, state: Path, runtime_dir: Path, screen: tuple[int, int], timeout_s: float) -> None:
        self.state = state
        self.home = state / "home"
        self.channel = state / "chan"
        self.runtime_dir = runtime_dir
        self.screen = screen
        self.timeout_s = timeout_s
        self.group: procs.ProcessGroup | None = None
        self.pidns: str | None = None
        # (pid, start time) of its X server, found at launch: the in-desktop server outlives a dead X server
        # (it answers with errors and empty trees), so the desktop's health checks this process too.
        self.x_server: tuple[int, str] | None = None
        self.server = Forward(self.channel / "server.sock")
        self.ports = {p: Forward(self.channel / f"port-{p}.sock") for p in FORWARDED_PORTS}
        self.url = f"http://127.0.0.1:{self.server.port}"

    @property
    def address(self) -> str:
        """``desktop_env``'s ``ip:server_port:chromium_port:vnc_port:vlc_port`` (no VNC: 0)."""
        return f"127.0.0.1:{self.server.port}:{self.ports[9222].port}:0:{self.ports[8080].port}"

    @classmethod
    def start(
        cls,
        *,
        runtime_dir: Path | None = None,
        state_root: Path | None = None,
        screen: tuple[int, int] = (1280, 720),
        timeout_s: float = 60.0,
    ) -> Desktop:
        """Start a desktop and wait until its server answers; :class:`ProcessError` naming what is missing."""
        missing = missing_programs()
        if missing:
            raise ProcessError(
                f"desktop needs {missing}; install the Debian packages listed in scripts/setup.sh "
                "(xvfb jwm bubblewrap dbus-x11 at-spi2-core python3-pyatspi python3-pil wmctrl ...)"
            )
        uid, gid = _host_ids()
        runtime = runtime_dir if runtime_dir is not None else procs.default_runtime_dir("desktop")
        root = state_root if state_root is not None else DEFAULT_STATE_ROOT
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o711)  # the sandbox user must traverse it to bind its own (0700) directory
        _check_traversable(root, uid, gid)
        reap_stale_desktops(runtime, root)
        state = root / f"desk-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        state.mkdir(mode=0o700)
        (state / "owner.json").write_text(
            json.dumps({"pid": os.getpid(), "start": procs.start_time(os.getpid())})
        )
        (state / "chan").mkdir()
        (state / "bin").mkdir()
        (state / "bin" / "sudo").write_text(SUDO_STUB)
        (state / "bin" / "sudo").chmod(0o755)
        (state / "bin" / "google-chrome").write_text(CHROME_WRAPPER)
        (state / "bin" / "google-chrome").chmod(0o755)
        (state / "jwmrc").write_text(jwmrc())
        (state / "passwd").write_text(
            f"root:x:0:0:root:/root:/bin/sh\nuser:x:{UID}:{UID}:user:/home/user:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        )
        (state / "group").write_text(f"root:x:0:\nuser:x:{UID}:\nnogroup:x:65534:\n")
        template = make_template(root / TEMPLATE_NAME)
        shutil.copytree(template, state / "home", symlinks=True)
        _chown_tree(state, uid, gid)
        desktop = cls(state=state, runtime_dir=runtime, screen=screen, timeout_s=timeout_s)
        try:
            desktop._launch()
        except BaseException:
            desktop.stop()
            raise
        return desktop

    def _argv(self) -> list[str]:
        width, height = self.screen
        env = {
            "HOME": "/home/user",
            "USER": "user",
            "LOGNAME": "user",
            "SHELL": "/bin/bash",
            "PATH": "/opt/rla/bin:/usr/local/bin:/usr/bin:/bin",
            "DISPLAY": ":0",
            "XDG_RUNTIME_DIR": f"/run/user/{UID}",
            "XDG_SESSION_TYPE": "x11",  # pyscreeze grabs the screen with scrot only on X11
            "DBUS_SESSION_BUS_ADDRESS": f"unix:path=/run/user/{UID}/bus",
            "GSETTINGS_BACKEND": "keyfile",
            # What an X session on Debian or Ubuntu sets (libatk-adaptor's Xsession.d/90atk-adaptor): GTK 2
            # applications (GIMP 2.10) load the AT-SPI bridge only when GTK_MODULES names it; GTK 3 has it built in.
            "GTK_MODULES": "gail:atk-bridge",
            "PYTHONPATH": "/opt/rla/site",
            "LANG": "C.UTF-8",
        }
        argv: list[str] = []
        if os.getuid() == 0:
            argv += ["setpriv", f"--reuid={HOST_USER}", f"--regid={HOST_USER}", "--clear-groups", "--"]
        argv += ["bwrap", "--unshare-all", "--uid", str(UID), "--gid", str(UID), "--hostname", "desktop"]
        argv += ["--clearenv"]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for link in ("bin", "lib", "lib64", "sbin"):
            if Path(f"/{link}").is_symlink():
                argv += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
            elif Path(f"/{link}").is_dir():
                argv += ["--ro-bind", f"/{link}", f"/{link}"]
        argv += ["--ro-bind", str(self.state / "passwd"), "/etc/passwd"]
        argv += ["--ro-bind", str(self.state / "group"), "/etc/group"]
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm"]
        argv += ["--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run"]
        argv += ["--perms", "0700", "--dir", f"/run/user/{UID}"]
        argv += ["--bind", str(self.home), "/home/user", "--bind", str(self.channel), "/run/rla"]
        argv += ["--ro-bind", str(self.state / "bin"), "/opt/rla/bin"]
        if CHROME_LIB.is_dir():
            argv += ["--dir", CHROME_DIR, "--ro-bind", str(CHROME_LIB / "chromium"), CHROME_AS]
            for entry in sorted(CHROME_LIB.iterdir()):
                if entry.name != "chromium":
                    argv += ["--symlink", str(entry), f"{CHROME_DIR}/{entry.name}"]
        argv += ["--ro-bind", str(self.state / "jwmrc"), "/opt/rla/jwmrc"]
        argv += ["--ro-bind", str(SERVER.parent), "/opt/rla/server"]
        if DESKTOP_SITE.is_dir():
            argv += ["--ro-bind", str(DESKTOP_SITE), "/opt/rla/site"]
        argv += ["--remount-ro", "/"]  # the sandbox's root tmpfs: writable only where mounted so (home, tmp)
        argv += ["--chdir", "/home/user", "/bin/sh", "-c", _LAUNCH, "desktop", f"{width}x{height}x24"]
        for port in FORWARDED_PORTS:
            argv += ["--forward", str(port)]
        return argv

    def _launch(self) -> None:
        for stale in self.channel.glob("*.sock"):
            stale.unlink()  # sockets of the previous run: readiness waits for the new server's
        self.group = procs.ProcessGroup.start(
            self._argv(), kind=PIDFILE_KIND, runtime_dir=self.runtime_dir, what=f"desktop {self.state.name}"
        )
        self.group.wait_ready(self._answers, timeout_s=self.timeout_s, interval_s=0.05)
        children = [p["pid"] for p in procs.live_processes() if p["ppid"] == self.group.pgid]
        self.pidns = pid_namespace(children[0]) if children else None
        self.x_server = self._find_x_server()

    def _find_x_server(self) -> tuple[int, str]:
        """(pid, start time) of this desktop's Xvfb; :class:`ProcessError` when it has none (it cannot work)."""
        names = {p["pid"]: p["name"] for p in procs.live_processes()}
        for pid in self.processes():
            started = procs.start_time(pid)
            if names.get(pid) == "Xvfb" and started is not None:
                return pid, started
        raise ProcessError(
            f"desktop {self.state.name} answers but has no X server (Xvfb) among its processes"
        )

    def _answers(self) -> bool:
        if not (self.channel / "server.sock").exists():
            return False
        try:
            with urllib.request.urlopen(self.url + "/platform", timeout=5) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def processes(self) -> list[int]:
        """Live processes of this desktop: its process group and everything in its pid namespace."""
        if self.group is None:
            return []
        pids = set(procs.group_members(self.group.pgid))
        if self.pidns is not None:
            pids.update(namespace_members(self.pidns))
        return sorted(pids)

    def _kill(self) -> None:
        if self.group is None:
            return
        self.group.stop()
        deadline = time.monotonic() + 10
        while self.pidns is not None and namespace_members(self.pidns) and time.monotonic() < deadline:
            time.sleep(0.02)  # the namespace's other processes die with its init, asynchronously

    def reset(self) -> float:
        """Kill the desktop, restore its home from the template, start it again; seconds it took."""
        t0 = time.monotonic()
        self._kill()
        uid, gid = _host_ids()
        shutil.rmtree(self.home)
        shutil.copytree(self.state.parent / TEMPLATE_NAME, self.home, symlinks=True)
        _chown_tree(self.home, uid, gid)
        self._launch()
        return time.monotonic() - t0

    def running(self) -> bool:
        """Its process group and its X server are alive."""
        if self.group is None or not self.group.alive() or self.x_server is None:
            return False
        return procs.is_running(*self.x_server)

    def healthy(self) -> bool:
        """Its processes run and its in-desktop server answers: whether a failure inside it can be ours."""
        return self.running() and self._answers()

    def stop(self) -> None:
        """Kill every process of the desktop, close its channel, remove its state (idempotent)."""
        self._kill()
        self.server.close()
        for forward in self.ports.values():
            forward.close()
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.state)

    def __enter__(self) -> Desktop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
