"""Stage rollout: the policy plays the sampled active tasks and every pending variant (spec §1 step 1)."""

from __future__ import annotations

from rla_core import dispatch
from rla_core.algo.curriculum import tasks_to_play
from rla_core.algo.episodes import check_env_error_share
from rla_core.algo.metrics import rollout_metrics
from rla_core.algo.registry import TaskRegistry
from rla_core.settings import adapter_of
from rla_core.settings.base import SIDE_FILES
from rla_core.stage_inputs import Role, RolloutInputs, StageName
from tasks.stage import StageContext, StageRef, stage


@stage(StageName.ROLLOUT, inputs=RolloutInputs)
def rollout(ctx: StageContext[RolloutInputs], *, tasks: StageRef, policy: StageRef) -> dict[str, float]:
    """Write 'rollouts' (and, for coding, the GT 'executions'; 'env_errors' when an attempt failed)."""
    cfg = ctx.inputs
    registry = TaskRegistry.from_events(ctx.read(tasks, "tasks"))
    workdir = ctx.scratch()
    played = tuple(tasks_to_play(registry, k=cfg.rollout.tasks_per_iter, seed=ctx.seed))
    request = cfg.request(played, seed=ctx.seed, iteration=ctx.iteration, workdir=workdir)
    generator = ctx.generator_spec(policy, Role.POLICY, models=cfg.models, threads=cfg.threads)
    frames = dispatch.rollout(request, adapter=adapter_of(cfg), generator=generator, cluster=cfg.cluster)
    check_env_error_share(
        frames["rollouts"],
        max_share=cfg.rollout.max_env_error_share,
        where=f"rollout, iteration {ctx.iteration}",
    )
    for name, frame in frames.items():
        ctx.writer.write_frame(name, frame)
    if (workdir / SIDE_FILES).is_dir():  # e.g. GUI screenshots named by rollouts.observation_ref
        ctx.writer.put_dir(workdir / SIDE_FILES, SIDE_FILES)
    return rollout_metrics(frames["rollouts"])
