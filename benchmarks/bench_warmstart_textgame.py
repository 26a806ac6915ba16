"""Warm start of the text-game tiny models, and where it lands (targets: policy 0 < success < 1, judge > 0.5).

Runs :func:`rla_core.settings.warm_start.warm_start_models` on the default config (the seed tasks of
``data/textworld/train.jsonl``), then plays the warm-started policy on those slots with the default
rollout sampling (``n`` rollouts per slot, joint batched runner) and has the warm-started judge score
every step with the default judge sampling. Prints the policy's success rate (must lie STRICTLY between
0 and 1 so that RL has a signal), the judge's step accuracy against TextWorld's ``policy_commands``
(must be > 0.5) and the wall time of each part. Exits 1 when a target is missed.

Run: ``.venv/bin/python benchmarks/bench_warmstart_textgame.py [--n 8] [--seed 0] [--cached] [--preset bench]``
(~2-3 min on 2 idle cores; tiny models are bootstrapped and trained in a fresh temp cache unless
``--cached``; games are cached under ``textgame.game_cache_dir``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import torch

from rla_core.algo.curriculum import PlayTask
from rla_core.algo.judging import judge_outcome_agreement, judge_step_accuracy
from rla_core.config import TextGameEngine, load_config
from rla_core.envs.judge import judge_steps
from rla_core.envs.rollout import RolloutTimings, run_rollouts
from rla_core.models.generator import TransformersGenerator
from rla_core.settings.textgame import ALFWORLD, TEXTWORLD
from rla_core.settings.warm_start import warm_start_models
from rla_core.stage_inputs import BootstrapInputs, RolloutInputs, RolloutRequest, SeedTasksInputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8, help="rollouts per training slot")
    parser.add_argument("--seed", type=int, default=0, help="warm-start and rollout seed")
    parser.add_argument("--override", action="append", default=[], help="config key=value (repeatable)")
    parser.add_argument(
        "--preset", default=None, help="base preset (e.g. bench; default: the embedded default)"
    )
    parser.add_argument(
        "--cached",
        action="store_true",
        help="use models.cache_dir (default: a fresh temp cache, so SFT really runs)",
    )
    args = parser.parse_args()
    torch.set_num_threads(2)

    with tempfile.TemporaryDirectory() as out:
        overrides = list(args.override)
        if not args.cached:
            # warm_start_models caches tiny-model SFT by content hash: a fresh cache measures the real cost.
            overrides.append(f"models.cache_dir={Path(out) / 'models'}")
        cfg = load_config(preset=args.preset, overrides=overrides)
        alfworld = cfg.textgame.engine is TextGameEngine.ALFWORLD
        setting = ALFWORLD if alfworld else TEXTWORLD
        start = time.perf_counter()
        result = warm_start_models(
            BootstrapInputs.from_config(cfg), out_dir=Path(out) / "warm", seed=args.seed
        )
        warm_s = time.perf_counter() - start
        for key in sorted(result.metrics):
            print(f"{key}={result.metrics[key]:.4g}")

        tasks = [
            PlayTask(slot, slot, False, spec)
            for slot, _env, spec in setting.seed_tasks(SeedTasksInputs.from_config(cfg))
        ]
        policy = TransformersGenerator(
            result.policy_dir, device="cpu", batch_size=cfg.models.generation_batch_size
        )
        timings = RolloutTimings()
        start = time.perf_counter()
        rollouts = run_rollouts(
            RolloutRequest(
                tasks=tasks,
                n=args.n,
                max_steps=cfg.rollout.max_steps,
                sampling=cfg.rollout.sampling,
                seed=args.seed,
                iteration=1,
                history_turns=cfg.models.history_turns,
                env_retries=0,
            ),
            env=setting.env(RolloutInputs.from_config(cfg).env()),
            generator=policy,
            timings=timings,
        )
        rollout_s = time.perf_counter() - start
        policy.close()

        judge = TransformersGenerator(
            result.reward_dir, device="cpu", batch_size=cfg.models.generation_batch_size
        )
        start = time.perf_counter()
        judgments = judge_steps(
            rollouts, generator=judge, m=cfg.judge.m, sampling=cfg.judge.sampling, seed=args.seed, iteration=1
        )
        judge_s = time.perf_counter() - start
        judge.close()

    finals = rollouts.filter(pl.col("done"))
    per_slot = finals.group_by("slot_id").agg(acc=(pl.col("outcome") > 0).mean()).sort("slot_id")
    success = float((finals["outcome"] > 0).mean() or 0.0)
    step_acc = judge_step_accuracy(rollouts, judgments)
    outcome_agree = judge_outcome_agreement(rollouts, judgments)
    valid = float(rollouts["action_valid"].mean() or 0.0)
    parsed = float(judgments["score"].is_not_null().mean() or 0.0)
    print("per-slot success: " + " ".join(f"{r['slot_id']}={r['acc']:.2f}" for r in per_slot.to_dicts()))
    print(
        f"policy_success={success:.3f} (target strictly in (0, 1)) episodes={finals.height} "
        f"steps={rollouts.height} valid_action_share={valid:.2f}"
    )
    print(
        f"judge_step_accuracy={step_acc if step_acc is None else round(step_acc, 3)} (target > 0.5) "
        f"outcome_agreement={outcome_agree if outcome_agree is None else round(outcome_agree, 3)} "
        f"parsed_share={parsed:.2f} judgments={judgments.height}"
    )
    print(
        f"wall_s: warm_start={warm_s:.1f} rollouts={rollout_s:.1f} (generation {timings.generation_s:.1f}, "
        f"engine {timings.engine_s:.1f}) judge={judge_s:.1f}"
    )
    ok = 0.0 < success < 1.0 and step_acc is not None and step_acc > 0.5
    print("targets: " + ("met" if ok else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
