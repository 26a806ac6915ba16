"""What every stage of one training run shares (:class:`RunContext`): the run's id, config and store."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from rla_core.config import RunConfig
from rla_core.store import ArtifactStore
from tasks.tracking import Tracker


@dataclass(frozen=True)
class RunContext:
    """What every stage of one training run shares. Small and picklable (it travels to Prefect tasks)."""

    run_id: str
    config: RunConfig
    storage_options: dict[str, Any] = field(default_factory=dict)
    tracker: Tracker | None = None
    cache_dir: str = ".cache"

    @functools.cached_property
    def store(self) -> ArtifactStore:
        return ArtifactStore(self.config.artifact_root, storage_options=self.storage_options)
