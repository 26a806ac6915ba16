"""Stage bootstrap (iteration 0): resolve or create the models and warm-start them (spec §1: base checkpoints)."""

from __future__ import annotations

from pathlib import Path

from rla_core.settings import task_file
from rla_core.settings.warm_start import warm_start_models
from rla_core.stage_inputs import BootstrapInputs, Role, StageName
from tasks.stage import StageContext, stage


@stage(StageName.BOOTSTRAP, inputs=BootstrapInputs, reads_file=lambda i: task_file(i, held_out=False))
def bootstrap(ctx: StageContext[BootstrapInputs]) -> dict[str, float]:
    """Write checkpoints 'policy', 'reward' (warm-started) and, when configured, 'environment' (frozen)."""
    out = ctx.scratch()
    result = warm_start_models(ctx.inputs, out_dir=out, seed=ctx.seed)
    ctx.writer.put_dir(result.policy_dir, Role.POLICY)
    ctx.writer.put_dir(result.reward_dir, Role.REWARD)
    if ctx.inputs.models.environment is not None:
        ctx.writer.put_dir(Path(result.environment_dir or ""), Role.ENVIRONMENT)
    return result.metrics
