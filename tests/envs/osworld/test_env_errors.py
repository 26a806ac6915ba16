"""Fault injection on real local desktops: an X server killed mid-episode is an env_error, replayed, never
trained on; an agent that deletes the file its evaluator reads loses (it is not an env_error).

Marked slow: each test starts real sandboxed desktops and runs OSWorld's own set-up, getters and metrics
(measured times in docs/environment-errors.md).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.envs.desktop.conftest import requires_desktop

pytestmark = [requires_desktop, pytest.mark.slow]
pytest.importorskip("desktop_env", reason="needs desktop-env (scripts/setup.sh, extra osworld)")

from rla_core import procs  # noqa: E402  (after the skip: the OSWorld modules import desktop_env)
from rla_core.algo.curriculum import PlayTask  # noqa: E402
from rla_core.algo.episodes import check_env_error_share  # noqa: E402
from rla_core.algo.labels import policy_samples, task_accuracy  # noqa: E402
from rla_core.config import RewardConfig, SamplingConfig  # noqa: E402
from rla_core.envs.osworld.env import OsworldEnv  # noqa: E402
from rla_core.envs.osworld.tasks import current_key, load_tasks, normalise  # noqa: E402
from rla_core.envs.prompts import listed_actions  # noqa: E402
from rla_core.envs.rollout import play_rollouts  # noqa: E402
from rla_core.models.generator import Generation  # noqa: E402
from rla_core.schemas import empty_frame  # noqa: E402
from rla_core.settings.base import PROJECT_ROOT  # noqa: E402
from rla_core.stage_inputs import RolloutRequest  # noqa: E402

TOOK = "you took action: "


class FollowSolution:
    """A policy that plays each task's scripted solution: step k (the prompt's history has k actions) answers
    the index of the solution's k-th action. While generating turn ``kill_at``, it SIGKILLs the X server
    (by pid) of the first desktop of ``env``'s pool, once."""

    def __init__(self, tasks: Sequence[dict[str, Any]], env: OsworldEnv, *, kill_at: int | None) -> None:
        self.plans = {t["current_task"][current_key(t)]: t["solutions"][current_key(t)] for t in tasks}
        self.env, self.kill_at, self.calls = env, kill_at, 0
        self.killed: tuple[int, str] | None = None

    def generate(
        self, prompts: Sequence[str], *, n: int, sampling: SamplingConfig, seed: int,
        seeds: Sequence[int] | None = None,
    ) -> list[list[Generation]]:  # fmt: skip
        if self.calls == self.kill_at:
            desktop = self.env.pool.desktops()[0]
            assert desktop.x_server is not None
            self.killed = desktop.x_server
            os.kill(self.killed[0], signal.SIGKILL)
            deadline = time.monotonic() + 10
            while procs.is_running(*self.killed):  # dead (a zombie) before the step: the kill is asynchronous
                assert time.monotonic() < deadline, f"the X server {self.killed} survived SIGKILL for 10 s"
                time.sleep(0.01)
        self.calls += 1
        return [[self._answer(p)] * n for p in prompts]

    def _answer(self, prompt: str) -> Generation:
        [plan] = [plan for instruction, plan in self.plans.items() if instruction in prompt]
        action = plan[min(prompt.count(TOOK), len(plan) - 1)]
        return Generation(f"\\boxed{{{listed_actions(prompt).index(action)}}}", 10, 3, "stop")

    def format_prompt(self, prompt: str) -> str:
        return prompt

    def close(self) -> None:
        return None


def _request(tasks: Sequence[dict[str, Any]], *, n: int) -> RolloutRequest:
    return RolloutRequest(
        tasks=tuple(PlayTask(t["id"], t["id"], False, t) for t in tasks), n=n, max_steps=3,
        sampling=SamplingConfig(), seed=0, iteration=1, history_turns=3, env_retries=2,
    )  # fmt: skip


def test_an_x_server_killed_mid_episode_is_recorded_replayed_and_not_trained_on(tmp_path: Path) -> None:
    # Expected: 2 shipped tasks x 2 rollouts = 4 episodes on 4 desktops, each typing its solution's command
    # (step 0), then DONE (step 1). While the policy generates step 1, the X server of one desktop is
    # SIGKILLed: that episode's DONE finds its desktop broken -> env_error (kind desktop) after 2 rows; the
    # other three are evaluated and won. The replay (attempt 1, same seeds) runs on that desktop, reset
    # (a new X server) when the failed episode closed, and wins. 'env_errors' keeps the failed attempt; the
    # rollouts and the labels see only the replay.
    shipped = {t["id"]: t for t in load_tasks(PROJECT_ROOT / "data" / "gui" / "osworld" / "all.json")}
    tasks = [shipped["rla-os-write"], shipped["rla-os-touch"]]
    request = _request(tasks, n=2)
    with OsworldEnv(
        desktops=4, cache_dir=tmp_path / "cache", max_steps=3, runtime_dir=tmp_path / "rt"
    ) as env:
        gen = FollowSolution(tasks, env, kill_at=1)
        frames = play_rollouts(request, env=env, generator=gen)
        assert gen.killed is not None
        assert all(d.running() for d in env.pool.desktops())  # the broken one was reset
    rollouts, errors = frames["rollouts"], frames["env_errors"]
    assert errors.select("attempt", "steps", "error_kind").rows() == [(0, 2, "desktop")]
    assert "the desktop broke before the step" in errors["error_message"][0]
    failed = errors.select("task_id", "rollout_id").row(0)
    episodes = rollouts.unique(["task_id", "rollout_id"], keep="first", maintain_order=True)
    assert episodes.select("task_id", "rollout_id").rows() == [
        ("rla-os-write", 0), ("rla-os-write", 1), ("rla-os-touch", 0), ("rla-os-touch", 1),
    ]  # fmt: skip
    assert [(t, r, a) for t, r, a in episodes.select("task_id", "rollout_id", "attempt").iter_rows()] == [
        (t, r, int((t, r) == failed)) for t, r in episodes.select("task_id", "rollout_id").iter_rows()
    ]  # the failed episode's rows are its replay's (attempt 1), the others' their first attempt's
    assert episodes["status"].to_list() == ["won"] * 4 and rollouts["outcome"].null_count() == 0
    assert rollouts.height == 8 and rollouts["error_kind"].null_count() == 8
    check_env_error_share(
        rollouts, max_share=0.2, where="rollout"
    )  # nothing left in env_error: the stage passes
    # Nothing of the failed attempt reaches the labels: its rows are only in 'env_errors'.
    assert task_accuracy(rollouts)["n_rollouts"].to_list() == [2, 2]
    _samples, stats = policy_samples(rollouts, empty_frame("judgments"), cfg=RewardConfig(), m=1)
    assert stats["rows_total"] == rollouts.height == 8


# The evaluator reads config.json with check_direct_json_object: when the agent deleted the file, `cat`
# prints nothing and the metric's json.loads('') raises on a healthy desktop.
DELETE_TASK = {
    "id": "deleted-config",
    "snapshot": "os",
    "config": [
        {"type": "launch", "parameters": {"command": ["gnome-terminal"]}},
        {"type": "execute", "parameters": {"command": "wmctrl -l | grep -q Terminal", "shell": True, "until": {"returncode": 0}}},
        {"type": "activate_window", "parameters": {"window_name": "Terminal"}},
        {"type": "execute", "parameters": {"command": "echo '{\"debug\": false}' > ~/Desktop/config.json", "shell": True}},
    ],
    "instruction": "Set debug to true in config.json on the Desktop (never run `rm ~/Desktop/config.json`).",
    "evaluator": {
        "func": "check_direct_json_object",
        "result": {"type": "vm_command_line", "command": "cat ~/Desktop/config.json", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": {"debug": True}}},
    },
}  # fmt: skip


def test_an_agent_that_deletes_the_file_its_evaluator_reads_loses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Expected: the agent types the rm command (step 0), then DONE (step 1); the evaluator raises reading the
    # missing file on a healthy desktop -> score 0 -> status lost, outcome -1, no error kind, no env_errors.
    task = normalise(DELETE_TASK)
    task["solutions"] = {current_key(task): ['type "rm ~/Desktop/config.json" and press Enter', "DONE"]}
    with OsworldEnv(
        desktops=1, cache_dir=tmp_path / "cache", max_steps=3, runtime_dir=tmp_path / "rt"
    ) as env:
        gen = FollowSolution([task], env, kill_at=None)
        with caplog.at_level(logging.WARNING, logger="rla_core.envs.osworld.env"):
            frames = play_rollouts(_request([task], n=1), env=env, generator=gen)
    rollouts = frames["rollouts"]
    assert "env_errors" not in frames
    assert rollouts["action"].to_list() == ['type "rm ~/Desktop/config.json" and press Enter', "DONE"]
    assert rollouts.select(pl.col("status").unique()).to_series().to_list() == ["lost"]
    assert set(rollouts["outcome"]) == {-1.0} and rollouts["error_kind"].null_count() == 2
    assert "deleted-config: evaluation raised JSONDecodeError" in caplog.text  # the evaluator did raise
