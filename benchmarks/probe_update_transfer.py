"""Does one policy update transfer beyond its own batch? (diagnosis of the bench preset, docs/bench-design.md §4)

Starts from the policy checkpoint a study run trained on (iteration 0 when ``--train`` starts at 1), makes
one ``rl_update`` on the policy rows of the ``--train`` iterations pooled, and measures the change of the
mean per-token log-probability of responses it did not train on: rows of the ``--test`` iterations,
split by the sign of their advantage and by whether the played action was one of the engine's optimal
actions or a no-op (look / inventory / examine); for comparison, also on the rows it trained on. An update that learned a preference that transfers raises
the positive-advantage and optimal rows more than the others.

Run: ``.venv/bin/python benchmarks/probe_update_transfer.py RUN_DIR --train 1-10 --test 11,12 --update 3e-4x16``
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import polars as pl
import torch
from probe_action_shares import action_flags  # a sibling script: run these as files, not as modules

from rla_core.config import LoraConfig, TrainConfig
from rla_core.models.logprobs import response_logprobs
from rla_core.models.update import rl_update


def _iterations(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(x) for x in text.split(",")]


def _stage_file(run: Path, iteration: int, stage: str, name: str) -> Path:
    paths = sorted((run / f"iter-{iteration:04d}" / stage).glob(f"attempt-*/{name}"))
    if not paths:
        raise SystemExit(
            f"no {stage} output '{name}' for iteration {iteration} under {run}: give a run directory"
        )
    return paths[-1]


def policy_rows(run: Path, iteration: int) -> pl.DataFrame:
    """Policy samples of one iteration with the played action, optimal/no-op flags."""
    rows = pl.read_parquet(_stage_file(run, iteration, "label", "policy_samples.parquet"))
    played = pl.read_parquet(_stage_file(run, iteration, "rollout", "rollouts.parquet")).select(
        "task_id", "rollout_id", "step", "action", "expert_actions"
    )
    return action_flags(rows.join(played, on=["task_id", "rollout_id", "step"], how="left"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory of a study (e.g. runs/s16-outcome-only-s1)")
    parser.add_argument("--train", default="1-10", help="iterations whose rows make the update (1-10 or 1,2)")
    parser.add_argument("--test", default="11,12", help="iterations whose rows measure it")
    parser.add_argument(
        "--file-order",
        action="store_true",
        help="keep the rows in file order (grouped by task, as the spec trains)",
    )
    parser.add_argument("--update", nargs="+", default=["3e-4x4", "3e-4x16"], help="LRxOPTIMIZER_STEPS")
    args = parser.parse_args()
    torch.set_num_threads(1)
    train_its, test_its = _iterations(args.train), _iterations(args.test)
    first = train_its[0]
    base = (
        _stage_file(args.run, 0, "bootstrap", "policy")
        if first == 1
        else _stage_file(args.run, first - 1, "train_policy", "policy")
    )
    train = pl.concat([policy_rows(args.run, i) for i in train_its])
    if not args.file_order:
        train = train.sample(fraction=1.0, shuffle=True, seed=0)
    test = pl.concat([policy_rows(args.run, i) for i in test_its])

    def logps(model: Path, rows: pl.DataFrame) -> torch.Tensor:
        return torch.tensor(response_logprobs(model, list(rows["prompt"]), list(rows["response"])))

    before, before_own = logps(base, test), logps(base, train)
    own_pos = torch.tensor((train["advantage"] > 0).to_list())
    groups = {
        "advantage > 0": torch.tensor((test["advantage"] > 0).to_list()),
        "advantage < 0": torch.tensor((test["advantage"] < 0).to_list()),
        "optimal action": torch.tensor(test["optimal"].to_list()),
        "no-op action": torch.tensor(test["noop"].to_list()),
    }
    print(
        f"update on {train.height} rows ({'file order' if args.file_order else 'shuffled'}) of iterations "
        f"{args.train}; measured on {test.height} rows of {args.test}"
    )
    for spec in args.update:
        lr, steps = float(spec.split("x")[0]), int(spec.split("x")[1])
        out = Path(tempfile.mkdtemp()) / "policy"
        cfg = TrainConfig(lr=lr, update_per_step=steps)
        metrics = rl_update(base, train, cfg=cfg, out_dir=out, seed=0, lora=LoraConfig())
        delta, own = logps(out, test) - before, logps(out, train) - before_own
        print(
            f"own batch: advantage > 0 {own[own_pos].mean():+.3f} | advantage < 0 {own[~own_pos].mean():+.3f}"
        )
        parts = " | ".join(
            f"{name} {delta[mask].mean():+.3f} (n={int(mask.sum())})" for name, mask in groups.items()
        )
        print(f"lr {lr:g} × {steps} steps: KL {metrics['kl']:.4f} | Δ mean token log-prob: {parts}")


if __name__ == "__main__":
    main()
