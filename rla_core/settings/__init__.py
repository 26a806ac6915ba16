"""The registry of setting adapters: one adapter per (setting, engine), each registered as what it is.

An environment plug-in (``setting: plugin``) is found by its name at run time, through its entry point
(:mod:`rla_core.plugins`): its adapter is :class:`~rla_core.settings.plugin.PluginSetting` of the stage's
``plugin`` section (its name, and the options when the stage opens the plug-in), resolved once per call
of :func:`adapter_of`: a stage asks once and hands the adapter down.

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
    from rla_core.settings.base import SettingAdapter, TaskFiles
    from rla_core.stage_inputs import PluginChoice

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


def adapter_for(setting: Setting, engine: Engine | PluginChoice | None) -> SettingAdapter:
    """The adapter registered for ``setting`` played by ``engine`` (None for the coding setting; the
    stage's ``plugin`` section for ``setting: plugin``, which resolves the plug-in)."""
    if setting is Setting.PLUGIN:
        from rla_core.settings.plugin import PluginSetting
        from rla_core.stage_inputs import PluginChoice

        if not isinstance(engine, PluginChoice) or not engine.name:
            raise ConfigError(
                "setting=plugin needs plugin.name: the entry-point name of an installed plug-in"
            )
        return PluginSetting.of(engine)
    if engine is not None and not isinstance(engine, TextGameEngine | GuiEngine):
        raise ConfigError(f"setting {setting.value!r} has no engine {engine!r}")
    make = ADAPTERS.get((setting, engine))
    if make is None:
        known = ", ".join(f"{s.value}/{e.value if e is not None else '-'}" for s, e in ADAPTERS)
        raise ConfigError(
            f"no adapter for setting {setting.value!r} with engine {engine!r}; registered: {known}"
        )
    return make()


def engine_of(section: object) -> Engine | PluginChoice | None:
    """The engine a setting's config section names (``textgame.engine``, ``gui.engine``; a plug-in's
    section itself: its name and options); None for a section without one (coding)."""
    from rla_core.stage_inputs import PluginChoice

    if isinstance(section, PluginChoice):
        return section
    engine = getattr(section, "engine", None)
    return engine if isinstance(engine, TextGameEngine | GuiEngine) else None


class _HasSetting(Protocol):
    @property
    def setting(self) -> Setting: ...


def adapter_of(inputs: _HasSetting) -> SettingAdapter:
    """The adapter of a stage's slice: its ``setting`` and the engine of that setting's section."""
    return adapter_for(inputs.setting, engine_of(getattr(inputs, inputs.setting.value, None)))


def task_files(inputs: _HasSetting) -> TaskFiles | None:
    """Where the setting of a stage's slice (or of the run config) keeps its task files, as its adapter
    declares them; None when its tasks come from code (a plug-in: read from its adapter class, so nothing
    is resolved to say so)."""
    if inputs.setting is Setting.PLUGIN:
        from rla_core.settings.plugin import PluginSetting

        return PluginSetting.task_files
    return adapter_for(inputs.setting, engine_of(getattr(inputs, inputs.setting.value, None))).task_files


def task_file(inputs: _HasSetting, *, held_out: bool) -> str | None:
    """The training (or ``held_out``) task file a stage's slice reads, whose bytes enter its key; None
    for a plug-in (its tasks are its code, keyed by its version)."""
    files = task_files(inputs)
    return None if files is None else files.of(inputs, held_out=held_out)
