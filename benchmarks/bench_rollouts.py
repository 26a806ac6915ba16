"""Throughput of the batched rollout runner with the default tiny policy (untrained, bootstrapped).

Prints steps/s and the share of wall time in generation vs. the TextWorld engine for the default
``joint`` mode (one generate call per turn) and the ``per_episode`` reference (one call per episode per
turn), and checks that both give identical rows (per-prompt seeds). Run: ``.venv/bin/python benchmarks/bench_rollouts.py`` (~1-2 min on 2 CPU cores).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import polars as pl
import torch

from rla_core.algo.curriculum import PlayTask
from rla_core.config import SamplingConfig
from rla_core.envs.demos import corpus_texts
from rla_core.envs.rollout import GenerationMode, RolloutTimings, run_rollouts
from rla_core.envs.textworld_env import TextWorldEnv
from rla_core.models.bootstrap import ensure_tiny_model
from rla_core.models.generator import TransformersGenerator
from rla_core.stage_inputs import RolloutRequest


def main() -> None:
    torch.set_num_threads(2)
    root = Path(".cache")
    env = TextWorldEnv(root / "games")
    lines = Path("data/textworld/train.jsonl").read_text(encoding="utf-8").splitlines()
    slots = [json.loads(line) for line in lines]
    specs = [s["spec"] for s in slots]
    model = ensure_tiny_model("policy", corpus=corpus_texts(env, specs), cache_dir=root / "models")
    gen = TransformersGenerator(model, device="cpu", batch_size=32)
    tasks = [PlayTask(s["slot_id"], s["slot_id"], False, s["spec"]) for s in slots]
    sampling = SamplingConfig(temperature=0.8, top_p=0.95, max_new_tokens=24)
    frames = {}
    for mode in GenerationMode:
        timings = RolloutTimings()
        start = time.perf_counter()
        frame = run_rollouts(
            RolloutRequest(
                tasks=tasks,
                n=4,
                max_steps=8,
                sampling=sampling,
                seed=1,
                iteration=1,
                history_turns=2,
                env_retries=0,
            ),
            env=env,
            generator=gen,
            mode=mode,
            timings=timings,
        )
        wall = time.perf_counter() - start
        frames[mode] = frame
        print(
            f"mode={mode.value} episodes={len(tasks) * 4} steps={frame.height} wall_s={wall:.2f} "
            f"steps_per_s={frame.height / wall:.2f} generation_share={timings.generation_s / wall:.2f} "
            f"engine_share={timings.engine_s / wall:.2f} success={float((frame.filter(pl.col('done'))['outcome'] > 0).mean() or 0.0):.2f}"
        )
    joint, per_episode = frames[GenerationMode.JOINT], frames[GenerationMode.PER_EPISODE]
    print(f"joint rows == per_episode rows: {joint.equals(per_episode)}")
    gen.close()


if __name__ == "__main__":
    main()
