"""``docs/configuration.md``'s reference, generated from the config's own declarations.

Every section, key, type, default and description of :class:`~rla_core.config.RunConfig`, the per-setting
defaults and the presets, written between two markers of the Markdown file (the rest of the file is prose)::

    python -m rla_core.config_reference docs/configuration.md

A test compares the file with :func:`config_reference_markdown`, so the reference never drifts from the code.
"""

from __future__ import annotations

import json
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rla_core.config import PRESETS, RunConfig, Setting, setting_defaults, speed_only
from rla_core.errors import ConfigError

REFERENCE_BEGIN = (
    "<!-- BEGIN GENERATED REFERENCE (python -m rla_core.config_reference docs/configuration.md) -->"
)
REFERENCE_END = "<!-- END GENERATED REFERENCE -->"


def _type_label(annotation: Any) -> str:
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("|", "\\|")


def _reference_rows(model: type[BaseModel], values: dict[str, Any], prefix: str) -> list[str]:
    rows = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = info.annotation
        description = (info.description or "").replace("|", "\\|").replace("<", "\\<")
        if speed_only(key):
            description += " *Speed only: not part of stage keys.*"
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if description:
                rows.append(f"| `{key}` | section | | {description} |")
            rows.extend(_reference_rows(annotation, values[name], f"{key}."))
        else:
            default = json.dumps(values[name], ensure_ascii=False).replace("|", "\\|")
            rows.append(f"| `{key}` | {_type_label(annotation)} | `{default}` | {description} |")
    return rows


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            out.extend(_flatten(value, f"{prefix}{key}."))
        else:
            out.append((f"{prefix}{key}", value))
    return out


def config_reference_markdown() -> str:
    """The generated part of ``docs/configuration.md``: every section and field, per-setting defaults, presets.

    Defaults are those of the embedded default (``setting: textgame``); keys that differ by setting
    are listed in their own table.
    """
    defaults = RunConfig().model_dump(mode="json")
    lines = [REFERENCE_BEGIN, ""]
    top = [(n, f) for n, f in RunConfig.model_fields.items()]
    lines += ["### Top level", "", "| key | type | default | meaning |", "|---|---|---|---|"]
    for name, info in top:
        annotation = info.annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            default = json.dumps(defaults[name], ensure_ascii=False)
            lines.append(f"| `{name}` | {_type_label(annotation)} | `{default}` | {info.description or ''} |")
    for name, info in top:
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            lines += ["", f"### `{name}`: {annotation.__doc__ or ''}".rstrip(), ""]
            lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
            lines += _reference_rows(annotation, defaults[name], f"{name}.")
    lines += [
        "",
        "### Per-setting defaults (spec §6)",
        "",
        "The one derived layer: in the setting named, a key below defaults to this value instead of the "
        "declared one above (the text games'). A preset, file or `--set` that names the key wins.",
    ]
    lines += ["", "| setting | key | value |", "|---|---|---|"]
    for setting in Setting:
        for key, value in _flatten(setting_defaults(setting)):
            lines.append(f"| `{setting.value}` | `{key}` | `{json.dumps(value)}` |")
    lines += ["", "### Presets (`rla_core/presets/<name>.yaml`)", "", "| preset | what it is |", "|---|---|"]
    for name in PRESETS:
        text = resources.files("rla_core").joinpath("presets", f"{name}.yaml").read_text(encoding="utf-8")
        first = next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.startswith("#")), "")
        lines.append(f"| `{name}` | {first} |")
    lines += ["", REFERENCE_END]
    return "\n".join(lines)


def write_config_reference(path: str | Path) -> None:
    """Replace the generated block of a markdown file (between the REFERENCE markers) with the current one."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    start, end = text.find(REFERENCE_BEGIN), text.find(REFERENCE_END)
    if start < 0 or end < start:
        raise ConfigError(
            f"'{p}' has no generated-reference markers; add '{REFERENCE_BEGIN}' and '{REFERENCE_END}'"
        )
    p.write_text(
        text[:start] + config_reference_markdown() + text[end + len(REFERENCE_END) :], encoding="utf-8"
    )


if __name__ == "__main__":
    import sys

    write_config_reference(sys.argv[1] if len(sys.argv) > 1 else "docs/configuration.md")
