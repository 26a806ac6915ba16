"""rla_core/store: the artifact store over fsspec (local paths and ``s3://``), manifests, run lock.

See :mod:`rla_core.store.artifacts` for the layout and commit protocol (design §3-4).
"""

from rla_core.store.artifacts import ArtifactStore, StageWriter
from rla_core.store.lock import LockHolder, RunLock
from rla_core.store.manifest import ArtifactEntry, EntryKind, Manifest, RunInfo

__all__ = [
    "ArtifactEntry",
    "ArtifactStore",
    "EntryKind",
    "LockHolder",
    "Manifest",
    "RunInfo",
    "RunLock",
    "StageWriter",
]
