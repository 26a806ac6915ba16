"""Supervised fine-tuning: the warm start of the tiny models on demonstrations (and reading drills)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import polars as pl

from rla_core import progress
from rla_core.errors import ModelError
from rla_core.models.checkpoints import (
    copy_checkpoint,
    load_model,
    save_checkpoint,
    write_checkpoint_atomically,
)
from rla_core.models.logprobs import weighted_nll_sum
from rla_core.models.packing import cut_micro_batches, layout_rows, varlen_attention
from rla_core.models.rows import (
    TrainRow,
    context_limit,
    prompt_token_ids,
    require_columns,
    row_images,
    vision_for,
)

SFT_BATCH_SIZE = 8


SFT_GRAD_CLIP = 1.0


SFT_WARMUP_STEPS = 100  # linear warm-up of sft(cosine=True)


def sft(
    model_dir: Path,
    rows: pl.DataFrame,
    *,
    out_dir: Path,
    epochs: int,
    lr: float,
    seed: int,
    batch_size: int = SFT_BATCH_SIZE,
    prompt_weight: float = 0.0,
    cosine: bool = False,
    max_tokens_per_micro_batch: int | None = None,
) -> dict[str, float]:
    """Supervised fine-tuning (warm start) on demonstrations; writes a checkpoint to ``out_dir``.

    Reads columns ``prompt`` and ``response``, and ``images`` when present (as :func:`rl_update`: the
    demonstration's prompt is then shown with its screenshots). Each row is ``prompt + response + EOS``; the loss is the
    token-mean cross-entropy over response and EOS tokens, so the model learns to answer and stop.
    With ``prompt_weight > 0`` the prompt tokens count too, each with that weight (language modelling of
    the prompt: it helps a model trained from scratch learn to copy from its context). Batches of
    ``batch_size`` rows, shuffled per epoch with ``seed``; AdamW(``lr``), grad-norm clip 1.0; with
    ``cosine`` the learning rate warms up linearly over :data:`SFT_WARMUP_STEPS` steps and then follows a
    cosine to 0. Rows longer than the model's context are dropped (counted). No rows or ``epochs=0`` copy
    the checkpoint (noop=1).

    With ``max_tokens_per_micro_batch`` each step's rows are packed (:mod:`rla_core.models.packing`) into
    forward passes of at most that many tokens (a longer row alone), whose gradients add up to the step's:
    each pass's weighted NLL sum is divided by the whole step's weight, so the loss is the same token mean.
    Without it a step is one right-padded forward pass. Either way logits are computed only at the
    positions in the loss.

    Returns metrics: loss (last epoch mean), first_loss (first epoch mean), rows_in, rows_used,
    rows_dropped_too_long, optimizer_steps, padding_share (of the positions the forward passes computed),
    loop_s (seconds of the epochs), noop.
    """
    import torch

    require_columns(rows, ("prompt", "response"), "sft")
    if epochs < 0 or not (0.0 < lr < 1.0) or batch_size < 1 or prompt_weight < 0:
        raise ModelError(
            f"sft needs epochs >= 0, 0 < lr < 1, batch_size >= 1 and prompt_weight >= 0, got "
            f"epochs={epochs}, lr={lr}, batch_size={batch_size}, prompt_weight={prompt_weight}"
        )
    model, tokenizer = load_model(model_dir)
    vision = vision_for(Path(model_dir), rows, tokenizer, what="sft rows")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ModelError(f"tokenizer of {model_dir} has no EOS token: SFT must teach the model to stop")
    limit = context_limit(model.config)
    prepared: list[TrainRow] = []
    too_long = 0
    for prompt, response, images in zip(
        rows["prompt"].to_list(), rows["response"].to_list(), row_images(rows), strict=True
    ):
        p_ids = prompt_token_ids(prompt, images, tokenizer, vision)
        r_ids = [*tokenizer(response, add_special_tokens=False)["input_ids"], eos]
        if len(p_ids) + len(r_ids) > limit or not p_ids:
            too_long += 1
            continue
        prepared.append(TrainRow(p_ids, r_ids, 1.0, images))
    metrics = {
        "rows_in": float(rows.height),
        "rows_used": float(len(prepared)),
        "rows_dropped_too_long": float(too_long),
    }
    if not prepared or epochs == 0:
        write_checkpoint_atomically(out_dir, lambda tmp: copy_checkpoint(Path(model_dir), tmp))
        return {**metrics, "noop": 1.0, "optimizer_steps": 0.0}

    device = next(model.parameters()).device
    packed, varlen = max_tokens_per_micro_batch is not None, varlen_attention(model)
    epoch_losses: list[float] = []
    steps = 0
    row_tokens = slots = 0
    started = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        batches = math.ceil(len(prepared) / batch_size)
        total_steps = epochs * batches
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: (
                min(1.0, (step + 1) / SFT_WARMUP_STEPS) * 0.5 * (1 + math.cos(math.pi * step / total_steps))
                if cosine
                else 1.0
            ),
        )
        model.train()
        counter = progress.start("SFT", total=total_steps, unit="optimizer steps")
        for _ in range(epochs):
            order = torch.randperm(len(prepared), generator=gen).tolist()
            total, count = 0.0, 0
            for start in range(0, len(order), batch_size):
                batch = [prepared[i] for i in order[start : start + batch_size]]
                lengths = [len(r.prompt_ids) + len(r.response_ids) for r in batch]
                # The step's loss weight, known before any pass: response tokens 1, prompt tokens after
                # the first prompt_weight (weighted_nll_sum's weights).
                step_weight = sum(
                    len(r.response_ids)
                    + (prompt_weight * (len(r.prompt_ids) - 1) if prompt_weight > 0 else 0)
                    for r in batch
                )
                loss = 0.0
                for part in cut_micro_batches(
                    lengths, rows=len(batch), max_tokens=max_tokens_per_micro_batch
                ):
                    in_pass = [batch[i] for i in part]
                    layout = layout_rows(
                        in_pass, packed=packed, varlen=varlen, score_prompt=prompt_weight > 0
                    )
                    nll, _ = weighted_nll_sum(model, layout, in_pass, device, prompt_weight, vision)
                    part_loss = nll / step_weight
                    part_loss.backward()
                    loss += float(part_loss.detach())
                    row_tokens, slots = row_tokens + layout.tokens, slots + layout.slots
                torch.nn.utils.clip_grad_norm_(model.parameters(), SFT_GRAD_CLIP)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                steps += 1
                counter.advance(1, rows=len(batch))
                total += loss * len(batch)
                count += len(batch)
            epoch_losses.append(total / count)
        counter.finish()
    loop_s = time.perf_counter() - started
    write_checkpoint_atomically(
        out_dir, lambda tmp: save_checkpoint(model, tokenizer, tmp, source=Path(model_dir))
    )
    return {
        **metrics,
        "loss": epoch_losses[-1],
        "first_loss": epoch_losses[0],
        "optimizer_steps": float(steps),
        "padding_share": 1.0 - row_tokens / slots,
        "loop_s": loop_s,
        "noop": 0.0,
    }
