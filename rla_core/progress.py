"""Progress of long loops (rollouts, judging, training steps): cheap counters, readable output.

A loop counts what it does through :func:`track`; whoever runs the loop decides where progress goes by
activating a :class:`Reporter` with :func:`reporting` (the stage machinery does this per stage). With
no reporter active, :func:`track` hands out a counter that does nothing, so library code and tests pay
nothing. The loops stay backend-neutral: they count episodes, steps and tokens, never call a logger.

A reporter turns counts into

* a rich progress bar when its output is a terminal (``tty=True``),
* otherwise throttled log lines, e.g. ``rollout iter 3: 96/192 episodes, 41.2 steps/s, 5120 tokens (12s)``,
* and, throttled, a :class:`ProgressRecord` handed to ``record`` (e.g. written next to the run's
  artifacts, so ``rla status`` in another process can show the running stage).

Cost: :meth:`Counter.advance` adds to a few floats and reads a monotonic clock; formatting and output
happen at most every ``log_every_s`` / ``record_every_s`` seconds (``benchmarks/bench_orchestration.py``
measures the overhead per iteration).

Example:
    >>> lines: list[str] = []
    >>> with reporting(Reporter("rollout iter 3", log=lines.append, tty=False, log_every_s=0.0)):
    ...     with track("", total=4, unit="episodes", rate="steps") as counter:
    ...         counter.advance(2, steps=10)
    >>> lines[0].startswith("rollout iter 3: 2/4 episodes")
    True
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Counter", "ProgressRecord", "Reporter", "current", "reporting", "start", "track"]


@dataclass(frozen=True)
class ProgressRecord:
    """One loop's progress at one moment (what a record sink receives and ``rla status`` shows).

    ``done``/``total`` count ``unit`` (total None when unknown); ``rate`` is ``rate_unit`` per second
    since the loop started; ``counts`` are the other running totals (steps, tokens, …).
    """

    label: str
    name: str
    unit: str
    done: float
    total: float | None
    rate_unit: str
    rate: float
    elapsed_s: float
    counts: dict[str, float]
    finished: bool
    updated_at: str

    def describe(self) -> str:
        """``96/192 episodes, 41.2 steps/s, 5120 tokens (12s)``."""
        done = f"{self.done:g}/{self.total:g}" if self.total is not None else f"{self.done:g}"
        parts = [f"{done} {self.unit}", f"{self.rate:.1f} {self.rate_unit}/s"]
        parts += [f"{v:g} {k}" for k, v in self.counts.items()]
        state = "done in " if self.finished else ""
        return f"{', '.join(parts)} ({state}{self.elapsed_s:.0f}s)"

    def line(self) -> str:
        """The log line: ``rollout iter 3: 96/192 episodes, …``."""
        head = f"{self.label} {self.name}".strip() if self.name else self.label
        return f"{head}: {self.describe()}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ProgressRecord:
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__})


class Counter:
    """Counts one loop; made by :func:`track`. ``advance(n, steps=…, tokens=…)`` after each unit of work."""

    def __init__(
        self,
        reporter: Reporter | None,
        name: str,
        *,
        total: float | None,
        unit: str,
        rate: str | None,
        log_end: bool = True,
    ) -> None:
        self._reporter = reporter
        self.name = name
        self.log_end = log_end
        self.total = total
        self.unit = unit
        self.rate_unit = rate or unit
        self.done = 0.0
        self.counts: dict[str, float] = {}
        self.started = time.monotonic()
        self._next_log = 0.0 if reporter is None else self.started + reporter.log_every_s
        self._next_record = 0.0 if reporter is None else self.started + reporter.record_every_s
        self._bar: Any = None

    def advance(self, n: float = 1, **counts: float) -> None:
        """Add ``n`` to the done count and each keyword to its running total (cheap; output is throttled)."""
        reporter = self._reporter
        if reporter is None:
            return
        self.done += n
        for key, value in counts.items():
            self.counts[key] = self.counts.get(key, 0.0) + value
        now = time.monotonic()
        if now >= self._next_log or now >= self._next_record:
            reporter.emit(self, now=now, final=False)

    def finish(self) -> None:
        """End the loop: its last line is logged and its record marked finished (once)."""
        if self._reporter is not None and self in self._reporter._open:
            self._reporter.close(self)

    def snapshot(self, *, now: float | None = None, final: bool = False) -> ProgressRecord:
        elapsed = (now if now is not None else time.monotonic()) - self.started
        rated = self.done if self.rate_unit == self.unit else self.counts.get(self.rate_unit, 0.0)
        return ProgressRecord(
            label=self._reporter.label if self._reporter is not None else "",
            name=self.name, unit=self.unit, done=self.done, total=self.total, rate_unit=self.rate_unit,
            rate=rated / elapsed if elapsed > 0 else 0.0, elapsed_s=elapsed, counts=dict(self.counts),
            finished=final, updated_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        )  # fmt: skip


@dataclass
class Reporter:
    """Where a stage's progress goes (see the module docstring).

    ``log`` receives one line per throttle window per loop (and a last one when the loop ends);
    ``tty`` shows a transient rich bar on stderr instead of the intermediate lines; ``record``
    receives the progress of every open loop at most every ``record_every_s`` seconds and at the end.
    """

    label: str
    log: Callable[[str], None] | None = None
    tty: bool = False
    record: Callable[[list[ProgressRecord]], None] | None = None
    log_every_s: float = 15.0
    record_every_s: float = 3.0
    _open: list[Counter] = field(default_factory=list)
    _finished: list[ProgressRecord] = field(default_factory=list)
    _progress: Any = None

    def open(self, counter: Counter) -> None:
        self._open.append(counter)
        if self.tty:
            self._bar_start(counter)

    def close(self, counter: Counter) -> None:
        now = time.monotonic()
        final = counter.snapshot(now=now, final=True)
        self._open.remove(counter)
        if counter.log_end:  # inner loops (one per generate call) would pile up in every record
            self._finished.append(final)
        if counter._bar is not None and self._progress is not None:
            self._progress.remove_task(counter._bar)
            if not self._open:
                self._progress.stop()
                self._progress = None
        if self.log is not None and counter.log_end:
            self.log(final.line())
        self._write_record(now)

    def emit(self, counter: Counter, *, now: float, final: bool) -> None:
        if counter._bar is not None and self._progress is not None:
            self._progress.update(counter._bar, completed=counter.done)
        complete = counter.total is not None and counter.done >= counter.total  # its end line follows
        if now >= counter._next_log and not complete:
            counter._next_log = now + self.log_every_s
            if self.log is not None and not self.tty:
                self.log(counter.snapshot(now=now, final=final).line())
        if now >= counter._next_record:
            counter._next_record = now + self.record_every_s
            self._write_record(now)

    def _write_record(self, now: float) -> None:
        if self.record is not None:
            self.record([*self._finished, *(c.snapshot(now=now) for c in self._open)])

    def _bar_start(self, counter: Counter) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        if self._progress is None:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=Console(stderr=True), transient=True,
            )  # fmt: skip
            self._progress.start()
        head = f"{self.label} {counter.name}".strip()
        counter._bar = self._progress.add_task(f"{head} ({counter.unit})", total=counter.total)

    def records_json(self) -> bytes:
        """Every loop's progress so far as JSON (finished loops first)."""
        now = time.monotonic()
        rows = [*self._finished, *(c.snapshot(now=now) for c in self._open)]
        return json.dumps([r.to_dict() for r in rows]).encode("utf-8")


_CURRENT: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar("rla_progress", default=None)


def current() -> Reporter | None:
    """The active reporter, or None."""
    return _CURRENT.get()


@contextlib.contextmanager
def reporting(reporter: Reporter) -> Iterator[Reporter]:
    """Send the progress of every :func:`track` inside the block (in this thread/context) to ``reporter``."""
    token = _CURRENT.set(reporter)
    try:
        yield reporter
    finally:
        _CURRENT.reset(token)
        if reporter._progress is not None:
            reporter._progress.stop()
            reporter._progress = None


def start(
    name: str, *, total: float | None, unit: str, rate: str | None = None, log_end: bool = True
) -> Counter:
    """Like :func:`track` for a loop that cannot be wrapped in a ``with`` block: call ``finish()`` after it."""
    reporter = _CURRENT.get()
    counter = Counter(reporter, name, total=total, unit=unit, rate=rate, log_end=log_end)
    if reporter is not None:
        reporter.open(counter)
    return counter


@contextlib.contextmanager
def track(
    name: str, *, total: float | None, unit: str, rate: str | None = None, log_end: bool = True
) -> Iterator[Counter]:
    """Count one loop: ``with track("", total=len(eps), unit="episodes", rate="steps") as c: c.advance(…)``.

    ``name`` qualifies the loop within its stage ("" when the stage label says it all, "policy SFT");
    ``rate`` names the count whose per-second rate is shown (default: ``unit`` itself); ``log_end=False``
    for an inner loop run many times (one generate call per rollout turn): it logs only when slow.
    """
    reporter = _CURRENT.get()
    counter = Counter(reporter, name, total=total, unit=unit, rate=rate, log_end=log_end)
    if reporter is None:
        yield counter
        return
    reporter.open(counter)
    try:
        yield counter
    finally:
        counter.finish()
