"""Fault injection on real browsers: a browser killed mid-episode is an env_error, replayed, never trained on."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

from rla_core.algo.curriculum import PlayTask
from rla_core.algo.labels import policy_samples, task_accuracy
from rla_core.config import RewardConfig, SamplingConfig
from rla_core.envs.miniwob.env import MiniWobEnv
from rla_core.envs.miniwob.pool import BrowserOptions
from rla_core.envs.rollout import play_rollouts, run_rollouts
from rla_core.models.generator import Generation
from rla_core.schemas import empty_frame
from rla_core.stage_inputs import RolloutRequest
from tests.gui.conftest import RecordedGenerator, spec
from tests.gui.test_pool import alive


class KillOnce(RecordedGenerator):
    """Recorded answers; while generating the ``at``-th turn, SIGKILLs the process group of episode 0's
    browser (the first browser of the pool), once."""

    def __init__(self, texts: Sequence[str], env: MiniWobEnv, *, at: int) -> None:
        super().__init__(texts)
        self.env, self.at, self.killed = env, at, None

    def generate(self, prompts: Sequence[str], **kwargs: object) -> list[list[Generation]]:  # type: ignore[override]
        if len(self.calls) == self.at and self.killed is None:
            self.killed = self.env.pool.browsers[0].pgid
            os.killpg(self.killed, signal.SIGKILL)
        return super().generate(prompts, **kwargs)  # type: ignore[arg-type]


def test_a_browser_killed_mid_episode_is_recorded_replayed_and_not_trained_on(tmp_path: Path) -> None:
    # Expected: two episodes of click-button, each in its own browser. At step 0 (page loaded, first
    # answer being generated) episode 0's browser group is SIGKILLed: episode 0 ends env_error (kind
    # browser), episode 1 plays on. The replay (attempt 1, same seeds) opens a new tab on a live browser
    # and ends won or lost; 'env_errors' keeps the failed attempt; the labels never see it.
    request = RolloutRequest(
        tasks=(PlayTask("cb", "cb", False, spec("click-button", seed=1)),), n=2, max_steps=2,
        sampling=SamplingConfig(), seed=0, iteration=1, history_turns=2, env_retries=2,
    )  # fmt: skip
    with MiniWobEnv(browsers=BrowserOptions(size=2, runtime_dir=tmp_path, call_timeout_s=10.0)) as env:
        gen = KillOnce([r"\boxed{0}"] * 8, env, at=0)
        first = run_rollouts(request, env=env, generator=gen)
        assert gen.killed is not None and alive(gen.killed) == []
        assert first.group_by("rollout_id").agg("status").sort("rollout_id")["status"].to_list()[0] == [
            "env_error"
        ]
        failed = first.filter(first["rollout_id"] == 0)
        assert failed["error_kind"].to_list() == ["browser"] and failed["outcome"].to_list() == [None]
        assert set(first.filter(first["rollout_id"] == 1)["status"]) <= {"won", "lost"}

        gen = KillOnce([r"\boxed{0}"] * 8, env, at=0)
        frames = play_rollouts(request, env=env, generator=gen)
    rollouts, errors = frames["rollouts"], frames["env_errors"]
    episodes = rollouts.unique(["rollout_id"], keep="first").sort("rollout_id")
    assert episodes.select("rollout_id", "attempt").rows() == [(0, 1), (1, 0)]
    assert set(episodes["status"]) <= {"won", "lost"} and rollouts["outcome"].null_count() == 0
    assert errors.select("task_id", "rollout_id", "attempt", "error_kind").rows() == [("cb", 0, 0, "browser")]
    # Nothing of the failed attempt reaches the labels: its rows are only in 'env_errors'.
    assert task_accuracy(rollouts)["n_rollouts"].to_list() == [2]
    _samples, stats = policy_samples(rollouts, empty_frame("judgments"), cfg=RewardConfig(), m=1)
    assert stats["rows_total"] == rollouts.height
