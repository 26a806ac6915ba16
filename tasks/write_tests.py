"""Stage write_tests (coding): the reward model writes K unit tests per task (spec §1.1 step 2, §2.4)."""

from __future__ import annotations

import polars as pl

from rla_core import dispatch
from rla_core.config import Setting
from rla_core.settings.coding import CodingSetting, coding_task
from rla_core.stage_inputs import Role, StageName, WriteTestsInputs, need
from tasks.stage import StageContext, StageRef, stage


@stage(StageName.WRITE_TESTS, inputs=WriteTestsInputs)
def write_tests(
    ctx: StageContext[WriteTestsInputs], *, rollouts: StageRef, tasks: StageRef, reward_model: StageRef
) -> dict[str, float]:
    """Write 'unit_tests' (invalid tests kept with their reason)."""
    cfg = ctx.inputs
    played = ctx.read(rollouts, "rollouts").unique("task_id", keep="first", maintain_order=True)
    specs = ctx.task_specs(played["task_id"].to_list(), tasks)
    coding = [coding_task(task_id, spec) for task_id, spec in specs.items()]
    spec = ctx.generator_spec(reward_model, Role.REWARD, models=cfg.models, threads=cfg.threads)
    with dispatch.stage_generator(
        spec, cfg.cluster
    ) as generator:  # with cluster.backend=ray, tasks shard over actors
        unit_tests = CodingSetting().write_tests(
            need(cfg.coding, Setting.CODING),
            coding,
            generator=generator,
            seed=ctx.seed,
            iteration=ctx.iteration,
        )
    ctx.writer.write_frame("unit_tests", unit_tests)
    valid = unit_tests.filter(pl.col("valid")).height
    # No tests written: no invalid rate to report (null, not a fabricated 0).
    rate = (
        {"reward_model/unit_test_invalid_rate": 1.0 - valid / unit_tests.height} if unit_tests.height else {}
    )
    return {"reward_model/unit_tests": float(unit_tests.height), **rate}
