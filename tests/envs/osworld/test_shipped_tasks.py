"""Every shipped OSWorld-format task variant scores 1 with its scripted solution and 0 with no action.

Real desktops, OSWorld's own DesktopEnv set-up, getters and metrics; the solution is played through the
candidate actions a policy sees (so each of its actions must be offered). The chrome tasks run Debian's
Chromium as ``google-chrome`` and are evaluated through its debugging port (playwright over the desktop's
forward) and the accessibility tree. Marked slow: 48 episodes on three desktops, measured time in
docs/osworld.md.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.envs.desktop.conftest import requires_desktop

pytestmark = [requires_desktop, pytest.mark.slow]
pytest.importorskip("desktop_env", reason="needs desktop-env (scripts/setup.sh, extra osworld)")

from rla_core.envs.osworld.env import OsworldEnv  # noqa: E402
from rla_core.envs.osworld.tasks import current_key, load_tasks, with_variant  # noqa: E402
from rla_core.settings.base import PROJECT_ROOT  # noqa: E402


def test_every_shipped_variant_scores_1_solved_and_0_untouched(tmp_path: Path) -> None:
    variants = [
        with_variant(t, key, 1)
        for t in load_tasks(PROJECT_ROOT / "data" / "gui" / "osworld" / "all.json")
        for key in t["task_template"]
    ]
    assert len(variants) >= 12 and sum(t["id"].startswith("rla-chrome-") for t in variants) >= 6
    with OsworldEnv(
        desktops=3, cache_dir=tmp_path / "cache", max_steps=5, runtime_dir=tmp_path / "rt"
    ) as env:

        def play(spec: dict[str, Any]) -> tuple[str, bool, float | None, float | None]:
            solution = spec["solutions"][current_key(spec)]
            episode = env.open(spec, seed=1)
            try:
                offered = all(a in episode.admissible_actions for a in solution[:1])
                for action in solution:
                    assert episode.expert_actions() == [action]  # the judge's ground truth follows it
                    episode.step(action)
            finally:
                episode.close()
            untouched = env.play(spec, ["DONE"])
            untouched.close()
            return f"{spec['id']}/{current_key(spec)}", offered, episode.score, untouched.score

        with ThreadPoolExecutor(max_workers=3) as pool:
            results = list(pool.map(play, variants))
    assert [r for r in results if r[1:] != (True, 1.0, 0.0)] == []
