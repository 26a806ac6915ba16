"""Packed vs padded micro-batches on CPU: the RL update and the warm start, tokens/s in one process.

Row sources (each its own model, as a run would train it):

- ``run``: the last ``policy_samples`` of a finished run (``--root``/``--run``; e.g. a short run of a shipped
  preset) with the run's bootstrapped policy (none when no run is given);
- ``drills``: ``--drills`` reading drills (``rla_core.envs.demos.reading_drills``) on that run's policy
  prompts, trained as the warm start trains them (SFT only: batches of 16, prompt in the loss);
- synthetic rows (:data:`SYNTHETIC`), on a tiny default-arch policy bootstrapped from their text: ``wide``
  (lengths uniform over a wide range), ``skewed`` (mostly short rows, a fifth long), ``narrow`` (about equal
  lengths: nothing shares a pack, so packing must cost nothing).

For each source, interleaved in this process (padded, packed, padded, packed, …; ``--repeats`` each, after
one warm-up of each): ``rl_update`` (``micro_batch_size`` 8, ``update_per_step`` 4, lr 1e-4, one process)
and ``sft`` (one epoch, batches of 8) with ``max_tokens_per_micro_batch`` null and ``--max-tokens``.
Reported: median ``loop_s`` (the update's π_old pass + steps; SFT's epoch), useful tokens/s (real row
tokens / loop_s), the ratio padded / packed of those and of the CPU seconds of the whole call
(``time.process_time``, checkpoint load and save included: less at the mercy of other jobs on a shared
machine than wall time), and each path's ``padding_share``. ``--forward`` adds the CPU seconds of forward +
backward over the same micro-batches in three layouts (:func:`forward_timing`: as before this change,
padded with logits at response positions, packed). ``--memory``: each path's update once more in a fresh
process, its resident set sampled every 2 ms; the peak's excess over the start is what the update's
tensors took. Threads: ``--threads`` (default 2).

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_packing.py [--root RUNS --run default] --forward --memory
(~15 min on 2 busy cores)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
import torch

from rla_core.config import LoraConfig, TrainConfig
from rla_core.models.sft import sft
from rla_core.models.update import rl_update

# Synthetic length distributions, in words (about one token each with a tokenizer trained on them): parts of
# (share of the rows, prompt words, response words), lengths uniform within each part.
SYNTHETIC = {
    "wide": [(1.0, (12, 480), (3, 72))],  # uniform: RL-like spread, ~40 % padding
    "skewed": [(0.8, (12, 90), (3, 24)), (0.2, (300, 480), (24, 72))],  # mostly short, a long tail
    "narrow": [(1.0, (225, 248), (15, 18))],  # about equal: little padding, nothing shares a pack
}

WORDS = [
    "take",
    "the",
    "key",
    "open",
    "chest",
    "go",
    "north",
    "south",
    "east",
    "west",
    "kitchen",
    "bedroom",
    "fridge",
    "counter",
    "door",
    "table",
]


def synthetic(n: int, prompt: tuple[int, int], response: tuple[int, int], seed: int) -> pl.DataFrame:
    """``n`` rows of pseudo-text, prompt and response lengths uniform in the given word ranges."""
    rng = random.Random(seed)

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

    rows = [(text(*prompt), " " + text(*response)) for _ in range(n)]
    return pl.DataFrame(
        {
            "prompt": [p for p, _ in rows],
            "response": [r for _, r in rows],
            "advantage": [1.0 - 2.0 * (i % 2) for i in range(n)],
        }
    )


def from_run(root: str, run_id: str, work: Path) -> tuple[pl.DataFrame, Path]:
    """The last policy_samples of a finished run and its bootstrapped policy checkpoint."""
    from rla_core.store import ArtifactStore

    store = ArtifactStore(root)
    labelled = max(it for (it, stage) in store.committed(run_id) if stage == "label")
    rows = store.read_frame(run_id, labelled, "label", "policy_samples").select(
        "prompt", "response", "advantage"
    )
    return rows, store.get_dir(run_id, 0, "bootstrap", "policy", work / "policy")


def _configs(max_tokens: int) -> dict[str, TrainConfig]:
    padded = TrainConfig(lr=1e-4, update_per_step=4, micro_batch_size=8, max_tokens_per_micro_batch=None)
    return {"padded": padded, "packed": padded.model_copy(update={"max_tokens_per_micro_batch": max_tokens})}


def _rss_mib() -> float:
    """This process's resident set now (MiB), from /proc/self/statm."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_child(model: str, rows: bytes, cfg: str, out: str, threads: int, queue: Any) -> None:
    """One update in a fresh process; reports its RSS before the update and the peak (sampled every 2 ms)
    during it, in MiB: the peak's excess over the start is what the update's tensors took."""
    import io
    import threading

    torch.set_num_threads(threads)
    frame = pl.read_parquet(io.BytesIO(rows))
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(model)  # imports and one load before the baseline
    base = peak = _rss_mib()
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.002):
            peak = max(peak, _rss_mib())

    sampler = threading.Thread(target=sample)
    sampler.start()
    cfg_ = TrainConfig.model_validate_json(cfg)
    rl_update(Path(model), frame, cfg=cfg_, out_dir=Path(out), seed=0, lora=LoraConfig())
    done.set()
    sampler.join()
    queue.put((base, peak))


def peak_rss(
    model: Path, rows: pl.DataFrame, cfg: TrainConfig, out: Path, threads: int
) -> tuple[float, float]:
    import io

    buf = io.BytesIO()
    rows.write_parquet(buf)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    args = (str(model), buf.getvalue(), cfg.model_dump_json(), str(out), threads, queue)
    proc = ctx.Process(target=_peak_rss_child, args=args)
    proc.start()
    result: tuple[float, float] = queue.get(timeout=1800)
    proc.join()
    return result


def forward_timing(model_dir: Path, rows: pl.DataFrame, repeats: int) -> dict[str, float]:
    """CPU seconds of forward + backward over the update's micro-batches (8 rows, file order), median of
    ``repeats`` interleaved rounds after one warm-up, in three layouts of the same rows:

    - ``before``: what the trainer did before this change, replicated: right-padded rows and logits at
      every position of the padded width, padding included (each row padded with id 0 to the width);
    - ``padded``: right-padded, logits at response positions only (``logits_to_keep``);
    - ``packed``: packed (packs as long as the micro-batch's longest row), logits at response positions.
    """
    from transformers import AutoTokenizer

    from rla_core.models.checkpoints import load_fp32
    from rla_core.models.logprobs import scored_token_logps
    from rla_core.models.packing import lay_out, layout_rows
    from rla_core.models.rows import TrainRow, prepare_rl_rows

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prepared, _ = prepare_rl_rows(rows, tokenizer, TrainConfig())
    model = load_fp32(model_dir)
    model.train()
    batches = [prepared[i : i + 8] for i in range(0, len(prepared), 8)]

    def before(batch: list[TrainRow]) -> Any:
        width = max(len(r.prompt_ids) + len(r.response_ids) for r in batch)
        seqs = [r.prompt_ids + r.response_ids for r in batch]
        return lay_out([s + [0] * (width - len(s)) for s in seqs], [1] * len(batch), pack_len=None)

    layouts = {
        "before": [before(b) for b in batches],
        "padded": [layout_rows(b, packed=False) for b in batches],
        "packed": [layout_rows(b, packed=True) for b in batches],
    }
    times: dict[str, list[float]] = {k: [] for k in layouts}
    for _ in range(repeats + 1):
        for name, per_batch in layouts.items():
            start = time.process_time()
            for batch, layout in zip(batches, per_batch, strict=True):
                logps, mask = scored_token_logps(model, layout, batch, "cpu")
                (logps * mask).sum().backward()
            times[name].append(time.process_time() - start)
    return {k: statistics.median(v[1:]) for k, v in times.items()}


def bench_source(
    name: str, rows: pl.DataFrame, model: Path, args: argparse.Namespace, work: Path, *, drills: bool = False
) -> dict[str, Any]:
    """``drills``: the rows are reading drills, trained as the warm start trains them (SFT only: batches of
    16, prompt tokens in the loss at weight 0.25, cosine schedule); otherwise update and plain SFT."""
    from rla_core.settings.warm_start import READING_BATCH_SIZE, READING_PROMPT_WEIGHT

    cfgs = _configs(args.max_tokens)
    demos = rows.drop("advantage") if "advantage" in rows.columns else rows
    recipe = {"batch_size": READING_BATCH_SIZE, "prompt_weight": READING_PROMPT_WEIGHT, "cosine": True}
    update: dict[str, list[dict[str, float]]] = {k: [] for k in cfgs}
    warm: dict[str, list[dict[str, float]]] = {k: [] for k in cfgs}
    for repeat in range(args.repeats + 1):  # the first round warms up and is dropped
        for path, cfg in cfgs.items():
            if not drills:
                cpu = time.process_time()
                m = rl_update(
                    model,
                    rows,
                    cfg=cfg,
                    out_dir=work / f"{name}-rl-{path}-{repeat}",
                    seed=0,
                    lora=LoraConfig(),
                )
                update[path].append({**m, "cpu_s": time.process_time() - cpu})
            cpu = time.process_time()
            s = sft(
                model, demos, out_dir=work / f"{name}-sft-{path}-{repeat}", epochs=1, lr=1e-4, seed=0,
                max_tokens_per_micro_batch=cfg.max_tokens_per_micro_batch, **(recipe if drills else {}),
            )  # fmt: skip
            warm[path].append({**s, "cpu_s": time.process_time() - cpu})
    if drills:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
        tokens = sum(
            len(tokenizer(p + r, add_special_tokens=False)["input_ids"]) + 1
            for p, r in demos.select("prompt", "response").iter_rows()
        )
        return {
            "rows": demos.height,
            "tokens": tokens,
            "load": os.getloadavg()[0],
            "sft": _summary(warm, tokens),
        }
    from transformers import AutoTokenizer

    from rla_core.models.rows import prepare_rl_rows

    tokenizer = AutoTokenizer.from_pretrained(model)
    prepared, _ = prepare_rl_rows(rows, tokenizer, cfgs["padded"])
    tokens = sum(len(r.prompt_ids) + len(r.response_ids) for r in prepared)
    sft_tokens = tokens + len(prepared)  # + EOS per row
    out: dict[str, Any] = {"rows": len(prepared), "tokens": tokens, "load": os.getloadavg()[0]}
    out["update"], out["sft"] = _summary(update, tokens), _summary(warm, sft_tokens)
    if args.forward:
        t = forward_timing(model, rows, args.repeats)
        out["forward_cpu_s"] = {k: round(v, 3) for k, v in t.items()} | {
            "speedup_logits_to_keep": round(t["before"] / t["padded"], 3),
            "speedup_packing": round(t["padded"] / t["packed"], 3),
            "speedup_both": round(t["before"] / t["packed"], 3),
        }
    if args.memory:
        out["peak_rss_mib"] = {}
        for path, cfg in cfgs.items():
            base, peak = peak_rss(model, rows, cfg, work / f"{name}-mem-{path}", args.threads)
            out["peak_rss_mib"][path] = {
                "before": round(base),
                "peak": round(peak),
                "update": round(peak - base),
            }
    return out


def _summary(runs: dict[str, list[dict[str, float]]], tokens: int) -> dict[str, float]:
    """Medians over the timed rounds (the first, a warm-up, dropped) of each path, and their ratios."""
    loop = {k: statistics.median(m["loop_s"] for m in v[1:]) for k, v in runs.items()}
    cpu = {k: statistics.median(m["cpu_s"] for m in v[1:]) for k, v in runs.items()}
    return {
        "padded_cpu_s": round(cpu["padded"], 3), "packed_cpu_s": round(cpu["packed"], 3),
        "speedup_cpu": round(cpu["padded"] / cpu["packed"], 3),
        "padded_loop_s": round(loop["padded"], 3), "packed_loop_s": round(loop["packed"], 3),
        "padded_tokens_s": round(tokens / loop["padded"]), "packed_tokens_s": round(tokens / loop["packed"]),
        "speedup": round(loop["padded"] / loop["packed"], 3),
        "padded_padding_share": round(runs["padded"][-1]["padding_share"], 3),
        "packed_padding_share": round(runs["packed"][-1]["padding_share"], 3),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="artifact root of a finished run")
    parser.add_argument("--run", help="its run id (rows from its last policy_samples)")
    parser.add_argument("--rows", type=int, default=64, help="synthetic rows per source")
    parser.add_argument("--max-tokens", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--forward", action="store_true", help="also time forward + backward per layout")
    parser.add_argument("--memory", action="store_true", help="also measure peak RSS in fresh processes")
    parser.add_argument("--sources", default="run,wide,skewed,narrow", help="also: drills (needs --run)")
    parser.add_argument("--drills", type=int, default=512, help="reading drills of the drills source")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from rla_core.models.bootstrap import ensure_tiny_model

    results: dict[str, Any] = {"max_tokens": args.max_tokens, "threads": args.threads}
    with tempfile.TemporaryDirectory(prefix="bench-packing-") as tmp:
        work = Path(tmp)
        sources: dict[str, tuple[pl.DataFrame, Path]] = {}
        for name in args.sources.split(","):
            if name == "run" and args.run:
                sources[f"run {args.run}"] = from_run(args.root, args.run, work / args.run)
            elif name == "drills" and args.run:
                from rla_core.envs.demos import reading_drills

                rows, model = from_run(args.root, args.run, work / f"{args.run}-drills")
                prompts = sorted(set(rows["prompt"].to_list()))
                sources[f"drills {args.run}"] = (reading_drills(prompts, n=args.drills, seed=0), model)
            elif name in SYNTHETIC:
                rows = pl.concat(
                    [
                        synthetic(round(args.rows * share), p, r, seed=i)
                        for i, (share, p, r) in enumerate(SYNTHETIC[name])
                    ]
                )
                rows = rows.sample(fraction=1.0, shuffle=True, seed=0)  # the long rows spread over the file
                corpus = rows["prompt"].to_list() + rows["response"].to_list()
                sources[name] = (rows, ensure_tiny_model("policy", corpus=corpus, cache_dir=work / "models"))
        for name, (rows, model) in sources.items():
            print(f"{name}: {rows.height} rows, load average {os.getloadavg()[0]:.1f}", flush=True)
            drills = name.startswith("drills")
            results[name] = bench_source(name.replace(" ", "-"), rows, model, args, work, drills=drills)
            print(json.dumps(results[name]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
