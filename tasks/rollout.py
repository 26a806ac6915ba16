"""Stage rollout: the policy plays the sampled active tasks and every pending variant (spec §1 step 1)."""

from __future__ import annotations

from rla_core.algo.curriculum import tasks_to_play
from rla_core.algo.metrics import rollout_metrics
from rla_core.algo.registry import TaskRegistry
from rla_core.settings import adapter_for
from tasks.stage import StageContext, StageRef, stage


@stage(
    "rollout",
    config=("setting", "rollout", "models.serving", "models.history_turns", "threads",
            "textgame.game_cache_dir", "textgame.engine", "coding", "gui"),
)  # fmt: skip
def rollout(ctx: StageContext, *, tasks: StageRef, policy: StageRef) -> dict[str, float]:
    """Write 'rollouts' (and, for coding, the GT 'executions')."""
    cfg = ctx.config
    registry = TaskRegistry.from_events(ctx.read(tasks, "tasks"))
    play = tasks_to_play(registry, k=cfg.rollout.tasks_per_iter, seed=ctx.seed)
    workdir = ctx.scratch()
    with ctx.generator(policy, "policy") as generator:
        frames = adapter_for(cfg.setting).rollout(
            cfg, play, generator=generator, n=cfg.rollout.rollouts_per_task, max_steps=cfg.rollout.max_steps,
            sampling=cfg.rollout.sampling, seed=ctx.seed, iteration=ctx.iteration, workdir=workdir,
            invalid_action=cfg.rollout.invalid_action,
        )  # fmt: skip
    for name, frame in frames.items():
        ctx.writer.write_frame(name, frame)
    if (workdir / "files").is_dir():
        ctx.writer.put_dir(
            workdir / "files", "files"
        )  # e.g. GUI screenshots named by rollouts.observation_ref
    return rollout_metrics(frames["rollouts"])
