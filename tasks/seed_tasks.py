"""Stage seed_tasks (iteration 0): the setting's seed task set becomes the registry's version-0 tasks."""

from __future__ import annotations

from rla_core.algo.registry import TaskRegistry
from rla_core.settings import adapter_for, task_files
from tasks.stage import RunContext, StageContext, file_digest, stage


def _task_files(run: RunContext) -> str:
    return file_digest(task_files(run.config)[0])


@stage(
    "seed_tasks",
    config=("setting", "textgame.tasks", "textgame.engine", "coding.problems", "gui.tasks"),
    key_extra=_task_files,
)
def seed_tasks(ctx: StageContext) -> dict[str, float]:
    """Write the initial 'tasks' registry (one active version-0 task per slot)."""
    registry = TaskRegistry.seed(adapter_for(ctx.config.setting).seed_tasks(ctx.config), iteration=0)
    ctx.writer.write_frame("tasks", registry.events)
    return {"env/slots": float(len(registry.slots()))}
