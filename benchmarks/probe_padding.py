"""Where the trainer's forward passes spend their positions, in finished runs: padding, prompt, response.

For each run (``--root`` and run ids; e.g. short runs of the shipped presets, ``--set iterations=1``) this
reads what the run's own stages wrote and lays it out exactly as the trainer does, without training:

- **update**: the last iteration's ``policy_samples`` and ``reward_samples`` (label stage), tokenised by
  the run's bootstrapped checkpoints as ``rl_update`` tokenises them (``prepare_rl_rows``, images through
  the checkpoint's processor for vision-language runs), cut by ``plan_micro_batches`` with the run's
  ``training.policy`` / ``training.reward`` settings (one process);
- **warm start**: the demonstrations the run's setting adapter builds for the bootstrap stage (and the
  reading drills, when the run has them), in the batches of SFT's first epoch (its seeded shuffle).

Each micro-batch is laid out right-padded (the trainer before packing) and packed
(``--max-tokens``; :mod:`rla_core.models.packing`). Printed per run and part: rows, micro-batches, the
padding share of the padded layout's positions, the split of the padded path's logit positions (each row
computed W - 1 of them: prompt, response, padding; before ``logits_to_keep`` every one went through the
lm_head and log-softmax), and the padding share left by packing. ``--json`` writes the same as JSON.

Run: PYTHONPATH=. .venv/bin/python benchmarks/probe_padding.py --root /tmp/runs default coding gui ...
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import torch

from rla_core.models.packing import cut_micro_batches, layout_rows
from rla_core.models.rows import TrainRow, prepare_rl_rows, prompt_token_ids, row_images, vision_for
from rla_core.models.update import plan_micro_batches

READING_BATCH, DEMO_BATCH = 16, 8  # rla_core.settings.warm_start.READING_BATCH_SIZE, sft.SFT_BATCH_SIZE


@dataclass
class Shares:
    """What the forward passes of one part of a run computed (sums over its micro-batches)."""

    rows: int = 0
    micro_batches: int = 0
    tokens: int = 0  # Σ row lengths
    padded_slots: int = 0  # Σ B·W
    prompt_logits: int = 0  # Σ (p - 1): positions predicting a prompt token
    response_logits: int = 0  # Σ n: positions predicting a response token
    logit_positions: int = 0  # Σ B·(W - 1): what logits[:, :-1] computed before logits_to_keep
    packed_slots: int = 0  # Σ P·L of the packed layouts

    def add(self, batch: list[TrainRow]) -> None:
        """One padded micro-batch (the trainer before packing)."""
        padded = layout_rows(batch, packed=False)
        width = padded.ids.shape[1]
        self.rows += len(batch)
        self.micro_batches += 1
        self.tokens += padded.tokens
        self.padded_slots += padded.slots
        self.prompt_logits += sum(len(r.prompt_ids) - 1 for r in batch)
        self.response_logits += sum(len(r.response_ids) for r in batch)
        self.logit_positions += len(batch) * (width - 1)

    def add_packed(self, batch: list[TrainRow]) -> None:
        """One packed micro-batch (its own cut: a token budget may cut other micro-batches)."""
        self.packed_slots += layout_rows(batch, packed=True).slots

    def summary(self) -> dict[str, float]:
        return {
            "rows": self.rows,
            "micro_batches": self.micro_batches,
            "tokens": self.tokens,
            "padding_share": round(1 - self.tokens / self.padded_slots, 3),
            "prompt_logit_share": round(self.prompt_logits / self.logit_positions, 3),
            "response_logit_share": round(self.response_logits / self.logit_positions, 3),
            "padding_logit_share": round(
                1 - (self.prompt_logits + self.response_logits) / self.logit_positions, 3
            ),
            "packed_padding_share": round(1 - self.tokens / self.packed_slots, 3),
        }


def update_shares(rows: pl.DataFrame, checkpoint: Path, train: Any, max_tokens: int) -> Shares:
    """The update's micro-batches of ``rows`` (one process), as ``rl_update`` cuts them."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    vision = vision_for(checkpoint, rows, tokenizer, what="probe rows")
    prepared, _ = prepare_rl_rows(rows, tokenizer, train, vision)
    out = Shares()
    if not prepared:
        return out
    lengths = [len(r.prompt_ids) + len(r.response_ids) for r in prepared]
    group = math.ceil(len(prepared) / train.update_per_step)
    for step in plan_micro_batches(lengths, group, train.micro_batch_size, 0, 1):
        for micro in step:
            out.add([prepared[i] for i, _ in micro])
    for step in plan_micro_batches(lengths, group, train.micro_batch_size, 0, 1, max_tokens=max_tokens):
        for micro in step:
            out.add_packed([prepared[i] for i, _ in micro])
    return out


def sft_shares(rows: pl.DataFrame, checkpoint: Path, *, batch: int, seed: int, max_tokens: int) -> Shares:
    """SFT's first epoch over ``rows`` (prompt + response + EOS, its seeded shuffle), ``batch`` rows a step
    (one padded pass, or packed passes of at most ``max_tokens`` tokens)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    vision = vision_for(checkpoint, rows, tokenizer, what="probe rows")
    prepared = [
        TrainRow(
            prompt_token_ids(p, images, tokenizer, vision),
            [*tokenizer(r, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id], 1.0, images,
        )
        for p, r, images in zip(rows["prompt"].to_list(), rows["response"].to_list(), row_images(rows), strict=True)
    ]  # fmt: skip
    order = torch.randperm(len(prepared), generator=torch.Generator().manual_seed(seed)).tolist()
    out = Shares()
    for start in range(0, len(order), batch):
        part = [prepared[i] for i in order[start : start + batch]]
        out.add(part)
        lengths = [len(r.prompt_ids) + len(r.response_ids) for r in part]
        for cut in cut_micro_batches(lengths, rows=len(part), max_tokens=max_tokens):
            out.add_packed([part[i] for i in cut])
    return out


def probe_run(
    root: str, run_id: str, max_tokens: int, work: Path, *, warm_start: bool
) -> dict[str, dict[str, float]]:
    from flows.runs import load_run_config
    from rla_core.envs.demos import reading_drills
    from rla_core.settings import adapter_of
    from rla_core.settings.warm_start import format_image_rows
    from rla_core.stage_inputs import BootstrapInputs
    from rla_core.store import ArtifactStore
    from tasks.stage import stage_seed

    store = ArtifactStore(root)
    cfg = load_run_config(store, run_id)
    ckpt = {
        role: store.get_dir(run_id, 0, "bootstrap", role, work / run_id / role)
        for role in ("policy", "reward")
    }
    labelled = max(it for (it, stage) in store.committed(run_id) if stage == "label")
    frames = {}
    for name in ("policy_samples", "reward_samples", "rollouts"):
        stage = "rollout" if name == "rollouts" else "label"
        rows = store.read_frame(run_id, labelled, stage, name)
        if "images" in rows.columns and rows["images"].null_count() < rows.height:
            files = store.get_dir(run_id, labelled, "rollout", "files", work / run_id / "side" / "files")
            rows = rows.with_columns(pl.col("images").list.eval(pl.lit(f"{files.parent}/") + pl.element()))
        frames[name] = rows
    policy_part, policy_rows = "update policy", frames["policy_samples"]
    if policy_rows.height == 0:
        # No row passed the band (e.g. an untrained policy that never wins): the steps it played, as rows.
        policy_part = "update policy (no row in the band: the rollout's steps instead)"
        policy_rows = (
            frames["rollouts"]
            .select("prompt", "response", *(["images"] if "images" in frames["rollouts"].columns else []))
            .with_columns(advantage=pl.lit(1.0))
        )
    out = {
        policy_part: update_shares(policy_rows, ckpt["policy"], cfg.training.policy, max_tokens),
        "update reward": update_shares(
            frames["reward_samples"], ckpt["reward"], cfg.training.reward, max_tokens
        ),
    }
    if not (warm_start or cfg.models.warm_start):
        return {part: shares.summary() for part, shares in out.items() if shares.rows}
    inputs = BootstrapInputs.from_config(cfg)
    seed = cfg.models.warm_start_seed
    seed = stage_seed(cfg.seed, 0, "bootstrap") if seed is None else seed
    data = adapter_of(inputs).warm_start(inputs, seed=seed, workdir=work / run_id / "demos")
    chat = cfg.models.serving.chat_template
    if cfg.models.policy_reading_drills > 0:
        prompts = sorted(set(data.policy_rows["prompt"].to_list()))
        drills = reading_drills(prompts, n=cfg.models.policy_reading_drills, seed=seed)
        # The drills' loss counts prompt tokens (weight 0.25): their prompt logits stay computed.
        out["warm start policy reading drills (prompt in the loss)"] = sft_shares(
            drills, ckpt["policy"], batch=READING_BATCH, seed=seed, max_tokens=max_tokens
        )
    for role, rows, epochs in (
        ("policy", data.policy_rows, cfg.models.warm_start_epochs),
        ("reward", data.reward_rows, cfg.models.reward_warm_start_epochs or cfg.models.warm_start_epochs),
    ):
        if epochs > 0 and rows.height:
            rows = format_image_rows(ckpt[role], rows, chat=chat)
            out[f"warm start {role}"] = sft_shares(
                rows, ckpt[role], batch=DEMO_BATCH, seed=seed, max_tokens=max_tokens
            )
    return {part: shares.summary() for part, shares in out.items() if shares.rows}  # empty: nothing ran


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="artifact root of the runs")
    parser.add_argument("runs", nargs="+", help="run ids")
    parser.add_argument("--max-tokens", type=int, default=8192, help="packed micro-batch budget")
    parser.add_argument("--json", type=Path, help="also write the table as JSON here")
    parser.add_argument(
        "--warm-start",
        action="store_true",
        help="probe the warm start's rows even where the run turned models.warm_start off (a run made "
        "without one to save time: its update rows come from an untrained policy, its warm-start rows "
        "are built here as the preset's would be)",
    )
    args = parser.parse_args()
    results: dict[str, Any] = {}
    header = ("run", "part", "rows", "micro-batches", "tokens", "padding", "logits: prompt", "response",
              "padding", "packed: padding")  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    with tempfile.TemporaryDirectory(prefix="probe-padding-") as tmp:
        for run_id in args.runs:
            results[run_id] = probe_run(
                args.root, run_id, args.max_tokens, Path(tmp), warm_start=args.warm_start
            )
            for part, s in results[run_id].items():
                cells = (run_id, part, s["rows"], s["micro_batches"], s["tokens"], s["padding_share"],
                         s["prompt_logit_share"], s["response_logit_share"], s["padding_logit_share"],
                         s["packed_padding_share"])  # fmt: skip
                print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"max_tokens": args.max_tokens, "runs": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
