"""The RL update: one policy-gradient step of one model from advantage rows (spec §4).

:func:`rl_update` is one RL step for one model (policy or reward model): PPO-clip with a k3 KL penalty
against π_old, the checkpoint that generated the data. Weights are always loaded as fp32 (the master
weights AdamW updates, whatever dtype the checkpoint was saved in) and saved as fp32, because every RL
step reloads the saved checkpoint with a fresh optimizer (spec §4): bf16 weights would round an lr-1e-6
update away. ``training.dtype`` only sets the autocast dtype of forward/backward passes.

Where it runs (:class:`Placement`, from config ``training``): one process in-process on
``training.device``, or, when ``training.processes > 1`` or the strategy is fsdp/deepspeed, workers
launched as ``accelerate launch --config_file infra/accelerate/<file> --num_processes N -m
rla_core.models.train_worker <spec>`` (``<file>`` per strategy in :data:`ACCELERATE_CONFIGS`; the
:class:`WorkerSpec` JSON) in their own process group (:mod:`rla_core.procs`): the stage
stays a batch job, a worker's failure fails the stage with the worker's error, nothing outlives it.
With ``cluster.backend=ray`` the same workers run under Ray Train's ``TorchTrainer`` on the cluster
(:mod:`rla_core.cluster.ray_train`), with the settings ``accelerate launch`` would apply passed on as
environment variables (:func:`accelerate_env`, derived from the same :func:`launch_options`).
Both paths run the same loop (:func:`train_loop`) and give the same weights up to float reduction order.

Why a hand-written loop on :class:`accelerate.Accelerator` and not ``transformers.Trainer``/TRL: TRL
1.16's ``GRPOTrainer._compute_loss`` clamps neither the log-ratio nor the k3 exponent (spec §4 does
both); ``Trainer``'s distributed sampler pads uneven shards by repeating rows (``even_batches``), which
would train some rows twice; its loss is rescaled by the micro-steps actually taken, not the spec's
constant ``/grad_accum`` (the last optimizer step differs); and the π_old pre-pass must see exactly
the micro-batches of the first update pass to be bit-identical. The distribution itself (DDP, FSDP,
ZeRO-3, mixed precision) is accelerate's; this module only decides which rows each rank sees.

Example:
    >>> rows = pl.DataFrame({"prompt": ["go"], "response": [" north"], "advantage": [1.0]})
    >>> metrics = rl_update(ckpt, rows, cfg=TrainConfig(lr=1e-4), out_dir=out, seed=0, lora=LoraConfig())
    >>> metrics["optimizer_steps"]
    1.0
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from rla_core import progress
from rla_core.algo.losses import ppo_k3_loss
from rla_core.config import LoraConfig, TrainConfig
from rla_core.models.bootstrap import validate_checkpoint
from rla_core.models.checkpoints import (
    copy_checkpoint,
    load_fp32,
    maybe_lora,
    merge_lora,
    save_checkpoint,
    torch_dtype,
    write_checkpoint_atomically,
)
from rla_core.models.launch import Placement, launch_update
from rla_core.models.logprobs import scored_token_logps
from rla_core.models.multimodal import (
    VisionProcessor,
)
from rla_core.models.packing import Layout, cut_micro_batches, layout_rows, varlen_attention
from rla_core.models.rows import TrainRow, prepare_rl_rows, require_columns, vision_for

log = logging.getLogger(__name__)


def rl_update(
    model_dir: Path,
    rows: pl.DataFrame,
    *,
    cfg: TrainConfig,
    out_dir: Path,
    seed: int,
    lora: LoraConfig,
    placement: Placement | None = None,
) -> dict[str, float]:
    """One RL update of the checkpoint ``model_dir`` from ``rows`` (spec §4); writes ``out_dir`` (fp32).

    Reads columns ``prompt``, ``response``, ``advantage`` (extra columns are ignored), in file order,
    and ``images`` when present (a list of image file references per row, null or empty for a text
    row): an image row's prompt is the formatted text with one image slot per image
    (``Generator.format_prompt`` of an :class:`ImagePrompt`), and its log-probabilities are computed
    given those images, as at generation. Rows whose prompt exceeds ``cfg.max_prompt_len`` tokens
    (image tokens included) are dropped; responses are right-truncated
    to ``cfg.max_gen_len`` tokens; no EOS is appended. π_old log-probs are computed once, before any
    update, with the same model. Per row and response token t::

        d_t = clamp(logπθ − logπ_old, −10, 10);  ρ_t = exp(d_t)
        L_pg = −mean_t min(ρ_t·A, clip(ρ_t, 1−ε, 1+ε)·A)
        k3_t = exp(clamp(logπ_old − logπθ, −10, 10)) − 1 − (logπ_old − logπθ);  L_kl = β·mean_t k3_t

    and an optimizer step's loss is Σ_rows (L_pg + L_kl) / G over its G = ceil(N / update_per_step)
    consecutive rows, so ≈ ``update_per_step`` AdamW steps (constant LR, grad-norm clip) happen. With
    W processes each step's G rows are split across the ranks (the effective batch stays G rows; DDP's
    gradient mean is undone by a factor W). An empty batch or all-zero advantages make no step: the
    input checkpoint is copied and ``noop=1`` is recorded. ``placement`` defaults to one CPU process.

    Micro-batches hold at most ``cfg.micro_batch_size`` rows and, with ``cfg.max_tokens_per_micro_batch``,
    at most that many tokens, packed (:mod:`rla_core.models.packing`); the loss does not depend on how
    rows are laid out, up to float rounding. Logits are computed at response positions only.

    Returns metrics: loss, pg_loss, kl, clip_fraction, grad_norm (means; pre-clip norm), kl_first_micro_step,
    rows_in, rows_used, rows_dropped_prompt_too_long, rows_dropped_empty, rows_truncated,
    optimizer_steps, grad_accum (= G), processes, padding_share (of the positions the update's forward
    passes computed, all ranks), loop_s (seconds of π_old pass + updates, rank 0), noop
    (and noop_empty_batch / noop_zero_advantages).
    """
    from transformers import AutoTokenizer

    placement = placement or Placement()
    require_columns(rows, ("prompt", "response", "advantage"), "rl_update")
    validate_checkpoint(Path(model_dir))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    vision = vision_for(Path(model_dir), rows, tokenizer, what="rl_update rows")
    prepared, counts = prepare_rl_rows(rows, tokenizer, cfg, vision)
    metrics: dict[str, float] = {"rows_in": float(rows.height), **counts, "rows_used": float(len(prepared))}
    if not prepared or all(r.advantage == 0.0 for r in prepared):
        reason = "empty_batch" if not prepared else "zero_advantages"
        log.info("rl_update no-op (%s): copying %s to %s", reason, model_dir, out_dir)
        write_checkpoint_atomically(out_dir, lambda tmp: copy_checkpoint(Path(model_dir), tmp))
        return {**metrics, "noop": 1.0, f"noop_{reason}": 1.0, "optimizer_steps": 0.0}

    if placement.launched:
        stats: dict[str, float] = {}

        def write(tmp: Path) -> None:
            stats.update(launch_update(Path(model_dir), prepared, cfg, lora, seed, placement, tmp))

        write_checkpoint_atomically(out_dir, write)
        return {**metrics, **stats, "noop": 0.0}

    model = load_fp32(Path(model_dir))
    runtime = LocalRuntime(placement.device, placement.dtype)
    with torch_rng(seed, placement.device):
        model, stats = train_loop(model, prepared, cfg=cfg, lora=lora, runtime=runtime, vision=vision)
    model = merge_lora(model, lora)
    write_checkpoint_atomically(
        out_dir, lambda tmp: save_checkpoint(model.to("cpu"), tokenizer, tmp, source=Path(model_dir))
    )
    return {**metrics, **stats, "noop": 0.0}


class TrainRuntime(Protocol):
    """What :func:`train_loop` needs from where it runs (:class:`LocalRuntime`, the worker's accelerate one)."""

    rank: int
    world: int
    device: Any

    def prepare(self, model: Any, make_optimizer: Callable[[list[Any]], Any]) -> tuple[Any, Any]: ...
    def autocast(self) -> contextlib.AbstractContextManager[Any]: ...
    def sync_context(self, model: Any, sync: bool) -> contextlib.AbstractContextManager[Any]: ...
    def backward(self, loss: Any, sync: bool) -> None: ...
    def clip_and_step(self, model: Any, optimizer: Any, max_norm: float) -> float: ...
    def reduce_sum(self, values: list[float]) -> list[float]: ...


class LocalRuntime:
    """One process on one device: autocast (and a grad scaler for fp16) around plain torch."""

    rank = 0
    world = 1
    is_main = True

    def __init__(self, device: str, dtype: str) -> None:
        import torch

        self.device = torch.device(device)
        self.dtype = dtype
        self.scaler = torch.amp.GradScaler(self.device.type) if dtype == "fp16" else None

    def prepare(self, model: Any, make_optimizer: Callable[[list[Any]], Any]) -> tuple[Any, Any]:
        model = model.to(self.device)
        return model, make_optimizer([p for p in model.parameters() if p.requires_grad])

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        import torch

        if self.dtype == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch_dtype(self.dtype))

    def sync_context(self, model: Any, sync: bool) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()  # one process: nothing to synchronise

    def backward(self, loss: Any, sync: bool) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def clip_and_step(self, model: Any, optimizer: Any, max_norm: float) -> float:
        import torch

        if self.scaler is not None:
            self.scaler.unscale_(optimizer)
        params = [p for p in model.parameters() if p.requires_grad]
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return norm

    def reduce_sum(self, values: list[float]) -> list[float]:
        return values


def train_loop(
    model: Any,
    prepared: list[TrainRow],
    *,
    cfg: TrainConfig,
    lora: LoraConfig,
    runtime: TrainRuntime,
    vision: VisionProcessor | None = None,
) -> tuple[Any, dict[str, float]]:
    """The spec §4 update of ``model`` (fp32 weights) on this rank's share of ``prepared``.

    ``vision``: the checkpoint's processor, needed when rows carry images (it reads their pixels).

    ``runtime`` is a :class:`LocalRuntime` or the worker's accelerate runtime. Every rank sees the same
    number of micro-batches per optimizer step (padding micro-batches carry weight 0), so collective
    calls inside forward/backward (FSDP/ZeRO-3 gathers, DDP reductions) line up. Returns the prepared
    (possibly wrapped) model and metrics summed over all ranks.
    """
    import torch

    n = len(prepared)
    group_rows = math.ceil(n / cfg.update_per_step)
    lengths = [len(r.prompt_ids) + len(r.response_ids) for r in prepared]
    budget = cfg.max_tokens_per_micro_batch
    plan = plan_micro_batches(
        lengths, group_rows, cfg.micro_batch_size, runtime.rank, runtime.world, max_tokens=budget
    )
    # One layout per micro-batch, used by the π_old pass and the update alike (the same tensors).
    varlen = varlen_attention(model)
    layouts = [
        [
            layout_rows([prepared[i] for i, _ in micro], packed=budget is not None, varlen=varlen)
            for micro in group
        ]
        for group in plan
    ]
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = maybe_lora(model, lora)

    def make_optimizer(params: list[Any]) -> Any:
        return torch.optim.AdamW(
            params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay
        )

    model, optimizer = runtime.prepare(model, make_optimizer)
    device = runtime.device
    started = time.perf_counter()
    # π_old before any update, over exactly the micro-batches of the update pass (bit-identical first pass).
    model.eval()
    old: list[list[Any]] = []
    with torch.no_grad():
        for group, group_layouts in zip(plan, layouts, strict=True):
            old.append([])
            for micro, layout in zip(group, group_layouts, strict=True):
                with runtime.autocast():
                    logps, _ = scored_token_logps(
                        model, layout, [prepared[i] for i, _ in micro], device, vision
                    )
                old[-1].append(logps.float())
    model.train()
    scale = runtime.world / group_rows  # DDP averages over ranks; the spec divides the step sum by G
    sums = UpdateSums()
    grad_norms: list[float] = []
    kl_first: float | None = None
    # Reported by the stage's reporter on the launching process; a no-op in accelerate workers (none set).
    counter = progress.start("update", total=len(plan), unit="optimizer steps", rate="rows")
    for g, group in enumerate(plan):
        for m, micro in enumerate(group):
            sync = m == len(group) - 1
            real = micro[0][1] > 0.0  # padding micro-batches hold only weight-0 rows
            batch = [prepared[i] for i, _ in micro]
            # DDP decides at forward time whether this backward all-reduces: both run in sync_context.
            with runtime.sync_context(model, sync):
                with runtime.autocast():
                    logps, mask = scored_token_logps(model, layouts[g][m], batch, device, vision)
                logps, mask = logps.float(), mask.float()
                adv = torch.tensor([r.advantage for r in batch], dtype=torch.float32, device=device)[:, None]
                pg, kl, clipped = ppo_k3_loss(logps, old[g][m], adv, mask, cfg.clip_eps)
                per_row = pg + cfg.kl_beta * kl
                runtime.backward(per_row.sum() * (scale if real else 0.0), sync)
            if not real:
                continue
            if kl_first is None:
                kl_first = float(kl.detach().mean())
            sums.add(per_row, pg, kl, clipped, mask, layouts[g][m])
        grad_norms.append(runtime.clip_and_step(model, optimizer, cfg.grad_clip))
        counter.advance(1, rows=sum(1 for micro in group for _i, w in micro if w > 0.0))
    counter.finish()
    total = sums.reduced(runtime)
    return model, {
        "loss": total.loss / n,
        "pg_loss": total.pg / n,
        "kl": total.kl / n,
        "kl_first_micro_step": float(kl_first or 0.0),
        "clip_fraction": total.clipped_tokens / max(total.tokens, 1.0),
        "padding_share": 1.0 - total.row_tokens / total.slots,
        "grad_norm": sum(grad_norms) / len(grad_norms),
        "optimizer_steps": float(len(grad_norms)),
        "grad_accum": float(group_rows),
        "processes": float(runtime.world),
        "loop_s": time.perf_counter() - started,
    }


@dataclass
class UpdateSums:
    """What :func:`train_loop` accumulates over this rank's real (non-padding) rows, then sums over ranks."""

    loss: float = 0.0  # Σ_rows (L_pg + β·L_kl)
    pg: float = 0.0  # Σ_rows L_pg
    kl: float = 0.0  # Σ_rows L_kl
    clipped_tokens: float = 0.0  # response tokens whose ratio left [1−ε, 1+ε]
    tokens: float = 0.0  # response tokens
    row_tokens: float = 0.0  # prompt + response tokens the forward passes were for
    slots: float = 0.0  # positions the forward passes computed (row tokens + padding)

    def add(self, per_row: Any, pg: Any, kl: Any, clipped: Any, mask: Any, layout: Layout) -> None:
        """Add one micro-batch: its per-row loss, pg and kl tensors (B,), clipped count, token mask and layout."""
        self.loss += float(per_row.detach().sum())
        self.pg += float(pg.detach().sum())
        self.kl += float(kl.detach().sum())
        self.clipped_tokens += float(clipped)
        self.tokens += float(mask.sum())
        self.row_tokens += float(layout.tokens)
        self.slots += float(layout.slots)

    def reduced(self, runtime: TrainRuntime) -> UpdateSums:
        """The sums over all ranks: one ``runtime.reduce_sum`` of the fields, in declaration order."""
        return UpdateSums(*runtime.reduce_sum(list(astuple(self))))


def plan_micro_batches(
    lengths: Sequence[int],
    group_rows: int,
    micro: int,
    rank: int,
    world: int,
    *,
    max_tokens: int | None = None,
) -> list[list[list[tuple[int, float]]]]:
    """This rank's (row index, weight) micro-batches per optimizer step, rows in file order.

    ``lengths``: each row's tokens (prompt + response). Optimizer step k covers rows [k·G, min((k+1)·G, n));
    they are cut into ``world`` contiguous chunks of ceil(size/world) rows, rank r takes chunk r, cut into
    consecutive micro-batches of at most ``micro`` rows and, with ``max_tokens``, at most that many tokens
    (:func:`~rla_core.models.packing.cut_micro_batches`; a longer row runs alone). Ranks with fewer
    micro-batches than the busiest rank get padding micro-batches (the step's first row with weight 0), so
    every rank runs the same number of forward/backward passes. Every rank knows every row's length, so
    each computes the others' cuts and agrees on the busiest.

    >>> plan_micro_batches([4] * 5, 5, 2, 1, 2)  # rows 0-2 on rank 0 (2 micro-batches), 3-4 on rank 1
    [[[(3, 1.0), (4, 1.0)], [(0, 0.0)]]]
    >>> plan_micro_batches([4, 4, 8, 1, 1], 5, 8, 0, 1, max_tokens=8)  # 4+4 | 8 | 1+1
    [[[(0, 1.0), (1, 1.0)], [(2, 1.0)], [(3, 1.0), (4, 1.0)]]]
    """
    n = len(lengths)
    plan = []
    for start in range(0, n, group_rows):
        stop = min(start + group_rows, n)
        chunk = math.ceil((stop - start) / world)
        cuts = []
        for r in range(world):
            lo, hi = min(start + r * chunk, stop), min(start + (r + 1) * chunk, stop)
            cut = cut_micro_batches(lengths[lo:hi], rows=micro, max_tokens=max_tokens)
            cuts.append([[(lo + i, 1.0) for i in part] for part in cut])
        busiest = max(len(c) for c in cuts)
        plan.append(cuts[rank] + [[(start, 0.0)]] * (busiest - len(cuts[rank])))
    return plan


@contextmanager
def torch_rng(seed: int, device: str) -> Iterator[None]:
    """Seed torch for the update without disturbing the caller's RNG state."""
    import torch

    devices = [torch.device(device).index or 0] if device.startswith("cuda") else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield
