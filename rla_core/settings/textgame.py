"""The text-game setting: spec §1.2, §2.1-2.2, §3.2; one setting, two engines (docs/settings.md).

``textgame.engine`` picks the adapter: :class:`TextWorldSetting` (generated TextWorld games) or
:class:`AlfworldSetting` (ALFWorld-style household games of the ALFRED domain played through TextWorld's
PDDL engine, :mod:`rla_core.envs.alfworld`). Both engines are :class:`~rla_core.envs.base.Environment` s,
so rollouts, judging, labels and warm start are the same functions here; only the environment and the
rewriters differ (ALFWorld: the paper's two-token rewrite with an environment model, else the parametric
extension).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.algo.curriculum import PlayTask
from rla_core.config import RewriterKind, Setting
from rla_core.errors import EnvironmentSpecError
from rla_core.settings.base import ProposalRequest, WarmStartData, judged_labels, numbered_jsonl
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
    from rla_core.envs.rewriter import RewriteRequest
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


def _seed_tasks(
    env: TextWorldEnv | AlfworldEnv, inputs: SeedTasksInputs
) -> list[tuple[str, str, dict[str, Any]]]:
    rows = _spec_rows(need(inputs.textgame, Setting.TEXTGAME).tasks, what="training task", env=env)
    return [(slot, env.name, spec) for slot, spec in rows]


def _eval_tasks(
    env: TextWorldEnv | AlfworldEnv, inputs: EvaluateInputs, path: str | Path | None
) -> list[PlayTask]:
    section = need(inputs.textgame, Setting.TEXTGAME)
    rows = _spec_rows(path or section.eval_tasks, what="evaluation task", env=env)
    return [PlayTask(slot, slot, False, spec) for slot, spec in rows]


def _warm_start(env: TextWorldEnv | AlfworldEnv, inputs: BootstrapInputs, *, seed: int) -> WarmStartData:
    from rla_core.envs.demos import corpus_texts, judge_demos, policy_warm_start_rows

    specs = [spec for _slot, _env, spec in _seed_tasks(env, inputs.seed_sources())]
    turns = inputs.models.history_turns  # demos show the history the rollouts will show
    return WarmStartData(
        corpus=corpus_texts(env, specs, seed=seed, history_turns=turns),
        policy_rows=policy_warm_start_rows(inputs, env, specs, seed=seed),
        reward_rows=judge_demos(env, specs, seed=seed, history_turns=turns),
    )


def _rollout(
    env: TextWorldEnv | AlfworldEnv, request: RolloutRequest, generator: Generator
) -> dict[str, pl.DataFrame]:
    from rla_core.envs.rollout import play_rollouts, run_rollouts

    # Text observations: no side files. In-process engines raise only on our bugs (the stage fails); an
    # episode of a broken game that offers no action is the one env_error they can record.
    return play_rollouts(request, lambda r: run_rollouts(r, env=env, generator=generator))


def _requests(inputs: AdaptInputs, job: ProposalRequest, env_model: Generator | None) -> list[RewriteRequest]:
    """Critic feedback on every target; with ``env_model``, its failure summaries in one generate call."""
    from rla_core.envs.feedback import critic_feedback
    from rla_core.envs.rewriter import RewriteRequest

    feedback = critic_feedback(
        job.frames["rollouts"],
        job.frames["judgments"],
        max_steps=inputs.rollout.max_steps,
        summarizer=env_model,
        sampling=inputs.adaptation.sampling if env_model is not None else None,
        seed=job.seed,
    )
    return RewriteRequest.for_targets(job.targets, feedback)


def _env_model(inputs: AdaptInputs, env_model: Generator | None) -> Generator | None:
    """The environment model when it rewrites (``adaptation.rewriter=llm``), else None."""
    return env_model if inputs.adaptation.rewriter is RewriterKind.LLM else None


class TextWorldSetting:
    """Generated TextWorld games: multi-turn episodes, step judgments by the reward model."""

    judge_template = "judge"
    judge_strict = False
    env_name = "textworld"
    one_generation_call = False

    def env(self, section: TextGameEnv) -> TextWorldEnv:
        """TextWorld games cached in ``textgame.game_cache_dir``."""
        from rla_core.envs.textworld_env import TextWorldEnv

        return TextWorldEnv(Path(section.game_cache_dir))

    def seed_tasks(self, inputs: SeedTasksInputs) -> list[tuple[str, str, dict[str, Any]]]:
        return _seed_tasks(self.env(need(inputs.textgame, Setting.TEXTGAME)), inputs)

    def eval_tasks(self, inputs: EvaluateInputs, path: str | Path | None) -> list[PlayTask]:
        return _eval_tasks(self.env(need(inputs.textgame, Setting.TEXTGAME)), inputs, path)

    def warm_start(self, inputs: BootstrapInputs, *, seed: int, workdir: Path | None = None) -> WarmStartData:
        return _warm_start(self.env(need(inputs.textgame, Setting.TEXTGAME)), inputs, seed=seed)

    def rollout(self, request: RolloutRequest, *, generator: Generator) -> dict[str, pl.DataFrame]:
        return _rollout(self.env(expect_section(request.env, TextGameEnv)), request, generator)

    def labels(
        self, inputs: LabelInputs, frames: dict[str, pl.DataFrame], *, accepted: set[str]
    ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, float]]:
        return judged_labels(inputs, frames, accepted=accepted)

    def propose(
        self, inputs: AdaptInputs, job: ProposalRequest, *, env_model: Generator | None
    ) -> pl.DataFrame:
        """Critic feedback, then the rewrites. With ``env_model``: its failure summaries in one generate call
        and, with ``adaptation.rewriter=llm``, every target's attempts in one more
        (:class:`~rla_core.envs.rewriter.ModelRewriter`); each shards over a Ray cluster when ``env_model``
        is a :class:`~rla_core.dispatch.ShardedGenerator`."""
        from rla_core.envs.rewriter import LlmRewriter, ParametricRewriter, TaskRewriter, rewrite_tasks

        requests = _requests(inputs, job, env_model)
        writer = _env_model(inputs, env_model)
        rewriter: TaskRewriter = (
            LlmRewriter(writer, sampling=inputs.adaptation.sampling)
            if writer is not None
            else ParametricRewriter()
        )
        return rewrite_tasks(
            requests, rewriter=rewriter, env=self.env(need(inputs.textgame, Setting.TEXTGAME)),
            k=inputs.adaptation.candidates, seed=job.seed, iteration=job.iteration,
        )  # fmt: skip


class AlfworldSetting:
    """ALFWorld-style household games: as :class:`TextWorldSetting`, with ALFWorld's own rewriters."""

    judge_template = "judge"
    judge_strict = False
    env_name = "alfworld"
    one_generation_call = False

    def env(self, section: TextGameEnv) -> AlfworldEnv:
        """ALFWorld games cached in ``textgame.game_cache_dir/alfworld``."""
        from rla_core.envs.alfworld.env import AlfworldEnv

        return AlfworldEnv(Path(section.game_cache_dir) / "alfworld")

    def seed_tasks(self, inputs: SeedTasksInputs) -> list[tuple[str, str, dict[str, Any]]]:
        return _seed_tasks(self.env(need(inputs.textgame, Setting.TEXTGAME)), inputs)

    def eval_tasks(self, inputs: EvaluateInputs, path: str | Path | None) -> list[PlayTask]:
        return _eval_tasks(self.env(need(inputs.textgame, Setting.TEXTGAME)), inputs, path)

    def warm_start(self, inputs: BootstrapInputs, *, seed: int, workdir: Path | None = None) -> WarmStartData:
        return _warm_start(self.env(need(inputs.textgame, Setting.TEXTGAME)), inputs, seed=seed)

    def rollout(self, request: RolloutRequest, *, generator: Generator) -> dict[str, pl.DataFrame]:
        return _rollout(self.env(expect_section(request.env, TextGameEnv)), request, generator)

    def labels(
        self, inputs: LabelInputs, frames: dict[str, pl.DataFrame], *, accepted: set[str]
    ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, float]]:
        return judged_labels(inputs, frames, accepted=accepted)

    def propose(
        self, inputs: AdaptInputs, job: ProposalRequest, *, env_model: Generator | None
    ) -> pl.DataFrame:
        """Critic feedback, then the paper's two-token rewrite by the environment model
        (``adaptation.rewriter=llm``), else the parametric extension; each candidate checked in the game."""
        from rla_core.envs.alfworld import rewriter as alfw
        from rla_core.envs.rewriter import TaskRewriter, rewrite_tasks

        requests = _requests(inputs, job, env_model)
        alfworld = self.env(need(inputs.textgame, Setting.TEXTGAME))
        writer = _env_model(inputs, env_model)
        rewriter: TaskRewriter
        if writer is not None:
            rewriter = alfw.TwoTokenRewriter(writer, env=alfworld, sampling=inputs.adaptation.sampling)

            def check(spec: dict[str, Any], request: RewriteRequest) -> str | None:
                return alfw.check_two_token(alfworld, spec, request)
        else:
            rewriter, check = alfw.ParametricRewriter(), alfw.check_parametric
        return rewrite_tasks(
            requests, rewriter=rewriter, env=alfworld, k=inputs.adaptation.candidates, seed=job.seed,
            iteration=job.iteration, check=check,
        )  # fmt: skip
