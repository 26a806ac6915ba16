"""A running stage's progress, where an operator sees it: Prefect logs / a terminal bar, and a record
that ``rla status`` reads from another process (``<run>/progress.json``, local or S3 root alike).

The record is a transient display aid, not an artifact: it is replaced (atomically, through the
store) every few seconds while a stage runs and says which stage of which iteration is running,
since when, in which process, and the counts of its loops (:mod:`rla_core.progress`). A stage that fails
leaves its error in it (one line), so that ``rla status`` shows the failure rather than a stale stage.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from rla_core.errors import ArtifactError
from rla_core.progress import ProgressRecord, Reporter, reporting
from rla_core.store.manifest import this_host, utc_now

if TYPE_CHECKING:
    from tasks.context import RunContext

PROGRESS_FILE = "progress.json"


def progress_payload(
    run_id: str,
    iteration: int,
    stage: str,
    attempt: int,
    started_at: str,
    loops: list[ProgressRecord],
    error: str | None = None,
) -> dict[str, Any]:
    """The JSON object of ``progress.json`` (``error``: why the attempt failed, once it did)."""
    return {
        "run_id": run_id,
        "iteration": iteration,
        "stage": stage,
        "attempt": attempt,
        "host": this_host(),
        "pid": os.getpid(),
        "started_at": started_at,
        "updated_at": utc_now(),
        "loops": [r.to_dict() for r in loops],
        **({"error": error} if error is not None else {}),
    }


@contextlib.contextmanager
def stage_progress(
    run: RunContext, iteration: int, stage: str, attempt: int, *, log: Callable[[str], None]
) -> Iterator[Reporter]:
    """Activate a reporter for one stage attempt: log lines (or a bar on a terminal) and the record."""
    started = utc_now()
    warned: list[str] = []

    def record(loops: list[ProgressRecord], error: str | None = None) -> None:
        payload = progress_payload(run.run_id, iteration, stage, attempt, started, loops, error)
        data = json.dumps(payload).encode()
        try:
            run.store.write_run_file(run.run_id, PROGRESS_FILE, data)
        except ArtifactError as exc:
            # A display aid must not fail the stage; the stage's own writes report the root's problem.
            if not warned:
                warned.append(str(exc))
                log(f"progress record not written: {exc}")

    reporter = Reporter(f"{stage} iter {iteration}", log=log, tty=sys.stderr.isatty(), record=record)
    record([])
    with reporting(reporter):
        try:
            yield reporter
        except BaseException as exc:  # recorded for `rla status`, then raised on unchanged
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            record([], f"{type(exc).__name__}: {first}" if first else type(exc).__name__)
            raise
