"""The GUI setting's MiniWoB++ engine (``gui.engine: miniwob``, spec §1.3, §3.3): web tasks in headless Chromium.

OSWorld tasks on local desktops are the other GUI engine, registered as its own adapter
(:class:`rla_core.settings.osworld.OsworldSetting`: same loop, stages and artifacts).

Episodes reuse the text-game runner and judge: the observation is a compact list of the page's
interactive elements and the admissible actions are concrete clicks and typings built from the DOM.
Every method (and :mod:`rla_core.dispatch`, playing a rollout in :meth:`MiniWobSetting.open_env`) opens its
own browser pool and always closes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.algo.curriculum import PlayTask
from rla_core.config import Setting
from rla_core.settings.base import (
    ProposalRequest,
    TaskFiles,
    WarmStartData,
    demo_screens,
    judged_labels,
    load_task_file,
    resolve_data_path,
    rewrite_requests,
    seed_tasks_loaded,
)
from rla_core.stage_inputs import (
    AdaptInputs,
    BootstrapInputs,
    EnvSection,
    EvaluateInputs,
    GuiEnv,
    SeedTasksInputs,
    expect_section,
    need,
)

if TYPE_CHECKING:
    from rla_core.envs.miniwob.env import MiniWobEnv
    from rla_core.models.generator import Generator


def slot_id(spec: dict[str, Any]) -> str:
    """A GUI slot is named by its MiniWoB task and seed."""
    return f"{spec['task']}-s{spec['seed']}"


class MiniWobSetting:
    """MiniWoB++ tasks; labels and judging as in the text games (step-wise judge, spec §2.1-2.2)."""

    judge_template = "gui_judge"
    judge_strict = True
    env_name = "miniwob"
    setting = Setting.GUI
    task_files = TaskFiles("gui", "tasks", "eval_tasks")

    @contextmanager
    def env(self, section: GuiEnv, *, screenshot_dir: Path | None = None) -> Iterator[MiniWobEnv]:
        from rla_core.envs.miniwob.env import MiniWobEnv
        from rla_core.envs.miniwob.pool import BrowserOptions

        browsers = BrowserOptions(size=section.browsers or None, call_timeout_s=section.call_timeout_s)
        with MiniWobEnv(browsers=browsers, screenshot_dir=screenshot_dir) as env:
            yield env

    def open_env(
        self, section: EnvSection, *, max_steps: int, screenshot_dir: Path | None = None
    ) -> AbstractContextManager[MiniWobEnv]:
        """A fresh browser pool, closed when the block ends (a replay opens a new tab; the pool starts a
        new browser in place of one it killed); the runner's step budget cuts the episodes."""
        return self.env(expect_section(section, GuiEnv), screenshot_dir=screenshot_dir)

    def prerequisites(self) -> list[str]:
        """Chromium and chromedriver."""
        from rla_core.envs.browser import find_browser
        from rla_core.errors import RlaError

        try:
            find_browser()
        except RlaError as exc:
            return [str(exc).strip().splitlines()[0]]
        return []

    def _specs(self, path: str | Path) -> list[dict[str, Any]]:
        from rla_core.envs.miniwob.tasks import available_tasks, default_html_dir, load_specs

        return load_specs(resolve_data_path(path), known_tasks=available_tasks(default_html_dir()))

    check_task_file = load_task_file  # the stages' loaders check every task
    check_seed_tasks = seed_tasks_loaded

    def seed_tasks(self, inputs: SeedTasksInputs) -> list[tuple[str, str, dict[str, Any]]]:
        path = need(inputs.gui, Setting.GUI).tasks
        return [(slot_id(spec), self.env_name, spec) for spec in self._specs(path)]

    def eval_tasks(self, inputs: EvaluateInputs, path: str | Path | None) -> list[PlayTask]:
        specs = self._specs(path or need(inputs.gui, Setting.GUI).eval_tasks)
        return [PlayTask(slot_id(s), slot_id(s), False, s) for s in specs]

    def warm_start(self, inputs: BootstrapInputs, *, seed: int, workdir: Path | None = None) -> WarmStartData:
        from rla_core.envs.demos import corpus_texts, judge_demos, policy_warm_start_rows

        section = need(inputs.gui, Setting.GUI)
        specs = self._specs(section.tasks)
        with self.env(section, screenshot_dir=demo_screens(inputs, workdir)) as env:
            turns = inputs.models.history_turns  # demos show the history the rollouts will show
            retries = inputs.rollout.env_retries  # a demonstration whose browser failed is replayed
            return WarmStartData(
                corpus=corpus_texts(env, specs, seed=seed, history_turns=turns, retries=retries),
                policy_rows=policy_warm_start_rows(inputs, env, specs, seed=seed),
                reward_rows=judge_demos(
                    env, specs, seed=seed, history_turns=turns, judge_template=self.judge_template,
                    screens=inputs.models.images.reward, retries=retries,
                ),
            )  # fmt: skip

    labels = staticmethod(judged_labels)  # step-judged labels, the same rule in every such setting

    def propose(
        self, inputs: AdaptInputs, job: ProposalRequest, *, env_model: Generator | None
    ) -> pl.DataFrame:
        from rla_core.envs.miniwob.rewriter import GuiRewriter, rewrite_gui_tasks

        requests = rewrite_requests(job, max_steps=inputs.rollout.max_steps)
        with self.env(need(inputs.gui, Setting.GUI)) as env:
            return rewrite_gui_tasks(
                requests, rewriter=GuiRewriter(), env=env, known_tasks=env.known_tasks,
                k=inputs.adaptation.candidates, iteration=job.iteration, seed=job.seed,
            )  # fmt: skip
