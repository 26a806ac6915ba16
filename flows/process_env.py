"""The environment defaults of a process that runs the loop, applied by its entry point (never on import).

Prefect reads its settings when it is imported, so an entry point (the `rla` CLI, the scheduled-run
flow, the test session) applies these before anything imports Prefect: a start-up timeout long enough
for the ephemeral server's first migration on two cores, and analytics off (no network here; with it
on, telemetry errors once locked the database). Stage logs are the progress display, so the per-file
bars of transformers and tqdm are off. Values already in the environment win, so an operator can point
at a real Prefect server or turn the bars back on.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

PROCESS_DEFAULTS: dict[str, str] = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_LOGGING_TO_API_BATCH_INTERVAL": "0.3",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TQDM_DISABLE": "1",
}


def apply_process_defaults(environ: MutableMapping[str, str] | None = None) -> None:
    """Set every :data:`PROCESS_DEFAULTS` key that ``environ`` (default: ``os.environ``) does not have."""
    target = os.environ if environ is None else environ
    for key, value in PROCESS_DEFAULTS.items():
        target.setdefault(key, value)
