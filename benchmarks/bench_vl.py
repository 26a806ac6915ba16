"""Generation tokens/s and update rows/s with vs without images on the tiny models, CPU.

Four arms, each on the same prompts and responses:

* ``text model``: the tiny Qwen2 policy (``tiny:<name>``), text prompts: today's path;
* ``vl model, text``: the tiny Qwen2-VL policy (``tiny-vl:<name>``, same text side), text prompts;
* ``vl model, 1 image`` / ``2 images``: the same prompts with one / two 160x210 screenshots each
  (MiniWoB++'s page size; 48 image tokens each after the processor's resize and 2x2 merge).

Generation: :class:`TransformersGenerator` (``batch_size`` 8, n=2, 16 new tokens at temperature 1;
tokens/s = completion tokens / wall). Update: :func:`rl_update` (micro-batch 8, 4 optimizer steps;
rows/s of the loop = π_old pass + forward/backward, and of the whole call). Median of ``--repeats``
runs after a warm-up that pays the imports; torch on one thread.

Run: .venv/bin/python benchmarks/bench_vl.py [--result benchmarks/results/bench_vl.json]  (~2 min)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
import torch

from rla_core.config import LoraConfig, SamplingConfig, TrainConfig
from rla_core.models.bootstrap import ensure_tiny_model, ensure_tiny_vl_model
from rla_core.models.generator import TransformersGenerator
from rla_core.models.multimodal import ImagePrompt, Prompt
from rla_core.models.update import rl_update

REPO = Path(__file__).resolve().parents[1]
N_PROMPTS = 16
N_SAMPLES = 2
NEW_TOKENS = 16
N_ROWS = 32
SCREEN = (160, 210)  # MiniWoB++'s page, width x height


def _screenshots(out: Path, k: int) -> list[str]:
    """``k`` synthetic form screenshots that differ in colours and button position."""
    from PIL import Image, ImageDraw

    paths = []
    for i in range(k):
        img = Image.new("RGB", SCREEN, (255 - 7 * i, 250, 240))
        draw = ImageDraw.Draw(img)
        draw.rectangle([10, 20 + 9 * i, 150, 50 + 9 * i], fill=(20, 60 + 8 * i, 200))
        draw.text((14, 60), f"button {i}", fill=(0, 0, 0))
        path = out / f"shot-{i}.png"
        img.save(path)
        paths.append(str(path))
    return paths


def _median_of(repeats: int, run: Any) -> tuple[float, Any]:
    walls, last = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        last = run()
        walls.append(time.perf_counter() - t)
    return statistics.median(walls), last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--result", type=Path, default=REPO / "benchmarks" / "results" / "bench_vl.json")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    texts = [
        f"Screenshot of form {i}. Click the button labelled {i % 5}, then submit. Action:"
        for i in range(N_PROMPTS)
    ]
    responses = [f" click button {i % 5}" for i in range(N_ROWS)]
    result: dict[str, Any] = {
        "issue": 31,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch_threads": 1},
        "shared_machine": (
            "2 CPU cores shared with a study run (/work/study-s26) and other helpers' tests: absolute "
            "numbers are noisy; compare the arms of one run"
        ),
        "notes": (
            "prompt tokens differ between the text model (no chat template: the plain text) and the VL arms "
            "(the VL chat template's markup, plus 48 image tokens and 2 slot tokens per screenshot); "
            "update rows/s loop = rows / (pi_old pass + forward/backward) seconds, wall = the whole rl_update "
            "call (tokenisation, image preprocessing, model load and save included)"
        ),
        "load_avg_start": os.getloadavg(),
        "setup": {
            "prompts": N_PROMPTS,
            "samples_per_prompt": N_SAMPLES,
            "max_new_tokens": NEW_TOKENS,
            "generation_batch_size": 8,
            "update_rows": N_ROWS,
            "micro_batch_size": 8,
            "update_per_step": 4,
            "screenshot_px": list(SCREEN),
            "repeats": args.repeats,
            "statistic": "median wall",
        },
        "arms": {},
    }
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        corpus = texts + responses
        text_model = ensure_tiny_model("bench", corpus=corpus, cache_dir=tmp / "cache")
        vl_model = ensure_tiny_vl_model("bench", corpus=corpus, cache_dir=tmp / "cache")
        shots = _screenshots(tmp, 8)
        arms: list[tuple[str, Path, int]] = [
            ("text model", text_model, 0),
            ("vl model, text", vl_model, 0),
            ("vl model, 1 image", vl_model, 1),
            ("vl model, 2 images", vl_model, 2),
        ]
        sampling = SamplingConfig(temperature=1.0, max_new_tokens=NEW_TOKENS)
        for name, model_dir, k in arms:
            gen = TransformersGenerator(model_dir, device="cpu", batch_size=8, chat_template=True)
            prompts: list[Prompt] = [
                gen.format_prompt(ImagePrompt(t, tuple(shots[(i + j) % len(shots)] for j in range(k))))
                if k
                else gen.format_prompt(t)
                for i, t in enumerate(texts)
            ]
            gen.generate(prompts[:2], n=1, sampling=sampling, seed=0)  # warm-up
            wall, out = _median_of(
                args.repeats, lambda g=gen, p=prompts: g.generate(p, n=N_SAMPLES, sampling=sampling, seed=1)
            )
            completion = sum(s.completion_tokens for row in out for s in row)
            prompt_tokens = statistics.mean(row[0].prompt_tokens for row in out)
            gen.close()
            row_prompts = [prompts[i % N_PROMPTS] for i in range(N_ROWS)]
            rows = pl.DataFrame(
                {
                    "prompt": [p.text if isinstance(p, ImagePrompt) else p for p in row_prompts],
                    "response": responses,
                    "advantage": [1.0 if i % 2 else -1.0 for i in range(N_ROWS)],
                    "images": [list(p.images) if isinstance(p, ImagePrompt) else [] for p in row_prompts],
                }
            )
            cfg = TrainConfig(lr=1e-4, update_per_step=4, micro_batch_size=8)
            loops, walls = [], []
            for run in range(args.repeats + 1):  # run 0 is a warm-up
                t = time.perf_counter()
                metrics = rl_update(
                    model_dir,
                    rows,
                    cfg=cfg,
                    out_dir=tmp / f"upd-{len(result['arms'])}-{run}",
                    seed=0,
                    lora=LoraConfig(),
                )
                if run:
                    walls.append(time.perf_counter() - t)
                    loops.append(metrics["loop_s"])
            entry = {
                "mean_prompt_tokens": round(prompt_tokens, 1),
                "generation_s": round(wall, 3),
                "generation_completion_tokens": completion,
                "generation_tokens_per_s": round(completion / wall, 1),
                "update_loop_s": round(statistics.median(loops), 3),
                "update_rows_per_s_loop": round(N_ROWS / statistics.median(loops), 1),
                "update_rows_per_s_wall": round(N_ROWS / statistics.median(walls), 1),
            }
            result["arms"][name] = entry
            print(name, json.dumps(entry), flush=True)
    result["load_avg_end"] = os.getloadavg()
    args.result.parent.mkdir(parents=True, exist_ok=True)
    args.result.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.result}")


if __name__ == "__main__":
    main()
