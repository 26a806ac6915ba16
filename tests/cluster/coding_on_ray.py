"""The coding stages' generation calls on an embedded Ray with 1 and 2 shards, and here, written as Parquet.

``python -m tests.cluster.coding_on_ray WORKDIR``, started by tests/cluster/test_coding_shards.py inside a
private network namespace that has only `lo` (``unshare -n``): the embedded Ray binds 127.0.0.1 and stops
when this process exits. For ``local``, ``ray-1`` and ``ray-2`` it makes what the coding rollout
(``dispatch.rollout``: programs, then their GT executions), write_tests (the reward model's unit tests) and
adapt (the environment model's rewrites) make, with each stage's own calls, on three problems of the
coding preset and a tiny model, and what the text-game adapt makes with that model as its environment
model (``textgame_proposals``: the LLM rewriter's attempts for two targets, one generate call); it writes
each frame to ``WORKDIR/<config>/<frame>.parquet``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import polars as pl

from rla_core import dispatch
from rla_core.algo.adaptation import Goal
from rla_core.algo.curriculum import PlayTask, RewriteTarget
from rla_core.config import ClusterBackend, ClusterConfig, Setting, load_config
from rla_core.dispatch import ShardedGenerator, stage_generator
from rla_core.models.bootstrap import ensure_tiny_model
from rla_core.models.generator import GeneratorSpec
from rla_core.schemas import get_schema
from rla_core.settings.base import ProposalRequest
from rla_core.settings.coding import CodingSetting, coding_task
from rla_core.settings.textgame import TEXTWORLD
from rla_core.stage_inputs import (
    AdaptInputs,
    RolloutInputs,
    RolloutRequest,
    SeedTasksInputs,
    WriteTestsInputs,
    need,
)

SHARDS = (2,)  # contiguous prompt slices with their seeds' offsets; 1 shard is the same code with one slice
CONFIGS = {
    "local": ClusterConfig(),
    **{
        f"ray-{w}": ClusterConfig(backend=ClusterBackend.RAY, workers=w, node_ip_address="127.0.0.1")
        for w in SHARDS
    },
}


def main() -> None:
    work = Path(sys.argv[1])
    cfg = load_config(
        preset="coding",
        overrides=[
            "threads=1", "rollout.rollouts_per_task=2", "rollout.sampling.max_new_tokens=24",
            "coding.unit_tests_per_task=2", "coding.unit_test_sampling.max_new_tokens=24",
            "adaptation.candidates=2", "adaptation.sampling.max_new_tokens=24",
        ],
    )  # fmt: skip
    setting = CodingSetting()
    rollout, tests = RolloutInputs.from_config(cfg), WriteTestsInputs.from_config(cfg)
    adapt = AdaptInputs.from_config(cfg)
    problems = setting.seed_tasks(SeedTasksInputs.from_config(cfg))[:3]
    tasks = tuple(PlayTask(task_id, task_id, False, spec) for task_id, _env, spec in problems)
    model = ensure_tiny_model(
        "coder", corpus=[spec["question"] for *_, spec in problems], cache_dir=work / "models"
    )
    spec = GeneratorSpec(checkpoint=model, models=rollout.models, role="policy", name=None, threads=1)
    request = RolloutRequest(
        tasks=tasks, n=rollout.rollout.rollouts_per_task, max_steps=1, sampling=rollout.rollout.sampling,
        seed=11, iteration=1, history_turns=0, env=rollout.env(), env_retries=0,
    )  # fmt: skip
    targets = [
        RewriteTarget(t.task_id, t.task_id, goal, 0.5, t.spec, t.spec)
        for t, goal in zip(tasks, (Goal.HARDER, Goal.EASIER, Goal.HARDER), strict=True)
    ]
    textgame = textgame_job(work)
    env_model = GeneratorSpec(
        checkpoint=model, models=rollout.models, role="environment", name=None, threads=1
    )
    for name, cluster in CONFIGS.items():
        start = time.perf_counter()
        frames = dispatch.rollout(request, adapter=setting, generator=spec, cluster=cluster)
        with stage_generator(spec, cluster) as gen:
            assert isinstance(gen, ShardedGenerator) == (cluster.backend is ClusterBackend.RAY)
            frames["unit_tests"] = setting.write_tests(
                need(tests.coding, Setting.CODING), [coding_task(t.task_id, t.spec) for t in tasks],
                generator=gen, seed=12, iteration=1,
            )  # fmt: skip
            job = ProposalRequest(
                frames={"executions": frames["executions"], "unit_tests": frames["unit_tests"]},
                targets=targets, seed=13, iteration=1,
            )  # fmt: skip
            frames["proposals"] = setting.propose(adapt, job, env_model=gen)
        adapt_start = time.perf_counter()
        with stage_generator(env_model, cluster) as gen:
            frames["textgame_proposals"] = TEXTWORLD.propose(*textgame, env_model=gen)
        print(f"{name}: text-game adapt {time.perf_counter() - adapt_start:.1f} s", file=sys.stderr)
        (work / name).mkdir(parents=True)
        for frame_name, frame in frames.items():
            assert isinstance(frame, pl.DataFrame) and frame.height > 0, (name, frame_name)
            frame.write_parquet(work / name / f"{frame_name}.parquet")
        print(f"{name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)


def textgame_job(work: Path) -> tuple[AdaptInputs, ProposalRequest]:
    """The text-game adapt's inputs (LLM rewriter, 2 candidates) and a job of two rewrite targets. No
    rollout failed, so no failure summary is asked for: the summaries are one more call of the same kind
    (their outputs reach 'proposals' only through a ``\\boxed{}``, which a tiny model does not write)."""
    cfg = load_config(
        preset="test",
        overrides=[
            "threads=1", "models.environment=tiny:env", "adaptation.rewriter=llm", "adaptation.candidates=2",
            "adaptation.sampling.max_new_tokens=24", f"textgame.game_cache_dir={work / 'games'}",
        ],
    )  # fmt: skip
    seeded = TEXTWORLD.seed_tasks(SeedTasksInputs.from_config(cfg))[:2]
    targets = [
        RewriteTarget(slot, slot, goal, 0.0 if goal is Goal.EASIER else 1.0, spec, spec)
        for (slot, _env, spec), goal in zip(seeded, (Goal.EASIER, Goal.HARDER), strict=True)
    ]
    frames = {name: pl.DataFrame(schema=get_schema(name).polars_schema) for name in ("rollouts", "judgments")}
    return AdaptInputs.from_config(cfg), ProposalRequest(frames=frames, targets=targets, seed=15, iteration=1)


if __name__ == "__main__":
    main()
