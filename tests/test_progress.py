"""rla_core.progress: counters, throttled lines, records, and the no-reporter fast path."""

from __future__ import annotations

import pytest

from rla_core import progress
from rla_core.progress import ProgressRecord, Reporter


def test_record_line_is_hand_formatted() -> None:
    record = ProgressRecord(
        label="rollout iter 3", name="", unit="episodes", done=96, total=192, rate_unit="steps", rate=41.23,
        elapsed_s=12.4, counts={"steps": 511, "tokens": 5120}, finished=False, updated_at="2026-12-01T00:00:00+00:00",
    )  # fmt: skip
    # done/total, then the rate to one decimal (41.23 → 41.2), then every running total, then whole seconds.
    assert record.line() == "rollout iter 3: 96/192 episodes, 41.2 steps/s, 511 steps, 5120 tokens (12s)"
    finished = ProgressRecord(**{**record.to_dict(), "name": "SFT", "total": None, "finished": True})
    assert (
        finished.line()
        == "rollout iter 3 SFT: 96 episodes, 41.2 steps/s, 511 steps, 5120 tokens (done in 12s)"
    )
    assert ProgressRecord.from_dict(record.to_dict()) == record


def test_without_a_reporter_counters_do_nothing() -> None:
    assert progress.current() is None
    with progress.track("", total=3, unit="episodes") as counter:
        counter.advance(3, steps=9)
    assert counter.done == 0 and counter.counts == {}  # nothing is even counted


def test_every_advance_logs_when_unthrottled_and_the_last_line_says_done() -> None:
    lines: list[str] = []
    records: list[list[ProgressRecord]] = []
    reporter = Reporter(
        "judge iter 1", log=lines.append, record=records.append, log_every_s=0.0, record_every_s=0.0
    )
    with progress.reporting(reporter):
        assert progress.current() is reporter
        with progress.track("", total=4, unit="episodes", rate="steps") as counter:
            counter.advance(1, steps=5)
            counter.advance(3, steps=15)
    assert progress.current() is None
    # The advance that completes the loop logs nothing itself: the end line follows at once.
    assert [line.split(",")[0] for line in lines] == [
        "judge iter 1: 1/4 episodes",
        "judge iter 1: 4/4 episodes",
    ]
    assert "5 steps" in lines[0] and "20 steps" in lines[1] and "(done in " in lines[1]
    last = records[-1]
    assert len(last) == 1 and last[0].finished and last[0].done == 4 and last[0].counts == {"steps": 20}


def test_throttled_reporter_logs_only_the_final_line_and_keeps_finished_loops() -> None:
    lines: list[str] = []
    records: list[list[ProgressRecord]] = []
    reporter = Reporter(
        "bootstrap iter 0", log=lines.append, record=records.append, log_every_s=1e9, record_every_s=1e9
    )
    with progress.reporting(reporter):
        first = progress.start("SFT", total=2, unit="optimizer steps")
        first.advance(1, rows=8)
        first.advance(1, rows=3)
        first.finish()
        first.finish()  # a second finish is a no-op
        with progress.track("SFT", total=1, unit="optimizer steps") as second:
            second.advance(1, rows=8)
    assert len(lines) == 2 and lines[0].startswith("bootstrap iter 0 SFT: 2/2 optimizer steps")
    assert "11 rows" in lines[0]  # 8 + 3
    # Each close writes a record holding every loop so far, finished ones first.
    assert [len(r) for r in records] == [1, 2] and all(r.finished for r in records[-1])


def test_a_loop_that_raises_still_reports_its_end() -> None:
    lines: list[str] = []
    reporter = Reporter("train_policy iter 2", log=lines.append, log_every_s=1e9)
    with (
        progress.reporting(reporter),
        pytest.raises(RuntimeError),
        progress.track("", total=10, unit="steps") as counter,
    ):
        counter.advance(3)
        raise RuntimeError("boom")
    assert lines == [lines[0]] and lines[0].startswith("train_policy iter 2: 3/10 steps")


def test_tty_reporter_draws_a_bar_instead_of_intermediate_lines() -> None:
    lines: list[str] = []
    with progress.reporting(
        Reporter("rollout iter 1", log=lines.append, tty=True, log_every_s=0.0)
    ) as reporter:
        with progress.track("", total=2, unit="episodes") as counter:
            assert reporter._progress is not None  # the rich bar is live while the loop runs
            counter.advance(2)
        assert reporter._progress is None  # and gone with the last loop
    assert len(lines) == 1 and lines[0].startswith("rollout iter 1: 2/2 episodes")


def test_inner_loops_log_only_when_slow_and_leave_no_finished_record() -> None:
    lines: list[str] = []
    records: list[list[ProgressRecord]] = []
    reporter = Reporter(
        "rollout iter 2", log=lines.append, record=records.append, log_every_s=1e9, record_every_s=1e9
    )
    with progress.reporting(reporter), progress.track("", total=2, unit="episodes") as outer:
        for _turn in range(3):
            with progress.track("generation", total=4, unit="sequences", log_end=False) as inner:
                inner.advance(4)
        outer.advance(2)
    # Only the outer loop's end line; the last record holds the outer loop alone.
    assert len(lines) == 1 and lines[0].startswith("rollout iter 2: 2/2 episodes")
    assert [r.unit for r in records[-1]] == ["episodes"]
