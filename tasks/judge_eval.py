"""Stage judge_eval: the reward model judges the judge's yardstick, a fixed recorded step set.

The judge stage's metrics are measured on the steps the current policy played, which drift with it; the
yardstick (``evaluation.judge_steps``, e.g. the warm-start policy's episodes on validation games with the
engine's expert labels) is the same set at every evaluation point, so the judge's balanced step accuracy and
share of "good" verdicts can be compared from iteration 0 to the end of a run, and across runs.
"""

from __future__ import annotations

from rla_core import dispatch
from rla_core.algo.judging import judge_step_metrics
from rla_core.envs.judge import read_steps_file
from rla_core.errors import ConfigError
from rla_core.settings import adapter_of
from rla_core.settings.base import resolve_data_path
from rla_core.stage_inputs import JudgeEvalInputs, JudgeRequest, Role, StageName
from tasks.stage import StageContext, StageRef, stage

YARDSTICK_PREFIX = "reward_model/yardstick_"


@stage(StageName.JUDGE_EVAL, inputs=JudgeEvalInputs, reads_file=lambda i: i.steps_file())
def judge_eval(ctx: StageContext[JudgeEvalInputs], *, reward_model: StageRef) -> dict[str, float]:
    """Write 'judgments' of the yardstick's steps (m per step, the judge stage's sampling and seeds) and
    their metrics ``reward_model/yardstick_step_balanced_accuracy``, ``…_good_verdict_share``,
    ``…_good_step_share`` and ``…_step_accuracy``."""
    cfg = ctx.inputs
    adapter = adapter_of(cfg)
    path = cfg.steps_file()
    if path is None:
        raise ConfigError("judge_eval runs only with evaluation.judge_steps set (the flow's rule)")
    steps = read_steps_file(resolve_data_path(path), where="evaluation.judge_steps")
    request = JudgeRequest(
        steps, m=cfg.judge.m, sampling=cfg.judge.sampling, seed=ctx.seed, iteration=ctx.iteration,
        template=adapter.judge_template, strict=adapter.judge_strict,
    )  # fmt: skip
    generator = ctx.generator_spec(reward_model, Role.REWARD, models=cfg.models, threads=cfg.threads)
    judgments = dispatch.judge(request, generator=generator, cluster=cfg.cluster)
    ctx.writer.write_frame("judgments", judgments)
    return judge_step_metrics(steps, judgments, prefix=YARDSTICK_PREFIX)
