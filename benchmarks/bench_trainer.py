"""Rows/s of rl_update (1 process, and 2 gloo DDP processes via `accelerate launch`) and sft on CPU.

Run: .venv/bin/python benchmarks/bench_trainer.py   (~2 min on 2 cores)

For 2 processes two numbers are printed: wall (the whole call, including launching the workers and
their imports, which a stage pays once per update) and loop (rank 0's π_old pass + updates).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import polars as pl
import torch

from rla_core.config import LoraConfig, TrainConfig
from rla_core.models.bootstrap import ensure_tiny_model
from rla_core.models.launch import Placement
from rla_core.models.sft import sft
from rla_core.models.update import rl_update

N_ROWS = 64


def main() -> None:
    prompts = [
        f"You are in room {i}. Goal: take the key and open the chest. Admissible: 0. go 1. take"
        for i in range(N_ROWS)
    ]
    responses = [f" I take the key. Action: \\boxed{{{i % 4}}}" for i in range(N_ROWS)]
    advantages = [1.0 if i % 2 else -1.0 for i in range(N_ROWS)]
    rows = pl.DataFrame({"prompt": prompts, "response": responses, "advantage": advantages})
    with tempfile.TemporaryDirectory() as tmp:
        model = ensure_tiny_model("policy", corpus=prompts + responses, cache_dir=Path(tmp) / "cache")
        cfg = TrainConfig(lr=1e-4, update_per_step=4, micro_batch_size=8)
        # Warm-up: the first call pays for importing torch/transformers/trl, which is not training speed.
        rl_update(model, rows.head(2), cfg=cfg, out_dir=Path(tmp) / "warm", seed=0, lora=LoraConfig())
        for threads in (1, 2):
            torch.set_num_threads(threads)
            t = time.perf_counter()
            m = rl_update(
                model, rows, cfg=cfg, out_dir=Path(tmp) / f"rl-{threads}", seed=0, lora=LoraConfig()
            )
            dt = time.perf_counter() - t
            print(
                f"rl_update 1 process x {threads} thread(s): {N_ROWS} rows, {m['optimizer_steps']:.0f} steps in "
                f"{dt:.2f}s = {N_ROWS / dt:.1f} rows/s wall, {N_ROWS / m['loop_s']:.1f} rows/s loop"
            )
        # Each worker gets threads // processes = 1 torch thread (OMP_NUM_THREADS), as in the train stage.
        two = Placement(device="cpu", processes=2, strategy="ddp", threads=2)
        t = time.perf_counter()
        m = rl_update(
            model, rows, cfg=cfg, out_dir=Path(tmp) / "rl2", seed=0, lora=LoraConfig(), placement=two
        )
        dt = time.perf_counter() - t
        print(
            f"rl_update 2 processes x 1 thread (DDP, gloo): {N_ROWS} rows, {m['optimizer_steps']:.0f} steps in "
            f"{dt:.2f}s = {N_ROWS / dt:.1f} rows/s wall, {N_ROWS / m['loop_s']:.1f} rows/s loop"
        )
        t = time.perf_counter()
        m = rl_update(
            model, rows, cfg=cfg, out_dir=Path(tmp) / "rl-lora", seed=0, lora=LoraConfig(enabled=True)
        )
        dt = time.perf_counter() - t
        print(f"rl_update+LoRA: {N_ROWS} rows in {dt:.2f}s = {N_ROWS / dt:.1f} rows/s")
        epochs = 3
        t = time.perf_counter()
        sft(model, rows.drop("advantage"), out_dir=Path(tmp) / "sft", epochs=epochs, lr=3e-3, seed=0)
        dt = time.perf_counter() - t
        print(f"sft: {N_ROWS} rows x {epochs} epochs in {dt:.2f}s = {N_ROWS * epochs / dt:.1f} rows/s")


if __name__ == "__main__":
    main()
