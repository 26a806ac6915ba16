"""Feasibility probe of image prompts: a tiny Qwen2-VL model built locally, scored by transformers and by CPU vLLM.

1. Builds the tiny Qwen2-VL-class checkpoint into a cache in OUT_DIR with
   :func:`rla_core.models.bootstrap.ensure_tiny_vl_model` (random init; text head_dim 64 and vision
   head_dim 64; our bootstrap BPE tokenizer plus Qwen2-VL's chat and vision special tokens; a local
   ``preprocessor_config.json`` for ``Qwen2VLImageProcessorPil``; a chat template). Nothing comes from a
   hub. No ``Qwen2VLProcessor`` is saved: without torchvision it cannot be constructed, even with
   ``video_processor=None`` (recorded in the result).
2. transformers (this interpreter, ``.venv``): ``AutoProcessor`` fails the same way (recorded), so the
   prompt is rendered and encoded by :class:`rla_core.models.multimodal.VisionProcessor` (chat template,
   image processor, ``<|image_pad|>`` expanded per patch group: what Qwen2VLProcessor does for text+image).
   Generates a few greedy tokens and computes the log-probabilities of a fixed continuation given image A
   and given image B (the image must change them).
3. vLLM (``.venv-vllm``, CPU build): first the import of vLLM's Qwen2-VL / Qwen3-VL model modules; then
   serves OUT_DIR exactly as a stage does (``VllmServer.start``), twice: plain, and with a probe-only
   ``sitecustomize`` on PYTHONPATH (:data:`VLLM_SHIM`) that removes the torchvision blockers. Where it
   serves, the chat is sent with the image as a base64 ``image_url`` part and the continuation is scored
   with the chat API's ``continue_final_message`` + ``prompt_logprobs=0`` (+ ``return_token_ids``);
   records start time, the root-cause error lines, and the max abs difference from transformers.

Every number in the result JSON is measured by this script. The committed result was measured
(2026-12-03 13:13 UTC) when the probe built the checkpoint itself with seed 31; since the build moved
into rla_core the weights are seeded by the content key, so a re-run gives other log-probabilities
(same shapes, token counts and errors).

Run: HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python benchmarks/probe_tiny_vl.py /tmp/tiny-vl \
     [--result benchmarks/results/tiny_vl_probe.json]     (~3 min on 2 busy cores: two vLLM starts)
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import platform
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PROMPT_TEXT = "Screenshot of the form. Which button submits it? Action:"
CONTINUATION = "click button 3 then type 42"
CORPUS = [PROMPT_TEXT, CONTINUATION, "click button 1", "type 7 into the box", "Action: click submit"]
IMAGE_SIZE = (224, 160)  # width, height: smart_resize makes it 224x168 -> 16x12 patches -> 48 image tokens
# Probe-only: a sitecustomize for the vLLM server's PYTHONPATH that removes the two torchvision blockers
# the plain attempt hits, to find out whether anything else stands in the way. Not a fix to ship.
VLLM_SHIM = '''"""Probe-only shim: lets the CPU vLLM build load Qwen2-VL without torchvision, to find the next blocker."""
import sys

try:
    import transformers.models.qwen2_vl.image_processing_pil_qwen2_vl as _pil
    from transformers import processing_utils as _pu
    from transformers.utils import PushToHubMixin as _PushToHubMixin
except ImportError:
    pass
else:
    # 1. vllm/model_executor/models/qwen2_vl.py imports smart_resize from the torchvision image processor module.
    sys.modules["transformers.models.qwen2_vl.image_processing_qwen2_vl"] = _pil
    # 2. Qwen2VLProcessor.from_pretrained loads Qwen2VLVideoProcessor (torchvision): load a stand-in.
    class _NoVideoProcessor(_PushToHubMixin):
        """Stands in for Qwen2VLVideoProcessor: vLLM reads valid_kwargs and the patch sizes, never videos."""

        def to_dict(self):
            return {"video_processor_type": "probe stand-in (no torchvision)"}

        valid_kwargs = _pu.VideosKwargs
        patch_size, temporal_patch_size, merge_size = 14, 2, 2

        @classmethod
        def from_pretrained(cls, *args, **kwargs):
            return cls()

    class _Mapping(type(_pu.MODALITY_TO_AUTOPROCESSOR_MAPPING)):
        def __getitem__(self, key):
            return _NoVideoProcessor if key == "video_processor" else super().__getitem__(key)

    _pu.MODALITY_TO_AUTOPROCESSOR_MAPPING = _Mapping()
    _orig_check = _pu.ProcessorMixin.check_argument_for_proper_class

    def _check(self, name, arg):
        if name == "video_processor":
            return None
        return _orig_check(self, name, arg)

    _pu.ProcessorMixin.check_argument_for_proper_class = _check
'''


def build(out: Path) -> tuple[Path, dict[str, Any]]:
    """The tiny VL checkpoint (:func:`rla_core.models.bootstrap.ensure_tiny_vl_model`, cached in ``out``)
    and facts about it, plus whether ``Qwen2VLProcessor`` can be constructed without torchvision."""
    from transformers import AutoConfig, AutoTokenizer, Qwen2VLImageProcessorPil, Qwen2VLProcessor

    from rla_core.models.bootstrap import DEFAULT_ARCH, DEFAULT_VISION, VISION_TOKENS, ensure_tiny_vl_model
    from rla_core.models.multimodal import load_vl_model

    t0 = time.perf_counter()
    model_dir = ensure_tiny_vl_model("probe31", corpus=CORPUS, cache_dir=out)
    build_s = round(time.perf_counter() - t0, 2)
    tok = AutoTokenizer.from_pretrained(model_dir)
    config = AutoConfig.from_pretrained(model_dir)
    model = load_vl_model(model_dir)
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(model_dir)
    # Qwen2VLProcessor cannot be constructed without torchvision, even with video_processor=None
    # (ProcessorMixin type-checks the video slot against BaseVideoProcessor, which is a torchvision-only
    # placeholder): the checkpoint has the tokenizer, the image processor and the chat template on their own.
    try:
        Qwen2VLProcessor(image_processor=image_processor, tokenizer=tok, chat_template=tok.chat_template)
        processor_error = None
    except (AttributeError, ValueError, TypeError, ImportError) as err:
        processor_error = f"{type(err).__name__}: {err}"[:600]
    vision = DEFAULT_VISION
    return model_dir, {
        "build_s": build_s,
        "files": sorted(p.name for p in model_dir.iterdir()),
        "params": sum(p.numel() for p in model.parameters()),
        "vision_params": sum(p.numel() for n, p in model.named_parameters() if "visual" in n),
        "vocab_size": len(tok),
        "special_token_ids": {t: tok.convert_tokens_to_ids(t) for t in VISION_TOKENS},
        "text_head_dim": DEFAULT_ARCH.hidden_size // DEFAULT_ARCH.num_attention_heads,
        "vision_head_dim": vision.embed_dim // vision.num_heads,
        "mrope_section": list(config.text_config.rope_parameters["mrope_section"]),
        "image_processor_class": type(image_processor).__name__,
        "qwen2vl_processor_constructs": processor_error is None,
        "qwen2vl_processor_error": processor_error,
        "min_pixels": vision.min_pixels,
        "max_pixels": vision.max_pixels,
    }


def screenshot(variant: str):
    """A synthetic 224x160 'form' PNG; variant 'A' and 'B' differ in colours and layout."""
    from PIL import Image, ImageDraw

    bg, fg = ((240, 240, 240), (20, 60, 200)) if variant == "A" else ((30, 30, 30), (230, 180, 20))
    img = Image.new("RGB", IMAGE_SIZE, bg)
    draw = ImageDraw.Draw(img)
    for i in range(3):
        y = 20 + i * 45 if variant == "A" else 110 - i * 45
        draw.rectangle([20, y, 200, y + 30], outline=fg, fill=fg if i == 2 else None)
        draw.text((30, y + 8), f"button {i + 1}", fill=(0, 0, 0) if variant == "A" else (255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB"), buf.getvalue()


def user_message(content_image: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": [content_image, {"type": "text", "text": PROMPT_TEXT}]}


def transformers_side(out: Path) -> dict[str, Any]:
    """Render, generate, and score CONTINUATION given images A and B with transformers on CPU."""
    import torch
    from transformers import AutoProcessor

    from rla_core.models.multimodal import ImagePrompt, VisionProcessor, load_vl_model

    res: dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        AutoProcessor.from_pretrained(out)
        res["auto_processor"] = "ok"
    except (AttributeError, ImportError, ValueError, OSError, TypeError) as err:
        res["auto_processor"] = f"{type(err).__name__}: {err}"[:600]
    # What the transformers backend uses without torchvision (rla_core.models.multimodal): the tokenizer
    # and the image processor loaded on their own, with the processor's one job (expand <|image_pad|>)
    # done by VisionProcessor.
    processor = VisionProcessor.from_pretrained(out)
    res["image_processor_class"] = type(processor.image_processor).__name__
    model = load_vl_model(out, dtype=torch.float32).eval()
    res["load_s"] = round(time.perf_counter() - t0, 2)

    template_full = processor.tokenizer.apply_chat_template(
        [user_message({"type": "image"}), {"role": "assistant", "content": CONTINUATION}],
        continue_final_message=True,
        tokenize=False,
    )
    for variant in ("A", "B"):
        _, png = screenshot(variant)
        path = out / f"screenshot-{variant}.png"
        path.write_bytes(png)
        prompt = processor.format(ImagePrompt(PROMPT_TEXT, (str(path),)), chat=True)
        full = ImagePrompt(prompt.text + CONTINUATION, prompt.images)
        res["rendered_prompt"] = prompt.text
        res["rendered_full_equals_template_continue_final_message"] = full.text == template_full
        p_in = processor.encode([prompt])
        f_in = processor.encode([full])
        n_prompt = int(p_in["input_ids"].shape[1])
        full_ids = f_in["input_ids"][0]
        entry: dict[str, Any] = {
            "prompt_tokens": n_prompt,
            "image_tokens": int((p_in["input_ids"][0] == model.config.image_token_id).sum()),
            "image_grid_thw": p_in["image_grid_thw"][0].tolist(),
            "pixel_values_shape": list(p_in["pixel_values"].shape),
            "prompt_is_prefix_of_full": bool(torch.equal(full_ids[:n_prompt], p_in["input_ids"][0])),
        }
        t = time.perf_counter()
        with torch.no_grad():
            logits = model(**f_in).logits[0].float()
        entry["forward_s"] = round(time.perf_counter() - t, 3)
        logps = torch.log_softmax(logits[:-1], dim=-1).gather(1, full_ids[1:, None])[:, 0]
        cont_ids = full_ids[n_prompt:].tolist()
        entry["continuation_token_ids"] = cont_ids
        entry["continuation_logprobs"] = [round(float(x), 6) for x in logps[n_prompt - 1 :]]
        entry["continuation_logprob_sum"] = round(float(logps[n_prompt - 1 :].sum()), 6)
        t = time.perf_counter()
        with torch.no_grad():
            gen = model.generate(**p_in, max_new_tokens=5, do_sample=False)
        entry["generate_s"] = round(time.perf_counter() - t, 3)
        entry["greedy_5_ids"] = gen[0, n_prompt:].tolist()
        entry["greedy_5_text"] = processor.tokenizer.decode(gen[0, n_prompt:])
        res[f"image_{variant}"] = entry
    a, b = res["image_A"]["continuation_logprobs"], res["image_B"]["continuation_logprobs"]
    res["image_changes_logprobs_max_abs"] = round(max(abs(x - y) for x, y in zip(a, b, strict=True)), 6)
    return res


def import_checks(interpreter: str) -> dict[str, str]:
    """Import vLLM's Qwen2-VL and Qwen3-VL model modules in the vLLM environment: 'ok' or the last error line."""
    import subprocess

    res = {}
    proc = subprocess.run(
        [interpreter, "-c", "import transformers, torch, vllm; print(vllm.__version__, transformers.__version__, torch.__version__)"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    res["versions (vllm transformers torch)"] = proc.stdout.strip() or proc.stderr.strip()[-300:]
    for mod in ("vllm.model_executor.models.qwen2_vl", "vllm.model_executor.models.qwen3_vl"):
        proc = subprocess.run(
            [interpreter, "-c", f"import {mod}"], capture_output=True, text=True, timeout=300
        )
        lines = [ln for ln in proc.stderr.splitlines() if "Error" in ln]
        res[mod] = "ok" if proc.returncode == 0 else (lines[-1] if lines else f"exit {proc.returncode}")
    return res


def vllm_side(
    out: Path, hf: dict[str, Any], interpreter: str, runtime: Path, *, shim: Path | None
) -> dict[str, Any]:
    """Serve ``out`` with CPU vLLM like a stage does; score CONTINUATION given images A and B over HTTP."""
    import re

    import httpx

    from rla_core.config import Backend, ServingConfig
    from rla_core.errors import ModelError
    from rla_core.models.serving import VllmServer, served_name

    res: dict[str, Any] = {"interpreter": interpreter, "pythonpath_shim": shim is not None}
    extra = (
        "--max-model-len", "1024", "--max-num-seqs", "4", "--enforce-eager",
        "--limit-mm-per-prompt", json.dumps({"image": 1, "video": 0}),
    )  # fmt: skip
    res["extra_args"] = list(extra)
    serving = ServingConfig(
        backend=Backend.VLLM,
        dtype="float32",
        interpreter=interpreter,
        extra_args=extra,
        startup_timeout_s=480.0,
    )
    name = served_name("probe31shim" if shim else "probe31", "policy")
    old_env = {k: os.environ.get(k) for k in ("PYTHONPATH", "VLLM_CACHE_ROOT")}
    if shim is not None:
        os.environ["PYTHONPATH"] = str(shim)
    # A private cache: vLLM caches a model's inspection (~/.cache/vllm/modelinfos), so one attempt that
    # got past it would move the next attempt's failure to a later stage.
    os.environ["VLLM_CACHE_ROOT"] = str(runtime / "vllm-cache")
    t0 = time.perf_counter()
    try:
        server = VllmServer.start(out, name=name, role="policy", serving=serving, runtime_dir=runtime)
    except ModelError as err:
        res["serves"] = False
        res["start_failed_after_s"] = round(time.perf_counter() - t0, 1)
        log_path = runtime / "logs" / f"{name}.log"
        log = log_path.read_text(errors="replace") if log_path.exists() else str(err)
        # The root cause, not only the tail: every distinct line naming an error, in order.
        errs = [ln.strip() for ln in log.splitlines() if re.search(r"(Error|error)\b", ln)]
        res["error_lines"] = list(dict.fromkeys(errs))[:20]
        res["error_tail"] = str(err)[-1500:]
        return res
    finally:
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    res["serves"] = True
    res["startup_s"] = round(server.startup_s, 1)
    with server, httpx.Client(timeout=httpx.Timeout(300.0, connect=5.0)) as client:
        url = f"{server.base_url}/chat/completions"
        for variant in ("A", "B"):
            _, png = screenshot(variant)
            part = {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
            }
            entry: dict[str, Any] = {}
            # Scoring: the continuation is the final assistant message, continued (no <|im_end|>), and
            # prompt_logprobs=0 returns each prompt token's own log-prob; one generated token is the minimum.
            body = {
                "model": name, "messages": [user_message(part), {"role": "assistant", "content": CONTINUATION}],
                "add_generation_prompt": False, "continue_final_message": True, "max_tokens": 1,
                "temperature": 0.0, "prompt_logprobs": 0, "return_token_ids": True,
            }  # fmt: skip
            t = time.perf_counter()
            resp = client.post(url, json=body)
            entry["score_request_s"] = round(time.perf_counter() - t, 3)
            entry["score_status"] = resp.status_code
            if resp.status_code != 200:
                entry["score_error"] = resp.text[:2000]
                res[f"image_{variant}"] = entry
                continue
            data = resp.json()
            plp = data.get("prompt_logprobs")
            prompt_ids = data.get("prompt_token_ids")
            hf_v = hf[f"image_{variant}"]
            cont_ids = hf_v["continuation_token_ids"]
            k = len(cont_ids)
            entry["prompt_tokens"] = len(prompt_ids) if prompt_ids is not None else len(plp)
            entry["prompt_tokens_match_transformers"] = entry["prompt_tokens"] == hf_v["prompt_tokens"] + k
            if prompt_ids is not None:
                entry["continuation_ids_match"] = prompt_ids[-k:] == cont_ids
            tail = plp[-k:]
            lps = [float(d[str(tid)]["logprob"]) for d, tid in zip(tail, cont_ids, strict=True)]
            entry["continuation_logprobs"] = [round(x, 6) for x in lps]
            entry["continuation_logprob_sum"] = round(sum(lps), 6)
            entry["max_abs_diff_vs_transformers"] = round(
                max(abs(x - y) for x, y in zip(lps, hf_v["continuation_logprobs"], strict=True)), 6
            )
            gen_body = {
                "model": name, "messages": [user_message(part)], "max_tokens": 5, "temperature": 0.0,
                "return_token_ids": True,
            }  # fmt: skip
            t = time.perf_counter()
            g = client.post(url, json=gen_body)
            entry["generate_request_s"] = round(time.perf_counter() - t, 3)
            if g.status_code == 200:
                choice = g.json()["choices"][0]
                entry["greedy_5_ids"] = choice.get("token_ids")
                entry["greedy_5_text"] = choice["message"]["content"]
            else:
                entry["generate_error"] = g.text[:2000]
            res[f"image_{variant}"] = entry
        a, b = res.get("image_A", {}), res.get("image_B", {})
        if "continuation_logprobs" in a and "continuation_logprobs" in b:
            res["image_changes_logprobs_max_abs"] = round(
                max(
                    abs(x - y)
                    for x, y in zip(a["continuation_logprobs"], b["continuation_logprobs"], strict=True)
                ),
                6,
            )
            res["max_abs_diff_vs_transformers"] = max(
                a["max_abs_diff_vs_transformers"], b["max_abs_diff_vs_transformers"]
            )
    return res


def torchvision_facts() -> dict[str, Any]:
    """What the video processor does without torchvision (recorded, not worked around)."""
    facts: dict[str, Any] = {}
    try:
        import torchvision  # noqa: F401

        facts["torchvision_installed"] = True
    except ImportError:
        facts["torchvision_installed"] = False
    try:
        from transformers import Qwen2VLVideoProcessor

        Qwen2VLVideoProcessor()
        facts["video_processor_constructs"] = True
    except (ImportError, ValueError, TypeError) as err:
        facts["video_processor_constructs"] = False
        facts["video_processor_error"] = f"{type(err).__name__}: {err}"[:600]
    return facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "out", type=Path, help="directory to write the tiny VL checkpoint to (must be empty/new)"
    )
    parser.add_argument("--result", type=Path, default=REPO / "benchmarks" / "results" / "tiny_vl_probe.json")
    parser.add_argument("--interpreter", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--skip-vllm", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import transformers

    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "issue": 31,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch_threads": 1},
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "prompt_text": PROMPT_TEXT,
        "continuation": CONTINUATION,
        "image_size": list(IMAGE_SIZE),
    }
    result["torchvision"] = torchvision_facts()
    model_dir, result["build"] = build(args.out)
    print(json.dumps(result["build"])[:3000], flush=True)
    result["transformers"] = transformers_side(model_dir)
    print(json.dumps(result["transformers"])[:3000], flush=True)
    if not args.skip_vllm:
        result["vllm_import_checks"] = import_checks(args.interpreter)
        print(json.dumps(result["vllm_import_checks"]), flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            shim_dir = Path(tmp) / "shim"
            shim_dir.mkdir()
            (shim_dir / "sitecustomize.py").write_text(VLLM_SHIM)
            for key, shim in (("vllm", None), ("vllm_with_probe_shim", shim_dir)):
                runtime = Path(tmp) / key
                try:
                    result[key] = vllm_side(
                        model_dir, result["transformers"], args.interpreter, runtime, shim=shim
                    )
                except (
                    Exception
                ) as err:  # a probe: any failure of the vLLM path is the finding, recorded verbatim
                    result[key] = {
                        "serves": None,
                        "error": f"{type(err).__name__}: {err}",
                        "trace": traceback.format_exc()[-3000:],
                    }
                print(key, json.dumps(result[key])[:3000], flush=True)
    args.result.parent.mkdir(parents=True, exist_ok=True)
    args.result.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.result}")


if __name__ == "__main__":
    main()
