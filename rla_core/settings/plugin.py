"""The adapter of an environment plug-in (``setting: plugin``; docs/environments.md).

A plug-in (:mod:`rla_core.plugins`) is played as a multi-turn environment like the text games: the same
rollout runner, step judge (with the plug-in's own judge prompt), step-judged labels, critic feedback and
rewrite validation (inside the plug-in's declared rewrite space). The adapter is the plug-in resolved
once for a stage (:meth:`PluginSetting.of`: its entry point loaded, and for a stage that opens it its
options validated); every use opens one instance through the guarded path
(:class:`~rla_core.envs.plugin_env.GuardedPlugin`) and closes it when the use is over.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.algo.curriculum import PlayTask
from rla_core.config import RewriterKind, Setting
from rla_core.errors import ConfigError, EnvironmentFault, EnvironmentSpecError
from rla_core.plugins import InstalledPlugin, find_plugin
from rla_core.schemas import empty_frame
from rla_core.settings.base import (
    ProposalRequest,
    TaskFiles,
    WarmStartData,
    judged_labels,
    numbered_jsonl,
    rewrite_requests,
)
from rla_core.stage_inputs import (
    AdaptInputs,
    BootstrapInputs,
    EnvSection,
    EvaluateInputs,
    PluginChoice,
    PluginSection,
    SeedTasksInputs,
    expect_section,
    need,
)

if TYPE_CHECKING:
    from rla_core.envs.plugin_env import GuardedPlugin
    from rla_core.envs.rewriter import TaskRewriter
    from rla_core.models.generator import Generator


@dataclass(frozen=True)
class PluginSetting:
    """One installed plug-in's adapter: multi-turn episodes, step judgments by the reward model.

    ``plugin``: the plug-in resolved for the stage, with its validated options when the stage opens it
    (a stage that reads only ``plugin.name`` — judge, label — gets its class alone)."""

    plugin: InstalledPlugin
    judge_strict: bool = False
    setting: Setting = Setting.PLUGIN
    task_files: TaskFiles | None = None  # the tasks come from the plug-in's code

    @classmethod
    def of(cls, section: PluginChoice) -> PluginSetting:
        """The adapter of the plug-in a stage's ``plugin`` section names, resolved once: its entry point
        loaded and, when the section carries options (:class:`~rla_core.stage_inputs.PluginSection`), those
        validated (a ConfigError names the key, a required one missing included)."""
        found = find_plugin(section.name)
        return cls(found.with_options(section.options) if isinstance(section, PluginSection) else found)

    @property
    def env_name(self) -> str:
        return self.plugin.name

    @property
    def judge_template(self) -> Template:
        return Template(self.plugin.cls.judge_template)

    @contextmanager
    def open_env(
        self, section: EnvSection, *, max_steps: int, screenshot_dir: Path | None = None
    ) -> Iterator[GuardedPlugin]:
        """One instance of the plug-in (the guarded path into it), closed when the block ends."""
        from rla_core.envs.plugin_env import GuardedPlugin

        chosen = expect_section(section, PluginSection)
        if chosen.name != self.plugin.name:
            raise ConfigError(
                f"this adapter plays plug-in {self.plugin.name!r}, the request names {chosen.name!r}: build "
                "the adapter and the request from the same stage slice"
            )
        env = GuardedPlugin(self.plugin)
        try:
            yield env
        finally:
            env.close()

    def _open(self, section: PluginSection | None) -> AbstractContextManager[GuardedPlugin]:
        """An instance for a use that plays no rollout (tasks, warm start, rewrites, the preflight)."""
        return self.open_env(need(section, Setting.PLUGIN), max_steps=1)

    def prerequisites(self) -> list[str]:
        """Nothing of ours beyond the plug-in's package (resolving it checked that it loads)."""
        return []

    def check_task_file(self, inputs: SeedTasksInputs | EvaluateInputs) -> list[str]:
        """Both splits of the plug-in's code load and are well-formed (ids, specs); no file to read."""
        if isinstance(inputs, EvaluateInputs):
            self.eval_tasks(inputs, None)  # listing them checks them
        else:
            self.seed_tasks(inputs)
        return []

    def seed_tasks(self, inputs: SeedTasksInputs) -> list[tuple[str, str, dict[str, Any]]]:
        with self._open(inputs.plugin) as env:
            return [(task.task_id, self.env_name, task.spec) for task in env.tasks("train")]

    def eval_tasks(self, inputs: EvaluateInputs, path: str | Path | None) -> list[PlayTask]:
        """The plug-in's held-out tasks; with ``path`` (``rla eval --tasks``), those a JSONL file names by
        ``{"task_id": ...}`` (an unknown id lists the plug-in's held-out ids)."""
        with self._open(inputs.plugin) as env:
            if path is None:
                tasks = env.tasks("eval")
            else:
                tasks = [
                    env.task("eval", str(row.get("task_id")))
                    for _line, row in numbered_jsonl(path, what="task id")
                ]
        return [PlayTask(t.task_id, t.task_id, False, t.spec) for t in tasks]

    def warm_start(self, inputs: BootstrapInputs, *, seed: int, workdir: Path | None = None) -> WarmStartData:
        """Corpus from the plug-in's episodes and texts; the policy's demonstrations when the plug-in gives
        them, the judge's when it gives expert actions (its step labels; a free-form plug-in's: its
        demonstrations, labelled by outcome, :func:`~rla_core.envs.demos.judge_demos`); otherwise no rows: that model
        starts from its untrained tiny weights (or the checkpoint configured). Every episode is played
        through the guarded path and replayed like a rollout's when the plug-in fails in it
        (``rollout.env_retries``); a seed task that still cannot be played fails the stage naming it."""
        from rla_core.envs.demos import DEMO_COLUMNS, corpus_texts, judge_demos, policy_warm_start_rows
        from rla_core.envs.plugin_env import implements

        turns = inputs.models.history_turns  # demos show the history the rollouts will show
        retries = inputs.rollout.env_retries
        empty = pl.DataFrame(schema=DEMO_COLUMNS)
        cls = self.plugin.cls
        with self._open(inputs.plugin) as env:
            specs = [task.spec for task in env.tasks("train")]
            texts = [self.judge_template.template, env.plugin.rewrite_template, *env.corpus()]
            if env.plays_itself:  # its episodes need the policy's endpoint: only its texts, no demonstrations
                instructions = [
                    str(env.call("instruction", s, partial(env.plugin.instruction, s))) for s in specs
                ]
                return WarmStartData(corpus=[*instructions, *texts], policy_rows=empty, reward_rows=empty)
            corpus = corpus_texts(env, specs, seed=seed, history_turns=turns, retries=retries) + texts
            return WarmStartData(
                corpus=corpus,
                policy_rows=(
                    policy_warm_start_rows(inputs, env, specs, seed=seed)
                    if implements(cls, "demonstration")
                    else empty
                ),
                reward_rows=judge_demos(
                    env, specs, seed=seed, history_turns=turns, judge_template=self.judge_template,
                    retries=retries, free_form=env.free_form,
                ) if implements(cls, "demonstration" if env.free_form else "expert_actions") else empty,
            )  # fmt: skip

    def declarations(self, inputs: BootstrapInputs) -> tuple[bool, bool]:
        """What the plug-in declares that the run's configuration must agree with: (its turns are free-form,
        it has a rewrite space)."""
        with self._open(inputs.plugin) as env:
            return env.free_form, env.space is not None

    def check_seed_tasks(self, inputs: BootstrapInputs) -> list[str]:
        """The preflight's look at the plug-in's seed tasks, one line per problem: the plug-in's
        ``check_variant`` accepts each, and each one's demonstration (when the plug-in gives them) is
        played once, through the guarded path, and wins it."""
        from rla_core.envs.plugin_env import implements

        problems: list[str] = []
        with self._open(inputs.plugin) as env:
            for task in env.tasks("train"):
                where = f"plug-in {self.env_name!r}, seed task {task.task_id!r}"
                verdict = env.check_winnable(task.spec)
                if verdict is not None:
                    problems.append(f"{where} is not a playable task: {verdict}")
                if implements(self.plugin.cls, "demonstration"):
                    problems += [f"{where} {p}" for p in _demonstration_problems(env, task.spec)]
        return problems

    labels = staticmethod(judged_labels)  # step-judged labels, the same rule in every such setting

    def propose(
        self, inputs: AdaptInputs, job: ProposalRequest, *, env_model: Generator | None
    ) -> pl.DataFrame:
        """Critic feedback, then the plug-in's own moves, or with ``adaptation.rewriter=llm`` the environment
        model's rewrites from the plug-in's prompt; every candidate checked against the rewrite space, then
        by the plug-in."""
        from rla_core.envs.plugin_env import PluginPrompts, PluginRewriter, check_variant
        from rla_core.envs.rewriter import ModelRewriter, RewriteRequest, rewrite_tasks

        with self._open(inputs.plugin) as env:
            if env.space is None:  # no rewrites declared: adaptation is off for it (the preflight says so)
                return empty_frame("proposals")
            requests = rewrite_requests(
                job,
                max_steps=inputs.rollout.max_steps,
                summarizer=env_model,
                sampling=inputs.adaptation.sampling,
            )
            rewriter: TaskRewriter = (
                ModelRewriter(PluginPrompts(env), env_model, sampling=inputs.adaptation.sampling)
                if env_model is not None and inputs.adaptation.rewriter is RewriterKind.LLM
                else PluginRewriter(env)
            )

            def check(spec: dict[str, Any], request: RewriteRequest) -> str | None:
                return check_variant(env, spec, request)

            return rewrite_tasks(
                requests, rewriter=rewriter, env=env, k=inputs.adaptation.candidates, seed=job.seed,
                iteration=job.iteration, check=check,
            )  # fmt: skip


def _demonstration_problems(env: GuardedPlugin, spec: dict[str, Any]) -> list[str]:
    """Why the plug-in's demonstration of ``spec`` does not win it, played once from its reset (empty: it wins)."""
    try:
        plans = env.demonstrations(spec, seed=0)
        for plan in plans:
            episode = env.open(spec, seed=0)
            result = None
            for action in plan:
                if not episode.free_form and action not in episode.admissible_actions:
                    return [f"cannot be demonstrated: {action!r} is not an admissible action there"]
                result = episode.step(action)
                if result.done:
                    break
            if result is None or not result.won:
                return [f"cannot be demonstrated: its demonstration {plan!r} does not win it"]
    except (EnvironmentSpecError, EnvironmentFault) as exc:
        return [f"cannot be demonstrated: {str(exc).splitlines()[0]}"]
    return []
