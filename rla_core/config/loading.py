"""Loading a config: presets, files, ``key=value`` overrides, stored configs of older versions, and where each value came from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rla_core.config.base import (
    config_leaves,
    merge_config,
    section_type,
)
from rla_core.config.run import RunConfig, embedded_defaults, setting_defaults
from rla_core.errors import ConfigError

PRESETS: tuple[str, ...] = (
    "default",
    "coding",
    "gui",
    "osworld",
    "alfworld",
    "bench",
    "bench-long",
    "paper-textgame",
    "paper-coding",
    "paper-gui",
    "reasoning-gym",
    "textarena",
    "test",
)


def _dotted_dict(dotted: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``"a.b"``."""
    *parents, leaf = dotted.split(".")
    out: dict[str, Any] = {leaf: value}
    for part in reversed(parents):
        out = {part: out}
    return out


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``data`` with each ``key=value`` override merged in, in order, key by key (a new dict).

    A section given as a mapping (``--set rollout.sampling='{temperature: 0.5}'``) changes the keys it
    names and keeps the others, as a file's section does; so does a key inside a mapping-valued leaf
    (``--set plugin.options.answer=free`` keeps the preset's other options).

    >>> apply_overrides({"judge": {"m": 3}}, ["judge.sampling={top_p: 0.9}", "seed=7"])
    {'judge': {'m': 3, 'sampling': {'top_p': 0.9}}, 'seed': 7}
    """
    out = dict(data)
    for text in overrides:
        key, value = parse_override(text)
        node: Any = out
        for part in key.split(".")[:-1]:
            node = node.get(part, {}) if isinstance(node, dict) else node
            if not isinstance(node, dict):
                raise ConfigError(f"override '{key}': '{part}' is a value, not a section")
        leaf, inside = _leaf_of(key)
        if inside:  # a key inside a mapping-valued leaf (plugin.options.answer): that key alone changes
            current = _get(out, leaf)
            value = _set_inside(current if isinstance(current, dict) else {}, inside, value)
            key = leaf
        out = merge_config(RunConfig, out, _dotted_dict(key, value))
    return out


def _leaf_of(dotted: str) -> tuple[str, list[str]]:
    """The dotted key of the configuration leaf ``dotted`` lands in, and the keys below that leaf (a key
    inside a mapping-valued leaf such as ``plugin.options``; empty for a leaf or a section)."""
    model: type[BaseModel] | None = RunConfig
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        info = model.model_fields.get(part) if model is not None else None
        if info is None:
            return dotted, []  # an unknown key: validation names it
        model = section_type(info.annotation)
        if model is None:
            return ".".join(parts[: i + 1]), parts[i + 1 :]
    return dotted, []


def _get(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _set_inside(mapping: dict[str, Any], keys: list[str], value: Any) -> dict[str, Any]:
    """A copy of ``mapping`` with ``value`` at the nested ``keys``."""
    out = dict(mapping)
    head, *rest = keys
    below = out.get(head)
    out[head] = _set_inside(below if isinstance(below, dict) else {}, rest, value) if rest else value
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``key=value`` override; the value is read as YAML (``4``, ``true``, ``[a, b]``)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override '{text}' is not of the form key=value (e.g. rollout.max_steps=12)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override '{text}': value is not valid YAML ({exc.__class__.__name__})") from exc
    return key, value


def preset_dict(name: str) -> dict[str, Any]:
    """The raw dict of a shipped preset (``rla_core/presets/<name>.yaml``)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset '{name}'; choose one of: {', '.join(PRESETS)}")
    text = resources.files("rla_core").joinpath("presets", f"{name}.yaml").read_text(encoding="utf-8")
    loaded = yaml.safe_load(text) or {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"preset '{name}' is not a mapping")
    return loaded


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a dict, with specific errors for missing or malformed files."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file '{p}' does not exist; pass an existing YAML file to --config")
    try:
        loaded = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file '{p}' is not valid YAML: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file '{p}' must contain a mapping at the top level")
    return loaded


# Keys that earlier versions wrote into run.json and that no longer exist. A stored config drops them
# when read back, so runs started before an upgrade can still be resumed; a new config naming them fails.
RETIRED_KEYS: tuple[str, ...] = (
    "training.keep_checkpoints",
    "models.vllm_base_url",  # one shared server cannot serve each stage's own checkpoint
    "models.vllm_tensor_parallel",  # now models.serving.tensor_parallel, per role
    # Read by nothing: seed problems' GT tests run with each problem's own time limit.
    "coding.gt_time_limit_s",
)
# Keys that moved: a stored config's value is carried to the new place (unless that is set already).
MOVED_KEYS: dict[str, str] = {"models.backend": "models.serving.backend"}


def upgrade_stored_config(data: dict[str, Any]) -> dict[str, Any]:
    """A stored run config with :data:`MOVED_KEYS` moved and :data:`RETIRED_KEYS` removed (a deep copy)."""
    out = json.loads(json.dumps(data))
    for old, new in MOVED_KEYS.items():
        *old_parents, old_leaf = old.split(".")
        node = out
        for part in old_parents:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict) and old_leaf in node:
            value = node.pop(old_leaf)
            *new_parents, new_leaf = new.split(".")
            target = out
            for part in new_parents:
                target = target.setdefault(part, {})
            target.setdefault(new_leaf, value)
    for dotted in RETIRED_KEYS:
        *parents, leaf = dotted.split(".")
        node = out
        for part in parents:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(leaf, None)
    return out


def build_config(data: dict[str, Any]) -> RunConfig:
    """Validate a raw dict into a :class:`RunConfig`, turning pydantic errors into one ConfigError."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "<root>"
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown key '{where}' (check the spelling; see docs/configuration.md)")
            elif where == "<root>" or err["type"] == "value_error":
                problems.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
            else:
                problems.append(f"'{where}': {err['msg']} (got {err.get('input')!r})")
        raise ConfigError("invalid config: " + "; ".join(problems)) from None


@dataclass(frozen=True)
class ResolvedConfig:
    """A loaded config and, for every leaf key, where its value came from.

    ``origins`` maps each dotted leaf key to ``default`` (the field's declared value), ``setting NAME``
    (the per-setting defaults), ``preset NAME``, ``file PATH`` or ``--set``: the last layer that named it.
    """

    config: RunConfig
    origins: dict[str, str]

    def non_default(self) -> list[tuple[str, Any, str]]:
        """``(key, value, origin)`` of every leaf whose value differs from the embedded default."""
        return [
            (key, value, self.origins.get(key, "default")) for key, value in diff_from_defaults(self.config)
        ]


def diff_from_defaults(cfg: RunConfig) -> list[tuple[str, Any]]:
    """``(key, value)`` of every leaf of ``cfg`` (JSON values) that differs from :func:`embedded_defaults`."""
    embedded = dict(config_leaves(RunConfig, embedded_defaults()))
    return [
        (key, value)
        for key, value in config_leaves(RunConfig, cfg.model_dump(mode="json"))
        if value != embedded[key]
    ]


def resolve_config(
    path: str | Path | None = None,
    *,
    preset: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> ResolvedConfig:
    """Load a config as :func:`load_config` does, keeping where each value came from (``rla config show``)."""
    file_data = read_config_file(path) if path is not None else {}
    base_name = str(preset or file_data.pop("preset", None) or "default")
    layers = [(f"preset {base_name}", preset_dict(base_name))]
    if path is not None:
        layers.append((f"file {path}", file_data))
    data = apply_overrides(merge_config(RunConfig, layers[0][1], file_data), overrides)
    layers.append(("--set", apply_overrides({}, overrides)))
    cfg = build_config(data)
    origins = {key: "default" for key, _ in config_leaves(RunConfig, embedded_defaults())}
    derived = setting_defaults(cfg.setting)
    origins |= {key: f"setting {cfg.setting.value}" for key, _ in config_leaves(RunConfig, derived)}
    for source, layer in layers:
        origins |= {key: source for key, _ in config_leaves(RunConfig, layer)}
    return ResolvedConfig(config=cfg, origins=origins)


def load_config(
    path: str | Path | None = None,
    *,
    preset: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> RunConfig:
    """Load a config: the chosen setting's defaults, then the preset (or the embedded default), the YAML
    file and the ``key=value`` overrides, merged key by key.

    A YAML file may name its own base with a top-level ``preset: NAME`` key. A key given in any layer
    changes that key only: its siblings keep their values.
    """
    return resolve_config(path, preset=preset, overrides=overrides).config
