"""The GUI setting: MiniWoB++ web tasks in headless Chromium, the laptop stand-in for OSWorld (spec §1.3, §3.3).

Episodes reuse the text-game runner and judge: the observation is a compact list of the page's
interactive elements and the admissible actions are concrete clicks and typings built from the DOM.
Every method opens its own browser pool and always closes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.algo.curriculum import PlayTask, RewriteTarget
from rla_core.config import InvalidAction, RunConfig
from rla_core.settings import WarmStartData, resolve_data_path
from rla_core.settings.textgame import TextGameSetting

if TYPE_CHECKING:
    from rla_core.config import SamplingConfig
    from rla_core.envs.miniwob.env import MiniWobEnv
    from rla_core.models.generator import Generator


SCREENSHOTS = Path("files") / "screenshots"


def slot_id(spec: dict[str, Any]) -> str:
    """A GUI slot is named by its MiniWoB task and seed."""
    return f"{spec['task']}-s{spec['seed']}"


class GuiSetting:
    """MiniWoB++ tasks; labels and judging as in the text games (step-wise judge, spec §2.1-2.2)."""

    judge_template = "gui_judge"
    judge_strict = True
    env_name = "miniwob"

    @contextmanager
    def env(self, cfg: RunConfig, *, screenshot_dir: Path | None = None) -> Iterator[MiniWobEnv]:
        from rla_core.envs.miniwob.env import MiniWobEnv

        with MiniWobEnv(
            pool_size=cfg.gui.browsers or None,
            call_timeout_s=cfg.gui.call_timeout_s,
            screenshot_dir=screenshot_dir,
        ) as env:
            yield env

    def _specs(self, path: str | Path) -> list[dict[str, Any]]:
        from rla_core.envs.miniwob.tasks import available_tasks, default_html_dir, load_specs

        return load_specs(resolve_data_path(path), known_tasks=available_tasks(default_html_dir()))

    def seed_tasks(self, cfg: RunConfig) -> list[tuple[str, str, dict[str, Any]]]:
        return [(slot_id(spec), self.env_name, spec) for spec in self._specs(cfg.gui.tasks)]

    def eval_tasks(self, cfg: RunConfig, path: str | Path | None) -> list[PlayTask]:
        return [PlayTask(slot_id(s), slot_id(s), False, s) for s in self._specs(path or cfg.gui.eval_tasks)]

    def warm_start(self, cfg: RunConfig, *, seed: int) -> WarmStartData:
        from rla_core.envs.demos import corpus_texts, judge_demos, policy_warm_start_rows

        specs = self._specs(cfg.gui.tasks)
        with self.env(cfg) as env:
            turns = cfg.models.history_turns  # demos show the history the rollouts will show
            return WarmStartData(
                corpus=corpus_texts(env, specs, seed=seed, history_turns=turns),
                policy_rows=policy_warm_start_rows(cfg, env, specs, seed=seed),
                reward_rows=judge_demos(
                    env, specs, seed=seed, history_turns=turns, judge_template=self.judge_template
                ),
            )

    def rollout(
        self,
        cfg: RunConfig,
        tasks: list[PlayTask],
        *,
        generator: Generator,
        n: int,
        max_steps: int,
        sampling: SamplingConfig,
        seed: int,
        iteration: int,
        workdir: Path | None = None,
        invalid_action: InvalidAction = InvalidAction.FALLBACK,
    ) -> dict[str, pl.DataFrame]:
        """Play the tasks in a fresh browser pool; with ``workdir`` and ``gui.screenshots``, each step's
        screenshot is kept under ``workdir/files/screenshots`` and referenced relative to ``workdir``."""
        from rla_core.envs.rollout import run_rollouts

        shots = workdir / SCREENSHOTS if workdir is not None and cfg.gui.screenshots else None
        with self.env(cfg, screenshot_dir=shots) as env:
            rollouts = run_rollouts(
                tasks,
                env=env, generator=generator, n=n, max_steps=max_steps, sampling=sampling, seed=seed,
                iteration=iteration, history_turns=cfg.models.history_turns, invalid_action=invalid_action,
            )  # fmt: skip
        if workdir is not None:
            prefix = str(workdir) + "/"
            rollouts = rollouts.with_columns(pl.col("observation_ref").str.strip_prefix(prefix))
        return {"rollouts": rollouts}

    def labels(
        self, cfg: RunConfig, frames: dict[str, pl.DataFrame], *, accepted: set[str]
    ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, float]]:
        return TextGameSetting().labels(cfg, frames, accepted=accepted)

    def propose(
        self,
        cfg: RunConfig,
        frames: dict[str, pl.DataFrame],
        targets: list[RewriteTarget],
        *,
        env_model: Generator | None,
        seed: int,
        iteration: int,
    ) -> pl.DataFrame:
        from rla_core.envs.feedback import critic_feedback
        from rla_core.envs.miniwob.rewriter import GuiRewriter, rewrite_gui_tasks
        from rla_core.envs.rewriter import RewriteRequest

        feedback = critic_feedback(frames["rollouts"], frames["judgments"], max_steps=cfg.rollout.max_steps)
        requests = [
            RewriteRequest(
                slot_id=t.slot_id,
                parent_task_id=t.task_id,
                parent_spec=t.spec,
                root_spec=t.root_spec,
                goal=t.goal,
                prev_acc=t.prev_acc,
                feedback=feedback.get(t.task_id),
            )
            for t in targets
        ]
        with self.env(cfg) as env:
            return rewrite_gui_tasks(
                requests, rewriter=GuiRewriter(), env=env, known_tasks=env.known_tasks,
                k=cfg.adaptation.candidates, iteration=iteration, seed=seed,
            )  # fmt: skip
