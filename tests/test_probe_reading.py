"""The reading probe's shares (benchmarks/probe_reading.py), on hand-made steps."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # probes import their siblings
from probe_reading import reading_stats

PROMPT = "Task: win.\nActions:\n0: look\n1: open box\n2: take key\nThink briefly, then answer."


def test_reading_stats_separate_writing_a_listed_action_from_boxing_its_number() -> None:
    steps = pl.DataFrame(
        {
            "prompt": [PROMPT] * 4,
            # listed and boxed right | listed, boxed wrong | not listed | listed and right (index-first style)
            "response": [
                "I should take key. \\boxed{2}",
                "I should open box. \\boxed{0}",
                "I should eat cake. \\boxed{1}",
                "I choose 0: look. \\boxed{0}",
            ],
            "action": ["take key", "look", "open box", "look"],
            "expert_actions": [
                '["take key"]',
                '["open box"]',
                '["open box"]',
                '["open box"]',
            ],  # JSON, as stored
            "done": [True, False, True, True],
            "outcome": [1.0, 0.0, 0.0, 0.0],
        }
    )
    stats = reading_stats(steps)
    assert stats["text_in_list"] == pytest.approx(3 / 4)
    assert stats["index_given_text"] == pytest.approx(2 / 3)  # of the 3 listed texts, 2 boxed their number
    assert stats["text_is_action"] == pytest.approx(2 / 4)
    assert stats["success"] == pytest.approx(1 / 3)  # 3 finished episodes, 1 won
    assert stats["noop"] == pytest.approx(2 / 4) and stats["optimal"] == pytest.approx(2 / 4)
