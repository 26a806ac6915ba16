"""Our local desktops as a provider of OSWorld's own, unmodified ``desktop_env.DesktopEnv`` (PyPI 1.0.2).

``DesktopEnv.__init__`` gets its VM manager and provider from ``create_vm_manager_and_provider(name, region,
use_proxy)``, a closed if/elif over cloud and hypervisor providers. **The one hook**: :func:`install` replaces
that name in ``desktop_env.desktop_env`` (the module that calls it) with a wrapper that returns
:class:`LocalVMManager` / :class:`LocalProvider` when the region names a registered local desktop
(``rlanything-local:<key>``) and calls upstream's factory unchanged otherwise. Nothing else of
``desktop_env`` is patched: ``reset`` → ``SetupController`` → ``step`` → ``evaluate`` (getters, metrics)
run as published, against our server (:mod:`rla_core.envs.desktop.server`).

Why the provider *name* is ``"docker"``: ``DesktopEnv.__init__`` also checks the name against a closed set
and derives one behaviour from it — ``docker`` (like the cloud providers) means "a started emulator is
clean, revert only after use", which is exactly a fresh local desktop; and ``docker`` is the provider
whose address carries its ports (``ip:server:chromium:vnc:vlc``), as each local desktop has its own.
The region prefix, not the name, selects our provider, so a real Docker provider is left alone.

Evaluator dependencies that cannot be installed here (``easyocr``: it requires CUDA builds of torch and
torchvision) are :class:`MissingDependency` placeholders: importing ``desktop_env``'s metric modules works,
and *using* the placeholder raises :class:`DependencyUnavailable` naming the package.

Example:
    >>> with Desktop.start() as d:  # doctest: +SKIP
    ...     env = make_env(d, action_space="pyautogui")
    ...     obs = env.reset(task_config=task)
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
import uuid
from typing import Any

from rla_core.envs.desktop.desktop import Desktop
from rla_core.errors import RlaError

REGION_PREFIX = "rlanything-local:"
PROVIDER_NAME = "docker"  # see the module docstring: selects DesktopEnv's "starts clean" behaviour
# Packages desktop_env's evaluator modules import that do not install here, and why.
UNAVAILABLE = {
    "easyocr": "it requires torch and torchvision builds with CUDA, which this project never installs "
    "(OSWorld's OCR-based LibreOffice Writer metrics need it)",
}

_desktops: dict[str, Desktop] = {}
_stop_on_close: dict[str, bool] = {}
_lock = threading.Lock()
_upstream: Any = None


class DependencyUnavailable(RlaError):
    """An OSWorld evaluator used a package that is not installed here (see ``UNAVAILABLE``)."""


class MissingDependency(types.ModuleType):
    """Stands in for an uninstallable module so that importing its importer works; any use raises."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(name)
        self.__why = why

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise DependencyUnavailable(
            f"{self.__name__}.{attr} was used, but the package {self.__name__!r} is not installed: {self.__why}. "
            f"A task whose evaluator needs it cannot be scored on local desktops."
        )


def _install_placeholders() -> None:
    for name, why in UNAVAILABLE.items():
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            sys.modules[name] = MissingDependency(name, why)


class LocalVMManager:
    """``desktop_env``'s VM manager interface over registered desktops (there is nothing to allocate)."""

    checked_and_cleaned = True

    def __init__(self, key: str) -> None:
        self.key = key

    def initialize_registry(self, **kwargs: Any) -> None:
        """Nothing to initialise: the registry is this module's ``_desktops``."""

    def add_vm(self, vm_path: str, *args: Any, **kwargs: Any) -> None:
        """Desktops are registered by :func:`make_env`, not by ``desktop_env``."""

    def delete_vm(self, vm_path: str, *args: Any, **kwargs: Any) -> None:
        """Unregistering is :func:`make_env`'s owner's business (``env.close()`` stops the desktop)."""

    def occupy_vm(self, vm_path: str, pid: int, *args: Any, **kwargs: Any) -> None:
        """A registered desktop belongs to one env already."""

    def list_free_vms(self, *args: Any, **kwargs: Any) -> list[str]:
        return []

    def check_and_clean(self, *args: Any, **kwargs: Any) -> None:
        """Stale desktops are reaped by :func:`rla_core.envs.desktop.desktop.reap_stale_desktops`."""

    def get_vm_path(self, *args: Any, **kwargs: Any) -> str:
        return self.key


class LocalProvider:
    """``desktop_env``'s provider interface over one local :class:`Desktop`."""

    def __init__(self, key: str) -> None:
        self.key = key

    @property
    def desktop(self) -> Desktop:
        try:
            return _desktops[self.key]
        except KeyError as exc:
            raise RlaError(
                f"no local desktop is registered as {self.key!r}; create envs with "
                "rla_core.envs.desktop.provider.make_env(desktop)"
            ) from exc

    def start_emulator(self, path_to_vm: str, headless: bool, *args: Any, **kwargs: Any) -> None:
        """The desktop is started by its owner; this only checks it still runs."""
        if not self.desktop.running():
            raise RlaError(
                f"local desktop {self.key!r} is not running (was it stopped or its server killed?)"
            )

    def get_ip_address(self, path_to_vm: str) -> str:
        return self.desktop.address

    def save_state(self, path_to_vm: str, snapshot_name: str) -> None:
        raise RlaError(
            "local desktops have one state to return to (the home template); saving snapshots is not supported"
        )

    def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str) -> str:
        """A fresh home from the template and a restarted desktop (same address)."""
        self.desktop.reset()
        return path_to_vm

    def stop_emulator(self, path_to_vm: str, *args: Any, **kwargs: Any) -> None:
        with _lock:
            desktop = _desktops.pop(self.key, None)
            stop = _stop_on_close.pop(self.key, True)
        if desktop is not None and stop:
            desktop.stop()


def _factory(provider_name: str, region: str | None, use_proxy: bool = False, **kwargs: Any) -> Any:
    if isinstance(region, str) and region.startswith(REGION_PREFIX):
        key = region[len(REGION_PREFIX) :]
        return LocalVMManager(key), LocalProvider(key)
    return _upstream(provider_name, region, use_proxy=use_proxy, **kwargs)


def install() -> None:
    """Install the hook (idempotent): our factory in ``desktop_env.desktop_env``, delegating to upstream's."""
    global _upstream
    _install_placeholders()
    import desktop_env.desktop_env as de

    with _lock:
        if getattr(de.create_vm_manager_and_provider, "__rlanything__", False):
            return
        _upstream = de.create_vm_manager_and_provider
        _factory.__rlanything__ = True  # type: ignore[attr-defined]
        de.create_vm_manager_and_provider = _factory


def make_env(desktop: Desktop, *, stop_on_close: bool = True, **kwargs: Any) -> Any:
    """A ``desktop_env.DesktopEnv`` driving ``desktop`` (screen size from the desktop; other keyword
    arguments go to ``DesktopEnv``). ``env.close()`` stops the desktop unless ``stop_on_close`` is False
    (a pool's desktop: the pool stops it)."""
    install()
    from desktop_env.desktop_env import DesktopEnv

    key = uuid.uuid4().hex[:12]
    with _lock:
        _desktops[key] = desktop
        _stop_on_close[key] = stop_on_close
    kwargs.setdefault("screen_size", desktop.screen)
    return DesktopEnv(provider_name=PROVIDER_NAME, region=REGION_PREFIX + key, path_to_vm=key, **kwargs)
