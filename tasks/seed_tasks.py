"""Stage seed_tasks (iteration 0): the setting's seed task set becomes the registry's version-0 tasks."""

from __future__ import annotations

from rla_core.algo.registry import TaskRegistry
from rla_core.settings import adapter_of, task_file
from rla_core.stage_inputs import SeedTasksInputs, StageName
from tasks.stage import StageContext, stage


@stage(StageName.SEED_TASKS, inputs=SeedTasksInputs, reads_file=lambda i: task_file(i, held_out=False))
def seed_tasks(ctx: StageContext[SeedTasksInputs]) -> dict[str, float]:
    """Write the initial 'tasks' registry (one active version-0 task per slot)."""
    registry = TaskRegistry.seed(adapter_of(ctx.inputs).seed_tasks(ctx.inputs), iteration=0)
    ctx.writer.write_frame("tasks", registry.events)
    return {"env/slots": float(len(registry.slots()))}
