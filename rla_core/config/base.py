"""What every config section shares: the frozen section base, partial-section merging, the leaf walk, bands, sampling, the canonical hash."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    @model_validator(mode="before")
    @classmethod
    def _given_in_part(cls, data: Any) -> Any:
        """A subsection given in part keeps its *declared* value for every key it does not name.

        The declared value of a subsection is the field's default here (e.g. ``judge.sampling``'s
        ``top_p=1.0``), not its class's defaults: without this merge, setting one key of a section would
        silently move its siblings to the class defaults.
        """
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, info in cls.model_fields.items():
            section = section_type(info.annotation)
            if section is not None and isinstance(out.get(name), dict):
                declared = info.get_default(call_default_factory=True)
                if isinstance(declared, BaseModel):
                    out[name] = merge_config(section, declared.model_dump(), out[name])
        return out


def section_type(annotation: Any) -> type[BaseModel] | None:
    """The section model a field holds, or None for a leaf (a dict-typed field is a leaf: replaced whole)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def merge_config(model: type[BaseModel], base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` merged onto ``base`` key by key, walking only into ``model``'s sections.

    A leaf in ``top`` replaces the one in ``base`` whole, so a list or a dict (``cluster.resources``)
    given in a later layer is the value, never a union with the earlier one.

    >>> merge_config(RunConfig, {"judge": {"m": 3, "sampling": {"top_p": 1.0}}}, {"judge": {"sampling": {"top_p": 0.9}}})
    {'judge': {'m': 3, 'sampling': {'top_p': 0.9}}}
    """
    out = dict(base)
    for key, value in top.items():
        info = model.model_fields.get(key)
        section = section_type(info.annotation) if info is not None else None
        if section is not None and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_config(section, out[key], value)
        else:
            out[key] = value
    return out


def config_leaves(model: type[BaseModel], data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted key, value)`` of every leaf of ``data`` that ``model`` declares, in declaration order.

    Sections are walked into; any other value (scalars, lists, tuples, dicts, nulls) is one leaf.

    >>> config_leaves(RunConfig, {"judge": {"m": 3, "sampling": {"stop": []}}, "cluster": {"resources": {}}})
    [('judge.m', 3), ('judge.sampling.stop', []), ('cluster.resources', {})]
    """
    out: list[tuple[str, Any]] = []
    for name, info in model.model_fields.items():
        if name not in data:
            continue
        section = section_type(info.annotation)
        if section is not None and isinstance(data[name], dict):
            out.extend(config_leaves(section, data[name], f"{prefix}{name}."))
        else:
            out.append((f"{prefix}{name}", data[name]))
    return out


class Band(_Section):
    """An inclusive accuracy band ``low <= acc <= high``."""

    low: float = Field(ge=0.0, le=1.0, description="Lower bound, inclusive.")
    high: float = Field(ge=0.0, le=1.0, description="Upper bound, inclusive.")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.low > self.high:
            raise ValueError(
                f"band low={self.low} is above high={self.high}: no task could pass the filter; "
                "set low <= high"
            )
        return self

    def contains(self, acc: float) -> bool:
        """Whether ``acc`` lies inside the band (both ends inclusive)."""
        return self.low <= acc <= self.high


class SamplingConfig(_Section):
    """Sampling parameters of one generation request (spec §6)."""

    temperature: float = Field(0.8, ge=0.0, le=5.0, description="0 means greedy decoding.")
    top_p: float = Field(0.95, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(64, ge=1, le=65536, description="New tokens per sample at most.")
    stop: tuple[str, ...] = Field(
        default=(), description="Stop strings; the text is cut before the first one (spec §6)."
    )


def hash_jsonable(value: Any) -> str:
    """sha256 hex digest of canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
