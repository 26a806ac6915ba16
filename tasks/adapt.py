"""Stage adapt: critic feedback → harder/easier variants of mis-sized tasks, pending for the next step (spec §3)."""

from __future__ import annotations

import contextlib

import polars as pl

from rla_core import dispatch
from rla_core.algo.curriculum import register_chosen, rewrite_targets
from rla_core.algo.labels import task_accuracy
from rla_core.algo.registry import TaskRegistry
from rla_core.settings import adapter_of
from rla_core.settings.base import ProposalRequest
from rla_core.stage_inputs import AdaptInputs, Role, StageName
from tasks.stage import StageContext, StageRef, signal_frames, stage


@stage(StageName.ADAPT, inputs=AdaptInputs)
def adapt(
    ctx: StageContext[AdaptInputs], *, tasks: StageRef, models: StageRef, **signals: StageRef
) -> dict[str, float]:
    """Write 'proposals' (every candidate, valid or not, with reasons) and the updated 'tasks' registry.

    ``signals``: the rollouts and the setting's reward-model signals, as :func:`tasks.stage.signal_frames`
    names them."""
    cfg = ctx.inputs
    frames = signal_frames(ctx, **signals)
    registry = TaskRegistry.from_events(ctx.read(tasks, "tasks"))
    targets = rewrite_targets(
        registry, task_accuracy(frames["rollouts"]), cfg=cfg.adaptation, iteration=ctx.iteration
    )
    # Every use of the environment model is one generate call per phase (text games: the failure summaries,
    # then every target's rewrite attempts; coding and OSWorld with adaptation.rewriter=llm: every rewrite),
    # which shards over a Ray cluster. MiniWoB's rewriter is parametric: it leaves the model unused.
    with contextlib.ExitStack() as stack:
        env_model = (
            stack.enter_context(
                dispatch.stage_generator(
                    ctx.generator_spec(models, Role.ENVIRONMENT, models=cfg.models, threads=cfg.threads),
                    cfg.cluster,
                )
            )
            if cfg.models.environment is not None and targets
            else None
        )
        job = ProposalRequest(frames=frames, targets=targets, seed=ctx.seed, iteration=ctx.iteration)
        proposals = adapter_of(cfg).propose(cfg, job, env_model=env_model)
    registry, created = register_chosen(registry, proposals, iteration=ctx.iteration)
    ctx.writer.write_frame("proposals", proposals)
    ctx.writer.write_frame("tasks", registry.events)
    return {
        "env/rewrite_targets": float(len(targets)),
        "env/proposals": float(proposals.height),
        "env/proposals_valid": float(proposals.filter(pl.col("valid")).height),
        "env/pending_created": float(len(created)),
    }
