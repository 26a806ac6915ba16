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

import dataclasses
import logging
import random
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.algo.curriculum import PlayTask
from rla_core.config import RewriterKind, Setting
from rla_core.errors import ConfigError, EnvironmentSpecError
from rla_core.settings.base import (
    ProposalRequest,
    WarmStartData,
    demo_screens,
    judged_labels,
    relative_refs,
    resolve_data_path,
    rewrite_requests,
    screenshot_dir,
)
from rla_core.stage_inputs import (
    AdaptInputs,
    BootstrapInputs,
    EvaluateInputs,
    GuiEnv,
    OsworldCache,
    RolloutRequest,
    SeedTasksInputs,
    expect_section,
    need,
)

if TYPE_CHECKING:
    from rla_core.envs.osworld.env import OsworldEnv
    from rla_core.models.generator import Generator

log = logging.getLogger(__name__)
RANDOM_DEMO_STEPS = 3  # steps of the one random trajectory per task that gives the judge its negative rows


def load_available(path: str | Path, section: OsworldCache | None, *, what: str) -> list[dict[str, Any]]:
    """The runnable tasks of a task file; each unavailable one is logged with its reasons and left out."""
    from rla_core.envs.osworld.tasks import load_tasks, task_key, unavailable

    cache = Path(need(section, Setting.GUI).cache_dir)
    tasks = load_tasks(resolve_data_path(path))
    runnable = []
    for task in tasks:
        reasons = unavailable(task, cache)
        if reasons:
            log.warning(
                "OSWorld %s task %s is unavailable here: %s", what, task_key(task), "; ".join(reasons)
            )
        else:
            runnable.append(task)
    if not runnable:
        raise EnvironmentSpecError(
            f"none of the {len(tasks)} OSWorld {what} tasks of '{path}' can run here (see the warnings: "
            "fill the file cache with python -m rla_core.envs.osworld.cache fill, docs/osworld.md)"
        )
    return runnable


class OsworldSetting:
    """OSWorld tasks; labels and judging as in MiniWoB++ (step-wise OSWorld-style judge, spec §2.1-2.2)."""

    judge_template = "gui_judge"
    judge_strict = True
    env_name = "osworld"
    one_generation_call = False

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
        from rla_core.envs.demos import DEMO_COLUMNS, DemoStep, judge_row, play_demo, policy_row
        from rla_core.envs.osworld.rewriter import rewrite_demos
        from rla_core.envs.osworld.tasks import task_key
        from rla_core.envs.prompts import template_texts

        section = need(inputs.gui, Setting.GUI)
        specs = [spec for _slot, _env, spec in self.seed_tasks(inputs.seed_sources())]
        turns = inputs.models.history_turns

        with self.env(
            section, max_steps=inputs.rollout.max_steps, screenshot_dir=demo_screens(inputs, workdir)
        ) as env:

            def plays(i: int) -> list[tuple[list[DemoStep], bool]]:
                spec = specs[i]
                out = []
                for plan in env.demonstrations(spec, seed=0):

                    def expert(step: int, actions: list[str], _ep: Any, plan: list[str] = plan) -> str | None:
                        return plan[step] if step < len(plan) else None

                    out.append(
                        (play_demo(env, spec, choose=expert, max_steps=len(plan), history_turns=turns), True)
                    )
                rng = random.Random(derive_seed(seed, task_key(spec), "random-demo"))

                def pick(step: int, actions: list[str], _ep: Any) -> str | None:
                    return rng.choice(actions) if actions else None

                out.append(
                    (
                        play_demo(env, spec, choose=pick, max_steps=RANDOM_DEMO_STEPS, history_turns=turns),
                        False,
                    )
                )
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

    def rollout(self, request: RolloutRequest, *, generator: Generator) -> dict[str, pl.DataFrame]:
        """Play the request's episodes in waves of the desktop pool's size; with ``request.workdir`` and
        ``gui.screenshots``, each step's screenshot is kept under ``workdir/files/screenshots``."""
        from rla_core.envs.osworld.env import waves
        from rla_core.envs.rollout import play_rollouts, run_rollouts

        section = expect_section(request.env, GuiEnv)
        workdir = request.workdir
        shots = screenshot_dir(request)
        frames: dict[str, list[pl.DataFrame]] = {}
        with self.env(section, max_steps=request.max_steps, screenshot_dir=shots) as env:
            for wave in waves(request.episode_keys(), env.pool.size):
                part = dataclasses.replace(request, episodes=wave)
                # A failed episode's desktop was reset (or replaced) when it closed: its replay starts clean.
                played = play_rollouts(part, lambda r: run_rollouts(r, env=env, generator=generator))
                for name, frame in played.items():
                    frames.setdefault(name, []).append(frame)
        out = {name: pl.concat(parts, how="vertical") for name, parts in frames.items()}
        return {**out, "rollouts": relative_refs(out["rollouts"], workdir)}

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
