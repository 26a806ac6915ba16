"""Check of image prompts: image prompts through the vLLM backend (``VllmServerGenerator``) vs the transformers one.

Builds the tiny VL checkpoint (``ensure_tiny_vl_model``), formats 3 image prompts (1 or 2 screenshots of
different sizes) and 1 text prompt with the transformers backend, generates greedily with both backends
and records, per prompt, the prompt token counts (equal: vLLM renders exactly the recorded text and
expands each image slot as ``VisionProcessor`` does), the texts and the completion token counts; then
samples n=2 with images through vLLM.

On this machine's CPU vLLM build (no torchvision) the server only loads Qwen2-VL with the probe-only
``sitecustomize`` of ``benchmarks/probe_tiny_vl.py`` (``VLLM_SHIM``) on its PYTHONPATH: ``--shim``
(default on). On a GPU vLLM build with torchvision, pass ``--no-shim``.

Run: .venv/bin/python benchmarks/probe_vl_vllm_generate.py /tmp/vl-vllm \
     [--result benchmarks/results/vl_vllm_generate.json]   (~3 min on 2 busy cores: one vLLM start)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SIZES = ((224, 160), (160, 210), (300, 200), (200, 200))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, help="directory for the checkpoint, screenshots and server files")
    parser.add_argument(
        "--result", type=Path, default=REPO / "benchmarks" / "results" / "vl_vllm_generate.json"
    )
    parser.add_argument("--interpreter", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--shim", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from PIL import Image, ImageDraw

    from rla_core.config import Backend, ModelsConfig, SamplingConfig, ServingConfig
    from rla_core.models.bootstrap import ensure_tiny_vl_model
    from rla_core.models.generator import GeneratorSpec, TransformersGenerator
    from rla_core.models.multimodal import ImagePrompt

    torch.set_num_threads(1)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    ckpt = ensure_tiny_vl_model(
        "vcheck", corpus=["click button 3", "Which button?"], cache_dir=work / "cache"
    )
    shots = []
    for i, size in enumerate(SIZES):
        img = Image.new("RGB", size, (40 * i, 200, 240 - 40 * i))
        ImageDraw.Draw(img).rectangle([10, 10, 80, 50], fill=(i * 50, 0, 0))
        img.save(work / f"shot-{i}.png")
        shots.append(str(work / f"shot-{i}.png"))
    hf = TransformersGenerator(ckpt, device="cpu", batch_size=4, chat_template=True)
    prompts = [
        *(
            hf.format_prompt(ImagePrompt(f"Which button {i}?", tuple(shots[i : i + 1 + i % 2])))
            for i in range(3)
        ),
        hf.format_prompt("text only"),
    ]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=6)
    ref = hf.generate(prompts, n=1, sampling=greedy, seed=0)
    if args.shim:
        source = (REPO / "benchmarks" / "probe_tiny_vl.py").read_text()
        match = re.search(r"VLLM_SHIM = '''(.*?)'''", source, re.S)
        assert match is not None
        (work / "shim").mkdir(exist_ok=True)
        (work / "shim" / "sitecustomize.py").write_text(match.group(1))
        os.environ["PYTHONPATH"] = os.pathsep.join([str(work / "shim"), str(REPO)])
    os.environ["VLLM_CACHE_ROOT"] = str(work / "vllm-cache")
    serving = ServingConfig(
        backend=Backend.VLLM, dtype="float32", chat_template=True, interpreter=args.interpreter,
        extra_args=("--max-model-len", "1024", "--max-num-seqs", "4", "--enforce-eager"), startup_timeout_s=600.0,
    )  # fmt: skip
    result: dict[str, Any] = {
        "issue": 31,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "shim": args.shim,
        "image_sizes": [list(s) for s in SIZES],
    }
    t = time.perf_counter()
    spec = GeneratorSpec(ckpt, ModelsConfig(serving=serving), threads=1, role="policy")
    with spec.open(runtime_dir=work / "rt") as gen:
        result["startup_s"] = round(time.perf_counter() - t, 1)
        result["format_prompt_equal"] = (
            gen.format_prompt(ImagePrompt("Which button 0?", (shots[0],))) == prompts[0]
        )
        t = time.perf_counter()
        out = gen.generate(prompts, n=1, sampling=greedy, seed=0)
        result["generate_s"] = round(time.perf_counter() - t, 1)
        result["prompts"] = [
            {
                "images": len(p.images) if isinstance(p, ImagePrompt) else 0,
                "prompt_tokens": {"transformers": r[0].prompt_tokens, "vllm": o[0].prompt_tokens},
                "greedy_text": {"transformers": r[0].text, "vllm": o[0].text},
                "completion_tokens": {"transformers": r[0].completion_tokens, "vllm": o[0].completion_tokens},
            }
            for p, r, o in zip(prompts, ref, out, strict=True)
        ]
        sampled = gen.generate(
            prompts[:2], n=2, sampling=SamplingConfig(temperature=1.0, max_new_tokens=4), seed=5
        )
        result["sampled_n2_completion_tokens"] = [[g.completion_tokens for g in s] for s in sampled]
    print(json.dumps(result, indent=2))
    args.result.parent.mkdir(parents=True, exist_ok=True)
    args.result.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
