"""Stage manifests and run info: the small JSON records that make artifacts visible (docs/architecture.md#the-design-contract).

A stage attempt exists only once its manifest is committed. The manifest lists every file of the
attempt with its size and sha256, and every frame with its schema, row count and schema fingerprint.
Its format is documented in ``docs/data-dictionary.md``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from rla_core.errors import ArtifactError

MANIFEST_FORMAT = "rla-manifest"
MANIFEST_VERSION = 1
RUN_INFO_FORMAT = "rla-run"
RUN_INFO_VERSION = 1


def utc_now() -> str:
    """The current UTC time as ISO 8601 with microseconds (``2026-01-31T12:00:00.000000+00:00``)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def this_host() -> str:
    """This machine's host name, as recorded in manifests and locks."""
    return socket.gethostname()


class EntryKind(StrEnum):
    """What an attempt's file is: a schema-checked Parquet frame or an opaque file (checkpoints)."""

    FRAME = "frame"
    FILE = "file"


@dataclass(frozen=True)
class ArtifactEntry:
    """One file of a committed attempt.

    ``path`` is relative to the attempt directory, ``/``-separated. ``schema``, ``rows`` and
    ``fingerprint`` are set for frames and None for plain files.
    """

    path: str
    kind: EntryKind
    bytes: int
    sha256: str
    schema: str | None = None
    rows: int | None = None
    fingerprint: str | None = None


def _untagged(data: bytes, tag: str) -> dict[str, Any]:
    """The JSON object ``data`` less its format tag; ValueError unless that tag is ``tag``."""
    raw: dict[str, Any] = json.loads(data)
    if raw.pop("format") != tag:
        raise ValueError(f"format tag is not '{tag}'")
    return raw


@dataclass(frozen=True)
class Manifest:
    """The committed record of one stage attempt (docs/architecture.md#the-design-contract)."""

    run_id: str
    iteration: int
    stage: str
    attempt: int
    stage_key: str
    inputs: dict[str, str]
    extra: dict[str, Any]
    schema_version: int
    created_at: str
    host: str
    pid: int
    artifacts: tuple[ArtifactEntry, ...]
    format_version: int = MANIFEST_VERSION

    @property
    def content_key(self) -> str:
        """sha256 over every (path, sha256) pair: identifies the attempt's outputs by content.

        Downstream stages use it as their input key, so a re-run with identical outputs does not
        invalidate them.
        """
        pairs = sorted((e.path, e.sha256) for e in self.artifacts)
        return hashlib.sha256(json.dumps(pairs, separators=(",", ":")).encode("utf-8")).hexdigest()

    @property
    def frames(self) -> tuple[str, ...]:
        """Names of the frames in this attempt (file stems of the Parquet frames)."""
        return tuple(e.path.removesuffix(".parquet") for e in self.artifacts if e.kind is EntryKind.FRAME)

    def entry(self, path: str) -> ArtifactEntry | None:
        """The entry at relative ``path``, or None."""
        for e in self.artifacts:
            if e.path == path:
                return e
        return None

    def to_json(self) -> bytes:
        """Canonical JSON bytes (sorted keys) with the format tag first."""
        body = asdict(self)
        body["artifacts"] = [
            {k: (str(v) if isinstance(v, EntryKind) else v) for k, v in a.items()} for a in body["artifacts"]
        ]
        body = {"format": MANIFEST_FORMAT, **body}
        return json.dumps(body, sort_keys=True, indent=1).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, *, where: str) -> Manifest:
        """Parse manifest bytes; ArtifactError names the file if they are not a valid manifest."""
        try:
            raw = _untagged(data, MANIFEST_FORMAT)
            if raw["format_version"] > MANIFEST_VERSION:
                raise ValueError(
                    f"format_version {raw['format_version']} is newer than this code ({MANIFEST_VERSION})"
                )
            raw["artifacts"] = tuple(
                ArtifactEntry(**{**a, "kind": EntryKind(a["kind"])}) for a in raw["artifacts"]
            )
            return cls(**raw)
        except (ValueError, KeyError, TypeError) as exc:
            raise ArtifactError(
                f"manifest '{where}' is not a valid rlanything manifest ({exc}); "
                "invalidate the stage (rla resume --from-stage) to write a fresh attempt"
            ) from exc


@dataclass(frozen=True)
class RunInfo:
    """``<root>/<run_id>/run.json``: what a run was started with (docs/architecture.md#the-design-contract)."""

    run_id: str
    config: dict[str, Any]
    config_hash: str
    code_version: str
    package_version: str
    created_at: str
    updated_at: str
    host: str = field(default_factory=this_host)
    pid: int = field(default_factory=os.getpid)
    format_version: int = RUN_INFO_VERSION

    def to_json(self) -> bytes:
        """Canonical JSON bytes with the format tag."""
        return json.dumps({"format": RUN_INFO_FORMAT, **asdict(self)}, sort_keys=True, indent=1).encode(
            "utf-8"
        )

    @classmethod
    def from_json(cls, data: bytes, *, where: str) -> RunInfo:
        """Parse run.json bytes; ArtifactError names the file if they are not valid."""
        try:
            return cls(**_untagged(data, RUN_INFO_FORMAT))
        except (ValueError, KeyError, TypeError) as exc:
            raise ArtifactError(f"run info '{where}' is not a valid run.json ({exc})") from exc


PRUNED_FORMAT = "rla-pruned"


@dataclass(frozen=True)
class PruneRecord:
    """``<attempt>/_pruned.json``: checkpoint files of a committed attempt deleted by retention
    (docs/operations.md#checkpoint-retention). The manifest itself is never rewritten: it still lists every
    file the attempt committed (its content key stays the input key of downstream stages); this record says
    which of them are gone on purpose, so the store reads them as pruned rather than missing.

    ``dirs``: the pruned top-level directories (checkpoint roles); ``paths``: every pruned file;
    ``setting``: the retention keys that pruned them, e.g. ``{"storage.keep_last": 2}``.
    """

    dirs: tuple[str, ...]
    paths: tuple[str, ...]
    pruned_bytes: int  # the pruned files' size, summed
    setting: dict[str, Any]
    at: str = field(default_factory=utc_now)
    host: str = field(default_factory=this_host)
    pid: int = field(default_factory=os.getpid)

    def to_json(self) -> bytes:
        body = {"format": PRUNED_FORMAT, **asdict(self)}
        return json.dumps(body, sort_keys=True, indent=1).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, *, where: str) -> PruneRecord:
        """Parse a prune record; ArtifactError names the file if it is not one."""
        try:
            raw = _untagged(data, PRUNED_FORMAT)
            return cls(**{**raw, "dirs": tuple(raw["dirs"]), "paths": tuple(raw["paths"])})
        except (ValueError, KeyError, TypeError) as exc:
            raise ArtifactError(f"prune record '{where}' is not valid ({exc})") from exc
