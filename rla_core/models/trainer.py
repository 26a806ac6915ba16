"""Policy-gradient update from advantage rows (spec §4) and supervised warm-start fine-tuning.

:func:`rl_update` is one RL step for one model (policy or reward model): PPO-clip with a k3 KL penalty
against π_old, the checkpoint that generated the data. The loop is written in torch on top of TRL's
``selective_log_softmax``: TRL 1.16's ``GRPOTrainer._compute_loss`` neither clamps the log-ratio to
[−10, 10] nor the k3 exponent (spec §4 does both), and its sampler shuffles rows while the spec keeps
file order, so its private hook cannot reproduce the spec's objective exactly.

Example:
    >>> rows = pl.DataFrame({"prompt": ["go"], "response": [" north"], "advantage": [1.0]})
    >>> metrics = rl_update(ckpt, rows, cfg=TrainConfig(lr=1e-4), out_dir=out, seed=0, lora=LoraConfig())
    >>> metrics["optimizer_steps"]
    1.0
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.config import LoraConfig, TrainConfig
from rla_core.errors import ModelError
from rla_core.models.bootstrap import validate_checkpoint

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

# Spec §4: the log-ratio (and the k3 exponent) are clamped to this range before exp().
LOG_RATIO_CLAMP = 10.0
SFT_BATCH_SIZE = 8
SFT_GRAD_CLIP = 1.0


@dataclass(frozen=True)
class _Row:
    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float


def rl_update(
    model_dir: Path, rows: pl.DataFrame, *, cfg: TrainConfig, out_dir: Path, seed: int, lora: LoraConfig
) -> dict[str, float]:
    """One RL update of the checkpoint ``model_dir`` from ``rows`` (spec §4); writes ``out_dir``.

    Reads columns ``prompt``, ``response``, ``advantage`` (extra columns are ignored), in file order.
    Rows whose prompt exceeds ``cfg.max_prompt_len`` tokens are dropped; responses are right-truncated
    to ``cfg.max_gen_len`` tokens; no EOS is appended. π_old log-probs are computed once, before any
    update, with the same model. Per row and response token t::

        d_t = clamp(logπθ − logπ_old, −10, 10);  ρ_t = exp(d_t)
        L_pg = −mean_t min(ρ_t·A, clip(ρ_t, 1−ε, 1+ε)·A)
        k3_t = exp(clamp(logπ_old − logπθ, −10, 10)) − 1 − (logπ_old − logπθ);  L_kl = β·mean_t k3_t

    and the step loss is Σ_rows (L_pg + L_kl) / grad_accum with grad_accum = ceil(N / update_per_step),
    so ≈ ``update_per_step`` AdamW steps (constant LR, grad-norm clip) happen. An empty batch or all-zero
    advantages make no step: the input checkpoint is copied and ``noop=1`` is recorded.

    Returns metrics: loss, pg_loss, kl, clip_fraction, grad_norm (means; pre-clip norm), kl_first_micro_step,
    rows_in, rows_used, rows_dropped_prompt_too_long, rows_dropped_empty, rows_truncated,
    optimizer_steps, noop (and noop_empty_batch / noop_zero_advantages).
    """
    import torch
    from trl.trainer.utils import selective_log_softmax

    _require_columns(rows, ("prompt", "response", "advantage"), "rl_update")
    model, tokenizer = _load(model_dir)
    prepared, counts = _prepare_rl_rows(rows, tokenizer, cfg)
    metrics: dict[str, float] = {"rows_in": float(rows.height), **counts, "rows_used": float(len(prepared))}
    if not prepared or all(r.advantage == 0.0 for r in prepared):
        reason = "empty_batch" if not prepared else "zero_advantages"
        log.info("rl_update no-op (%s): copying %s to %s", reason, model_dir, out_dir)
        _write_atomically(out_dir, lambda tmp: _copy_checkpoint(Path(model_dir), tmp))
        return {**metrics, "noop": 1.0, f"noop_{reason}": 1.0, "optimizer_steps": 0.0}

    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        grad_accum = math.ceil(len(prepared) / cfg.update_per_step)
        groups = _partition(len(prepared), grad_accum, cfg.micro_batch_size)
        # Same micro-batches as the update, so π_old and the first πθ pass are bit-identical.
        old_logps = _old_logps(model, prepared, groups, device, selective_log_softmax)
        model = _maybe_lora(model, lora)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(
            params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay
        )
        model.train()
        sums = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0}
        clipped_tokens = 0
        total_tokens = 0
        grad_norms: list[float] = []
        kl_first: float | None = None
        for group in groups:
            for idx in group:
                batch = [prepared[i] for i in idx]
                logps, mask = _response_logps(model, batch, device, selective_log_softmax)
                old = _pad_like([old_logps[i] for i in idx], logps)
                adv = torch.tensor([r.advantage for r in batch], dtype=logps.dtype, device=device)[:, None]
                pg, kl, clipped = _ppo_k3(logps, old, adv, mask, cfg.clip_eps)
                per_row = pg + cfg.kl_beta * kl
                (per_row.sum() / grad_accum).backward()
                if kl_first is None:
                    kl_first = float(kl.detach().mean())
                sums["loss"] += float(per_row.detach().sum())
                sums["pg_loss"] += float(pg.detach().sum())
                sums["kl"] += float(kl.detach().sum())
                clipped_tokens += int(clipped)
                total_tokens += int(mask.sum())
            grad_norms.append(float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    model = _maybe_merge(model, lora)
    _write_atomically(out_dir, lambda tmp: _save(model, tokenizer, tmp))
    n = float(len(prepared))
    return {
        **metrics,
        "loss": sums["loss"] / n,
        "pg_loss": sums["pg_loss"] / n,
        "kl": sums["kl"] / n,
        "kl_first_micro_step": float(kl_first or 0.0),
        "clip_fraction": clipped_tokens / max(total_tokens, 1),
        "grad_norm": sum(grad_norms) / len(grad_norms),
        "optimizer_steps": float(len(grad_norms)),
        "grad_accum": float(grad_accum),
        "noop": 0.0,
    }


def sft(
    model_dir: Path, rows: pl.DataFrame, *, out_dir: Path, epochs: int, lr: float, seed: int
) -> dict[str, float]:
    """Supervised fine-tuning (warm start) on demonstrations; writes a checkpoint to ``out_dir``.

    Reads columns ``prompt`` and ``response``. Each row is ``prompt + response + EOS``; the loss is the
    token-mean cross-entropy over response and EOS tokens only, so the model learns to answer and stop.
    Batches of 8 rows, shuffled per epoch with ``seed``; AdamW(``lr``), grad-norm clip 1.0. Rows longer
    than the model's context are dropped (counted). No rows or ``epochs=0`` copy the checkpoint (noop=1).

    Returns metrics: loss (last epoch mean), first_loss (first epoch mean), rows_in, rows_used,
    rows_dropped_too_long, optimizer_steps, noop.
    """
    import torch
    from trl.trainer.utils import selective_log_softmax

    _require_columns(rows, ("prompt", "response"), "sft")
    if epochs < 0 or not (0.0 < lr < 1.0):
        raise ModelError(f"sft needs epochs >= 0 and 0 < lr < 1, got epochs={epochs}, lr={lr}")
    model, tokenizer = _load(model_dir)
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ModelError(f"tokenizer of {model_dir} has no EOS token: SFT must teach the model to stop")
    limit = int(getattr(model.config, "max_position_embeddings", 1 << 30))
    prepared: list[_Row] = []
    too_long = 0
    for prompt, response in zip(rows["prompt"].to_list(), rows["response"].to_list(), strict=True):
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        r_ids = [*tokenizer(response, add_special_tokens=False)["input_ids"], eos]
        if len(p_ids) + len(r_ids) > limit or not p_ids:
            too_long += 1
            continue
        prepared.append(_Row(p_ids, r_ids, 1.0))
    metrics = {
        "rows_in": float(rows.height),
        "rows_used": float(len(prepared)),
        "rows_dropped_too_long": float(too_long),
    }
    if not prepared or epochs == 0:
        _write_atomically(out_dir, lambda tmp: _copy_checkpoint(Path(model_dir), tmp))
        return {**metrics, "noop": 1.0, "optimizer_steps": 0.0}

    device = next(model.parameters()).device
    epoch_losses: list[float] = []
    steps = 0
    with torch.random.fork_rng(devices=[]):
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        model.train()
        for _ in range(epochs):
            order = torch.randperm(len(prepared), generator=gen).tolist()
            total, count = 0.0, 0
            for start in range(0, len(order), SFT_BATCH_SIZE):
                batch = [prepared[i] for i in order[start : start + SFT_BATCH_SIZE]]
                logps, mask = _response_logps(model, batch, device, selective_log_softmax)
                loss = -(logps * mask).sum() / mask.sum()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), SFT_GRAD_CLIP)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                steps += 1
                total += float(loss.detach()) * len(batch)
                count += len(batch)
            epoch_losses.append(total / count)
    _write_atomically(out_dir, lambda tmp: _save(model, tokenizer, tmp))
    return {
        **metrics,
        "loss": epoch_losses[-1],
        "first_loss": epoch_losses[0],
        "optimizer_steps": float(steps),
        "noop": 0.0,
    }


def response_logprobs(model_dir: Path, prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
    """Mean per-token log-probability of each response given its prompt (no EOS added).

    A measurement helper (e.g. "did the update raise the likelihood of positively rewarded responses").
    """
    import torch
    from trl.trainer.utils import selective_log_softmax

    model, tokenizer = _load(model_dir)
    rows = [
        _Row(
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
        logps, mask = _response_logps(model, rows, next(model.parameters()).device, selective_log_softmax)
    return ((logps * mask).sum(-1) / mask.sum(-1)).tolist()


# --- components ------------------------------------------------------------------------------------


def _ppo_k3(
    logps: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip_eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row PPO-clip loss and k3 KL (token-mean over the response), plus the clipped-token count.

    Shapes: logps, old, mask (B, T); adv (B, 1). Returns pg (B,), kl (B,), clipped ().
    """
    import torch

    d = torch.clamp(logps - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(d)
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    back = old - logps  # log(π_old/πθ)
    k3 = torch.exp(torch.clamp(back, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)) - 1 - back
    lengths = mask.sum(-1).clamp(min=1.0)
    pg = -(surrogate * mask).sum(-1) / lengths
    kl = (k3 * mask).sum(-1) / lengths
    clipped = (((ratio < 1 - clip_eps) | (ratio > 1 + clip_eps)).float() * mask).sum().detach()
    return pg, kl, clipped


def _response_logps(
    model: Any, batch: Sequence[_Row], device: Any, selective_log_softmax: Any
) -> tuple[Any, Any]:
    """Log-probs of each row's response tokens, right-padded: (B, T_resp_max) and its mask."""
    import torch

    seqs = [r.prompt_ids + r.response_ids for r in batch]
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
    ids, attn = ids.to(device), attn.to(device)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    token_logps = selective_log_softmax(logits, ids[:, 1:])  # position j predicts token j+1
    resp_width = max(len(r.response_ids) for r in batch)
    out = torch.zeros((len(batch), resp_width), dtype=token_logps.dtype, device=device)
    mask = torch.zeros((len(batch), resp_width), dtype=token_logps.dtype, device=device)
    for i, r in enumerate(batch):
        p, n = len(r.prompt_ids), len(r.response_ids)
        out[i, :n] = token_logps[i, p - 1 : p - 1 + n]
        mask[i, :n] = 1.0
    return out, mask


def _partition(n: int, grad_accum: int, micro: int) -> list[list[list[int]]]:
    """Row indices in file order: optimizer-step groups of ``grad_accum`` rows, split into micro-batches."""
    groups = []
    for g_start in range(0, n, grad_accum):
        g_stop = min(g_start + grad_accum, n)
        groups.append([list(range(m, min(m + micro, g_stop))) for m in range(g_start, g_stop, micro)])
    return groups


def _old_logps(
    model: Any, rows: list[_Row], groups: list[list[list[int]]], device: Any, sls: Any
) -> list[Any]:
    import torch

    model.eval()
    result: list[Any] = [None] * len(rows)
    with torch.no_grad():
        for group in groups:
            for idx in group:
                logps, _ = _response_logps(model, [rows[i] for i in idx], device, sls)
                for j, i in enumerate(idx):
                    result[i] = logps[j, : len(rows[i].response_ids)].clone()
    return result


def _pad_like(parts: list[Any], like: Any) -> Any:
    import torch

    out = torch.zeros_like(like)
    for i, p in enumerate(parts):
        out[i, : p.shape[0]] = p
    return out


def _prepare_rl_rows(
    rows: pl.DataFrame, tokenizer: Any, cfg: TrainConfig
) -> tuple[list[_Row], dict[str, float]]:
    prepared: list[_Row] = []
    too_long = truncated = empty = 0
    for prompt, response, adv in zip(
        rows["prompt"].to_list(), rows["response"].to_list(), rows["advantage"].to_list(), strict=True
    ):
        if adv is None or not math.isfinite(float(adv)):
            raise ModelError(f"advantage {adv!r} for prompt {str(prompt)[:60]!r} is not a finite number")
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if len(p_ids) > cfg.max_prompt_len:
            too_long += 1
            continue
        r_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
        if len(r_ids) > cfg.max_gen_len:
            r_ids = r_ids[: cfg.max_gen_len]
            truncated += 1
        if not p_ids or not r_ids:
            # No token to score: the row cannot contribute a gradient.
            empty += 1
            continue
        prepared.append(_Row(p_ids, r_ids, float(adv)))
    return prepared, {
        "rows_dropped_prompt_too_long": float(too_long),
        "rows_truncated": float(truncated),
        "rows_dropped_empty": float(empty),
    }


def _require_columns(rows: pl.DataFrame, names: Sequence[str], where: str) -> None:
    missing = [c for c in names if c not in rows.columns]
    if missing:
        raise ModelError(f"{where}: rows lack columns {missing} (have {rows.columns}); pass {list(names)}")


def _load(model_dir: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    validate_checkpoint(Path(model_dir))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return model, tokenizer


def _maybe_lora(model: Any, lora: LoraConfig) -> Any:
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


def _maybe_merge(model: Any, lora: LoraConfig) -> Any:
    # Merged so downstream stages load a plain checkpoint with no peft dependency.
    return model.merge_and_unload() if lora.enabled else model


def _save(model: Any, tokenizer: Any, out: Path) -> None:
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _copy_checkpoint(src: Path, out: Path) -> None:
    shutil.copytree(src, out, dirs_exist_ok=True)


def _write_atomically(out_dir: Path, write: Any) -> None:
    """Write a checkpoint into a temp sibling, then rename it to ``out_dir`` (never a half checkpoint)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ModelError(
            f"output directory {out_dir} is not empty: stages write new checkpoints to fresh locations"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with _temp_dir(out_dir.parent) as tmp:
        write(tmp)
        if out_dir.exists():
            out_dir.rmdir()
        os.rename(tmp, out_dir)


@contextmanager
def _temp_dir(parent: Path) -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-ckpt-", dir=parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
