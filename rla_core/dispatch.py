"""A stage's generating work, here or sharded over the executor (``cluster.*``, docs/cluster.md).

The rollout, evaluate and judge stages call :func:`rollout` and :func:`judge` instead of opening a
generator themselves; :func:`rollout` asks the registry (:func:`rla_core.settings.adapter_for`) for the
adapter of the setting and engine, whose ``rollout`` plays the episodes. With ``cluster.backend=local``
both open the stage's generator here and do the work in this process. With ``ray`` the work is cut into
``cluster.replicas_for(role)`` contiguous shards of its canonical order (:mod:`rla_core.cluster.shards`);
each shard runs on its own Ray actor (:func:`rla_core.cluster.ray_session.run_shards`, resources from
:func:`shard_request`), which opens its own environment (games, browsers) and a generator over exactly
the stage's input checkpoint, and the driver concatenates the shards' frames in shard order. Every row
is sampled from its own seeded stream, so the result equals the local one byte for byte, whatever the
shard count, and every ``cluster`` key stays out of stage keys (``SPEED_ONLY_KEYS``).

The coding stages sample one batched generation call each (the rollout's programs — its adapter says so
with ``one_generation_call`` — and write_tests' unit tests), and so does every phase of adapt's
environment model in every setting (text games: the failure summaries, then every target's rewrite
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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.cluster.ray_session import ShardRequest
from rla_core.config import ClusterBackend, ClusterConfig, Setting
from rla_core.models.multimodal import ChatPrompts, Prompt
from rla_core.models.server_pool import replica_hold
from rla_core.schemas import validate
from rla_core.settings import adapter_for, engine_of

if TYPE_CHECKING:
    from rla_core.config import SamplingConfig
    from rla_core.models.generator import Generation, Generator, GeneratorSpec
    from rla_core.models.multimodal import VisionProcessor
    from rla_core.stage_inputs import RolloutRequest

__all__ = ["ShardedGenerator", "judge", "rollout", "shard_request", "stage_generator"]


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


def rollout(
    request: RolloutRequest, *, setting: Setting, generator: GeneratorSpec, cluster: ClusterConfig
) -> dict[str, pl.DataFrame]:
    """The rollout frames of ``request`` played by the adapter of ``setting`` and the engine of
    ``request.env`` (side files under ``request.workdir/files``)."""
    from rla_core.cluster.shards import episode_shards

    adapter = adapter_for(setting, engine_of(request.env))
    if adapter.one_generation_call:  # one generation call over every problem: its prompts shard, and
        # its GT executions fan out over the same cluster (Sandbox(cluster=…))
        with stage_generator(generator, cluster) as gen:
            return adapter.rollout(replace(request, cluster=cluster), generator=gen)
    shards = (
        episode_shards(request, cluster.replicas_for(generator.role))
        if cluster.backend is ClusterBackend.RAY
        else []
    )
    if not shards:  # local, or nothing to play
        return _play_here(setting, request, generator, False)[0]
    from rla_core.cluster.ray_session import run_shards

    results = run_shards(
        cluster, _play_here, [(setting, shard, generator, True) for shard in shards],
        request=shard_request(generator), what="rollout shard",
    )  # fmt: skip
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


def _play_here(
    setting: Setting, request: RolloutRequest, generator: GeneratorSpec, shard: bool
) -> tuple[dict[str, pl.DataFrame], dict[str, bytes]]:
    """The whole request here, or one ``shard`` on an actor: frames, plus the side files a shard sends
    back (a shard writes into its own scratch directory, which may be on another machine)."""
    adapter = adapter_for(setting, engine_of(request.env))
    with generator.open() as gen:
        if request.workdir is None or not shard:
            return adapter.rollout(request, generator=gen), {}
        with tempfile.TemporaryDirectory(prefix="rla-shard-") as tmp:
            frames = adapter.rollout(replace(request, workdir=Path(tmp)), generator=gen)
            files = {
                str(p.relative_to(tmp)): p.read_bytes() for p in sorted(Path(tmp).rglob("*")) if p.is_file()
            }
            return frames, files


def judge(
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
    results = run_shards(cluster, _judge_here, payloads, request=shard_request(generator), what="judge shard")
    return validate("judgments", pl.concat(results, how="vertical"), where="judge: merged shards")


def _judge_here(rollouts: pl.DataFrame, generator: GeneratorSpec, judge_args: dict[str, Any]) -> pl.DataFrame:
    from rla_core.envs.judge import judge_steps

    with generator.open() as gen:
        return judge_steps(rollouts, generator=gen, **judge_args)


@contextmanager
def stage_generator(generator: GeneratorSpec, cluster: ClusterConfig) -> Iterator[Generator]:
    """The stage's generator: opened here (``local``), or a :class:`ShardedGenerator` (``ray``)."""
    if cluster.backend is ClusterBackend.LOCAL:
        with generator.open() as gen:
            yield gen
    else:
        yield ShardedGenerator(generator, cluster)


class ShardedGenerator(ChatPrompts):
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
        self._chat: Callable[[str], str] | None = None
        self._chat_on = spec.models.serving.chat_template  # an image prompt's markup as in an actor
        self._vision: VisionProcessor | None = None  # loaded on the first image prompt
        if spec.models.serving.chat_template:  # as both generator backends do (chat_template on)
            from transformers import AutoTokenizer

            from rla_core.models.generator import chat_formatter

            self._chat = chat_formatter(AutoTokenizer.from_pretrained(spec.checkpoint))

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
        from rla_core.cluster.ray_session import run_shards
        from rla_core.cluster.shards import split_even
        from rla_core.models.generator import prompt_seeds

        per_prompt = prompt_seeds(prompts, seed, seeds)
        parts = split_even(len(prompts), self.cluster.replicas_for(self.spec.role))
        payloads = [
            (self.spec, [prompts[i] for i in part], n, sampling, [per_prompt[i] for i in part])
            for part in parts
        ]
        if not payloads:
            return []
        results = run_shards(
            self.cluster, _generate_here, payloads, request=shard_request(self.spec), what="generation shard"
        )
        return [samples for shard in results for samples in shard]

    def close(self) -> None:
        """Nothing held here: each ``generate`` call's actors end with it, or live with the run that keeps
        them (:func:`shard_request`)."""


def _generate_here(
    spec: GeneratorSpec, prompts: list[Prompt], n: int, sampling: SamplingConfig, seeds: list[int]
) -> list[list[Generation]]:
    with spec.open() as gen:
        return gen.generate(prompts, n=n, sampling=sampling, seed=seeds[0], seeds=seeds)
