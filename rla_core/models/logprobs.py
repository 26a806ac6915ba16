"""Log-probabilities of responses given prompts (and their images): the update's logπ, and measurements.

:func:`response_token_logps` is the one forward pass every trainer path scores with (the RL update,
SFT, and the measurement helpers here), so a measurement equals what the update computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from rla_core.errors import ModelError
from rla_core.models.checkpoints import load_model
from rla_core.models.multimodal import (
    VisionProcessor,
)
from rla_core.models.rows import TrainRow, prompt_token_ids, require_columns, row_images, vision_for


def response_logprobs(model_dir: Path, prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
    """Mean per-token log-probability of each response given its prompt (no EOS added).

    A measurement helper (e.g. "did the update raise the likelihood of positively rewarded responses").
    """
    import torch
    from trl.trainer.utils import selective_log_softmax

    model, tokenizer = load_model(model_dir)
    rows = [
        TrainRow(
            tokenizer(p, add_special_tokens=False)["input_ids"],
            tokenizer(r, add_special_tokens=False)["input_ids"],
            0.0,
        )
        for p, r in zip(prompts, responses, strict=True)
    ]
    if any(not r.prompt_ids or not r.response_ids for r in rows):
        raise ModelError("response_logprobs needs a non-empty prompt and response in every pair")
    model.eval()
    with torch.no_grad():
        logps, mask = response_token_logps(
            model, rows, next(model.parameters()).device, selective_log_softmax
        )
    return ((logps * mask).sum(-1) / mask.sum(-1)).tolist()


def token_logprobs(model_dir: Path, rows: pl.DataFrame, *, micro_batch_size: int = 8) -> list[list[float]]:
    """Per-token log-probabilities of each row's response given its prompt (and its images), as the
    update computes them (spec §4's logπ): the same tokenisation as :func:`rl_update` (columns
    ``prompt``, ``response``, optional ``images``; no truncation) and the same forward pass, fp32, in
    micro-batches of ``micro_batch_size`` rows. ``result[i][t]`` is log p(response token t | prompt,
    images, response tokens < t) of row i.

    Example:
        >>> token_logprobs(ckpt, pl.DataFrame({"prompt": [p], "response": [" click 3"], "images": [[png]]}))
    """
    import torch
    from trl.trainer.utils import selective_log_softmax

    require_columns(rows, ("prompt", "response"), "token_logprobs")
    if micro_batch_size < 1:
        raise ModelError(f"micro_batch_size={micro_batch_size}: must be at least 1")
    model, tokenizer = load_model(model_dir)
    vision = vision_for(Path(model_dir), rows, tokenizer, what="token_logprobs rows")
    prepared = []
    for i, (prompt, response, images) in enumerate(
        zip(rows["prompt"].to_list(), rows["response"].to_list(), row_images(rows), strict=True)
    ):
        row = TrainRow(
            prompt_token_ids(prompt, images, tokenizer, vision),
            tokenizer(response, add_special_tokens=False)["input_ids"], 0.0, images,
        )  # fmt: skip
        if not row.prompt_ids or not row.response_ids:
            raise ModelError(f"token_logprobs row {i}: the prompt and the response must both have tokens")
        prepared.append(row)
    model.eval()
    out: list[list[float]] = []
    device = next(model.parameters()).device
    with torch.no_grad():
        for start in range(0, len(prepared), micro_batch_size):
            batch = prepared[start : start + micro_batch_size]
            logps, _ = response_token_logps(model, batch, device, selective_log_softmax, vision)
            out.extend(logps[i, : len(r.response_ids)].tolist() for i, r in enumerate(batch))
    return out


def weighted_sequence_nll(
    model: Any,
    batch: Sequence[TrainRow],
    device: Any,
    prompt_weight: float,
    vision: VisionProcessor | None = None,
) -> Any:
    """Weighted token-mean NLL of whole rows: response tokens weigh 1, prompt tokens ``prompt_weight``."""
    import torch

    seqs = [r.prompt_ids + r.response_ids for r in batch]
    ids, attn = pad_right(seqs)
    weight = torch.zeros(ids.shape)
    for i, (r, s) in enumerate(zip(batch, seqs, strict=True)):
        weight[i, : len(r.prompt_ids)] = prompt_weight
        weight[i, len(r.prompt_ids) : len(s)] = 1.0
    ids, attn, weight = ids.to(device), attn.to(device), weight[:, 1:].to(device)
    logits = model_forward(model, ids, attn, batch, vision).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    ).view_as(weight)
    return (nll * weight).sum() / weight.sum()


def pad_right(seqs: Sequence[list[int]]) -> tuple[Any, Any]:
    """Token id rows right-padded with 0 to the longest: ids and attention mask, both (B, W) long."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
    return ids, attn


def model_forward(
    model: Any, ids: Any, attn: Any, batch: Sequence[TrainRow], vision: VisionProcessor | None
) -> Any:
    """``model``'s output for the right-padded rows ``ids``; rows with images get their pixels (read from
    the files now, in row order) and the per-token modality, as at generation. A text batch: ids only."""
    if not any(r.images for r in batch):
        return model(input_ids=ids, attention_mask=attn)
    if vision is None:
        raise ModelError("training rows carry images but no VisionProcessor was given: pass vision=")
    images = [ref for r in batch for ref in r.images]
    pixels = vision.pixels(images, prompt=f"{len(batch)} training rows")
    return model(
        input_ids=ids, attention_mask=attn, mm_token_type_ids=vision.token_types(ids),
        **{k: v.to(ids.device) for k, v in pixels.items()},
    )  # fmt: skip


def response_token_logps(
    model: Any,
    batch: Sequence[TrainRow],
    device: Any,
    selective_log_softmax: Any,
    vision: VisionProcessor | None = None,
) -> tuple[Any, Any]:
    """Log-probs of each row's response tokens, right-padded: (B, T_resp_max) and its mask."""
    import torch

    ids, attn = pad_right([r.prompt_ids + r.response_ids for r in batch])
    ids, attn = ids.to(device), attn.to(device)
    logits = model_forward(model, ids, attn, batch, vision).logits[:, :-1]
    token_logps = selective_log_softmax(logits, ids[:, 1:])  # position j predicts token j+1
    resp_width = max(len(r.response_ids) for r in batch)
    out = torch.zeros((len(batch), resp_width), dtype=token_logps.dtype, device=device)
    mask = torch.zeros((len(batch), resp_width), dtype=token_logps.dtype, device=device)
    for i, r in enumerate(batch):
        p, n = len(r.prompt_ids), len(r.response_ids)
        out[i, :n] = token_logps[i, p - 1 : p - 1 + n]
        mask[i, :n] = 1.0
    return out, mask
