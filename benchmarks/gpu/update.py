"""RL update: the project's ``rl_update`` vs a plain torch loop doing the same work on the same model and tokens.

Project: ``rl_update`` (test preset's ``training.policy`` with ``micro_batch_size``/``update_per_step``
from the flags, ``training.dtype`` autocast, one process on ``--device``) on ``--rows`` rows of exactly
``--prompt-tokens`` + ``--response-tokens`` tokens (no padding), once to warm up, then timed: its own
``loop_s`` (π_old pass + updates) and the wall time (checkpoint load, loop, fp32 save).
Reference: the same rows tokenised by the project (``prepare_rl_rows``) and cut into the same micro-batches
(``plan_micro_batches``), moved to the device before timing; the checkpoint loaded fp32; then plain torch:
a no-grad π_old forward over every micro-batch, forward + backward under the same autocast, log-probs by
``log_softmax`` + ``gather``, the PPO-clip + k3 loss inline, grad-norm clip and ``torch.optim.AdamW`` with
the same hyper-parameters per optimizer step. One warm-up pass, one timed pass.

ratio_loop = project loop_s / reference loop seconds; TFLOP/s counts 8·N·T (forward + backward 6·N·T,
π_old forward 2·N·T; N parameters, T tokens).

Run on a GPU:  python benchmarks/gpu/update.py                       (exit 2 without CUDA)
CPU smoke:     python benchmarks/gpu/update.py --device cpu --dtype fp32 --size smoke --rows 8
               --prompt-tokens 16 --response-tokens 16 --micro-batch 4
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


def _config(args: argparse.Namespace) -> Any:
    from rla_core.config import load_config

    return load_config(
        preset="test",
        overrides=[
            f"training.device={args.device}", f"training.dtype={args.dtype}",
            f"training.policy.micro_batch_size={args.micro_batch}",
            f"training.policy.update_per_step={args.steps}",
            f"training.policy.max_prompt_len={args.prompt_tokens + 8}",
            f"training.policy.max_gen_len={args.response_tokens + 8}",
        ],
    )  # fmt: skip


def _project(path: Path, rows: Any, cfg: Any, tmp: Path) -> dict[str, float]:
    from rla_core.models.launch import Placement
    from rla_core.models.update import rl_update

    placement = Placement.from_config(cfg.training)
    kwargs = {"cfg": cfg.training.policy, "seed": 0, "lora": cfg.models.lora, "placement": placement}
    rl_update(path, rows, out_dir=tmp / "warm", **kwargs)
    sync(placement.device)
    start = time.perf_counter()
    metrics = rl_update(path, rows, out_dir=tmp / "timed", **kwargs)
    sync(placement.device)
    return {"wall_s": time.perf_counter() - start, "loop_s": float(metrics["loop_s"]),
            "steps": float(metrics["optimizer_steps"])}  # fmt: skip


def _reference(path: Path, rows: Any, cfg: Any, device: str) -> dict[str, float]:
    import contextlib

    import torch
    from transformers import AutoTokenizer

    from rla_core.models.checkpoints import load_fp32
    from rla_core.models.logprobs import pad_right
    from rla_core.models.rows import prepare_rl_rows
    from rla_core.models.update import plan_micro_batches

    tcfg = cfg.training.policy
    prepared, _ = prepare_rl_rows(rows, AutoTokenizer.from_pretrained(path), tcfg)
    group_rows = math.ceil(len(prepared) / tcfg.update_per_step)
    plan = plan_micro_batches(len(prepared), group_rows, tcfg.micro_batch_size, 0, 1)
    batches = []
    for group in plan:
        batches.append([])
        for micro in group:
            batch = [prepared[i] for i, _ in micro]
            ids, attn = pad_right([r.prompt_ids + r.response_ids for r in batch])
            p, k = len(batch[0].prompt_ids), len(batch[0].response_ids)  # equal lengths by construction
            adv = torch.tensor([r.advantage for r in batch])[:, None]
            batches[-1].append((ids.to(device), attn.to(device), p, k, adv.to(device)))
    amp = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.training.dtype.value]
    model = load_fp32(path).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=tcfg.lr, betas=tcfg.betas, eps=tcfg.eps,
                                  weight_decay=tcfg.weight_decay)  # fmt: skip

    def autocast() -> Any:
        return torch.autocast(torch.device(device).type, dtype=amp) if amp else contextlib.nullcontext()

    def logps(ids: Any, attn: Any, p: int, k: int) -> Any:
        with autocast():
            logits = model(input_ids=ids, attention_mask=attn).logits[:, p - 1 : p - 1 + k]
        return logits.float().log_softmax(-1).gather(-1, ids[:, p : p + k, None]).squeeze(-1)

    def one_pass() -> None:
        model.eval()
        with torch.no_grad():
            old = [[logps(ids, attn, p, k) for ids, attn, p, k, _ in group] for group in batches]
        model.train()
        eps = tcfg.clip_eps
        for g, group in enumerate(batches):
            for m, (ids, attn, p, k, adv) in enumerate(group):
                new = logps(ids, attn, p, k)
                ratio = torch.exp(torch.clamp(new - old[g][m], -10, 10))
                surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv)
                back = old[g][m] - new
                k3 = torch.exp(torch.clamp(back, -10, 10)) - 1 - back
                per_row = -surrogate.mean(-1) + tcfg.kl_beta * k3.mean(-1)
                (per_row.sum() / group_rows).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    one_pass()
    sync(device)
    start = time.perf_counter()
    one_pass()
    sync(device)
    return {"loop_s": time.perf_counter() - start, "params": float(param_count(model))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"], help="training.dtype")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=384)
    parser.add_argument("--response-tokens", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4, help="training.policy.update_per_step")
    add_size_args(parser)
    args = parser.parse_args()

    import polars as pl
    import torch
    from transformers import AutoTokenizer

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "update: no CUDA device visible; on a CPU pass --device cpu --dtype fp32 --size smoke", flush=True
        )
        return 2
    path = build(SIZES[args.size], args.cache_dir)
    tok = AutoTokenizer.from_pretrained(path)
    rng = random.Random(5)
    rows = pl.DataFrame(
        {
            "prompt": [exact_prompt(tok, args.prompt_tokens, rng) for _ in range(args.rows)],
            # A leading space: the response tokenises on its own as it does after the prompt.
            "response": [" " + exact_prompt(tok, args.response_tokens, rng) for _ in range(args.rows)],
            "advantage": [1.0 - 2.0 * (i % 2) for i in range(args.rows)],
        }
    )
    cfg = _config(args)
    with tempfile.TemporaryDirectory() as tmp:
        project = _project(path, rows, cfg, Path(tmp))
    reference = _reference(path, rows, cfg, args.device)
    tokens = args.rows * (args.prompt_tokens + args.response_tokens)
    flops = 8 * reference["params"] * tokens
    fields = {
        "size": args.size, "device": args.device, "dtype": args.dtype, "rows": args.rows,
        "tokens_per_row": args.prompt_tokens + args.response_tokens, "optimizer_steps": project["steps"],
        "project_loop_s": round(project["loop_s"], 3), "project_wall_s": round(project["wall_s"], 3),
        "reference_loop_s": round(reference["loop_s"], 3),
        "project_tflops": round(flops / project["loop_s"] / 1e12, 2),
        "reference_tflops": round(flops / reference["loop_s"] / 1e12, 2),
        "ratio_loop": round(project["loop_s"] / reference["loop_s"], 3),
        "ratio_wall": round(project["wall_s"] / project["loop_s"], 3),
    }  # fmt: skip
    print(result_line("update", fields), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
