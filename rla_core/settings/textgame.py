"""The text-game setting: spec §1.2, §2.1-2.2, §3.2; one setting, two engines (design §1).

``textgame.engine`` picks the engine: generated TextWorld games (``textworld``) or ALFWorld-style
household games of the ALFRED domain played through TextWorld's PDDL engine (``alfworld``,
:mod:`rla_core.envs.alfworld`). Both are :class:`~rla_core.envs.base.Environment` s, so rollouts,
judging, labels and warm start are the same code; only the rewriters differ (ALFWorld: the paper's
two-token rewrite with an environment model, else the parametric extension).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import polars as pl

from rla_core.algo.curriculum import PlayTask
from rla_core.algo.labels import policy_samples, reward_samples
from rla_core.config import Setting, TextGameEngine
from rla_core.errors import EnvironmentSpecError
from rla_core.settings import ProposalRequest, WarmStartData, numbered_jsonl
from rla_core.stage_inputs import (
    AdaptInputs,
    BootstrapInputs,
    EvaluateInputs,
    LabelInputs,
    RolloutRequest,
    SeedTasksInputs,
    TextGameEnv,
    expect_section,
    need,
)

if TYPE_CHECKING:
    from rla_core.envs.alfworld.env import AlfworldEnv
    from rla_core.envs.textworld_env import TextWorldEnv
    from rla_core.models.generator import Generator


def _spec_rows(
    path: str | Path, *, what: str, env: TextWorldEnv | AlfworldEnv
) -> list[tuple[str, dict[str, Any]]]:
    """(slot id, spec) of every row of a task file, each spec checked by ``env``; errors name the line."""
    out = []
    for lineno, row in numbered_jsonl(path, what=what):
        if not isinstance(row.get("slot_id"), str) or not isinstance(row.get("spec"), dict):
            raise EnvironmentSpecError(
                f"{what} file '{path}' line {lineno} needs a string 'slot_id' and an object 'spec' "
                '(e.g. {"slot_id": "tw-0", "spec": {"world_size": 1, "nb_objects": 3, "quest_length": 1, "seed": 1}})'
            )
        try:
            env.validate_spec(row["spec"])
        except EnvironmentSpecError as exc:
            raise EnvironmentSpecError(
                f"{what} file '{path}' line {lineno} (slot {row['slot_id']!r}): {exc}"
            ) from None
        out.append((row["slot_id"], row["spec"]))
    return out


class TextGameSetting:
    """TextWorld games: multi-turn episodes, step judgments by the reward model."""

    judge_template = "judge"
    judge_strict = False
    env_name = "textworld"  # the default engine; seed_tasks records the configured engine's own name

    def env(self, section: TextGameEnv) -> TextWorldEnv | AlfworldEnv:
        """The configured engine's environment (``textgame.engine``, games cached in ``game_cache_dir``)."""
        if section.engine is TextGameEngine.ALFWORLD:
            from rla_core.envs.alfworld.env import AlfworldEnv

            return AlfworldEnv(Path(section.game_cache_dir) / "alfworld")
        from rla_core.envs.textworld_env import TextWorldEnv

        return TextWorldEnv(Path(section.game_cache_dir))

    def seed_tasks(self, inputs: SeedTasksInputs) -> list[tuple[str, str, dict[str, Any]]]:
        section = need(inputs.textgame, Setting.TEXTGAME)
        env = self.env(section)
        rows = _spec_rows(section.tasks, what="training task", env=env)
        return [(slot, env.name, spec) for slot, spec in rows]

    def eval_tasks(self, inputs: EvaluateInputs, path: str | Path | None) -> list[PlayTask]:
        section = need(inputs.textgame, Setting.TEXTGAME)
        rows = _spec_rows(path or section.eval_tasks, what="evaluation task", env=self.env(section))
        return [PlayTask(slot, slot, False, spec) for slot, spec in rows]

    def warm_start(self, inputs: BootstrapInputs, *, seed: int, workdir: Path | None = None) -> WarmStartData:
        from rla_core.envs.demos import corpus_texts, judge_demos, policy_warm_start_rows

        env = self.env(need(inputs.textgame, Setting.TEXTGAME))
        specs = [spec for _slot, _env, spec in self.seed_tasks(inputs.seed_sources())]
        turns = inputs.models.history_turns  # demos show the history the rollouts will show
        return WarmStartData(
            corpus=corpus_texts(env, specs, seed=seed, history_turns=turns),
            policy_rows=policy_warm_start_rows(inputs, env, specs, seed=seed),
            reward_rows=judge_demos(env, specs, seed=seed, history_turns=turns),
        )

    def rollout(self, request: RolloutRequest, *, generator: Generator) -> dict[str, pl.DataFrame]:
        from rla_core.envs.rollout import play_rollouts, run_rollouts

        env = self.env(expect_section(request.env, TextGameEnv))  # text observations: no side files
        # In-process engines raise only on our bugs (the stage fails); an episode of a broken game that
        # offers no action is the one env_error they can record.
        return play_rollouts(request, lambda r: run_rollouts(r, env=env, generator=generator))

    def labels(
        self, inputs: LabelInputs, frames: dict[str, pl.DataFrame], *, accepted: set[str]
    ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, float]]:
        rollouts, judgments = frames["rollouts"], frames["judgments"]
        policy, p_stats = policy_samples(
            rollouts, judgments, cfg=inputs.reward, m=inputs.judge.m, accepted_pending=accepted
        )
        reward, r_stats = reward_samples(
            rollouts, judgments, cfg=inputs.reward, m=inputs.judge.m, accepted_pending=accepted
        )
        stats = {f"policy/{k}": float(v) for k, v in p_stats.items()}
        stats |= {f"reward_model/{k}": float(v) for k, v in r_stats.items()}
        return policy, reward, stats

    def propose(
        self, inputs: AdaptInputs, job: ProposalRequest, *, env_model: Generator | None
    ) -> pl.DataFrame:
        """Critic feedback, then the rewrites. With ``env_model``: its failure summaries in one generate call
        and, with ``adaptation.rewriter=llm``, every target's attempts in one more
        (:class:`~rla_core.envs.rewriter.ModelRewriter`); each shards over a Ray cluster when ``env_model``
        is a :class:`~rla_core.cluster.ShardedGenerator`."""
        from rla_core.config import RewriterKind
        from rla_core.envs.feedback import critic_feedback
        from rla_core.envs.rewriter import (
            LlmRewriter,
            ParametricRewriter,
            RewriteRequest,
            TaskRewriter,
            rewrite_tasks,
        )

        seed, iteration = job.seed, job.iteration
        feedback = critic_feedback(
            job.frames["rollouts"],
            job.frames["judgments"],
            max_steps=inputs.rollout.max_steps,
            summarizer=env_model,
            sampling=inputs.adaptation.sampling if env_model is not None else None,
            seed=seed,
        )
        requests = RewriteRequest.for_targets(job.targets, feedback)
        env = self.env(need(inputs.textgame, Setting.TEXTGAME))
        use_llm = inputs.adaptation.rewriter is RewriterKind.LLM and env_model is not None
        rewriter: TaskRewriter
        if need(inputs.textgame, Setting.TEXTGAME).engine is TextGameEngine.ALFWORLD:
            from rla_core.envs.alfworld import rewriter as alfw

            alfworld = cast("AlfworldEnv", env)
            if use_llm and env_model is not None:
                rewriter = alfw.TwoTokenRewriter(env_model, env=alfworld, sampling=inputs.adaptation.sampling)

                def check(spec: dict[str, Any], request: RewriteRequest) -> str | None:
                    return alfw.check_two_token(alfworld, spec, request)
            else:
                rewriter, check = alfw.ParametricRewriter(), alfw.check_parametric
            return rewrite_tasks(
                requests, rewriter=rewriter, env=alfworld, k=inputs.adaptation.candidates, seed=seed,
                iteration=iteration, check=check,
            )  # fmt: skip
        if use_llm and env_model is not None:
            rewriter = LlmRewriter(env_model, sampling=inputs.adaptation.sampling)
        else:
            rewriter = ParametricRewriter()
        return rewrite_tasks(
            requests,
            rewriter=rewriter,
            env=env,
            k=inputs.adaptation.candidates,
            seed=seed,
            iteration=iteration,
        )
