"""How much does pairing evaluation seeds sharpen a measured change? (docs/bench-design.md §4)

For seeds 1..N it evaluates a run's checkpoints ``--end`` and 0 with the same seed (paired) and checkpoint 0
again with another seed (independent), on ``--tasks`` (use the validation split, never the held-out set when
the numbers decide a design), and prints the mean and standard deviation over seeds of both changes.

Run: ``.venv/bin/python benchmarks/probe_paired_eval.py --root runs --run s16-outcome-only-s1 \\
    --tasks data/textworld/bench-val.jsonl --end 12 --seeds 5``
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from flows.evals import evaluate_run
from rla_core.store import ArtifactStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="artifact root of the run")
    parser.add_argument("--run", required=True, help="run id")
    parser.add_argument("--tasks", type=Path, required=True, help="task file to evaluate on")
    parser.add_argument("--end", type=int, required=True, help="the later checkpoint (iteration)")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    store = ArtifactStore(args.root)

    def success(checkpoint: int, seed: int) -> float:
        result = evaluate_run(store, args.run, checkpoint=checkpoint, tasks_file=args.tasks, seed=seed)
        return result.metrics["policy/eval_success_rate"]

    paired, independent = [], []
    for seed in range(1, args.seeds + 1):
        end, start, other = success(args.end, seed), success(0, seed), success(0, seed + 1000)
        paired.append(end - start)
        independent.append(end - other)
        print(
            f"seed {seed}: end {end:.3f} start (same seed) {start:.3f} start (other seed) {other:.3f}",
            flush=True,
        )
    for name, values in (("paired", paired), ("independent", independent)):
        print(f"{name}: mean {statistics.mean(values):+.3f} sd {statistics.stdev(values):.3f}")


if __name__ == "__main__":
    main()
