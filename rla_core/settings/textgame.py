"""The text-game setting (TextWorld, the engine ALFWorld is built on): spec §1.2, §2.1-2.2, §3.2."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.algo.curriculum import PlayTask, RewriteTarget
from rla_core.algo.labels import policy_samples, reward_samples, task_accuracy
from rla_core.config import RunConfig
from rla_core.errors import EnvironmentSpecError
from rla_core.settings import WarmStartData, read_jsonl

if TYPE_CHECKING:
    from rla_core.config import SamplingConfig
    from rla_core.envs.textworld_env import TextWorldEnv
    from rla_core.models.generator import Generator


def _spec_rows(path: str | Path, *, what: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for i, row in enumerate(read_jsonl(path, what=what)):
        if not isinstance(row.get("slot_id"), str) or not isinstance(row.get("spec"), dict):
            raise EnvironmentSpecError(
                f"{what} file '{path}' row {i + 1} needs a string 'slot_id' and an object 'spec' "
                '(e.g. {"slot_id": "tw-0", "spec": {"world_size": 1, "nb_objects": 3, "quest_length": 1, "seed": 1}})'
            )
        out.append((row["slot_id"], row["spec"]))
    return out


class TextGameSetting:
    """TextWorld games: multi-turn episodes, step judgments by the reward model."""

    judge_template = "judge"
    judge_strict = False
    env_name = "textworld"

    def env(self, cfg: RunConfig) -> TextWorldEnv:
        from rla_core.envs.textworld_env import TextWorldEnv

        return TextWorldEnv(Path(cfg.textgame.game_cache_dir))

    def seed_tasks(self, cfg: RunConfig) -> list[tuple[str, str, dict[str, Any]]]:
        env = self.env(cfg)
        rows = _spec_rows(cfg.textgame.tasks, what="training task")
        for _slot, spec in rows:
            env.validate_spec(spec)
        return [(slot, self.env_name, spec) for slot, spec in rows]

    def eval_tasks(self, cfg: RunConfig, path: str | Path | None) -> list[PlayTask]:
        rows = _spec_rows(path or cfg.textgame.eval_tasks, what="evaluation task")
        return [PlayTask(slot, slot, False, spec) for slot, spec in rows]

    def warm_start(self, cfg: RunConfig, *, seed: int) -> WarmStartData:
        from rla_core.envs.demos import corpus_texts, judge_demos, policy_demos

        env = self.env(cfg)
        specs = [spec for _slot, _env, spec in self.seed_tasks(cfg)]
        return WarmStartData(
            corpus=corpus_texts(env, specs, seed=seed),
            policy_rows=policy_demos(env, specs),
            reward_rows=judge_demos(env, specs, seed=seed),
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
    ) -> dict[str, pl.DataFrame]:
        from rla_core.envs.rollout import run_rollouts

        del workdir  # text observations: no side files
        rollouts = run_rollouts(
            [(t.task_id, t.slot_id, t.pending, t.spec) for t in tasks],
            env=self.env(cfg),
            generator=generator,
            n=n,
            max_steps=max_steps,
            sampling=sampling,
            seed=seed,
            iteration=iteration,
        )
        return {"rollouts": rollouts}

    def accuracy(self, frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
        return task_accuracy(frames["rollouts"])

    def labels(
        self, cfg: RunConfig, frames: dict[str, pl.DataFrame], *, accepted: set[str]
    ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, float]]:
        rollouts, judgments = frames["rollouts"], frames["judgments"]
        policy, p_stats = policy_samples(
            rollouts, judgments, cfg=cfg.reward, m=cfg.judge.m, accepted_pending=accepted
        )
        reward, r_stats = reward_samples(
            rollouts, judgments, cfg=cfg.reward, m=cfg.judge.m, accepted_pending=accepted
        )
        stats = {f"policy/{k}": float(v) for k, v in p_stats.items()}
        stats |= {f"reward_model/{k}": float(v) for k, v in r_stats.items()}
        return policy, reward, stats

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
        from rla_core.config import RewriterKind
        from rla_core.envs.feedback import critic_feedback
        from rla_core.envs.rewriter import (
            Goal,
            LlmRewriter,
            ParametricRewriter,
            RewriteRequest,
            TaskRewriter,
            rewrite_tasks,
        )

        feedback = critic_feedback(
            frames["rollouts"],
            frames["judgments"],
            max_steps=cfg.rollout.max_steps,
            summarizer=env_model,
            sampling=cfg.adaptation.sampling if env_model is not None else None,
            seed=seed,
        )
        requests = [
            RewriteRequest(
                slot_id=t.slot_id,
                parent_task_id=t.task_id,
                parent_spec=t.spec,
                root_spec=t.root_spec,
                goal=Goal(t.goal.value),
                prev_acc=t.prev_acc,
                feedback=feedback.get(t.task_id),
            )
            for t in targets
        ]
        rewriter: TaskRewriter
        if cfg.adaptation.rewriter is RewriterKind.LLM and env_model is not None:
            rewriter = LlmRewriter(env_model, sampling=cfg.adaptation.sampling)
        else:
            rewriter = ParametricRewriter()
        return rewrite_tasks(
            requests,
            rewriter=rewriter,
            env=self.env(cfg),
            k=cfg.adaptation.candidates,
            seed=seed,
            iteration=iteration,
        )
