"""The GUI setting's OSWorld engine (``gui.engine: osworld``, spec §1.3, §3.3): OSWorld tasks on local desktops.

Same loop, stages and artifacts as MiniWoB++ (:mod:`rla_core.settings.gui`, the other GUI engine): the
step-wise OSWorld-style judge, the text-game labels, evaluation on the held-out task file. What differs:

* tasks come from an OSWorld meta list or JSONL (:func:`rla_core.envs.osworld.tasks.load_tasks`), each slot
  named by its task key ``<domain>/<id>`` (:func:`~rla_core.envs.osworld.tasks.task_key`); a task that
  cannot run here (files not in ``gui.osworld.cache_dir``, root, network, missing programs) is **reported
  unavailable and left out** — logged with its reasons (the URL of every missing file) — never run or scored;
* episodes run on a pool of ``gui.osworld.desktops`` desktops, one per open episode, so a request's episodes
  are played in waves of the pool's size (each episode's rows do not depend on the others: the same rows);
* the warm start plays each seed task's scripted solution and one random trajectory **once**, and builds
  the tokenizer corpus, the policy rows and the judge rows from those plays (a desktop episode costs
  seconds, MiniWoB's helpers would replay each task ~10 times);
* adaptation: :mod:`rla_core.envs.osworld.rewriter` (evaluator key and hints within the task's template),
  written by the environment model (``adaptation.rewriter=llm``, warm-started on the parametric rewriter's
  moves when it is a tiny one) or by the parametric rewriter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.algo.curriculum import PlayTask
from rla_core.config import RewriterKind, Setting
from rla_core.errors import ConfigError, EnvironmentSpecError
from rla_core.settings.base import (
    ProposalRequest,
    TaskFiles,
    WarmStartData,
    demo_screens,
    judged_labels,
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
    OsworldCache,
    SeedTasksInputs,
    expect_section,
    need,
)

if TYPE_CHECKING:
    from rla_core.envs.osworld.env import OsworldEnv
    from rla_core.models.generator import Generator

log = logging.getLogger(__name__)
RANDOM_DEMO_STEPS = 3  # steps of the one random trajectory per task that gives the judge its negative rows


def split_available(
    path: str | Path, section: OsworldCache | None
) -> tuple[list[dict[str, Any]], list[tuple[str, list[str]]]]:
    """The tasks of a task file that can run here, and (task key, reasons) of those that cannot (files not
    in ``gui.osworld.cache_dir``, root, network, missing programs)."""
    from rla_core.envs.osworld.tasks import load_tasks, task_key, unavailable

    cache = Path(need(section, Setting.GUI).cache_dir)
    runnable, blocked = [], []
    for task in load_tasks(resolve_data_path(path)):
        reasons = unavailable(task, cache)
        if reasons:
            blocked.append((task_key(task), reasons))
        else:
            runnable.append(task)
    return runnable, blocked


def load_available(path: str | Path, section: OsworldCache | None, *, what: str) -> list[dict[str, Any]]:
    """The runnable tasks of a task file; each unavailable one is logged with its reasons and left out."""
    runnable, blocked = split_available(path, section)
    for key, reasons in blocked:
        log.warning("OSWorld %s task %s is unavailable here: %s", what, key, "; ".join(reasons))
    if not runnable:
        raise EnvironmentSpecError(
            f"none of the {len(blocked)} OSWorld {what} tasks of '{path}' can run here (see the warnings: "
            "fill the file cache with python -m rla_core.envs.osworld.cache fill, docs/osworld.md)"
        )
    return runnable


class OsworldSetting:
    """OSWorld tasks; labels and judging as in MiniWoB++ (step-wise OSWorld-style judge, spec §2.1-2.2)."""

    judge_template = "gui_judge"
    judge_strict = True
    env_name = "osworld"
    setting = Setting.GUI
    task_files = TaskFiles("gui", "tasks", "eval_tasks")

    @staticmethod
    def opener(
        section: GuiEnv, *, max_steps: int, screenshot_dir: Path | None = None
    ) -> Callable[[], OsworldEnv]:
        """What builds this section's desktop pool (opened by the caller: :meth:`env`, or the rewrites'
        solution check, which opens one when it first needs it)."""
        from rla_core.envs.osworld.env import OsworldEnv

        osw = need(section.osworld, Setting.GUI)

        def build() -> OsworldEnv:
            return OsworldEnv(
                desktops=osw.desktops or None, cache_dir=Path(osw.cache_dir), max_steps=max_steps,
                a11y_max_tokens=osw.a11y_max_tokens, max_clicks=osw.max_clicks, step_pause_s=osw.step_pause_s,
                screenshot_dir=screenshot_dir,
            )  # fmt: skip

        return build

    @contextmanager
    def env(
        self, section: GuiEnv, *, max_steps: int, screenshot_dir: Path | None = None
    ) -> Iterator[OsworldEnv]:
        with self.opener(section, max_steps=max_steps, screenshot_dir=screenshot_dir)() as env:
            yield env

    def open_env(
        self, section: EnvSection, *, max_steps: int, screenshot_dir: Path | None = None
    ) -> AbstractContextManager[OsworldEnv]:
        """A pool of desktops, stopped when the block ends; at most its size of episodes are open at once
        (``max_open``: the rollout is played in waves of it). ``max_steps`` is given to the environment so
        that the last step is scored."""
        return self.env(expect_section(section, GuiEnv), max_steps=max_steps, screenshot_dir=screenshot_dir)

    def prerequisites(self) -> list[str]:
        """The desktop programs and, as root, the sandbox user."""
        from rla_core.envs.desktop.desktop import missing_prerequisites

        return missing_prerequisites()

    def check_task_file(self, inputs: SeedTasksInputs | EvaluateInputs) -> list[str]:
        """The task list loads (every listed example present and valid); tasks that cannot run here are a
        warning: the stages leave them out and log why."""
        cache: OsworldCache | None
        if isinstance(inputs, EvaluateInputs):
            held_out = need(inputs.gui, Setting.GUI)
            path, cache = held_out.eval_tasks, held_out.osworld
        else:
            train = need(inputs.gui, Setting.GUI)
            path, cache = train.tasks, train.osworld
        runnable, blocked = split_available(path, cache)
        if not blocked:
            return []
        first, reasons = blocked[0]
        return [
            f"{len(blocked)} of the {len(runnable) + len(blocked)} OSWorld tasks of '{resolve_data_path(path)}' "
            f"cannot run here and will be left out (first: {first}: {reasons[0]}); fill the file cache with "
            "`python -m rla_core.envs.osworld.cache fill` (docs/osworld.md)"
        ]

    check_seed_tasks = seed_tasks_loaded

    def seed_tasks(self, inputs: SeedTasksInputs) -> list[tuple[str, str, dict[str, Any]]]:
        from rla_core.envs.osworld.tasks import task_key

        section = need(inputs.gui, Setting.GUI)
        tasks = load_available(section.tasks, section.osworld, what="training")
        return [(task_key(t), self.env_name, t) for t in tasks]

    def eval_tasks(self, inputs: EvaluateInputs, path: str | Path | None) -> list[PlayTask]:
        from rla_core.envs.osworld.tasks import task_key

        section = need(inputs.gui, Setting.GUI)
        tasks = load_available(path or section.eval_tasks, section.osworld, what="evaluation")
        return [PlayTask(task_key(t), task_key(t), False, t) for t in tasks]

    def warm_start(self, inputs: BootstrapInputs, *, seed: int, workdir: Path | None = None) -> WarmStartData:
        from rla_core.algo.seeds import derive_seed
        from rla_core.envs.demos import (
            DEMO_COLUMNS,
            DemoStep,
            following,
            judge_row,
            play_demo,
            policy_row,
            random_chooser,
        )
        from rla_core.envs.osworld.rewriter import rewrite_demos
        from rla_core.envs.osworld.tasks import task_key
        from rla_core.envs.prompts import template_texts

        section = need(inputs.gui, Setting.GUI)
        specs = [spec for _slot, _env, spec in self.seed_tasks(inputs.seed_sources())]
        turns = inputs.models.history_turns
        retries = inputs.rollout.env_retries  # a demonstration whose desktop failed is replayed

        with self.env(
            section, max_steps=inputs.rollout.max_steps, screenshot_dir=demo_screens(inputs, workdir)
        ) as env:

            def plays(i: int) -> list[tuple[list[DemoStep], bool]]:
                spec = specs[i]
                out = []
                for plan in env.demonstrations(spec, seed=0):
                    steps = play_demo(
                        env, spec, chooser=following(plan), max_steps=len(plan), history_turns=turns,
                        retries=retries,
                    )  # fmt: skip
                    out.append((steps, True))
                pick = random_chooser(derive_seed(seed, task_key(spec), "random-demo"))
                steps = play_demo(
                    env, spec, chooser=pick, max_steps=RANDOM_DEMO_STEPS, history_turns=turns, retries=retries
                )
                out.append((steps, False))
                return out

            with ThreadPoolExecutor(max_workers=env.pool.size) as ex:
                played = [t for per_task in ex.map(plays, range(len(specs))) for t in per_task]
        images = inputs.models.images
        policy_rows = [
            policy_row(step, images=images.policy)
            for steps, is_expert in played if is_expert for step in steps
        ]  # fmt: skip
        judge_rows = [
            judge_row(step, template=self.judge_template, screens=images.reward)
            for steps, _expert in played
            for step in steps
        ]
        policy = pl.DataFrame(policy_rows, schema=DEMO_COLUMNS)
        judge = pl.DataFrame(judge_rows, schema=DEMO_COLUMNS)
        # A tiny environment model learns the rewrites it will be asked for (the parametric rewriter's moves).
        rewrites = rewrite_demos(specs) if inputs.models.environment is not None else None
        texts = [policy, judge, *([rewrites] if rewrites is not None else [])]
        corpus = [
            *template_texts().values(),  # the shared templates and OSWorld's own rewrite prompt
            *(t for rows in texts for c in ("prompt", "response") for t in rows[c]),
        ]
        return WarmStartData(corpus=corpus, policy_rows=policy, reward_rows=judge, environment_rows=rewrites)

    labels = staticmethod(judged_labels)  # step-judged labels, the same rule in every such setting

    def propose(
        self, inputs: AdaptInputs, job: ProposalRequest, *, env_model: Generator | None
    ) -> pl.DataFrame:
        """The environment model's rewrites with ``adaptation.rewriter=llm`` (all targets' samples in one
        generate call, sharded over a Ray cluster like every setting's; a target with no valid sample keeps
        its task as the pending one, :func:`~rla_core.envs.osworld.rewriter.with_fallback`), else the
        parametric ones; every candidate through the same checks, the scripted solution on a desktop."""
        from rla_core.envs.osworld.rewriter import (
            OsworldPrompts,
            OsworldRewriter,
            SolutionCheck,
            check_osworld_candidate,
            with_fallback,
        )
        from rla_core.envs.rewriter import ModelRewriter, TaskRewriter, rewrite_tasks

        llm = inputs.adaptation.rewriter is RewriterKind.LLM
        if llm and env_model is None and job.targets:
            raise ConfigError(
                "adaptation.rewriter=llm needs an environment model for OSWorld rewrites: set "
                "models.environment (a checkpoint, hub id or tiny:<name>) or use adaptation.rewriter=parametric"
            )
        requests = rewrite_requests(job, max_steps=inputs.rollout.max_steps)
        rewriter: TaskRewriter = (
            ModelRewriter(OsworldPrompts(), env_model, sampling=inputs.adaptation.sampling)
            if llm and env_model is not None
            else OsworldRewriter()
        )
        validator = SolutionCheck(
            self.opener(need(inputs.gui, Setting.GUI), max_steps=inputs.rollout.max_steps)
        )
        try:
            proposals = rewrite_tasks(
                requests, rewriter=rewriter, env=validator, k=inputs.adaptation.candidates,
                seed=job.seed, iteration=job.iteration, check=check_osworld_candidate,
            )  # fmt: skip
        finally:
            validator.close()
        return with_fallback(proposals, requests, iteration=job.iteration) if llm else proposals
