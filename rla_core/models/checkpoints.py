"""Checkpoints as the trainer reads and writes them: fp32 weights in, fp32 weights out, never half written.

Every RL step reloads the saved checkpoint with a fresh optimizer (spec §4), so weights are loaded
and saved fp32 whatever dtype a checkpoint was saved in: bf16 weights would round a small update away.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from rla_core.config import LoraConfig
from rla_core.errors import ModelError
from rla_core.models.bootstrap import validate_checkpoint
from rla_core.models.multimodal import (
    copy_processor_files,
    is_vision_language,
    load_vl_model,
)
from rla_core.store import publish_dir


def load_fp32(model_dir: Path) -> Any:
    """The checkpoint's model with fp32 weights, whatever dtype it was saved in (explicit, never inferred);
    a vision-language checkpoint with its image-text-to-text class (vision tower included)."""
    import torch
    from transformers import AutoModelForCausalLM

    validate_checkpoint(Path(model_dir))
    if is_vision_language(Path(model_dir)):
        return load_vl_model(Path(model_dir), dtype=torch.float32)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def load_model(model_dir: Path) -> tuple[Any, Any]:
    """fp32 model (see :func:`load_fp32`) and tokenizer of a checkpoint."""
    from transformers import AutoTokenizer

    model = load_fp32(model_dir)
    return model, AutoTokenizer.from_pretrained(model_dir)


def torch_dtype(name: str) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def maybe_lora(model: Any, lora: LoraConfig) -> Any:
    if not lora.enabled:
        return model
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    peft_cfg = PeftLoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, peft_cfg)


def merge_lora(model: Any, lora: LoraConfig) -> Any:
    """The model with its LoRA adapters merged (peft ``merge_and_unload``) when LoRA is on, else itself.

    Merged so downstream stages load a plain checkpoint with no peft dependency.
    """
    return model.merge_and_unload() if lora.enabled else model


def save_checkpoint(model: Any, tokenizer: Any, out: Path, *, source: Path) -> None:
    """The model and tokenizer, plus the image processor config of a vision-language ``source``."""
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    copy_processor_files(source, out)


def copy_checkpoint(src: Path, out: Path) -> None:
    shutil.copytree(src, out, dirs_exist_ok=True)


def write_checkpoint_atomically(out_dir: Path, write: Any) -> None:
    """Write a checkpoint into a temp sibling, then rename it to ``out_dir`` (never a half checkpoint)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ModelError(
            f"output directory {out_dir} is not empty: stages write new checkpoints to fresh locations"
        )
    publish_dir(out_dir, write, exists="fail")
