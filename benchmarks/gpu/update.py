"""RL update on rows of varied lengths: padded vs packed ``rl_update``, a plain torch loop, and MFU.

Rows: ``--rows`` rows whose prompt and response lengths are drawn uniformly from [``--min-share`` × max,
max] tokens (max ``--prompt-tokens`` / ``--response-tokens``; seed 5), so right-padded micro-batches carry
padding as RL rows do. Model: ``qwen2_random.py``'s size (default ``0.5b``: Qwen2-0.5B's shape).

In one process, on the same model and rows:

1. **peak**: the chip's dense bf16 matmul rate, measured here (best of square matmuls of 4096, 8192 and
   16384; ``--peak-tflops`` overrides it), the denominator of every MFU below.
2. **project, padded**: ``rl_update`` with ``micro_batch_size`` rows per right-padded micro-batch (logits at
   response positions only, as always); **project, packed**: the same with
   ``max_tokens_per_micro_batch`` (packs as long as each micro-batch's longest row: SDPA). Each once to
   warm up, then timed in alternation (padded, packed, padded, packed; best of the two): ``loop_s`` is the
   update's own π_old pass + optimizer steps; ``wall_s`` adds loading and saving the fp32 checkpoint.
3. **reference**: plain torch on the padded micro-batches (logits at every position, ``log_softmax`` +
   ``gather``, PPO-clip + k3 inline, AdamW), one warm-up pass, one timed.

FLOPs count what the rows need, not what a layout wastes: per real token 8·N (π_old forward 2·N, update
forward + backward 6·N; N = parameters outside the embedding), the lm_head 8·H·V per *response* token
only (logits are computed there only), and causal attention 8·layers·H·s² per row of s tokens
(2·s²·H per layer per forward, 4 forward-equivalents). MFU = FLOPs / loop seconds / peak; useful tokens/s
= real tokens / loop seconds. ``padding_share`` is ``rl_update``'s own metric (padding among the positions
its forward passes computed).

Run on a GPU:  python benchmarks/gpu/update.py                       (exit 2 without CUDA)
CPU smoke:     python benchmarks/gpu/update.py --device cpu --dtype fp32 --size smoke --rows 8
               --prompt-tokens 24 --response-tokens 16 --micro-batch 4 --peak-tflops 1
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from qwen2_random import SIZES, add_size_args, build, exact_prompt, param_count, result_line, sync


def _config(args: argparse.Namespace, *, packed: bool) -> Any:
    from rla_core.config import load_config

    budget = args.max_tokens or args.micro_batch * (args.prompt_tokens + args.response_tokens)
    return load_config(
        preset="test",
        overrides=[
            f"training.device={args.device}", f"training.dtype={args.dtype}",
            f"training.policy.micro_batch_size={args.micro_batch}",
            f"training.policy.update_per_step={args.steps}",
            f"training.policy.max_prompt_len={args.prompt_tokens + 8}",
            f"training.policy.max_gen_len={args.response_tokens + 8}",
            f"training.policy.max_tokens_per_micro_batch={budget if packed else 'null'}",
        ],
    )  # fmt: skip


def dense_bf16_peak(device: str) -> float:
    """TFLOP/s of the best square bf16 matmul (2·n³ FLOPs) among n = 4096, 8192, 16384, 10 each, best of 3."""
    import torch

    best = 0.0
    for n in (4096, 8192, 16384):
        a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        a @ b  # warm-up (cuBLAS heuristics, clocks)
        for _ in range(3):
            sync(device)
            start = time.perf_counter()
            for _ in range(10):
                a @ b
            sync(device)
            best = max(best, 10 * 2 * n**3 / (time.perf_counter() - start) / 1e12)
        del a, b
    return best


def _project(path: Path, rows: Any, args: argparse.Namespace, tmp: Path) -> dict[str, dict[str, float]]:
    """Padded and packed ``rl_update``: one warm-up each, then alternating timed runs (best of 2)."""
    import shutil

    from rla_core.models.launch import Placement
    from rla_core.models.update import rl_update

    cfgs = {name: _config(args, packed=name == "packed") for name in ("padded", "packed")}
    out: dict[str, dict[str, float]] = {}
    for i, (name, cfg) in enumerate([*cfgs.items(), *cfgs.items(), *cfgs.items()]):
        placement = Placement.from_config(cfg.training)
        kwargs = {"cfg": cfg.training.policy, "seed": 0, "lora": cfg.models.lora, "placement": placement}
        sync(placement.device)
        if str(args.device).startswith("cuda"):
            import torch

            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        metrics = rl_update(path, rows, out_dir=tmp / f"{name}-{i}", **kwargs)
        sync(placement.device)
        wall = time.perf_counter() - start
        shutil.rmtree(tmp / f"{name}-{i}")  # 2 GB of fp32 weights at 0.5 B
        peak_gib = 0.0
        if str(args.device).startswith("cuda"):
            import torch

            peak_gib = torch.cuda.max_memory_allocated() / 2**30
        run = {"wall_s": wall, "loop_s": float(metrics["loop_s"]), "steps": float(metrics["optimizer_steps"]),
               "padding_share": float(metrics["padding_share"]), "peak_gib": peak_gib}  # fmt: skip
        if name not in out:
            out[name] = {"warmup": 1.0}  # the first run of each warms up and is not kept
        elif out[name].get("warmup") or run["loop_s"] < out[name]["loop_s"]:
            out[name] = run
    return out


def _reference(path: Path, rows: Any, args: argparse.Namespace) -> dict[str, float]:
    import contextlib

    import torch
    from transformers import AutoTokenizer

    from rla_core.models.checkpoints import load_fp32
    from rla_core.models.rows import prepare_rl_rows
    from rla_core.models.update import plan_micro_batches

    cfg = _config(args, packed=False)
    tcfg, device = cfg.training.policy, args.device
    prepared, _ = prepare_rl_rows(rows, AutoTokenizer.from_pretrained(path), tcfg)
    group_rows = math.ceil(len(prepared) / tcfg.update_per_step)
    lengths = [len(r.prompt_ids) + len(r.response_ids) for r in prepared]
    plan = plan_micro_batches(lengths, group_rows, tcfg.micro_batch_size, 0, 1)
    batches = []
    for group in plan:
        batches.append([])
        for micro in group:
            batch = [prepared[i] for i, _ in micro]
            width = max(len(r.prompt_ids) + len(r.response_ids) for r in batch)
            ids = torch.zeros((len(batch), width), dtype=torch.long)
            attn = torch.zeros_like(ids)
            score = torch.zeros((len(batch), width - 1))  # 1 where position j predicts a response token
            for b, r in enumerate(batch):
                seq, p = r.prompt_ids + r.response_ids, len(r.prompt_ids)
                ids[b, : len(seq)], attn[b, : len(seq)], score[b, p - 1 : len(seq) - 1] = (
                    torch.tensor(seq),
                    1,
                    1.0,
                )
            adv = torch.tensor([r.advantage for r in batch])[:, None]
            batches[-1].append((ids.to(device), attn.to(device), score.to(device), adv.to(device)))
    amp = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.training.dtype.value]
    model = load_fp32(path).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=tcfg.lr, betas=tcfg.betas, eps=tcfg.eps,
                                  weight_decay=tcfg.weight_decay)  # fmt: skip

    def autocast() -> Any:
        return torch.autocast(torch.device(device).type, dtype=amp) if amp else contextlib.nullcontext()

    def logps(ids: Any, attn: Any) -> Any:
        with autocast():
            logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits[:, :-1]
        return logits.float().log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)

    def one_pass() -> None:
        model.eval()
        with torch.no_grad():
            old = [[logps(ids, attn) for ids, attn, _, _ in group] for group in batches]
        model.train()
        eps = tcfg.clip_eps
        for g, group in enumerate(batches):
            for m, (ids, attn, score, adv) in enumerate(group):
                new = logps(ids, attn)
                ratio = torch.exp(torch.clamp(new - old[g][m], -10, 10))
                surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv)
                back = old[g][m] - new
                k3 = torch.exp(torch.clamp(back, -10, 10)) - 1 - back
                n = score.sum(-1)
                per_row = (-(surrogate * score).sum(-1) + tcfg.kl_beta * (k3 * score).sum(-1)) / n
                (per_row.sum() / group_rows).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    one_pass()
    sync(device)
    start = time.perf_counter()
    one_pass()
    sync(device)
    return {"loop_s": time.perf_counter() - start}


def useful_flops(model_config: Any, params: int, prepared: list[Any]) -> float:
    """FLOPs the rows need (see the module docstring): trunk per token, lm_head per response token, attention."""
    hidden, vocab = model_config.hidden_size, model_config.vocab_size
    trunk = params - vocab * hidden  # tied embeddings: the lm_head's matrix is the embedding
    tokens = sum(len(r.prompt_ids) + len(r.response_ids) for r in prepared)
    scored = sum(len(r.response_ids) for r in prepared)
    squares = sum((len(r.prompt_ids) + len(r.response_ids)) ** 2 for r in prepared)
    return (
        8.0 * trunk * tokens
        + 8.0 * hidden * vocab * scored
        + 8.0 * model_config.num_hidden_layers * hidden * squares
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"], help="training.dtype")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=384, help="longest prompt")
    parser.add_argument("--response-tokens", type=int, default=128, help="longest response")
    parser.add_argument("--min-share", type=float, default=0.25, help="shortest length / longest")
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument(
        "--max-tokens", type=int, default=0, help="packed budget (0: micro-batch x longest row)"
    )
    parser.add_argument("--steps", type=int, default=4, help="training.policy.update_per_step")
    parser.add_argument("--peak-tflops", type=float, default=0.0, help="skip the matmul peak measurement")
    add_size_args(parser)
    args = parser.parse_args()

    import polars as pl
    import torch
    from transformers import AutoConfig, AutoTokenizer

    from rla_core.models.checkpoints import load_fp32
    from rla_core.models.rows import prepare_rl_rows

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "update: no CUDA device visible; on a CPU pass --device cpu --dtype fp32 --size smoke", flush=True
        )
        return 2
    peak = args.peak_tflops or dense_bf16_peak(args.device)
    print(f"dense bf16 matmul peak: {peak:.1f} TFLOP/s", flush=True)
    path = build(SIZES[args.size], args.cache_dir)
    tok = AutoTokenizer.from_pretrained(path)
    rng = random.Random(5)

    def length(longest: int) -> int:
        return rng.randint(max(1, round(args.min_share * longest)), longest)

    rows = pl.DataFrame(
        {
            "prompt": [exact_prompt(tok, length(args.prompt_tokens), rng) for _ in range(args.rows)],
            # A leading space: the response tokenises on its own as it does after the prompt.
            "response": [
                " " + exact_prompt(tok, length(args.response_tokens), rng) for _ in range(args.rows)
            ],
            "advantage": [1.0 - 2.0 * (i % 2) for i in range(args.rows)],
        }
    )
    prepared, _ = prepare_rl_rows(rows, tok, _config(args, packed=False).training.policy)
    params = param_count(load_fp32(path))
    flops = useful_flops(AutoConfig.from_pretrained(path), params, prepared)
    tokens = sum(len(r.prompt_ids) + len(r.response_ids) for r in prepared)
    with tempfile.TemporaryDirectory() as tmp:
        project = _project(path, rows, args, Path(tmp))
    reference = _reference(path, rows, args)
    padded, packed = project["padded"], project["packed"]
    fields = {
        "size": args.size, "device": args.device, "dtype": args.dtype, "rows": args.rows, "tokens": tokens,
        "peak_bf16_tflops": round(peak, 1), "optimizer_steps": packed["steps"],
        "padded_loop_s": round(padded["loop_s"], 3), "packed_loop_s": round(packed["loop_s"], 3),
        "reference_loop_s": round(reference["loop_s"], 3),
        "padded_wall_s": round(padded["wall_s"], 3), "packed_wall_s": round(packed["wall_s"], 3),
        "padded_padding_share": round(padded["padding_share"], 3),
        "packed_padding_share": round(packed["padding_share"], 3),
        "padded_tokens_s": round(tokens / padded["loop_s"]), "packed_tokens_s": round(tokens / packed["loop_s"]),
        "speedup_packed": round(padded["loop_s"] / packed["loop_s"], 3),
        "padded_mfu": round(flops / padded["loop_s"] / 1e12 / peak, 3),
        "packed_mfu": round(flops / packed["loop_s"] / 1e12 / peak, 3),
        "reference_mfu": round(flops / reference["loop_s"] / 1e12 / peak, 3),
        "padded_peak_gib": round(padded["peak_gib"], 2), "packed_peak_gib": round(packed["peak_gib"], 2),
    }  # fmt: skip
    print(result_line("update", fields), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
