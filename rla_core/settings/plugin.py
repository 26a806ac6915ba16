"""The adapter of an environment plug-in (``setting: plugin``; docs/environments.md).

A plug-in (:mod:`rla_core.plugins`) is played as a multi-turn environment like the text games: the same
rollout runner, step judge (with the plug-in's own judge prompt), step-judged labels, critic feedback and
rewrite validation (inside the plug-in's declared rewrite space). Every method opens the plug-in with its
stage's ``plugin`` section (name and options).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.algo.curriculum import PlayTask
from rla_core.config import RewriterKind, Setting
from rla_core.plugins import EnvironmentPlugin, load_plugin
from rla_core.settings.base import (
    ProposalRequest,
    WarmStartData,
    judged_labels,
    numbered_jsonl,
    rewrite_requests,
)
from rla_core.stage_inputs import (
    AdaptInputs,
    BootstrapInputs,
    EvaluateInputs,
    PluginSection,
    RolloutRequest,
    SeedTasksInputs,
    expect_section,
    need,
)

if TYPE_CHECKING:
    from rla_core.envs.plugin_env import PluginEnvironment
    from rla_core.envs.rewriter import TaskRewriter
    from rla_core.models.generator import Generator


def _overrides(plugin: EnvironmentPlugin, method: str) -> bool:
    """Whether the plug-in implements an optional method of the contract (not the default)."""
    return getattr(type(plugin), method) is not getattr(EnvironmentPlugin, method)


@dataclass
class PluginSetting:
    """One installed plug-in's adapter: multi-turn episodes, step judgments by the reward model."""

    env_name: str
    judge_template: Template
    judge_strict: bool = False
    one_generation_call: bool = False

    @classmethod
    def named(cls, name: str) -> PluginSetting:
        """The adapter of the installed plug-in ``name`` (an unknown name lists the installed ones)."""
        return cls(env_name=name, judge_template=Template(load_plugin(name).cls.judge_template))

    def env(self, section: PluginSection) -> PluginEnvironment:
        from rla_core.envs.plugin_env import PluginEnvironment

        return PluginEnvironment(load_plugin(section.name, section.options))

    def seed_tasks(self, inputs: SeedTasksInputs) -> list[tuple[str, str, dict[str, Any]]]:
        env = self.env(need(inputs.plugin, Setting.PLUGIN))
        return [(task.task_id, self.env_name, task.spec) for task in env.tasks("train")]

    def eval_tasks(self, inputs: EvaluateInputs, path: str | Path | None) -> list[PlayTask]:
        """The plug-in's held-out tasks; with ``path`` (``rla eval --tasks``), those a JSONL file names by
        ``{"task_id": ...}`` (an unknown id lists the plug-in's held-out ids)."""
        env = self.env(need(inputs.plugin, Setting.PLUGIN))
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
        them, the judge's when it gives expert actions (its step labels); otherwise no rows: that model
        starts from its untrained tiny weights (or the checkpoint configured)."""
        from rla_core.envs.demos import DEMO_COLUMNS, corpus_texts, judge_demos, policy_warm_start_rows

        env = self.env(need(inputs.plugin, Setting.PLUGIN))
        specs = [task.spec for task in env.tasks("train")]
        turns = inputs.models.history_turns  # demos show the history the rollouts will show
        empty = pl.DataFrame(schema=DEMO_COLUMNS)
        corpus = corpus_texts(env, specs, seed=seed, history_turns=turns)
        corpus += [self.judge_template.template, env.plugin.rewrite_template, *env.plugin.corpus()]
        demos = _overrides(env.plugin, "demonstration")
        labels = _overrides(env.plugin, "expert_actions")
        return WarmStartData(
            corpus=corpus,
            policy_rows=policy_warm_start_rows(inputs, env, specs, seed=seed) if demos else empty,
            reward_rows=judge_demos(
                env, specs, seed=seed, history_turns=turns, judge_template=self.judge_template
            ) if labels else empty,
        )  # fmt: skip

    def rollout(self, request: RolloutRequest, *, generator: Generator) -> dict[str, pl.DataFrame]:
        from rla_core.envs.rollout import play_rollouts, run_rollouts

        env = self.env(expect_section(request.env, PluginSection))
        return play_rollouts(request, lambda r: run_rollouts(r, env=env, generator=generator))

    labels = staticmethod(judged_labels)  # step-judged labels, the same rule in every such setting

    def propose(
        self, inputs: AdaptInputs, job: ProposalRequest, *, env_model: Generator | None
    ) -> pl.DataFrame:
        """Critic feedback, then the plug-in's own moves, or with ``adaptation.rewriter=llm`` the environment
        model's rewrites from the plug-in's prompt; every candidate checked against the rewrite space, then
        by the plug-in."""
        from rla_core.envs.plugin_env import PluginPrompts, PluginRewriter, check_variant
        from rla_core.envs.rewriter import ModelRewriter, RewriteRequest, rewrite_tasks

        requests = rewrite_requests(
            job, max_steps=inputs.rollout.max_steps, summarizer=env_model, sampling=inputs.adaptation.sampling
        )
        env = self.env(need(inputs.plugin, Setting.PLUGIN))
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
