"""Stage train_reward: the same update for the reward model from its consistency advantages (spec §2.2, §4)."""

from __future__ import annotations

from rla_core.stage_inputs import Role, StageName, TrainRewardInputs
from tasks.stage import StageContext, StageRef, stage, train_checkpoint


@stage(StageName.TRAIN_REWARD, inputs=TrainRewardInputs)
def train_reward(
    ctx: StageContext[TrainRewardInputs],
    *,
    samples: StageRef,
    reward_model: StageRef,
    screens: StageRef | None = None,
) -> dict[str, float]:
    """Write checkpoint 'reward' (a copy of the input when there is nothing to learn: a recorded no-op).

    ``screens``: the rollout stage whose screenshots the samples' images reference (models.images.reward)."""
    cfg = ctx.inputs
    return train_checkpoint(
        ctx, rows=ctx.read(samples, "reward_samples"), base=reward_model, role=Role.REWARD,
        cfg=cfg.training.reward, placement=cfg.training, threads=cfg.threads, cluster=cfg.cluster,
        prefix="reward_model", screens=screens,
    )  # fmt: skip
