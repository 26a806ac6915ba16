"""Stage bootstrap (iteration 0): resolve or create the models and warm-start them (spec §1: base checkpoints)."""

from __future__ import annotations

from pathlib import Path

from rla_core.settings import task_files
from rla_core.settings.warm_start import warm_start_models
from tasks.stage import RunContext, StageContext, file_digest, stage


def _task_files(run: RunContext) -> str:
    return file_digest(task_files(run.config)[0])


@stage(
    "bootstrap",
    config=(
        "setting",
        "models",
        "training.sft_lr",
        "threads",
        "textgame.tasks",
        "textgame.engine",
        "coding.problems",
        "gui.tasks",
    ),
    key_extra=_task_files,
)
def bootstrap(ctx: StageContext) -> dict[str, float]:
    """Write checkpoints 'policy', 'reward' (warm-started) and, when configured, 'environment' (frozen)."""
    out = ctx.scratch()
    result = warm_start_models(ctx.config, out_dir=out, seed=ctx.seed)
    ctx.writer.put_dir(result.policy_dir, "policy")
    ctx.writer.put_dir(result.reward_dir, "reward")
    if ctx.config.models.environment is not None:
        ctx.writer.put_dir(Path(result.environment_dir or ""), "environment")
    return result.metrics
