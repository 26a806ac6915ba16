"""rla_core/store: the artifact store over fsspec (local paths and ``s3://``), manifests, run lock.

See :mod:`rla_core.store.artifacts` for the layout and commit protocol (docs/architecture.md#the-design-contract), and
:mod:`rla_core.store.atomic` for the one atomic file/directory publish every layer uses.

Only :mod:`~rla_core.store.atomic` (standard library) is imported eagerly; the store classes load on
first access, so light modules (``rla_core.procs``, the environments) can import the publish helpers
without pulling in polars and the schemas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rla_core.store.atomic import publish_copy, publish_dir, publish_file

if TYPE_CHECKING:
    from rla_core.store.artifacts import ArtifactStore, StageWriter
    from rla_core.store.lock import LockHolder, RunLock
    from rla_core.store.manifest import ArtifactEntry, EntryKind, Manifest, PruneRecord, RunInfo

_LAZY = {
    "ArtifactEntry": "rla_core.store.manifest",
    "ArtifactStore": "rla_core.store.artifacts",
    "EntryKind": "rla_core.store.manifest",
    "LockHolder": "rla_core.store.lock",
    "Manifest": "rla_core.store.manifest",
    "PruneRecord": "rla_core.store.manifest",
    "RunInfo": "rla_core.store.manifest",
    "RunLock": "rla_core.store.lock",
    "StageWriter": "rla_core.store.artifacts",
}

__all__ = [
    "ArtifactEntry",
    "ArtifactStore",
    "EntryKind",
    "LockHolder",
    "Manifest",
    "PruneRecord",
    "RunInfo",
    "RunLock",
    "StageWriter",
    "publish_copy",
    "publish_dir",
    "publish_file",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
