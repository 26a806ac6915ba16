"""Stage train_reward: the same update for the reward model from its consistency advantages (spec §2.2, §4)."""

from __future__ import annotations

from tasks.stage import StageContext, StageRef, stage, train_checkpoint


@stage(
    "train_reward",
    config=("training.reward", "training.dtype", "models.lora", "threads"),
)
def train_reward(ctx: StageContext, *, samples: StageRef, reward_model: StageRef) -> dict[str, float]:
    """Write checkpoint 'reward' (a copy of the input when there is nothing to learn: a recorded no-op)."""
    return train_checkpoint(
        ctx, rows=ctx.read(samples, "reward_samples"), base=reward_model, name="reward",
        cfg=ctx.config.training.reward, prefix="reward_model",
    )  # fmt: skip
