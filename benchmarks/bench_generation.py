"""Batched vs one-at-a-time generation throughput on the default tiny policy (target: >= 5x).

Run: .venv/bin/python benchmarks/bench_generation.py   (~1 min on 2 cores)
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from rla_core.config import SamplingConfig
from rla_core.models.bootstrap import ensure_tiny_model
from rla_core.models.generator import TransformersGenerator

PROMPTS = [f"You are in room {i}. Goal: take the key and open the chest. Action:" for i in range(32)]
NEW_TOKENS = 32


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        model = ensure_tiny_model("policy", corpus=PROMPTS, cache_dir=Path(cache))
        gen = TransformersGenerator(model, device="cpu", batch_size=32)
        # EOS-free sampling budget: every sequence produces exactly NEW_TOKENS unless it samples EOS.
        sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=NEW_TOKENS)
        gen.generate(PROMPTS[:2], n=1, sampling=sampling, seed=0)  # warm-up
        t = time.perf_counter()
        batched = gen.generate(PROMPTS, n=1, sampling=sampling, seed=0)
        t_batched = time.perf_counter() - t
        t = time.perf_counter()
        single = [gen.generate([p], n=1, sampling=sampling, seed=0)[0] for p in PROMPTS]
        t_single = time.perf_counter() - t
        tok_b = sum(g.completion_tokens for s in batched for g in s)
        tok_s = sum(g.completion_tokens for s in single for g in s)
        print(f"prompts={len(PROMPTS)} max_new_tokens={NEW_TOKENS}")
        print(f"batched:      {tok_b} tokens in {t_batched:.2f}s = {tok_b / t_batched:.0f} tokens/s")
        print(f"one-at-a-time: {tok_s} tokens in {t_single:.2f}s = {tok_s / t_single:.0f} tokens/s")
        print(f"speed-up: {(tok_b / t_batched) / (tok_s / t_single):.1f}x (target >= 5x)")
        gen.close()


if __name__ == "__main__":
    main()
