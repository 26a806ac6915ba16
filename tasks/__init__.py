"""tasks: one Prefect task per stage of the RLAnything loop (design §3).

Importing this package sets Prefect's local defaults *before* Prefect is imported (Prefect reads its
settings at import): a start-up timeout long enough for the ephemeral server's first migration on two
cores, and analytics off (no network here; with it on, telemetry errors once locked the database).
Values already in the environment win, so operators can point at a real Prefect server.
"""

import os

_PREFECT_DEFAULTS = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_LOGGING_TO_API_BATCH_INTERVAL": "0.3",
    # Stage logs are the progress display; per-file download/load bars of transformers only add noise.
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TQDM_DISABLE": "1",
}
for _key, _value in _PREFECT_DEFAULTS.items():
    os.environ.setdefault(_key, _value)
