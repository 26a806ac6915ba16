"""Stage execute (coding): every program runs on the generated unit tests in the sandbox (spec §1.1 step 3)."""

from __future__ import annotations

from rla_core.config import Setting
from rla_core.settings.coding import CodingSetting, coding_task
from rla_core.stage_inputs import ExecuteInputs, StageName, need
from tasks.stage import StageContext, StageRef, stage


@stage(StageName.EXECUTE, inputs=ExecuteInputs)
def execute(
    ctx: StageContext[ExecuteInputs], *, rollouts: StageRef, unit_tests: StageRef, tasks: StageRef
) -> dict[str, float]:
    """Write 'executions' of the generated tests (the GT executions come from the rollout stage)."""
    programs = ctx.read(rollouts, "rollouts")
    tests = ctx.read(unit_tests, "unit_tests")
    specs = ctx.task_specs(programs["task_id"].unique(maintain_order=True).to_list(), tasks)
    coding = [coding_task(task_id, spec) for task_id, spec in specs.items()]
    sandbox = need(ctx.inputs.coding, Setting.CODING)
    executions = CodingSetting().execute(
        sandbox, programs, tests, coding, iteration=ctx.iteration,
        retries=ctx.inputs.rollout.env_retries, cluster=ctx.inputs.cluster,
    )  # fmt: skip
    ctx.writer.write_frame("executions", executions)
    counts = executions.group_by("error_kind").len()
    out = {"reward_model/executions": float(executions.height)}
    for kind, n in counts.iter_rows():
        out[f"reward_model/exec_{kind}"] = float(n)
    if executions.height:  # no executions: no pass rate to report (null, not a fabricated 0)
        out["reward_model/exec_pass_rate"] = float(executions["passed"].sum()) / executions.height
    return out
