"""Scale-out of the env-bound ALFWorld rollout stage over Ray: 1 vs 2 workers (target ≥ 1.6×).

Times the rollout stage's body (:func:`rla_core.dispatch.rollout`, what ``tasks/rollout.py``
calls) on the ``alfworld`` preset's engine with the tiny policy: in this process (``cluster.backend=
local``), then on an embedded Ray with 1 and with 2 workers (one CPU each). Every configuration must
give the same frames (checked); the speed-up is Ray-1 wall / Ray-2 wall (both pay actor start-up).
A profile pass then runs the same shards through ``run_shards`` with a timed body, to say where the
time goes: actor start-up, opening the generator (model load), playing (split into generation,
engine steps and expert plan searches, with the actor's CPU seconds), and the driver's merge.

``threads=1`` for every configuration (one torch thread per worker: 2 workers fill the 2 cores; the
thread count is part of the rollout key, so it must be the same everywhere to compare frames).

Ray must stay on loopback, so the script re-executes itself inside a private network namespace that
has only ``lo`` (``unshare -n``) when it sees another interface. Writes ``benchmarks/results/
scaleout.json`` (and prints it) with the machine's load average before and after.
Run: ``.venv/bin/python benchmarks/bench_scaleout.py`` (~5 min on 2 busy cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

from rla_core.algo.curriculum import PlayTask
from rla_core.cluster.ray_session import ShardRequest, disconnect, run_shards
from rla_core.cluster.shards import episode_shards
from rla_core.config import ClusterBackend, ClusterConfig, TextGameEngine, load_config
from rla_core.dispatch import rollout
from rla_core.envs.alfworld.env import AlfworldEnv
from rla_core.envs.demos import corpus_texts
from rla_core.models.bootstrap import ensure_tiny_model
from rla_core.models.generator import GeneratorSpec
from rla_core.stage_inputs import RolloutInputs, RolloutRequest, TextGameEnv, expect_section

REPO = Path(__file__).resolve().parents[1]


def _in_private_netns() -> bool:
    return sorted(name for _i, name in socket.if_nameindex()) == ["lo"]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _timed_play(request: RolloutRequest, generator: GeneratorSpec) -> dict[str, Any]:
    """One shard of the profile pass, as ``rla_core.dispatch.play_episodes`` plays it on an actor (the adapter's own
    environment, :func:`run_rollouts`), with timers, in the actor: seconds to open the generator (model
    load) and to play; of playing, generation, the engine's steps (which include the expert labels'
    plan searches, also given apart) and the rest (opening the games, building the frame); and the
    process's CPU seconds while playing — below the wall seconds when the worker waited for a core."""
    from rla_core.envs.rollout import RolloutTimings, run_rollouts
    from rla_core.settings.textgame import ALFWORLD, TEXTWORLD

    t0 = time.perf_counter()
    with generator.open() as gen:
        t1 = time.perf_counter()
        section = expect_section(request.env, TextGameEnv)
        adapter = ALFWORLD if section.engine is TextGameEngine.ALFWORLD else TEXTWORLD
        env = adapter.env(section)
        timings = RolloutTimings()
        cpu = time.process_time()
        frame = run_rollouts(request, env=env, generator=gen, timings=timings)
        cpu = time.process_time() - cpu
        t2 = time.perf_counter()
    plans = env.plans.stats if isinstance(env, AlfworldEnv) else None
    return {
        "open_s": t1 - t0, "play_s": t2 - t1, "generation_s": timings.generation_s,
        "engine_s": timings.engine_s, "plan_search_s": plans.seconds if plans else 0.0,
        "plan_searches": plans.searches if plans else 0, "other_s": t2 - t1 - timings.generation_s - timings.engine_s,
        "play_cpu_s": cpu, "steps": frame.height, "pid": os.getpid(),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks-file", default="data/alfworld/paper-train.jsonl")
    parser.add_argument("--tasks", type=int, default=8, help="first N tasks of the file")
    parser.add_argument("--n", type=int, default=4, help="rollouts per task")
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/scaleout.json")
    args = parser.parse_args()
    if not _in_private_netns():
        script = shlex.join([sys.executable, *sys.argv])
        os.execvp("unshare", ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {script}"])
    load_before = _load()
    work = Path(tempfile.mkdtemp(prefix="bench-scaleout-"))
    cfg = load_config(
        preset="alfworld",
        overrides=[
            "threads=1",
            f"textgame.game_cache_dir={work / 'games'}",
            f"rollout.max_steps={args.max_steps}",
        ],
    )
    inputs = RolloutInputs.from_config(cfg)
    rows = [json.loads(line) for line in (REPO / args.tasks_file).read_text().splitlines() if line.strip()]
    rows = rows[: args.tasks]
    tasks = tuple(PlayTask(r["slot_id"], r["slot_id"], False, r["spec"]) for r in rows)
    env = AlfworldEnv(work / "games")
    model = ensure_tiny_model(
        "policy",
        corpus=corpus_texts(env, [t.spec for t in tasks]),
        cache_dir=REPO / ".cache/models-bench-alfworld",
    )
    generator = GeneratorSpec(checkpoint=model, models=inputs.models, role="policy", name=None, threads=1)
    request = RolloutRequest(
        tasks=tasks, n=args.n, max_steps=args.max_steps, sampling=inputs.rollout.sampling, seed=1, iteration=1,
        history_turns=inputs.models.history_turns, invalid_action=inputs.rollout.invalid_action, env=inputs.env(), env_retries=0,
    )  # fmt: skip
    local = ClusterConfig()

    def timed(cluster: ClusterConfig) -> tuple[float, pl.DataFrame]:
        from rla_core.settings.textgame import ALFWORLD

        start = time.perf_counter()
        frames = rollout(request, adapter=ALFWORLD, generator=generator, cluster=cluster)
        return time.perf_counter() - start, frames["rollouts"]

    warm_s, reference = timed(local)  # generates and plans the games into the disk cache
    local_s, again = timed(local)
    walls: dict[str, float] = {"local_cold": warm_s, "local": local_s}
    same = again.equals(reference)
    for workers in (1, 2):
        cluster = ClusterConfig(backend=ClusterBackend.RAY, workers=workers, node_ip_address="127.0.0.1")
        walls[f"ray_{workers}"], frame = timed(cluster)
        same = same and frame.equals(reference)
    # Profile: the same shards through run_shards with a timed body, on the 2-worker Ray still up.
    cluster = ClusterConfig(backend=ClusterBackend.RAY, workers=2, node_ip_address="127.0.0.1")
    start = time.perf_counter()
    shards = [(s, generator) for s in episode_shards(request, 2)]
    profile = run_shards(cluster, _timed_play, shards, request=ShardRequest(threads=1), what="profile shard")
    profile_wall = time.perf_counter() - start
    local_profile = _timed_play(request, generator)
    disconnect()
    result = {
        "what": "alfworld rollout stage body (dispatch.rollout), tiny policy, threads=1",
        "tasks_file": args.tasks_file, "tasks": len(tasks), "rollouts_per_task": args.n,
        "max_steps": args.max_steps, "steps": reference.height,
        "wall_s": {k: round(v, 2) for k, v in walls.items()},
        "speedup_ray_2_vs_ray_1": round(walls["ray_1"] / walls["ray_2"], 2),
        "speedup_ray_2_vs_local": round(walls["local"] / walls["ray_2"], 2),
        "target": 1.6,
        "identical_frames": same,
        "profile_ray_2": {
            "wall_s": round(profile_wall, 2),
            "shards": [{k: round(v, 2) if isinstance(v, float) else v for k, v in p.items()} for p in profile],
            "outside_shards_s": round(profile_wall - max(p["open_s"] + p["play_s"] for p in profile), 2),
        },
        "profile_local": {k: round(v, 2) if isinstance(v, float) else v for k, v in local_profile.items()},
        "load_before": load_before, "load_after": _load(), "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
