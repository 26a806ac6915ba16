"""The registry of setting adapters: one adapter per (setting, engine), each registered as what it is.

A stage asks :func:`adapter_of` (its slice's setting and the engine of that setting's section) or
:func:`adapter_for` for the adapter, and calls the methods of
:class:`~rla_core.settings.base.SettingAdapter`; nothing dispatches on the engine inside an adapter.

Example:
    >>> adapter_for(Setting.GUI, GuiEngine.OSWORLD).env_name
    'osworld'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from rla_core.config import GuiEngine, Setting, TextGameEngine
from rla_core.errors import ConfigError

if TYPE_CHECKING:
    from rla_core.settings.base import SettingAdapter

Engine = TextGameEngine | GuiEngine


def _textworld() -> SettingAdapter:
    from rla_core.settings.textgame import TEXTWORLD

    return TEXTWORLD


def _alfworld() -> SettingAdapter:
    from rla_core.settings.textgame import ALFWORLD

    return ALFWORLD


def _coding() -> SettingAdapter:
    from rla_core.settings.coding import CodingSetting

    return CodingSetting()


def _miniwob() -> SettingAdapter:
    from rla_core.settings.gui import MiniWobSetting

    return MiniWobSetting()


def _osworld() -> SettingAdapter:
    from rla_core.settings.osworld import OsworldSetting

    return OsworldSetting()


# The coding setting has one engine (the sandbox): its key has none.
ADAPTERS: dict[tuple[Setting, Engine | None], Callable[[], SettingAdapter]] = {
    (Setting.TEXTGAME, TextGameEngine.TEXTWORLD): _textworld,
    (Setting.TEXTGAME, TextGameEngine.ALFWORLD): _alfworld,
    (Setting.CODING, None): _coding,
    (Setting.GUI, GuiEngine.MINIWOB): _miniwob,
    (Setting.GUI, GuiEngine.OSWORLD): _osworld,
}


def adapter_for(setting: Setting, engine: Engine | None) -> SettingAdapter:
    """The adapter registered for ``setting`` played by ``engine`` (None for the coding setting)."""
    make = ADAPTERS.get((setting, engine))
    if make is None:
        known = ", ".join(f"{s.value}/{e.value if e is not None else '-'}" for s, e in ADAPTERS)
        raise ConfigError(
            f"no adapter for setting {setting.value!r} with engine {engine!r}; registered: {known}"
        )
    return make()


def engine_of(section: object) -> Engine | None:
    """The engine a setting's config section names (``textgame.engine``, ``gui.engine``); None for a
    section without one (coding)."""
    engine = getattr(section, "engine", None)
    return engine if isinstance(engine, TextGameEngine | GuiEngine) else None


class _HasSetting(Protocol):
    @property
    def setting(self) -> Setting: ...


def adapter_of(inputs: _HasSetting) -> SettingAdapter:
    """The adapter of a stage's slice: its ``setting`` and the engine of that setting's section."""
    return adapter_for(inputs.setting, engine_of(getattr(inputs, inputs.setting.value, None)))
