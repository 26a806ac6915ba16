"""Training rows: demonstrations and advantage rows tokenised as the model saw them at generation.

A row's prompt is the formatted text, with one image slot per screenshot for a vision-language
checkpoint (:class:`~rla_core.models.multimodal.ImagePrompt`); its response is tokenised without
special tokens. :func:`prepare_rl_rows` applies the update's length rules (spec §4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from rla_core.config import TrainConfig
from rla_core.errors import ModelError
from rla_core.models.multimodal import (
    ImagePrompt,
    VisionProcessor,
)


@dataclass(frozen=True)
class TrainRow:
    """One tokenised training row: prompt and response token ids (no padding) and the row's advantage.

    ``images``: the image files the prompt shows, in order (empty for a text row); ``prompt_ids`` then
    hold each image's expanded ``<|image_pad|>`` run (:meth:`VisionProcessor.prompt_ids`), and the
    pixels are read from the files for every forward pass (:func:`response_token_logps`).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    images: tuple[str, ...] = ()


def row_images(rows: pl.DataFrame) -> list[tuple[str, ...]]:
    """Each row's image references (column ``images``: a list of paths; null, empty or absent: none)."""
    if "images" not in rows.columns:
        return [()] * rows.height
    out = []
    for i, refs in enumerate(rows["images"].to_list()):
        if refs is not None and (isinstance(refs, str) or not isinstance(refs, list)):
            raise ModelError(f"row {i}: images must be a list of image paths, got {refs!r:.80}")
        out.append(tuple(refs or ()))
    return out


def vision_for(model_dir: Path, rows: pl.DataFrame, tokenizer: Any, *, what: str) -> VisionProcessor | None:
    """The processor of ``model_dir`` when ``rows`` carry images (a text-only checkpoint: ModelError)."""
    if not any(row_images(rows)):
        return None
    return VisionProcessor.from_pretrained(model_dir, tokenizer=tokenizer, what=what)


def prompt_token_ids(
    prompt: str, images: tuple[str, ...], tokenizer: Any, vision: VisionProcessor | None
) -> list[int]:
    """The prompt's token ids as the model saw them at generation (image slots expanded when it has images)."""
    if images:
        assert vision is not None  # vision_for gives one whenever a row has images
        return vision.prompt_ids(ImagePrompt(prompt, images))
    ids: list[int] = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return ids


def context_limit(config: Any) -> int:
    """The model's context length (a vision-language config keeps it in its text_config)."""
    text = getattr(config, "text_config", None) or config
    return int(getattr(text, "max_position_embeddings", 1 << 30))


def recorded_ids(rows: pl.DataFrame) -> list[tuple[list[int], list[int]] | None]:
    """Each row's recorded (prompt ids, response ids) — columns ``prompt_ids``, ``response_ids``, written for
    the turns the recording endpoint answered — or None for a row played as text (null, or no such columns)."""
    if "prompt_ids" not in rows.columns or "response_ids" not in rows.columns:
        return [None] * rows.height
    out: list[tuple[list[int], list[int]] | None] = []
    for i, (p_ids, r_ids) in enumerate(
        zip(rows["prompt_ids"].to_list(), rows["response_ids"].to_list(), strict=True)
    ):
        if (p_ids is None) != (r_ids is None):
            raise ModelError(
                f"row {i}: prompt_ids and response_ids are recorded together (one of them is null)"
            )
        out.append(None if p_ids is None else (list(p_ids), list(r_ids)))
    return out


def prepare_rl_rows(
    rows: pl.DataFrame, tokenizer: Any, cfg: TrainConfig, vision: VisionProcessor | None = None
) -> tuple[list[TrainRow], dict[str, float]]:
    """Training rows as the model saw them: a row with recorded token ids (:func:`recorded_ids`) takes them
    as they are, never re-tokenised; the others tokenise their prompt (and images) and response. Then the
    update's length rules (spec §4): a prompt over ``max_prompt_len`` drops the row, a response over
    ``max_gen_len`` is cut, a row without a prompt or response token is dropped; their counts come back."""
    prepared: list[TrainRow] = []
    too_long = truncated = empty = 0
    for prompt, response, adv, images, recorded in zip(
        rows["prompt"].to_list(), rows["response"].to_list(), rows["advantage"].to_list(),
        row_images(rows), recorded_ids(rows), strict=True,
    ):  # fmt: skip
        if adv is None or not math.isfinite(float(adv)):
            raise ModelError(f"advantage {adv!r} for prompt {str(prompt)[:60]!r} is not a finite number")
        if recorded is not None and images:
            raise ModelError(
                f"a row with images has recorded token ids (prompt {str(prompt)[:60]!r}): not both"
            )
        p_ids = recorded[0] if recorded else prompt_token_ids(prompt, images, tokenizer, vision)
        if len(p_ids) > cfg.max_prompt_len:
            too_long += 1
            continue
        r_ids = recorded[1] if recorded else tokenizer(response, add_special_tokens=False)["input_ids"]
        if len(r_ids) > cfg.max_gen_len:
            r_ids = r_ids[: cfg.max_gen_len]
            truncated += 1
        if not p_ids or not r_ids:
            # No token to score: the row cannot contribute a gradient.
            empty += 1
            continue
        prepared.append(TrainRow(p_ids, r_ids, float(adv), images))
    return prepared, {
        "rows_dropped_prompt_too_long": float(too_long),
        "rows_truncated": float(truncated),
        "rows_dropped_empty": float(empty),
    }


def require_columns(rows: pl.DataFrame, names: Sequence[str], where: str) -> None:
    missing = [c for c in names if c not in rows.columns]
    if missing:
        raise ModelError(f"{where}: rows lack columns {missing} (have {rows.columns}); pass {list(names)}")
