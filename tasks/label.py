"""Stage label: decide last step's pending tasks, then build policy and reward-model training rows (spec §2)."""

from __future__ import annotations

from rla_core.algo.curriculum import accepted_pending, decide_pending
from rla_core.algo.labels import task_accuracy
from rla_core.algo.metrics import band_share
from rla_core.algo.registry import TaskRegistry
from rla_core.settings import adapter_of
from rla_core.stage_inputs import LabelInputs, StageName
from tasks.stage import StageContext, StageRef, signal_frames, stage


@stage(StageName.LABEL, inputs=LabelInputs)
def label(ctx: StageContext[LabelInputs], *, tasks: StageRef, **signals: StageRef) -> dict[str, float]:
    """Write 'decisions', the updated 'tasks' registry, 'policy_samples' and 'reward_samples'.

    ``signals``: the rollouts and the setting's reward-model signals, as :func:`tasks.stage.signal_frames`
    names them."""
    cfg = ctx.inputs
    frames = signal_frames(ctx, **signals)
    acc = task_accuracy(frames["rollouts"])
    registry, decisions = decide_pending(
        TaskRegistry.from_events(ctx.read(tasks, "tasks")), acc, cfg=cfg.adaptation, iteration=ctx.iteration
    )
    policy, reward, stats = adapter_of(cfg).labels(
        cfg, frames, accepted=accepted_pending(decisions), seed=ctx.seed
    )
    ctx.writer.write_frame("decisions", decisions)
    ctx.writer.write_frame("tasks", registry.events)
    ctx.writer.write_frame("policy_samples", policy)
    ctx.writer.write_frame("reward_samples", reward)
    accepted = decisions.filter(decisions["accepted"]).height
    return {
        **stats,
        **band_share(acc, cfg.reward.rm_acc_band),
        "policy/samples": float(policy.height),
        "reward_model/samples": float(reward.height),
        "env/pending_decided": float(decisions.height),
        "env/pending_accepted": float(accepted),
        "env/pending_rejected": float(decisions.height - accepted),
    }
