"""Stage bootstrap (iteration 0): resolve or create the models and warm-start them (spec §1: base checkpoints)."""

from __future__ import annotations

from pathlib import Path

from rla_core.settings.warm_start import warm_start_models
from tasks.stage import StageContext, stage


@stage(
    "bootstrap",
    config=("setting", "models", "training.sft_lr", "textgame.tasks", "coding.problems"),
    uses=("rla_core.models", "rla_core.settings", "rla_core.envs", "rla_core.coding"),
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
