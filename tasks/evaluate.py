"""Stage evaluate: the new policy on held-out tasks (spec §1.2 step 5); also `rla eval`.

Every evaluation of a run plays with one seed, :func:`eval_seed` (iteration 0's stage seed): the same
games, episode seeds and sampling seeds at every iteration, so two evaluation points differ only by the
policy (common random numbers), and their difference is not blurred by the luck of two independent
draws (measured in docs/bench-design.md §4).
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from rla_core import dispatch
from rla_core.algo.curriculum import PlayTask
from rla_core.algo.episodes import check_env_error_share
from rla_core.algo.metrics import coding_eval_metrics, eval_metrics, eval_rows
from rla_core.config import Setting
from rla_core.models.serving import served_name
from rla_core.settings import adapter_of, task_file
from rla_core.settings.coding import CodingSetting, coding_task
from rla_core.stage_inputs import CodingUnitTests, EvaluateInputs, Role, StageName, need
from tasks.stage import StageContext, StageRef, stage, stage_seed

if TYPE_CHECKING:
    from rla_core.models.generator import GeneratorSpec


def eval_seed(run_seed: int) -> int:
    """The seed of every evaluation of a run (and the default of `rla eval`): iteration 0's stage seed."""
    return stage_seed(run_seed, 0, StageName.EVALUATE)


@dataclass(frozen=True)
class EvalPlay:
    """What an evaluation played: the held-out tasks and the setting's rollout frames (coding: + GT runs)."""

    tasks: tuple[PlayTask, ...]
    frames: dict[str, pl.DataFrame]


def play_checkpoint(
    inputs: EvaluateInputs,
    policy_dir: Path,
    *,
    tasks_file: str | Path | None,
    iteration: int,
    seed: int = 0,
    served_as: str | None = None,
) -> EvalPlay:
    """Play the held-out tasks with a policy checkpoint.

    ``served_as``: the vLLM served name (a stage passes its input's content key + role)."""
    from rla_core.models.generator import GeneratorSpec

    adapter = adapter_of(inputs)  # resolved once for the evaluation (a plug-in: loaded here)
    with contextlib.ExitStack() as stack:
        # A policy that sees its screens needs them while it plays; 'eval' records no prompt, so they go.
        workdir = (
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rla-eval-")))
            if inputs.models.images.policy
            else None
        )
        tasks = tuple(adapter.eval_tasks(inputs, tasks_file))
        request = inputs.request(tasks, seed=seed, iteration=iteration, workdir=workdir)
        generator = GeneratorSpec(
            checkpoint=policy_dir,
            models=inputs.models,
            role=Role.POLICY,
            name=served_as,
            threads=inputs.threads,
        )
        frames = dispatch.rollout(request, adapter=adapter, generator=generator, cluster=inputs.cluster)
    share = inputs.rollout.max_env_error_share
    check_env_error_share(frames["rollouts"], max_share=share, where=f"evaluate, iteration {iteration}")
    return EvalPlay(request.tasks, frames)


def evaluate_unit_tests(
    inputs: EvaluateInputs, played: EvalPlay, reward_model: GeneratorSpec, *, iteration: int, seed: int
) -> tuple[dict[str, pl.DataFrame], dict[str, float]]:
    """Coding: the reward model writes unit tests for the held-out problems and the held-out programs run
    on them (spec §1.1 step 8: the in-loop evaluation runs the rollout, unit-test and execute steps).

    Returns the frames 'rollouts' (the programs), 'unit_tests' and 'executions' (GT and generated runs),
    and code accuracy, unit-test accuracy and detection (:func:`rla_core.algo.metrics.coding_eval_metrics`).
    """
    section = need(inputs.coding, Setting.CODING)
    tasks = [coding_task(t.task_id, t.spec) for t in played.tasks]
    rollouts, gt = played.frames["rollouts"], played.frames["executions"]
    writing = CodingUnitTests(
        unit_tests_per_task=section.unit_tests_per_task, unit_test_sampling=section.unit_test_sampling
    )
    with dispatch.stage_generator(reward_model, inputs.cluster) as generator:
        unit_tests = CodingSetting().write_tests(
            writing, tasks, generator=generator, seed=seed, iteration=iteration
        )
    generated = CodingSetting().execute(
        section, rollouts, unit_tests, tasks, iteration=iteration, cluster=inputs.cluster
    )
    executions = pl.concat([gt, generated])
    frames = {"rollouts": rollouts, "unit_tests": unit_tests, "executions": executions}
    return frames, coding_eval_metrics(rollouts, executions, unit_tests)


@stage(StageName.EVALUATE, inputs=EvaluateInputs, reads_file=lambda i: task_file(i, held_out=True))
def evaluate(
    ctx: StageContext[EvaluateInputs], *, policy: StageRef, reward_model: StageRef | None = None
) -> dict[str, float]:
    """Write 'eval' (played with :func:`eval_seed`, not the stage's per-iteration seed); with the reward
    model (coding) also the held-out 'rollouts', 'unit_tests' and 'executions' and the paper's three
    coding metrics."""
    seed = eval_seed(ctx.run_seed)
    played = play_checkpoint(
        ctx.inputs, ctx.checkpoint(policy, Role.POLICY), tasks_file=None, iteration=ctx.iteration,
        seed=seed, served_as=served_name(policy.content_key, Role.POLICY),
    )  # fmt: skip
    evals = eval_rows(played.frames["rollouts"], iteration=ctx.iteration)
    ctx.writer.write_frame("eval", evals)
    if "env_errors" in played.frames:  # an attempt failed and was replayed (docs/environment-errors.md)
        ctx.writer.write_frame("env_errors", played.frames["env_errors"])
    metrics = eval_metrics(evals)
    if reward_model is not None:
        spec = ctx.generator_spec(
            reward_model, Role.REWARD, models=ctx.inputs.models, threads=ctx.inputs.threads
        )
        frames, coding = evaluate_unit_tests(ctx.inputs, played, spec, iteration=ctx.iteration, seed=seed)
        for name, frame in frames.items():
            ctx.writer.write_frame(name, frame)
        metrics |= coding
    return metrics
