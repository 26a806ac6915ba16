"""Stage evaluate: the new policy on held-out tasks (spec §1.2 step 5); also `rla eval`.

Every evaluation of a run plays with one seed, :func:`eval_seed` (iteration 0's stage seed): the same
games, episode seeds and sampling seeds at every iteration, so two evaluation points differ only by the
policy (common random numbers), and their difference is not blurred by the luck of two independent
draws (measured in docs/bench-design.md §4).
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import polars as pl

from rla_core.algo.episodes import check_env_error_share
from rla_core.algo.metrics import eval_metrics, eval_rows
from rla_core.models.serving import served_name
from rla_core.settings import adapter_for
from rla_core.stage_inputs import EvaluateInputs, Role, RolloutRequest, StageName
from tasks.stage import StageContext, StageRef, stage, stage_seed


def eval_seed(run_seed: int) -> int:
    """The seed of every evaluation of a run (and the default of `rla eval`): iteration 0's stage seed."""
    return stage_seed(run_seed, 0, StageName.EVALUATE)


def evaluate_checkpoint(
    inputs: EvaluateInputs,
    policy_dir: Path,
    *,
    tasks_file: str | Path | None,
    iteration: int,
    seed: int = 0,
    served_as: str | None = None,
) -> pl.DataFrame:
    """Play the held-out tasks with a policy checkpoint; artifact 'eval' (one row per episode).

    ``served_as``: the vLLM served name (a stage passes its input's content key + role)."""
    return evaluate_frames(
        inputs, policy_dir, tasks_file=tasks_file, iteration=iteration, seed=seed, served_as=served_as
    )["eval"]


def evaluate_frames(
    inputs: EvaluateInputs,
    policy_dir: Path,
    *,
    tasks_file: str | Path | None,
    iteration: int,
    seed: int = 0,
    served_as: str | None = None,
) -> dict[str, pl.DataFrame]:
    """'eval' and, when an attempt failed, 'env_errors' of :func:`evaluate_checkpoint`; fails with
    EnvErrorShareError when more than ``rollout.max_env_error_share`` of the episodes stay env_error."""
    from rla_core.cluster import play_episodes
    from rla_core.models.generator import GeneratorSpec

    adapter = adapter_for(inputs.setting)
    images = inputs.models.images.policy
    with contextlib.ExitStack() as stack:
        # A policy that sees its screens needs them while it plays; 'eval' records no prompt, so they go.
        workdir = (
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rla-eval-"))) if images else None
        )
        request = RolloutRequest(
            tasks=tuple(adapter.eval_tasks(inputs, tasks_file)), n=inputs.evaluation.rollouts_per_task,
            max_steps=inputs.evaluation.max_steps, sampling=inputs.evaluation.sampling, seed=seed,
            iteration=iteration, history_turns=inputs.models.history_turns, images=images, env=inputs.env(),
            workdir=workdir, env_retries=inputs.rollout.env_retries,
        )  # fmt: skip
        generator = GeneratorSpec(
            checkpoint=policy_dir,
            models=inputs.models,
            role=Role.POLICY,
            name=served_as,
            threads=inputs.threads,
        )
        frames = play_episodes(request, setting=inputs.setting, generator=generator, cluster=inputs.cluster)
    share = inputs.rollout.max_env_error_share
    check_env_error_share(frames["rollouts"], max_share=share, where=f"evaluate, iteration {iteration}")
    out = {"eval": eval_rows(frames["rollouts"], iteration=iteration)}
    if "env_errors" in frames:
        out["env_errors"] = frames["env_errors"]
    return out


@stage(StageName.EVALUATE, inputs=EvaluateInputs, reads_file=lambda i: i.task_file())
def evaluate(ctx: StageContext[EvaluateInputs], *, policy: StageRef) -> dict[str, float]:
    """Write 'eval' (played with :func:`eval_seed`, not the stage's per-iteration seed), and 'env_errors'
    when an attempt failed."""
    frames = evaluate_frames(
        ctx.inputs, ctx.checkpoint(policy, Role.POLICY), tasks_file=None, iteration=ctx.iteration,
        seed=eval_seed(ctx.run_seed), served_as=served_name(policy.content_key, Role.POLICY),
    )  # fmt: skip
    for name, frame in frames.items():
        ctx.writer.write_frame(name, frame)
    return eval_metrics(frames["eval"])
