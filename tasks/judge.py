"""Stage judge (text games, GUI): the reward model judges every step m times (spec §1.2(b))."""

from __future__ import annotations

from rla_core import dispatch
from rla_core.algo.episodes import played
from rla_core.algo.judging import judge_outcome_agreement, judge_step_metrics
from rla_core.algo.metrics import judgment_metrics
from rla_core.settings import adapter_of
from rla_core.stage_inputs import JudgeInputs, JudgeRequest, Role, StageName
from tasks.stage import StageContext, StageRef, stage


@stage(StageName.JUDGE, inputs=JudgeInputs)
def judge(ctx: StageContext[JudgeInputs], *, rollouts: StageRef, reward_model: StageRef) -> dict[str, float]:
    """Write 'judgments': m parsed judgments per rollout step (unparsable → null score + reason)."""
    cfg = ctx.inputs
    adapter = adapter_of(cfg)
    steps = played(ctx.read(rollouts, "rollouts"))  # env_error episodes are not judged (no outcome)
    request = JudgeRequest(
        steps, m=cfg.judge.m, sampling=cfg.judge.sampling, seed=ctx.seed, iteration=ctx.iteration,
        template=adapter.judge_template, strict=adapter.judge_strict,
        screens=ctx.side_files(rollouts) if cfg.models.images.reward else None,
    )  # fmt: skip
    generator = ctx.generator_spec(reward_model, Role.REWARD, models=cfg.models, threads=cfg.threads)
    judgments = dispatch.judge(request, generator=generator, cluster=cfg.cluster)
    ctx.writer.write_frame("judgments", judgments)
    metrics = judgment_metrics(judgments) | judge_step_metrics(steps, judgments)
    agreement = judge_outcome_agreement(steps, judgments)
    if agreement is not None:
        metrics["reward_model/outcome_agreement"] = agreement
    return metrics
