"""GPU check of the RL update: the test preset's updates with fp32 master weights + bf16 autocast.

Prepared for a machine with a CUDA GPU; it has NOT been run in this repository's CPU-only environment.
It trains the test preset's tiny policy and reward model (config ``preset=test``: its ``training.policy``
/ ``training.reward`` sections) on synthetic advantage rows of the preset's size and checks, per path:

* the update ran on the GPU with ``training.dtype=bf16`` autocast,
* the saved checkpoint is fp32 and the weights moved (share of changed parameters printed),
* samples/s (rows per second of the update, after one warm-up update).

Paths: 1 process on cuda:0; with ≥ 2 GPUs also DDP over all GPUs (``accelerate launch``, the stage's own
command line), and FSDP; DeepSpeed ZeRO-3 when ``deepspeed`` is installed (``pip install -e '.[deepspeed]'``).
It compares DDP's weights with the 1-process update (same rows, same effective batch; bf16 autocast
differs in reduction order, so the deviation is printed, not asserted).

Run:  .venv/bin/python benchmarks/gpu/train_check.py [--rows 64]     (exit code 1 on a failed check)
CPU smoke run of the script itself (1 process + 2 gloo DDP workers, fp32):
      .venv/bin/python benchmarks/gpu/train_check.py --device cpu --dtype fp32 --rows 16
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import torch
from safetensors.torch import load_file

from rla_core.config import load_config
from rla_core.models.bootstrap import ensure_tiny_model
from rla_core.models.launch import Placement
from rla_core.models.update import rl_update


def _rows(n: int) -> pl.DataFrame:
    prompts = [
        f"You are in room {i}. Goal: take the key and open the chest. Admissible: 0. go 1. take"
        for i in range(n)
    ]
    responses = [f" I take the key. Action: \\boxed{{{i % 4}}}" for i in range(n)]
    return pl.DataFrame(
        {"prompt": prompts, "response": responses, "advantage": [1.0 - 2.0 * (i % 2) for i in range(n)]}
    )


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return load_file(ckpt / "model.safetensors")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64, help="advantage rows per update")
    parser.add_argument("--device", default="cuda", help="cuda (the check) or cpu (smoke run of the script)")
    parser.add_argument("--dtype", default="bf16", choices=("fp32", "bf16", "fp16"), help="autocast dtype")
    args = parser.parse_args()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("no CUDA device visible: this check needs a GPU (nothing was run)")
            return 2
        gpus = torch.cuda.device_count()
        print(f"GPUs: {gpus} x {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    else:
        gpus = 2  # CPU smoke run: 1 process and 2 gloo DDP workers
    place = [f"training.device={args.device}", f"training.dtype={args.dtype}"]
    cfg = load_config(preset="test", overrides=place)
    rows = _rows(args.rows)
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp_str:
        tmp = Path(tmp_str)
        corpus = rows["prompt"].to_list() + rows["response"].to_list()
        paths: list[tuple[str, Placement]] = [
            ("1 process", Placement.from_config(cfg.training, threads=cfg.threads))
        ]
        if gpus > 1:
            sharded = ("fsdp",) + (("deepspeed",) if importlib.util.find_spec("deepspeed") else ())
            for strategy in ("ddp", *(sharded if args.device == "cuda" else ())):
                over = [f"training.processes={gpus}", f"training.strategy={strategy}"]
                launched = load_config(preset="test", overrides=[*place, *over])
                paths.append(
                    (f"{strategy} x{gpus}", Placement.from_config(launched.training, threads=cfg.threads))
                )
        for role, train_cfg in (("policy", cfg.training.policy), ("reward", cfg.training.reward)):
            base = ensure_tiny_model(role, corpus=corpus, cache_dir=tmp / "cache")
            start = _weights(base)
            reference: dict[str, torch.Tensor] | None = None
            for label, placement in paths:
                warm = tmp / f"{role}-{label}-warm".replace(" ", "_")
                rl_update(
                    base,
                    rows.head(8),
                    cfg=train_cfg,
                    out_dir=warm,
                    seed=0,
                    lora=cfg.models.lora,
                    placement=placement,
                )
                out = tmp / f"{role}-{label}".replace(" ", "_")
                t = time.perf_counter()
                m = rl_update(
                    base, rows, cfg=train_cfg, out_dir=out, seed=0, lora=cfg.models.lora, placement=placement
                )
                dt = time.perf_counter() - t
                w = _weights(out)
                dtypes = {str(v.dtype) for v in w.values()}
                changed = sum(int((w[k] != start[k].float()).sum()) for k in w) / sum(
                    v.numel() for v in w.values()
                )
                line = (
                    f"{role:6s} {label:14s} {args.rows / dt:8.1f} samples/s  steps={m['optimizer_steps']:.0f} "
                    f"dtypes={sorted(dtypes)} changed={changed:.2%}"
                )
                if reference is None:
                    reference = w
                else:
                    dev = max(float((w[k] - reference[k]).abs().max()) for k in w)
                    line += f" max|Δ vs 1 process|={dev:.2e}"
                print(line, flush=True)
                if dtypes != {"torch.float32"}:
                    failures.append(f"{role} {label}: checkpoint dtypes {dtypes}, expected fp32")
                if changed < 0.5:
                    failures.append(f"{role} {label}: only {changed:.2%} of parameters changed")
    for f in failures:
        print("FAILED:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
