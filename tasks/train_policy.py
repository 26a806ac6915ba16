"""Stage train_policy: one PPO-clip + k3-KL update of the policy from its advantage rows (spec §4)."""

from __future__ import annotations

from tasks.stage import StageContext, StageRef, stage, train_checkpoint


@stage(
    "train_policy",
    config=("training.policy", "training.dtype", "models.lora", "threads"),
)
def train_policy(ctx: StageContext, *, samples: StageRef, policy: StageRef) -> dict[str, float]:
    """Write checkpoint 'policy' (a copy of the input when there is nothing to learn: a recorded no-op)."""
    return train_checkpoint(
        ctx, rows=ctx.read(samples, "policy_samples"), base=policy, name="policy",
        cfg=ctx.config.training.policy, prefix="policy",
    )  # fmt: skip
