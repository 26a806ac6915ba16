"""Generation: the project's ``TransformersGenerator`` vs bare ``model.generate(do_sample=True)``, fp32 and bf16.

Both run on the same model object (the generator's own) and the same input tensors (its own tokenizer,
left padding): ``--prompts`` prompts of exactly ``--prompt-tokens`` tokens (no padding), one sample each,
``--new-tokens`` new tokens, temperature ``--temperature``, top-p ``--top-p``, no stop strings, micro-batches
of ``--batch`` (``models.generation_batch_size``). The model is the random Qwen2 checkpoint of
``qwen2_random.py`` (saved fp32); for each ``--dtypes`` entry it is cast in place, so the generator's seeded
per-row sampler and stop check are what differ from the reference. Each side is warmed up once, then timed
``--repeats`` times, alternating, and the best time of each is kept (the machine's other load hits both).
Tokens count up to and including EOS (random weights over a large vocabulary almost never sample it).
``--profile`` prints the top operators of one generator call under ``torch.profiler``.

ratio = generator seconds per token / bare seconds per token (> 1: the generator is slower).

Run on a GPU:      python benchmarks/gpu/generation.py                      (exit 2 without CUDA)
The CPU sitting:   python benchmarks/gpu/generation.py --device cpu --size cpu --repeats 2
CPU smoke:         python benchmarks/gpu/generation.py --device cpu --size smoke --prompts 4 --prompt-tokens 16
                   --new-tokens 8 --batch 4 --repeats 1
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any

from qwen2_random import SIZES, add_size_args, build, exact_prompt, param_count, result_line, sync

_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def _project(gen: Any, prompts: list[str], sampling: Any) -> tuple[float, int]:
    sync(gen._device)
    start = time.perf_counter()
    out = gen.generate(prompts, n=1, sampling=sampling, seed=1)
    sync(gen._device)
    return time.perf_counter() - start, sum(g.completion_tokens for row in out for g in row)


def _bare(
    gen: Any, batches: list[tuple[Any, Any]], args: argparse.Namespace, new_tokens: int
) -> tuple[float, int]:
    import torch

    eos_ids = gen._eos_ids()
    eos = torch.tensor(eos_ids, device=gen._device)
    kwargs: dict[str, Any] = {
        "max_new_tokens": new_tokens, "pad_token_id": gen._tokenizer.pad_token_id, "eos_token_id": eos_ids,
        "do_sample": True, "temperature": args.temperature, "top_p": args.top_p, "top_k": 0,
    }  # fmt: skip
    sync(gen._device)
    start = time.perf_counter()
    with torch.inference_mode():
        outs = [gen._model.generate(input_ids=ids, attention_mask=mask, **kwargs) for ids, mask in batches]
    sync(gen._device)
    secs = time.perf_counter() - start
    tokens = 0
    for (ids, _), out in zip(batches, outs, strict=True):
        new = out[:, ids.shape[1] :]
        hit = torch.isin(new, eos)
        first = torch.where(hit.any(dim=1), hit.int().argmax(dim=1) + 1, new.shape[1])
        tokens += int(first.sum())
    return secs, tokens


def _profile(gen: Any, prompts: list[str], sampling: Any) -> dict[str, float]:
    """Top operators of one generator call, and per decode step: host reads, RNG calls and operator calls
    (on a GPU each operator call is about one kernel launch, each host read a synchronisation)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gen._device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        gen.generate(prompts, n=1, sampling=sampling, seed=1)
        sync(gen._device)
    events = prof.key_averages()
    sort = "self_cuda_time_total" if gen._device.type == "cuda" else "self_cpu_time_total"
    print(events.table(sort_by=sort, row_limit=15, max_name_column_width=50), flush=True)
    calls = {e.key: e.count for e in events}
    steps = sampling.max_new_tokens
    per_step = {
        "host_reads_per_step": calls.get("aten::_local_scalar_dense", 0) / steps,
        "rng_calls_per_step": (calls.get("aten::uniform_", 0) + calls.get("aten::exponential_", 0)) / steps,
        "aten_calls_per_step": sum(n for k, n in calls.items() if k.startswith("aten::")) / steps,
    }
    print("per decode step:", {k: round(v, 1) for k, v in per_step.items()}, flush=True)
    return per_step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    add_size_args(parser)
    args = parser.parse_args()

    import torch

    from rla_core.config import SamplingConfig
    from rla_core.models.generator import TransformersGenerator

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("generation: no CUDA device visible; on a CPU pass --device cpu --size cpu", flush=True)
        return 2
    dtypes = [d for d in args.dtypes.split(",") if d]
    unknown = [d for d in dtypes if d not in _DTYPES]
    if unknown:
        parser.error(f"--dtypes {unknown}: use {sorted(_DTYPES)}")
    path = build(SIZES[args.size], args.cache_dir)
    gen = TransformersGenerator(path, device=args.device, batch_size=args.batch)
    rng = random.Random(11)
    prompts = [exact_prompt(gen._tokenizer, args.prompt_tokens, rng) for _ in range(args.prompts)]
    batches = []
    for start in range(0, len(prompts), args.batch):
        enc = gen._tokenizer(prompts[start : start + args.batch], return_tensors="pt", padding=True,
                             add_special_tokens=False)  # fmt: skip
        batches.append((enc["input_ids"].to(gen._device), enc["attention_mask"].to(gen._device)))
    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.new_tokens)
    warm = sampling.model_copy(update={"max_new_tokens": min(8, args.new_tokens)})
    fields: dict[str, Any] = {
        "size": args.size, "params_m": round(param_count(gen._model) / 1e6, 1), "device": args.device,
        "prompts": args.prompts, "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
        "batch": args.batch, "torch_threads": torch.get_num_threads(),
    }  # fmt: skip
    print(f"generation: {fields}", flush=True)
    for name in dtypes:
        gen._model.to(getattr(torch, _DTYPES[name]))
        _project(gen, prompts[: args.batch], warm)
        _bare(gen, batches[:1], args, warm.max_new_tokens)
        best: dict[str, tuple[float, int]] = {}
        for _ in range(args.repeats):
            for side, run in (
                ("generator", lambda: _project(gen, prompts, sampling)),
                ("bare", lambda: _bare(gen, batches, args, args.new_tokens)),
            ):
                secs, tokens = run()
                print(
                    f"  {name} {side:9s} {tokens} tokens in {secs:7.2f} s = {tokens / secs:8.0f} tok/s",
                    flush=True,
                )
                if side not in best or secs < best[side][0]:
                    best[side] = (secs, tokens)
        ratio = (best["generator"][0] / best["generator"][1]) / (best["bare"][0] / best["bare"][1])
        fields |= {
            f"{name}_generator_tok_s": round(best["generator"][1] / best["generator"][0]),
            f"{name}_bare_tok_s": round(best["bare"][1] / best["bare"][0]),
            f"{name}_ratio": round(ratio, 3),
        }
        print(f"{name}: generator / bare generate = {ratio:.3f}", flush=True)
        if args.profile:
            fields |= {
                f"{name}_{k}": round(v, 1) for k, v in _profile(gen, prompts[: args.batch], sampling).items()
            }
    gen.close()
    print(result_line("generation", fields), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
