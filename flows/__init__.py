"""flows: the training-loop flows and the `rla` CLI.

Importing ``tasks`` first sets Prefect's local defaults before any module imports Prefect.
"""

import tasks  # noqa: F401
