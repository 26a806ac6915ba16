"""Log-probabilities of responses given prompts (and their images): the update's logπ, and measurements.

:func:`scored_token_logps` is the one forward pass every trainer path scores with (the RL update, SFT,
and the measurement helpers here), so a measurement equals what the update computed. It takes a
:class:`~rla_core.models.packing.Layout` (right-padded or packed rows) and computes logits only at the
positions whose next token is scored (transformers' ``logits_to_keep``): the prompt's positions cost no
lm_head and no log-softmax unless the prompt is in the loss.
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
from rla_core.models.packing import Layout, layout_rows
from rla_core.models.rows import TrainRow, prompt_token_ids, require_columns, row_images, vision_for


def response_logprobs(model_dir: Path, prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
    """Mean per-token log-probability of each response given its prompt (no EOS added).

    A measurement helper (e.g. "did the update raise the likelihood of positively rewarded responses").
    """
    import torch

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
        logps, mask = response_token_logps(model, rows, next(model.parameters()).device)
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
            logps, _ = response_token_logps(model, batch, device, vision)
            out.extend(logps[i, : len(r.response_ids)].tolist() for i, r in enumerate(batch))
    return out


def weighted_nll_sum(
    model: Any,
    layout: Layout,
    batch: Sequence[TrainRow],
    device: Any,
    prompt_weight: float,
    vision: VisionProcessor | None = None,
) -> tuple[Any, float]:
    """Σ weight·NLL over the scored tokens of ``layout`` (of ``batch``), and Σ weight: response tokens
    weigh 1, prompt tokens after the first (which nothing predicts) ``prompt_weight``.

    ``layout`` scores the prompt when ``prompt_weight > 0`` (``layout_rows(..., score_prompt=True)``),
    the response only otherwise (the prompt's positions then get no logits at all). The ratio of the two is
    :func:`weighted_sequence_nll`; SFT sums the first over a step's forward passes and divides by the
    step's total weight, so cutting a step into passes leaves its token mean unchanged.
    """
    import torch

    logps, mask = scored_token_logps(model, layout, batch, device, vision)
    weight = mask
    if prompt_weight > 0:
        # Row b's scored tokens are tokens 1..end: the first p_b - 1 of them are prompt tokens.
        cols = torch.arange(mask.shape[1], device=mask.device)[None, :]
        prompt = torch.tensor([len(r.prompt_ids) - 1 for r in batch], device=mask.device)[:, None]
        weight = torch.where(cols < prompt, prompt_weight, 1.0) * mask
    return -(logps * weight).sum(), float(weight.sum())


def weighted_sequence_nll(
    model: Any,
    batch: Sequence[TrainRow],
    device: Any,
    prompt_weight: float,
    vision: VisionProcessor | None = None,
    *,
    packed: bool = False,
) -> Any:
    """Weighted token-mean NLL of whole rows: response tokens weigh 1, prompt tokens ``prompt_weight``."""
    layout = layout_rows(batch, packed=packed, score_prompt=prompt_weight > 0)
    total, weight = weighted_nll_sum(model, layout, batch, device, prompt_weight, vision)
    return total / weight


def model_forward(
    model: Any, layout: Layout, batch: Sequence[TrainRow], device: Any, vision: VisionProcessor | None
) -> Any:
    """``model``'s logits at ``layout.keep``'s positions, (K, vocabulary) in ``keep``'s row-major order.

    The rows of ``batch`` as ``layout`` places them (:mod:`rla_core.models.packing`): right-padded with an
    attention mask, or packed with restarting positions and no mask. Always ``use_cache=False``: with a
    cache transformers skips its packed-row detection and packed rows would attend across boundaries.
    Rows with images (always padded) get their pixels (read from the files now, in row order) and the
    per-token modality, as at generation.
    """
    ids = layout.ids.to(device)
    inputs: dict[str, Any] = {"input_ids": ids, "use_cache": False, "logits_to_keep": layout.keep.to(device)}
    if layout.attention_mask is not None:
        inputs["attention_mask"] = layout.attention_mask.to(device)
    if layout.positions is not None:
        inputs["position_ids"] = layout.positions.to(device)
    if any(r.images for r in batch):
        if vision is None:
            raise ModelError("training rows carry images but no VisionProcessor was given: pass vision=")
        if layout.packed:
            raise ModelError("rows with images are laid out right-padded (packing.layout_rows), not packed")
        pixels = vision.pixels([ref for r in batch for ref in r.images], prompt=f"{len(batch)} training rows")
        inputs |= {
            "mm_token_type_ids": vision.token_types(ids),
            **{k: v.to(device) for k, v in pixels.items()},
        }
    return model(**inputs).logits


def scored_token_logps(
    model: Any, layout: Layout, batch: Sequence[TrainRow], device: Any, vision: VisionProcessor | None = None
) -> tuple[Any, Any]:
    """Log-probs of each row's scored tokens (``layout``'s), right-padded: (B, T) with T = max widths, and
    its (B, T) mask (1.0 on scored tokens). Whatever the layout, row b's values sit in row b."""
    import torch
    from trl.trainer.utils import selective_log_softmax

    logits = model_forward(model, layout, batch, device, vision)
    # One (1, K, V) call: TRL's fp32 path loops over the leading dimension.
    logps = selective_log_softmax(logits[None], layout.targets.to(logits.device)[None])[0]
    shape = (len(layout.widths), max(layout.widths))
    where = (layout.row_of.to(logps.device), layout.col_of.to(logps.device))
    out = logps.new_zeros(shape).index_put(where, logps)
    mask = logps.new_zeros(shape).index_put(where, torch.ones_like(logps))
    return out, mask


def response_token_logps(
    model: Any,
    batch: Sequence[TrainRow],
    device: Any,
    vision: VisionProcessor | None = None,
    *,
    packed: bool = False,
    varlen: bool = False,
) -> tuple[Any, Any]:
    """Log-probs of each row's response tokens, right-padded: (B, T_resp_max) and its mask.

    ``packed`` / ``varlen``: the micro-batch's layout (:func:`~rla_core.models.packing.layout_rows`);
    the values are the same up to float rounding.
    """
    layout = layout_rows(batch, packed=packed, varlen=varlen)
    return scored_token_logps(model, layout, batch, device, vision)
