"""The vision-language path on CUDA: the tiny Qwen2-VL-class checkpoint generating from image prompts.

Builds the project's tiny vision-language model (:func:`ensure_tiny_vl_model`) and ``--prompts`` image prompts
(1 or 2 synthetic PNG screens each, formatted with the chat template, as a rollout records them), opens
``TransformersGenerator`` on ``--device`` (``models.serving.dtype=auto``: bfloat16 on CUDA), and checks:

* batch independence on the device: the batched samples equal those of one prompt per micro-batch
  (a False is a finding: kernels whose reduction order follows the batch shape), and
* tokens per second of the batched call (after a warm-up), with the dtype the generator resolved.

Run on a GPU:  python benchmarks/gpu/vision_language.py              (exit 2 without CUDA)
CPU smoke:     python benchmarks/gpu/vision_language.py --device cpu --prompts 4 --new-tokens 8
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from qwen2_random import result_line, sync

CORPUS = [
    "Which button submits the form? Action: click submit",
    "You see a login form. Action: type name",
] * 4


def _screen(path: Path, shade: int) -> str:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (224, 168), (shade, shade, shade))
    ImageDraw.Draw(img).rectangle([20 + shade % 50, 20, 120, 60], fill=(20, 60, 200))
    img.save(path)
    return str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/rla_bench_models"))
    args = parser.parse_args()

    import torch

    from rla_core.config import SamplingConfig
    from rla_core.models.bootstrap import ensure_tiny_vl_model
    from rla_core.models.generator import TransformersGenerator
    from rla_core.models.multimodal import ImagePrompt

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("vision_language: no CUDA device visible; on a CPU pass --device cpu", flush=True)
        return 2
    path = ensure_tiny_vl_model("policy", corpus=CORPUS, cache_dir=args.cache_dir)
    sampling = SamplingConfig(temperature=1.0, top_p=0.95, max_new_tokens=args.new_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        screens = [_screen(Path(tmp) / f"s{i}.png", 40 + 50 * i) for i in range(4)]
        batched = TransformersGenerator(path, device=args.device, batch_size=args.prompts, chat_template=True)
        prompts = [
            batched.format_prompt(ImagePrompt(f"Screen {i}: which button?", tuple(screens[i % 4 : i % 4 + 1 + i % 2])))
            for i in range(args.prompts)
        ]  # fmt: skip
        batched.generate(prompts[:2], n=1, sampling=sampling.model_copy(update={"max_new_tokens": 4}), seed=0)
        sync(args.device)
        start = time.perf_counter()
        out = batched.generate(prompts, n=1, sampling=sampling, seed=1)
        sync(args.device)
        secs = time.perf_counter() - start
        dtype = batched.dtype.value
        batched.close()
        single = TransformersGenerator(path, device=args.device, batch_size=1, chat_template=True)
        alone = single.generate(prompts, n=1, sampling=sampling, seed=1)
        single.close()
    tokens = sum(g.completion_tokens for row in out for g in row)
    fields = {
        "device": args.device, "dtype": dtype, "prompts": args.prompts, "new_tokens": args.new_tokens,
        "image_tokens_first_prompt": out[0][0].prompt_tokens, "tok_s": round(tokens / secs),
        "batch_independent": alone == out,
    }  # fmt: skip
    print(result_line("vision_language", fields), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
