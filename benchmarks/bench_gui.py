"""GUI setting throughput: MiniWoB++ episodes/s with 1, 2 and 4 browsers; browser vs generation time.

Part 1: scripted-solver episodes on the 13 training tasks, played by one worker thread per browser
(each browser serves its own episodes), so browsers work in parallel.
Part 2: the shared rollout runner with a real tiny policy model (bootstrapped locally, no download)
on 3 tasks x 2 rollouts, reporting RolloutTimings: browser (engine) vs generation seconds.

Run: .venv/bin/python benchmarks/bench_gui.py
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import torch

from rla_core.algo.curriculum import PlayTask
from rla_core.config import ModelsConfig, SamplingConfig
from rla_core.envs.demos import corpus_texts
from rla_core.envs.miniwob.env import MiniWobEnv
from rla_core.envs.miniwob.pool import BrowserOptions, BrowserPool, chrome_processes
from rla_core.envs.miniwob.tasks import load_specs
from rla_core.envs.rollout import RolloutTimings, run_rollouts
from rla_core.models.bootstrap import ensure_tiny_model
from rla_core.models.generator import GeneratorSpec
from rla_core.stage_inputs import RolloutRequest

DATA = Path(__file__).resolve().parents[1] / "data" / "gui"
EPISODES = 52


def solver_throughput(browsers: int, runtime: Path) -> float:
    """Episodes/s of scripted-solver episodes with ``browsers`` browsers and as many threads."""
    with BrowserPool(BrowserOptions(size=browsers, runtime_dir=runtime)) as pool:
        env = MiniWobEnv(pool)
        specs = load_specs(DATA / "train.jsonl", known_tasks=env.known_tasks)
        env.solve(specs[0])  # warm: start the first browser outside the timing
        jobs = [specs[i % len(specs)] for i in range(EPISODES)]
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    if not jobs:
                        return
                    spec = jobs.pop()
                _actions, won, why = env.solve(spec)
                assert won, why

        started = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(browsers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return EPISODES / (time.perf_counter() - started)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runtime = Path(tmp) / "rt"
        for browsers in (1, 2, 4):
            rate = solver_throughput(browsers, runtime)
            print(f"solver episodes/s with {browsers} browser(s): {rate:.2f}")
        with MiniWobEnv(browsers=BrowserOptions(size=1, runtime_dir=runtime)) as env:
            specs = load_specs(DATA / "train.jsonl", known_tasks=env.known_tasks)[:3]
            model = ensure_tiny_model(
                "gui-bench", corpus=corpus_texts(env, specs), cache_dir=Path(tmp) / "models"
            )
            with GeneratorSpec(model, ModelsConfig(), threads=torch.get_num_threads()).open() as gen:
                timings = RolloutTimings()
                started = time.perf_counter()
                frame = run_rollouts(
                    RolloutRequest(
                        tasks=[PlayTask(f"t{i}", f"s{i}", False, s) for i, s in enumerate(specs)],
                        n=2,
                        max_steps=4,
                        sampling=SamplingConfig(temperature=0.8, top_p=0.95, max_new_tokens=24),
                        seed=0,
                        iteration=1,
                        history_turns=2,
                        env_retries=0,
                    ),
                    env=env,
                    generator=gen,
                    timings=timings,
                )
                total = time.perf_counter() - started
        episodes = frame.select("task_id", "rollout_id").unique().height
        print(
            f"tiny-policy rollouts: {episodes} episodes, {timings.steps} steps in {total:.2f} s "
            f"({episodes / total:.2f} episodes/s)"
        )
        share = timings.engine_s / max(1e-9, timings.engine_s + timings.generation_s)
        print(
            f"time in browser: {timings.engine_s:.2f} s, in generation: {timings.generation_s:.2f} s "
            f"(browser share {share:.0%})"
        )
    print(f"chromium/chromedriver processes left: {len(chrome_processes())}")


if __name__ == "__main__":
    main()
