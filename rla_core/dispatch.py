"""A stage's generating work, here or sharded over the executor (``cluster.*``, docs/cluster.md).

The rollout, evaluate and judge stages call :func:`rollout` and :func:`judge` instead of opening a
generator themselves. :func:`rollout` is the one path that plays episodes: with the stage's adapter
(resolved once by the stage) it opens the setting's environment (:meth:`EpisodeSetting.open_env
<rla_core.settings.base.EpisodeSetting.open_env>`), plays the request in waves of what the environment
may hold open at once (``max_open``), replays the episodes whose environment failed
(:func:`rla_core.envs.rollout.play_rollouts`, ``request.env_retries``) and records side files relative
to ``request.workdir`` (:func:`play_episodes`). With ``cluster.backend=local`` it does so in this
process. With ``ray`` the work is cut into ``cluster.replicas_for(role)`` contiguous shards of its
canonical order (:mod:`rla_core.cluster.shards`); each shard runs on its own Ray actor
(:func:`rla_core.cluster.ray_session.run_shards`, resources from :func:`shard_request`) as one typed
request (:class:`RolloutShard`, :class:`~rla_core.stage_inputs.JudgeRequest`, :class:`GenerationShard`),
resolves the adapter and opens its own environment (games, browsers) and a generator over exactly the
stage's input checkpoint, and the driver merges the shards' results in shard order (:func:`sharded`:
split, work, merge). Every row is sampled from its own seeded stream, so the result equals the local one
byte for byte, whatever the shard count, and every ``cluster`` key stays out of stage keys
(``SPEED_ONLY_KEYS``).

The coding stages sample one batched generation call each (the rollout's programs — its adapter is a
:class:`~rla_core.settings.base.OneCallSetting` — and write_tests' unit tests), and so does every phase of
adapt's environment model in every setting (text games: the failure summaries, then every target's rewrite
attempts; coding: the rewrites): they open :func:`stage_generator`, which with ``ray`` is a
:class:`ShardedGenerator` — ``generate`` cuts its prompts into contiguous shards, each sampled on its
own actor by a generator over the same checkpoint, with prompt i seeded exactly as one local call seeds
it (``seeds[i]``, or ``seed + i``), so the samples are the local ones whatever the shard count.
Sandboxed executions (the coding rollout's GT tests, the execute stage) fan out through
:func:`rla_core.cluster.ray_session.run_batches`: contiguous batches of the jobs, one per Ray worker,
results concatenated in job order (``Sandbox(cluster=…)``, :mod:`rla_core.sandbox.runner`).
Multi-process policy and reward-model updates run under Ray Train
(:mod:`rla_core.cluster.ray_train`, called by :func:`rla_core.models.update.rl_update`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import polars as pl

from rla_core.cluster.ray_session import ShardRequest
from rla_core.config import ClusterBackend, ClusterConfig, Setting
from rla_core.errors import ConfigError
from rla_core.models.multimodal import ChatPrompts, Prompt
from rla_core.models.server_pool import replica_hold
from rla_core.schemas import validate
from rla_core.settings import adapter_for, engine_of
from rla_core.settings.base import (
    EpisodeSetting,
    OneCallSetting,
    SettingAdapter,
    relative_refs,
    screenshot_dir,
)

if TYPE_CHECKING:
    from rla_core.config import SamplingConfig
    from rla_core.envs.base import Environment
    from rla_core.models.generator import Generation, Generator, GeneratorSpec
    from rla_core.models.multimodal import VisionProcessor
    from rla_core.stage_inputs import JudgeRequest, RolloutRequest

__all__ = [
    "GenerationShard",
    "RolloutShard",
    "ShardedGenerator",
    "judge",
    "play_episodes",
    "rollout",
    "shard_request",
    "sharded",
    "stage_generator",
]

Job = TypeVar("Job")
Part = TypeVar("Part")
Result = TypeVar("Result")


def shard_request(generator: GeneratorSpec) -> ShardRequest:
    """What a shard that opens ``generator`` asks of its actor: its torch threads, its role and, when it
    serves with vLLM, that server's GPUs (the role's tensor-parallel size) and, inside a run that keeps
    its servers, a server pool of the actor's own kept across stages
    (:func:`~rla_core.models.server_pool.replica_hold`: the shard's generator then leases from it)."""
    vllm_gpus = generator.tensor_parallel() if generator.serves_with_vllm() else None
    return ShardRequest(
        threads=generator.threads, role=str(generator.role), vllm_gpus=vllm_gpus,
        hold=replica_hold(generator.models.serving),
    )  # fmt: skip


def sharded(
    parts: Sequence[Part],
    *,
    work: Callable[[Part], Result],
    merge: Callable[[list[Result]], Job],
    cluster: ClusterConfig,
    generator: GeneratorSpec,
    what: str,
) -> Job:
    """``merge`` of ``work`` on every part (the split of one job, in canonical order), each part on its
    own Ray actor that opens ``generator``; the results in part order. The one way work crosses machines:
    each part is one typed request, ``work`` a module-level function of it."""
    from rla_core.cluster.ray_session import run_shards

    results = run_shards(
        cluster, work, [(part,) for part in parts], request=shard_request(generator), what=what
    )
    return merge(list(results))


# ---- rollouts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutShard:
    """What a rollout shard carries to its actor: the setting (its adapter is resolved there, from the
    request's environment section), the shard's request and the generator to open."""

    setting: Setting
    request: RolloutRequest
    generator: GeneratorSpec


def rollout(
    request: RolloutRequest, *, adapter: SettingAdapter, generator: GeneratorSpec, cluster: ClusterConfig
) -> dict[str, pl.DataFrame]:
    """The rollout frames of ``request`` (side files under ``request.workdir/files``), played with the
    stage's ``adapter``: here, or in episode shards on the cluster."""
    from rla_core.cluster.shards import episode_shards

    if isinstance(adapter, OneCallSetting):  # one generation call over every problem: its prompts shard,
        # and its GT executions fan out over the same cluster (Sandbox(cluster=…))
        with stage_generator(generator, cluster) as gen:
            return adapter.sample_rollouts(replace(request, cluster=cluster), generator=gen)
    if not isinstance(adapter, EpisodeSetting):
        raise TypeError(
            f"adapter {adapter.env_name!r} neither plays episodes nor samples its rollouts in one call"
        )
    shards = (
        episode_shards(request, cluster.replicas_for(generator.role))
        if cluster.backend is ClusterBackend.RAY
        else []
    )
    if not shards:  # local, or nothing to play
        with generator.open() as gen:
            return play_episodes(adapter, request, generator=gen)
    parts = [RolloutShard(adapter.setting, shard, generator) for shard in shards]

    def merge(results: list[tuple[dict[str, pl.DataFrame], dict[str, bytes]]]) -> dict[str, pl.DataFrame]:
        names = dict.fromkeys(
            name for frames, _files in results for name in frames
        )  # a shard may lack env_errors
        frames = {
            name: validate(
                name,
                pl.concat([r[0][name] for r in results if name in r[0]], how="vertical"),
                where="rollout: merged shards",
            )
            for name in names
        }
        if request.workdir is not None:
            for _frames, files in results:
                for rel, data in files.items():
                    target = request.workdir / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
        return frames

    return sharded(
        parts, work=_play_shard, merge=merge, cluster=cluster, generator=generator, what="rollout shard"
    )


def _play_shard(shard: RolloutShard) -> tuple[dict[str, pl.DataFrame], dict[str, bytes]]:
    """One shard on an actor: frames, plus the side files it sends back (it writes into its own scratch
    directory, which may be on another machine)."""
    adapter = adapter_for(shard.setting, engine_of(shard.request.env))
    if not isinstance(adapter, EpisodeSetting):
        raise TypeError(
            f"adapter {adapter.env_name!r} plays no episodes: its rollout is not sharded by episode"
        )
    with shard.generator.open() as gen:
        if shard.request.workdir is None:
            return play_episodes(adapter, shard.request, generator=gen), {}
        with tempfile.TemporaryDirectory(prefix="rla-shard-") as tmp:
            frames = play_episodes(adapter, replace(shard.request, workdir=Path(tmp)), generator=gen)
            files = {
                str(p.relative_to(tmp)): p.read_bytes() for p in sorted(Path(tmp).rglob("*")) if p.is_file()
            }
            return frames, files


def play_episodes(
    adapter: EpisodeSetting, request: RolloutRequest, *, generator: Generator
) -> dict[str, pl.DataFrame]:
    """The request's episodes, here: in the environment the adapter opens, in waves of what it may hold
    open at once (``env.max_open``: an OSWorld desktop pool's size), failed episodes replayed on it
    (:func:`~rla_core.envs.rollout.play_rollouts`), screenshots kept under ``request.workdir`` when the
    request keeps them (:func:`~rla_core.settings.base.screenshot_dir`) and referenced relative to it."""
    if request.env is None:
        raise ConfigError(
            "a rollout request names the environment section it plays (inputs.request(...) does)"
        )
    from rla_core.envs.endpoint_play import play_through_endpoint
    from rla_core.envs.plugin_env import GuardedPlugin

    shots = screenshot_dir(request)
    with adapter.open_env(request.env, max_steps=request.max_steps, screenshot_dir=shots) as env:
        if isinstance(env, GuardedPlugin) and env.plays_itself:  # an environment written against a client
            frames = play_through_endpoint(request, env=env, generator=generator)
        else:
            frames = _in_waves(request, env, generator)
    if request.workdir is not None:
        frames["rollouts"] = relative_refs(frames["rollouts"], request.workdir)
    return frames


def _in_waves(request: RolloutRequest, env: Environment, generator: Generator) -> dict[str, pl.DataFrame]:
    """:func:`~rla_core.envs.rollout.play_rollouts` over consecutive waves of at most ``env.max_open``
    episodes (canonical order kept; each episode's rows do not depend on the others: the same rows). A
    failed episode's desktop was reset (or replaced) when it closed: its replay in its wave starts clean."""
    from rla_core.envs.rollout import play_rollouts, waves

    keys = request.episode_keys()
    size = env.max_open
    parts = (
        [request]
        if size is None or size >= len(keys)
        else [replace(request, episodes=w) for w in waves(keys, size)]
    )
    played = [play_rollouts(part, env=env, generator=generator) for part in parts]
    if len(played) == 1:
        return played[0]
    names = dict.fromkeys(name for frames in played for name in frames)  # a wave may have no env_errors
    return {name: pl.concat([f[name] for f in played if name in f], how="vertical") for name in names}


# ---- judgments -----------------------------------------------------------------------------------


def judge(request: JudgeRequest, *, generator: GeneratorSpec, cluster: ClusterConfig) -> pl.DataFrame:
    """'judgments' of every step of ``request.steps`` (:func:`rla_core.envs.judge.judge_steps`)."""
    from rla_core.cluster.shards import split_even

    steps = request.steps
    ranges = split_even(steps.height, cluster.replicas_for(generator.role))
    if cluster.backend is ClusterBackend.LOCAL or len(ranges) <= 1:
        return _judge_here(JudgeShard(request, generator))
    parts = [JudgeShard(replace(request, steps=steps.slice(r.start, len(r))), generator) for r in ranges]

    def merge(results: list[pl.DataFrame]) -> pl.DataFrame:
        return validate("judgments", pl.concat(results, how="vertical"), where="judge: merged shards")

    return sharded(
        parts, work=_judge_here, merge=merge, cluster=cluster, generator=generator, what="judge shard"
    )


@dataclass(frozen=True)
class JudgeShard:
    """What a judge shard carries to its actor: its part of the request and the generator to open."""

    request: JudgeRequest
    generator: GeneratorSpec


def _judge_here(shard: JudgeShard) -> pl.DataFrame:
    from rla_core.envs.judge import judge_steps

    job = shard.request
    with shard.generator.open() as gen:
        return judge_steps(
            job.steps, generator=gen, m=job.m, sampling=job.sampling, seed=job.seed, iteration=job.iteration,
            template=job.template, strict=job.strict, screens=job.screens,
        )  # fmt: skip


@contextmanager
def stage_generator(generator: GeneratorSpec, cluster: ClusterConfig) -> Iterator[Generator]:
    """The stage's generator: opened here (``local``), or a :class:`ShardedGenerator` (``ray``)."""
    if cluster.backend is ClusterBackend.LOCAL:
        with generator.open() as gen:
            yield gen
    else:
        yield ShardedGenerator(generator, cluster)


class ShardedGenerator:
    """A :class:`~rla_core.models.generator.Generator` whose ``generate`` samples on Ray actors.

    The prompts are cut into ``cluster.replicas_for(role)`` contiguous shards (:func:`~rla_core.cluster.shards.split_even`);
    each shard runs on its own actor, which opens ``spec`` (the same checkpoint, backend and torch threads)
    and samples its prompts with their seeds as one local call over every prompt would: ``seeds[i]``, or
    ``seed + i`` with i the prompt's index in the whole call. A generator's sample j of prompt i depends
    only on (prompt i, its seed, j), so the results, concatenated in shard order, are the local ones.
    Meant for stages that sample one batched call (each call starts its actors and loads the model in
    each). ``format_prompt`` renders here, with the checkpoint's own tokenizer, what the generator in an
    actor would render.

    Example:
        >>> ray2 = ClusterConfig(backend=ClusterBackend.RAY, workers=2)
        >>> with stage_generator(spec, ray2) as gen:  # prompts 0-1 on one actor, 2 on the other
        ...     out = gen.generate(["a", "b", "c"], n=2, sampling=SamplingConfig(), seed=7)
        >>> with spec.open() as here:  # the same samples, row for row
        ...     out == here.generate(["a", "b", "c"], n=2, sampling=SamplingConfig(), seed=7)
        True
    """

    def __init__(self, spec: GeneratorSpec, cluster: ClusterConfig) -> None:
        self.spec = spec
        self.cluster = cluster
        chat: Callable[[str], str] | None = None
        self._vision: VisionProcessor | None = None  # loaded on the first image prompt
        if spec.models.serving.chat_template:  # as both generator backends do (chat_template on)
            from transformers import AutoTokenizer

            from rla_core.models.generator import chat_formatter

            chat = chat_formatter(AutoTokenizer.from_pretrained(spec.checkpoint))
        # an image prompt's markup as in an actor (chat_template on)
        self.format_prompt = ChatPrompts(
            chat, spec.models.serving.chat_template, self._vision_processor
        ).format

    def _vision_processor(self) -> VisionProcessor:
        if self._vision is None:  # loaded on the first image prompt
            from rla_core.models.multimodal import VisionProcessor

            self._vision = VisionProcessor.from_pretrained(
                self.spec.checkpoint, what="format_prompt() prompts"
            )
        return self._vision

    def generate(
        self,
        prompts: Sequence[Prompt],
        *,
        n: int,
        sampling: SamplingConfig,
        seed: int,
        seeds: Sequence[int] | None = None,
    ) -> list[list[Generation]]:
        """``result[i][j]`` is sample j of prompt i, drawn on the actor of the shard holding prompt i."""
        from rla_core.cluster.shards import split_even
        from rla_core.models.generator import prompt_seeds

        per_prompt = prompt_seeds(prompts, seed, seeds)
        ranges = split_even(len(prompts), self.cluster.replicas_for(self.spec.role))
        parts = [
            GenerationShard(self.spec, [prompts[i] for i in r], n, sampling, [per_prompt[i] for i in r])
            for r in ranges
        ]
        if not parts:
            return []

        def merge(results: list[list[list[Generation]]]) -> list[list[Generation]]:
            return [samples for shard in results for samples in shard]

        return sharded(
            parts, work=_generate_here, merge=merge, cluster=self.cluster, generator=self.spec,
            what="generation shard",
        )  # fmt: skip

    def close(self) -> None:
        """Nothing held here: each ``generate`` call's actors end with it, or live with the run that keeps
        them (:func:`shard_request`)."""


@dataclass(frozen=True)
class GenerationShard:
    """What a generation shard carries to its actor: the generator to open, its prompts, the samples per
    prompt, the sampling and each prompt's seed."""

    generator: GeneratorSpec
    prompts: list[Prompt]
    n: int
    sampling: SamplingConfig
    seeds: list[int]


def _generate_here(shard: GenerationShard) -> list[list[Generation]]:
    with shard.generator.open() as gen:
        return gen.generate(
            shard.prompts, n=shard.n, sampling=shard.sampling, seed=shard.seeds[0], seeds=shard.seeds
        )
