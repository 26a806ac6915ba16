"""Stage train_policy: one PPO-clip + k3-KL update of the policy from its advantage rows (spec §4)."""

from __future__ import annotations

from rla_core.stage_inputs import Role, StageName, TrainPolicyInputs
from tasks.stage import StageContext, StageRef, stage, train_checkpoint


@stage(StageName.TRAIN_POLICY, inputs=TrainPolicyInputs)
def train_policy(
    ctx: StageContext[TrainPolicyInputs],
    *,
    samples: StageRef,
    policy: StageRef,
    screens: StageRef | None = None,
) -> dict[str, float]:
    """Write checkpoint 'policy' (a copy of the input when there is nothing to learn: a recorded no-op).

    ``screens``: the rollout stage whose screenshots the samples' images reference (models.images.policy)."""
    cfg = ctx.inputs
    return train_checkpoint(
        ctx, rows=ctx.read(samples, "policy_samples"), base=policy, role=Role.POLICY, cfg=cfg.training.policy,
        placement=cfg.training, threads=cfg.threads, cluster=cfg.cluster, prefix="policy", screens=screens,
    )  # fmt: skip
