"""Generating stages on one process or sharded over a Ray cluster (``cluster.*``, docs/cluster.md).

The rollout, evaluate and judge stages call :func:`play_episodes` and :func:`judge_rollouts` instead of opening a
generator themselves. With ``cluster.backend=local`` both open the stage's generator here and do the
work in this process. With ``ray`` the work is cut into ``cluster.replicas_for(role)`` contiguous shards of its
canonical order (:mod:`rla_core.cluster.shards`); each shard runs on its own Ray actor, which opens
its own environment (games, browsers) and a generator over exactly the stage's input checkpoint, and
the driver concatenates the shards' frames in shard order. Every row is sampled from its own seeded
stream, so the result equals the local one byte for byte, whatever the shard count, and every
``cluster`` key stays out of stage keys (``SPEED_ONLY_KEYS``).

Sandboxed executions (the coding rollout's GT tests, the execute stage) fan out through
:func:`rla_core.cluster.ray_session.run_batches`: contiguous batches of the jobs, one per Ray worker,
results concatenated in job order (``Sandbox(cluster=…)``, :mod:`rla_core.sandbox.runner`). The
coding rollout's one generation call over every problem is not sharded yet: it runs in the stage's
process. Multi-process policy and reward-model updates run under Ray Train
(:mod:`rla_core.cluster.ray_train`, called by :func:`rla_core.models.trainer.rl_update`).
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.config import ClusterBackend, ClusterConfig, Setting
from rla_core.schemas import validate

if TYPE_CHECKING:
    from rla_core.models.generator import GeneratorSpec
    from rla_core.stage_inputs import RolloutRequest

__all__ = ["judge_rollouts", "play_episodes"]


def play_episodes(
    request: RolloutRequest, *, setting: Setting, generator: GeneratorSpec, cluster: ClusterConfig
) -> dict[str, pl.DataFrame]:
    """The setting's rollout frames for ``request`` (side files under ``request.workdir/files``)."""
    from rla_core.cluster.shards import episode_shards

    sharded = cluster.backend is ClusterBackend.RAY and setting is not Setting.CODING
    shards = episode_shards(request, cluster.replicas_for(generator.role)) if sharded else []
    if not shards:  # local, coding (generation not sharded yet; its executions fan out), or nothing to play
        if setting is Setting.CODING:
            request = replace(request, cluster=cluster)
        return _play_here(setting, request, generator, False)[0]
    from rla_core.cluster.ray_session import run_shards

    results = run_shards(
        cluster, _play_here, [(setting, shard, generator, True) for shard in shards], threads=generator.threads,
        what="rollout shard",
    )  # fmt: skip
    frames = {
        name: validate(
            name,
            pl.concat([r[0][name] for r in results], how="vertical"),
            where="play_episodes: merged shards",
        )
        for name in results[0][0]
    }
    if request.workdir is not None:
        for _frames, files in results:
            for rel, data in files.items():
                target = request.workdir / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
    return frames


def _play_here(
    setting: Setting, request: RolloutRequest, generator: GeneratorSpec, shard: bool
) -> tuple[dict[str, pl.DataFrame], dict[str, bytes]]:
    """The whole request here, or one ``shard`` on an actor: frames, plus the side files a shard sends
    back (a shard writes into its own scratch directory, which may be on another machine)."""
    from rla_core.settings import adapter_for

    with generator.open() as gen:
        if request.workdir is None or not shard:
            return adapter_for(setting).rollout(request, generator=gen), {}
        with tempfile.TemporaryDirectory(prefix="rla-shard-") as tmp:
            frames = adapter_for(setting).rollout(replace(request, workdir=Path(tmp)), generator=gen)
            files = {
                str(p.relative_to(tmp)): p.read_bytes() for p in sorted(Path(tmp).rglob("*")) if p.is_file()
            }
            return frames, files


def judge_rollouts(
    rollouts: pl.DataFrame,
    *,
    generator: GeneratorSpec,
    cluster: ClusterConfig,
    **judge_args: Any,
) -> pl.DataFrame:
    """'judgments' of every step of ``rollouts`` (:func:`rla_core.envs.judge.judge_steps` arguments)."""
    from rla_core.cluster.shards import split_even

    parts = split_even(rollouts.height, cluster.replicas_for(generator.role))
    if cluster.backend is ClusterBackend.LOCAL or len(parts) <= 1:
        return _judge_here(rollouts, generator, judge_args)
    from rla_core.cluster.ray_session import run_shards

    payloads = [(rollouts.slice(part.start, len(part)), generator, judge_args) for part in parts]
    results = run_shards(cluster, _judge_here, payloads, threads=generator.threads, what="judge shard")
    return validate("judgments", pl.concat(results, how="vertical"), where="judge_rollouts: merged shards")


def _judge_here(rollouts: pl.DataFrame, generator: GeneratorSpec, judge_args: dict[str, Any]) -> pl.DataFrame:
    from rla_core.envs.judge import judge_steps

    with generator.open() as gen:
        return judge_steps(rollouts, generator=gen, **judge_args)
