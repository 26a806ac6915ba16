"""Stage evaluate: the new policy on held-out tasks (spec §1.2 step 5); also `rla eval`.

Every evaluation of a run plays with one seed, :func:`eval_seed` (iteration 0's stage seed): the same
games, episode seeds and sampling seeds at every iteration, so two evaluation points differ only by the
policy (common random numbers), and their difference is not blurred by the luck of two independent
draws (measured in docs/bench-design.md §4).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rla_core.algo.metrics import eval_metrics, eval_rows
from rla_core.config import RunConfig
from rla_core.models.serving import served_name
from rla_core.settings import adapter_for, task_files
from tasks.stage import RunContext, StageContext, StageRef, derive_seed, file_digest, stage


def eval_seed(cfg: RunConfig) -> int:
    """The seed of every evaluation of a run (and the default of `rla eval`): iteration 0's stage seed."""
    return derive_seed(cfg.seed, 0, "evaluate")


def evaluate_checkpoint(
    cfg: RunConfig,
    policy_dir: Path,
    *,
    tasks_file: str | Path | None,
    iteration: int,
    seed: int = 0,
    served_as: str | None = None,
) -> pl.DataFrame:
    """Play the held-out tasks with a policy checkpoint; artifact 'eval' (one row per episode).

    ``served_as``: the vLLM served name (a stage passes its input's content key + role)."""
    from rla_core.models.generator import open_generator

    adapter = adapter_for(cfg.setting)
    play = adapter.eval_tasks(cfg, tasks_file)
    generator = open_generator(policy_dir, models=cfg.models, role="policy", name=served_as)
    try:
        frames = adapter.rollout(
            cfg, play, generator=generator, n=cfg.evaluation.rollouts_per_task, max_steps=cfg.evaluation.max_steps,
            sampling=cfg.evaluation.sampling, seed=seed, iteration=iteration,
        )  # fmt: skip
    finally:
        generator.close()
    return eval_rows(frames["rollouts"], iteration=iteration)


def _eval_files(run: RunContext) -> str:
    return file_digest(task_files(run.config)[1])


@stage(
    "evaluate",
    config=("setting", "evaluation", "models.serving", "models.history_turns", "threads", "textgame", "coding", "gui"),
    key_extra=_eval_files,
)  # fmt: skip
def evaluate(ctx: StageContext, *, policy: StageRef) -> dict[str, float]:
    """Write 'eval' (played with :func:`eval_seed`, not the stage's per-iteration seed)."""
    evals = evaluate_checkpoint(
        ctx.config, ctx.checkpoint(policy, "policy"), tasks_file=None, iteration=ctx.iteration,
        seed=eval_seed(ctx.config),
        served_as=served_name(policy.content_key, "policy"),
    )  # fmt: skip
    ctx.writer.write_frame("eval", evals)
    return eval_metrics(evals)
