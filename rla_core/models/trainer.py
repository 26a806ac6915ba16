"""Policy-gradient update from advantage rows (spec §4) and supervised warm-start fine-tuning.

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
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import polars as pl
from pydantic import BaseModel, ConfigDict

from rla_core import progress
from rla_core.algo.losses import ppo_k3_loss
from rla_core.config import ClusterBackend, ClusterConfig, LoraConfig, TrainConfig, TrainDtype, TrainStrategy
from rla_core.errors import ModelError, ProcessError
from rla_core.models.bootstrap import resolve_device, validate_checkpoint
from rla_core.models.multimodal import (
    ImagePrompt,
    VisionProcessor,
    copy_processor_files,
    is_vision_language,
    load_vl_model,
    require_vision_language,
)
from rla_core.procs import ProcessGroup, default_runtime_dir
from rla_core.store import publish_dir

log = logging.getLogger(__name__)

SFT_BATCH_SIZE = 8
SFT_GRAD_CLIP = 1.0
SFT_WARMUP_STEPS = 100  # linear warm-up of sft(cosine=True)
# The worker module `accelerate launch` runs: run, not imported, so declared for the stage code version.
WORKER_MODULE = "rla_core.models.train_worker"
CODE_RESOURCES = ("train_worker.py",)
ACCELERATE_CONFIG_DIR = Path(__file__).resolve().parents[2] / "infra" / "accelerate"
ACCELERATE_CONFIGS = {"ddp": "ddp.yaml", "fsdp": "fsdp.yaml", "deepspeed": "deepspeed_zero3.yaml"}
_MIXED_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}
# What accelerate's launcher sets for its workers that we pass on to workers it does not launch.
_ACCELERATE_ENV_PREFIXES = ("ACCELERATE_", "FSDP_")
# Separates a worker's error message from its traceback in error-rank<r>.txt (the launcher shows the message).
ERROR_SEPARATOR = "\n--- traceback ---\n"


@dataclass(frozen=True)
class TrainRow:
    """One tokenised training row: prompt and response token ids (no padding) and the row's advantage.

    ``images``: the image files the prompt shows, in order (empty for a text row); ``prompt_ids`` then
    hold each image's expanded ``<|image_pad|>`` run (:meth:`VisionProcessor.prompt_ids`), and the
    pixels are read from the files for every forward pass (:func:`_response_logps`).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    images: tuple[str, ...] = ()


class WorkerSpec(BaseModel):
    """What :func:`rl_update` hands each accelerate worker (:mod:`rla_core.models.train_worker`), as JSON.

    The launcher writes it with :meth:`write` and every rank reads it with :meth:`read`, so both sides
    validate the same declaration: the checkpoint to train; where rank 0 writes the new checkpoint and
    the metrics, and where a failing rank writes ``error-rank<r>.txt``; the prepared rows; the train and
    LoRA config; the seed; the device kind, the autocast dtype and the torch threads the workers share.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_dir: Path
    out_dir: Path
    metrics_path: Path
    error_dir: Path
    rows: tuple[TrainRow, ...]
    cfg: TrainConfig
    lora: LoraConfig
    seed: int
    device: str
    dtype: Literal["fp32", "bf16", "fp16"]
    threads: int | None = None

    def write(self, path: Path) -> None:
        path.write_text(self.model_dump_json())

    @classmethod
    def read(cls, path: Path) -> WorkerSpec:
        return cls.model_validate_json(Path(path).read_text())


class PlacementFields(Protocol):
    """The ``training.*`` keys that say where an update runs (config ``training`` or a stage's slice)."""

    @property
    def device(self) -> str: ...
    @property
    def dtype(self) -> TrainDtype: ...
    @property
    def processes(self) -> int: ...
    @property
    def strategy(self) -> TrainStrategy: ...
    @property
    def worker_timeout_s(self) -> float: ...


@dataclass(frozen=True)
class Placement:
    """Where and how an update runs: config ``training`` with the device resolved.

    ``device`` is ``cpu`` or ``cuda[:N]``; ``dtype`` the autocast dtype (fp32 = none); ``processes`` > 1
    or a ``strategy`` other than ddp launches accelerate workers; ``threads`` caps torch CPU threads
    (shared by the workers); ``timeout_s`` bounds a launched update; ``cluster`` with backend ray runs
    launched workers under Ray Train's ``TorchTrainer`` on that cluster instead of ``accelerate launch``.
    """

    device: str = "cpu"
    dtype: str = "fp32"
    processes: int = 1
    strategy: str = "ddp"
    threads: int | None = None
    timeout_s: float | None = None
    cluster: ClusterConfig | None = None

    @classmethod
    def from_config(
        cls, training: PlacementFields, *, threads: int | None = None, cluster: ClusterConfig | None = None
    ) -> Placement:
        return cls(
            device=resolve_device(training.device, setting="training.device"),
            dtype=str(training.dtype.value),
            processes=training.processes,
            strategy=str(training.strategy.value),
            threads=threads,
            timeout_s=training.worker_timeout_s,
            cluster=cluster,
        )

    @property
    def launched(self) -> bool:
        return self.processes > 1 or self.strategy != "ddp"

    @property
    def on_ray(self) -> bool:
        """Launched workers run under Ray Train (``cluster.backend=ray``), not ``accelerate launch``."""
        return self.launched and self.cluster is not None and self.cluster.backend is ClusterBackend.RAY


def accelerate_config(strategy: str) -> Path:
    """The accelerate config file of ``strategy`` in ``infra/accelerate/``; a typed error when missing."""
    path = ACCELERATE_CONFIG_DIR / ACCELERATE_CONFIGS.get(strategy, f"{strategy}.yaml")
    if not path.is_file():
        raise ModelError(
            f"no accelerate config {path} for training.strategy={strategy!r}; strategies: "
            f"{sorted(ACCELERATE_CONFIGS)} with their files in {ACCELERATE_CONFIG_DIR}"
        )
    return path


def launch_options(strategy: str, processes: int, dtype: str) -> list[str]:
    """The ``accelerate launch`` options of a multi-process update: the strategy's config file plus the
    command-line overrides (processes, mixed precision). The one declaration of the accelerate settings:
    :func:`launch_argv` launches with them, :func:`accelerate_env` derives what they set in a worker."""
    return [
        "--config_file", str(accelerate_config(strategy)),
        "--num_processes", str(processes), "--num_machines", "1",
        "--mixed_precision", _MIXED_PRECISION[dtype], "--dynamo_backend", "no",
        "--main_process_port", "0",
    ]  # fmt: skip


def launch_argv(strategy: str, processes: int, dtype: str, spec_path: Path) -> list[str]:
    """The ``accelerate launch`` command line of a multi-process update (the same on CPU and GPU)."""
    return [
        sys.executable, "-m", "accelerate.commands.launch", *launch_options(strategy, processes, dtype),
        "-m", WORKER_MODULE, str(spec_path),
    ]  # fmt: skip


def accelerate_env(strategy: str, processes: int, dtype: str) -> dict[str, str]:
    """The ``ACCELERATE_*`` / ``FSDP_*`` variables ``accelerate launch`` would set in each worker for
    :func:`launch_options` (mixed precision, FSDP plugin, DeepSpeed config, dynamo).

    For workers that accelerate does not launch (Ray Train's ``TorchTrainer``): there nothing reads the
    YAML, and an ``Accelerator`` falls back to its defaults (mixed precision 'no'). Derived by
    accelerate's own launcher code (checked against accelerate 1.16.0) from the same options, so the
    two paths cannot drift apart. The process-group variables (RANK, MASTER_ADDR, ...) and the thread
    count are the runner's.

    Example:
        >>> accelerate_env("ddp", 2, "bf16")["ACCELERATE_MIXED_PRECISION"]
        'bf16'
    """
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    argv = [*launch_options(strategy, processes, dtype), "-m", WORKER_MODULE, "SPEC"]
    args, defaults, mp_from_config = _validate_launch_command(launch_command_parser().parse_args(argv))
    if args.use_deepspeed:  # as accelerate.commands.launch.launch_command does before its deepspeed launcher
        fields = list(defaults.deepspeed_config) if defaults else []
        args.deepspeed_fields_from_accelerate_config = ",".join(
            [*fields, "mixed_precision"] if mp_from_config else fields
        )
        env = prepare_deepspeed_cmd_env(args)[1]
    else:
        env = prepare_multi_gpu_env(args)  # DDP and FSDP
    return {k: v for k, v in sorted(env.items()) if k.startswith(_ACCELERATE_ENV_PREFIXES)}


def worker_threads(placement: Placement) -> int | None:
    """Torch threads of each update worker on CPU: ``threads`` shared by the processes (None: not CPU)."""
    if placement.device != "cpu":
        return None
    return max(1, (placement.threads or os.cpu_count() or 1) // placement.processes)


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

    Returns metrics: loss, pg_loss, kl, clip_fraction, grad_norm (means; pre-clip norm), kl_first_micro_step,
    rows_in, rows_used, rows_dropped_prompt_too_long, rows_dropped_empty, rows_truncated,
    optimizer_steps, grad_accum (= G), processes, loop_s (seconds of π_old pass + updates, rank 0), noop
    (and noop_empty_batch / noop_zero_advantages).
    """
    from transformers import AutoTokenizer

    placement = placement or Placement()
    _require_columns(rows, ("prompt", "response", "advantage"), "rl_update")
    validate_checkpoint(Path(model_dir))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    vision = _vision_for(Path(model_dir), rows, tokenizer, what="rl_update rows")
    prepared, counts = _prepare_rl_rows(rows, tokenizer, cfg, vision)
    metrics: dict[str, float] = {"rows_in": float(rows.height), **counts, "rows_used": float(len(prepared))}
    if not prepared or all(r.advantage == 0.0 for r in prepared):
        reason = "empty_batch" if not prepared else "zero_advantages"
        log.info("rl_update no-op (%s): copying %s to %s", reason, model_dir, out_dir)
        _write_atomically(out_dir, lambda tmp: _copy_checkpoint(Path(model_dir), tmp))
        return {**metrics, "noop": 1.0, f"noop_{reason}": 1.0, "optimizer_steps": 0.0}

    if placement.launched:
        stats: dict[str, float] = {}

        def write(tmp: Path) -> None:
            stats.update(_launch(Path(model_dir), prepared, cfg, lora, seed, placement, tmp))

        _write_atomically(out_dir, write)
        return {**metrics, **stats, "noop": 0.0}

    model = load_fp32(Path(model_dir))
    runtime = LocalRuntime(placement.device, placement.dtype)
    with torch_rng(seed, placement.device):
        model, stats = train_loop(model, prepared, cfg=cfg, lora=lora, runtime=runtime, vision=vision)
    model = merge_lora(model, lora)
    _write_atomically(out_dir, lambda tmp: _save(model.to("cpu"), tokenizer, tmp, source=Path(model_dir)))
    return {**metrics, **stats, "noop": 0.0}


def _launch(
    model_dir: Path,
    prepared: list[TrainRow],
    cfg: TrainConfig,
    lora: LoraConfig,
    seed: int,
    placement: Placement,
    out: Path,
) -> dict[str, float]:
    """Run the update in ``placement.processes`` workers — ``accelerate launch`` on this machine, or
    Ray Train workers on the cluster (:attr:`Placement.on_ray`); rank 0 writes the checkpoint to ``out``.

    On Ray, ``out`` (and the spec, metrics and error files beside it) must be on storage every node
    sees: the caller passes a directory there (``tasks.stage.train_checkpoint``).
    """
    work = Path(tempfile.mkdtemp(prefix=".rla-train-", dir=out.parent))
    try:
        spec = WorkerSpec.model_validate(
            {
                "model_dir": model_dir.resolve(),  # absolute: workers may start elsewhere
                "out_dir": out.resolve(),
                "metrics_path": work / "metrics.json",
                "error_dir": work,
                "rows": prepared,
                "cfg": cfg,
                "lora": lora,
                "seed": seed,
                "device": placement.device,
                "dtype": placement.dtype,
                "threads": placement.threads,
            }
        )
        spec_path = work / "spec.json"
        spec.write(spec_path)
        threads = worker_threads(placement)
        thread_env = {"OMP_NUM_THREADS": str(threads)} if threads is not None else {}
        if placement.on_ray:
            from rla_core.cluster.ray_train import run_train_workers

            assert placement.cluster is not None
            what = f"training workers ({placement.strategy}, {placement.processes} processes on Ray Train)"
            env = {**accelerate_env(placement.strategy, placement.processes, placement.dtype), **thread_env}
            log.info("starting %s with %s", what, env)
            error = run_train_workers(
                placement.cluster, WORKER_MODULE, [str(spec_path)], processes=placement.processes,
                use_gpu=placement.device != "cpu", env=env, storage=work, timeout_s=placement.timeout_s, what=what,
            )  # fmt: skip
            failed = None if error is None else (f"{what} failed", f"the cluster's error:\n{error}")
        else:
            argv = launch_argv(placement.strategy, placement.processes, placement.dtype, spec_path)
            what = f"training workers ({placement.strategy}, {placement.processes} processes)"
            log.info("launching %s: %s", what, " ".join(argv))
            group = ProcessGroup.start(
                argv, kind="train", runtime_dir=default_runtime_dir("train"), log_path=work / "workers.log",
                env={**os.environ, **thread_env}, what=what,
            )  # fmt: skip
            with group:
                code = group.wait(placement.timeout_s)
            tail = f"last lines of the workers' log:\n{group.log_tail(40)}"
            failed = None if code == 0 else (f"{what} failed with exit code {code}", tail)
        if failed is not None:
            headline, tail = failed
            errors = sorted(work.glob("error-rank*.txt"))
            detail = "\n".join(p.read_text(errors="replace").split(ERROR_SEPARATOR)[0] for p in errors)
            raise ProcessError(f"{headline}: {detail or '(no worker error recorded)'}\n{tail}")
        metrics: dict[str, float] = json.loads((work / "metrics.json").read_text())
        return metrics
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- the update loop, shared by the in-process and the accelerate path ------------------------------


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
        return torch.autocast(self.device.type, dtype=_torch_dtype(self.dtype))

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
    from trl.trainer.utils import selective_log_softmax

    n = len(prepared)
    group_rows = math.ceil(n / cfg.update_per_step)
    plan = plan_micro_batches(n, group_rows, cfg.micro_batch_size, runtime.rank, runtime.world)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = _maybe_lora(model, lora)

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
        for group in plan:
            old.append([])
            for micro in group:
                with runtime.autocast():
                    logps, _ = _response_logps(
                        model, [prepared[i] for i, _ in micro], device, selective_log_softmax, vision
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
                    logps, mask = _response_logps(model, batch, device, selective_log_softmax, vision)
                logps, mask = logps.float(), mask.float()
                adv = torch.tensor([r.advantage for r in batch], dtype=torch.float32, device=device)[:, None]
                pg, kl, clipped = ppo_k3_loss(logps, old[g][m], adv, mask, cfg.clip_eps)
                per_row = pg + cfg.kl_beta * kl
                runtime.backward(per_row.sum() * (scale if real else 0.0), sync)
            if not real:
                continue
            if kl_first is None:
                kl_first = float(kl.detach().mean())
            sums.add(per_row, pg, kl, clipped, mask)
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

    def add(self, per_row: Any, pg: Any, kl: Any, clipped: Any, mask: Any) -> None:
        """Add one micro-batch: its per-row loss, pg and kl tensors (B,), clipped count and token mask."""
        self.loss += float(per_row.detach().sum())
        self.pg += float(pg.detach().sum())
        self.kl += float(kl.detach().sum())
        self.clipped_tokens += float(clipped)
        self.tokens += float(mask.sum())

    def reduced(self, runtime: TrainRuntime) -> UpdateSums:
        """The sums over all ranks: one ``runtime.reduce_sum`` of the fields, in declaration order."""
        return UpdateSums(*runtime.reduce_sum(list(astuple(self))))


def plan_micro_batches(
    n: int, group_rows: int, micro: int, rank: int, world: int
) -> list[list[list[tuple[int, float]]]]:
    """This rank's (row index, weight) micro-batches per optimizer step, rows in file order.

    Optimizer step k covers rows [k·G, min((k+1)·G, n)); they are cut into ``world`` contiguous chunks
    of ceil(size/world) rows, rank r takes chunk r, split into micro-batches of ``micro`` rows. Ranks
    with fewer micro-batches than the busiest rank get padding micro-batches (the step's first row with
    weight 0), so every rank runs the same number of forward/backward passes.

    >>> plan_micro_batches(5, 5, 2, 1, 2)  # rows 0-2 on rank 0 (2 micro-batches), 3-4 on rank 1
    [[[(3, 1.0), (4, 1.0)], [(0, 0.0)]]]
    """
    plan = []
    for start in range(0, n, group_rows):
        stop = min(start + group_rows, n)
        chunk = math.ceil((stop - start) / world)
        lo, hi = min(start + rank * chunk, stop), min(start + (rank + 1) * chunk, stop)
        mine = [[(i, 1.0) for i in range(m, min(m + micro, hi))] for m in range(lo, hi, micro)]
        busiest = math.ceil(min(chunk, stop - start) / micro)
        mine += [[(start, 0.0)]] * (busiest - len(mine))
        plan.append(mine)
    return plan


@contextmanager
def torch_rng(seed: int, device: str) -> Iterator[None]:
    """Seed torch for the update without disturbing the caller's RNG state."""
    import torch

    devices = [torch.device(device).index or 0] if device.startswith("cuda") else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def load_fp32(model_dir: Path) -> Any:
    """The checkpoint's model with fp32 weights, whatever dtype it was saved in (explicit, never inferred);
    a vision-language checkpoint with its image-text-to-text class (vision tower included)."""
    import torch
    from transformers import AutoModelForCausalLM

    validate_checkpoint(Path(model_dir))
    if is_vision_language(Path(model_dir)):
        return load_vl_model(Path(model_dir), dtype=torch.float32)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def _torch_dtype(name: str) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


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

    Returns metrics: loss (last epoch mean), first_loss (first epoch mean), rows_in, rows_used,
    rows_dropped_too_long, optimizer_steps, noop.
    """
    import torch
    from trl.trainer.utils import selective_log_softmax

    _require_columns(rows, ("prompt", "response"), "sft")
    if epochs < 0 or not (0.0 < lr < 1.0) or batch_size < 1 or prompt_weight < 0:
        raise ModelError(
            f"sft needs epochs >= 0, 0 < lr < 1, batch_size >= 1 and prompt_weight >= 0, got "
            f"epochs={epochs}, lr={lr}, batch_size={batch_size}, prompt_weight={prompt_weight}"
        )
    model, tokenizer = _load(model_dir)
    vision = _vision_for(Path(model_dir), rows, tokenizer, what="sft rows")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ModelError(f"tokenizer of {model_dir} has no EOS token: SFT must teach the model to stop")
    limit = _context_limit(model.config)
    prepared: list[TrainRow] = []
    too_long = 0
    for prompt, response, images in zip(
        rows["prompt"].to_list(), rows["response"].to_list(), _row_images(rows), strict=True
    ):
        p_ids = _prompt_ids(prompt, images, tokenizer, vision)
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
        _write_atomically(out_dir, lambda tmp: _copy_checkpoint(Path(model_dir), tmp))
        return {**metrics, "noop": 1.0, "optimizer_steps": 0.0}

    device = next(model.parameters()).device
    epoch_losses: list[float] = []
    steps = 0
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
                if prompt_weight > 0:
                    loss = _weighted_sequence_nll(model, batch, device, prompt_weight, vision)
                else:
                    logps, mask = _response_logps(model, batch, device, selective_log_softmax, vision)
                    loss = -(logps * mask).sum() / mask.sum()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), SFT_GRAD_CLIP)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                steps += 1
                counter.advance(1, rows=len(batch))
                total += float(loss.detach()) * len(batch)
                count += len(batch)
            epoch_losses.append(total / count)
        counter.finish()
    _write_atomically(out_dir, lambda tmp: _save(model, tokenizer, tmp, source=Path(model_dir)))
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
        logps, mask = _response_logps(model, rows, next(model.parameters()).device, selective_log_softmax)
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

    _require_columns(rows, ("prompt", "response"), "token_logprobs")
    if micro_batch_size < 1:
        raise ModelError(f"micro_batch_size={micro_batch_size}: must be at least 1")
    model, tokenizer = _load(model_dir)
    vision = _vision_for(Path(model_dir), rows, tokenizer, what="token_logprobs rows")
    prepared = []
    for i, (prompt, response, images) in enumerate(
        zip(rows["prompt"].to_list(), rows["response"].to_list(), _row_images(rows), strict=True)
    ):
        row = TrainRow(
            _prompt_ids(prompt, images, tokenizer, vision),
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
            logps, _ = _response_logps(model, batch, device, selective_log_softmax, vision)
            out.extend(logps[i, : len(r.response_ids)].tolist() for i, r in enumerate(batch))
    return out


# --- components ------------------------------------------------------------------------------------


def _weighted_sequence_nll(
    model: Any,
    batch: Sequence[TrainRow],
    device: Any,
    prompt_weight: float,
    vision: VisionProcessor | None = None,
) -> Any:
    """Weighted token-mean NLL of whole rows: response tokens weigh 1, prompt tokens ``prompt_weight``."""
    import torch

    seqs = [r.prompt_ids + r.response_ids for r in batch]
    ids, attn = _pad_right(seqs)
    weight = torch.zeros(ids.shape)
    for i, (r, s) in enumerate(zip(batch, seqs, strict=True)):
        weight[i, : len(r.prompt_ids)] = prompt_weight
        weight[i, len(r.prompt_ids) : len(s)] = 1.0
    ids, attn, weight = ids.to(device), attn.to(device), weight[:, 1:].to(device)
    logits = _forward(model, ids, attn, batch, vision).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    ).view_as(weight)
    return (nll * weight).sum() / weight.sum()


def _pad_right(seqs: Sequence[list[int]]) -> tuple[Any, Any]:
    """Token id rows right-padded with 0 to the longest: ids and attention mask, both (B, W) long."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
    return ids, attn


def _forward(
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


def _response_logps(
    model: Any,
    batch: Sequence[TrainRow],
    device: Any,
    selective_log_softmax: Any,
    vision: VisionProcessor | None = None,
) -> tuple[Any, Any]:
    """Log-probs of each row's response tokens, right-padded: (B, T_resp_max) and its mask."""
    import torch

    ids, attn = _pad_right([r.prompt_ids + r.response_ids for r in batch])
    ids, attn = ids.to(device), attn.to(device)
    logits = _forward(model, ids, attn, batch, vision).logits[:, :-1]
    token_logps = selective_log_softmax(logits, ids[:, 1:])  # position j predicts token j+1
    resp_width = max(len(r.response_ids) for r in batch)
    out = torch.zeros((len(batch), resp_width), dtype=token_logps.dtype, device=device)
    mask = torch.zeros((len(batch), resp_width), dtype=token_logps.dtype, device=device)
    for i, r in enumerate(batch):
        p, n = len(r.prompt_ids), len(r.response_ids)
        out[i, :n] = token_logps[i, p - 1 : p - 1 + n]
        mask[i, :n] = 1.0
    return out, mask


def _row_images(rows: pl.DataFrame) -> list[tuple[str, ...]]:
    """Each row's image references (column ``images``: a list of paths; null, empty or absent: none)."""
    if "images" not in rows.columns:
        return [()] * rows.height
    out = []
    for i, refs in enumerate(rows["images"].to_list()):
        if refs is not None and (isinstance(refs, str) or not isinstance(refs, list)):
            raise ModelError(f"row {i}: images must be a list of image paths, got {refs!r:.80}")
        out.append(tuple(refs or ()))
    return out


def _vision_for(model_dir: Path, rows: pl.DataFrame, tokenizer: Any, *, what: str) -> VisionProcessor | None:
    """The processor of ``model_dir`` when ``rows`` carry images (a text-only checkpoint: ModelError)."""
    if not any(_row_images(rows)):
        return None
    require_vision_language(model_dir, what=what)
    return VisionProcessor.from_pretrained(model_dir, tokenizer=tokenizer)


def _prompt_ids(
    prompt: str, images: tuple[str, ...], tokenizer: Any, vision: VisionProcessor | None
) -> list[int]:
    """The prompt's token ids as the model saw them at generation (image slots expanded when it has images)."""
    if images:
        assert vision is not None  # _vision_for gives one whenever a row has images
        return vision.prompt_ids(ImagePrompt(prompt, images))
    ids: list[int] = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return ids


def _context_limit(config: Any) -> int:
    """The model's context length (a vision-language config keeps it in its text_config)."""
    text = getattr(config, "text_config", None) or config
    return int(getattr(text, "max_position_embeddings", 1 << 30))


def _prepare_rl_rows(
    rows: pl.DataFrame, tokenizer: Any, cfg: TrainConfig, vision: VisionProcessor | None = None
) -> tuple[list[TrainRow], dict[str, float]]:
    prepared: list[TrainRow] = []
    too_long = truncated = empty = 0
    for prompt, response, adv, images in zip(
        rows["prompt"].to_list(), rows["response"].to_list(), rows["advantage"].to_list(),
        _row_images(rows), strict=True,
    ):  # fmt: skip
        if adv is None or not math.isfinite(float(adv)):
            raise ModelError(f"advantage {adv!r} for prompt {str(prompt)[:60]!r} is not a finite number")
        p_ids = _prompt_ids(prompt, images, tokenizer, vision)
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
        prepared.append(TrainRow(p_ids, r_ids, float(adv), images))
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
    """fp32 model (see :func:`load_fp32`) and tokenizer of a checkpoint."""
    from transformers import AutoTokenizer

    model = load_fp32(model_dir)
    return model, AutoTokenizer.from_pretrained(model_dir)


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


def merge_lora(model: Any, lora: LoraConfig) -> Any:
    """The model with its LoRA adapters merged (peft ``merge_and_unload``) when LoRA is on, else itself.

    Merged so downstream stages load a plain checkpoint with no peft dependency.
    """
    return model.merge_and_unload() if lora.enabled else model


def _save(model: Any, tokenizer: Any, out: Path, *, source: Path) -> None:
    """The model and tokenizer, plus the image processor config of a vision-language ``source``."""
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    copy_processor_files(source, out)


def _copy_checkpoint(src: Path, out: Path) -> None:
    shutil.copytree(src, out, dirs_exist_ok=True)


def _write_atomically(out_dir: Path, write: Any) -> None:
    """Write a checkpoint into a temp sibling, then rename it to ``out_dir`` (never a half checkpoint)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ModelError(
            f"output directory {out_dir} is not empty: stages write new checkpoints to fresh locations"
        )
    publish_dir(out_dir, write, exists="fail")
