"""One rank of a multi-process RL update; run by ``accelerate launch ... -m rla_core.models.train_worker SPEC``.

:func:`rla_core.models.update.rl_update` writes SPEC (a :class:`~rla_core.models.launch.WorkerSpec`
as JSON: checkpoint, prepared token rows, train config, LoRA, seed, device, autocast dtype) and
launches N of these under the strategy's file in ``infra/accelerate/`` (``launch.ACCELERATE_CONFIGS``),
or, with ``cluster.backend=ray``, N Ray Train workers call :func:`main` with that file's settings in
their environment (:mod:`rla_core.cluster.ray_train`).
Each rank loads the checkpoint in fp32 (a vision-language one with its image processor, when rows carry
image references), runs
:func:`~rla_core.models.update.train_loop` on its share of every optimizer step's rows through an
:class:`accelerate.Accelerator` (DDP, FSDP or DeepSpeed ZeRO-3 per the config file; gloo on CPU), and
rank 0 writes the fp32 checkpoint and the metrics. A rank that fails writes ``error-rank<r>.txt``
(the exception, one line first) into the spec's ``error_dir`` and exits non-zero; the launcher then
ends the others and the stage fails with that error.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rla_core.config import LoraConfig
from rla_core.errors import ModelError
from rla_core.models.checkpoints import load_fp32, merge_lora
from rla_core.models.launch import ACCELERATE_CONFIG_DIR, ACCELERATE_CONFIGS, ERROR_SEPARATOR, WorkerSpec
from rla_core.models.multimodal import VisionProcessor, copy_processor_files
from rla_core.models.update import torch_rng, train_loop


class AccelerateRuntime:
    """The :func:`~rla_core.models.update.train_loop` runtime of one accelerate rank."""

    def __init__(self, accelerator: Any, micro_batch_size: int) -> None:
        from accelerate.utils import DistributedType

        self.acc = accelerator
        self.rank = accelerator.process_index
        self.world = accelerator.num_processes
        self.is_main = accelerator.is_main_process
        self.device = accelerator.device
        self.kind = accelerator.distributed_type
        self.deepspeed = self.kind == DistributedType.DEEPSPEED
        self.fsdp = self.kind == DistributedType.FSDP
        if self.deepspeed:
            ds = accelerator.state.deepspeed_plugin.deepspeed_config
            # No dataloader goes through prepare(): DeepSpeed needs the per-rank micro-batch given here.
            ds["train_micro_batch_size_per_gpu"] = micro_batch_size
            ds["gradient_accumulation_steps"] = 1  # boundaries are set per backward (see backward())

    def prepare(self, model: Any, make_optimizer: Callable[[list[Any]], Any]) -> tuple[Any, Any]:
        if self.deepspeed:
            ds = self.acc.state.deepspeed_plugin.deepspeed_config
            offload = ds.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none")
            params = [p for p in model.parameters() if p.requires_grad]
            optimizer = make_optimizer(params)
            if offload not in (None, "none"):
                # ZeRO-Offload steps on CPU: DeepSpeed's CPU AdamW (adamw_mode) is the same update rule.
                from deepspeed.ops.adam import DeepSpeedCPUAdam

                group = optimizer.param_groups[0]
                optimizer = DeepSpeedCPUAdam(
                    params, lr=group["lr"], betas=group["betas"], eps=group["eps"],
                    weight_decay=group["weight_decay"], adamw_mode=True,
                )  # fmt: skip
            prepared: tuple[Any, Any] = self.acc.prepare(model, optimizer)
            return prepared
        # DDP/FSDP: wrap (shard) first, then build the optimizer over the wrapped parameters.
        model = self.acc.prepare(model)
        optimizer = self.acc.prepare(make_optimizer([p for p in model.parameters() if p.requires_grad]))
        return model, optimizer

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()  # accelerate's: prepare() wraps forward in the configured autocast

    def sync_context(self, model: Any, sync: bool) -> contextlib.AbstractContextManager[Any]:
        # Micro-batches before the last of an optimizer step accumulate locally (DDP/FSDP no_sync).
        return contextlib.nullcontext() if sync or self.deepspeed else self.acc.no_sync(model)

    def backward(self, loss: Any, sync: bool) -> None:
        if self.deepspeed:
            self._set_deepspeed_boundary(sync)
        self.acc.backward(loss)

    def _set_deepspeed_boundary(self, boundary: bool) -> None:
        """Whether the next ``accelerator.backward`` ends an optimizer step under DeepSpeed.

        ``Accelerator.backward`` passes ``accelerator.sync_gradients`` to DeepSpeed's
        ``engine.set_gradient_accumulation_boundary`` and runs ``engine.step()`` (clip, step, zero grad)
        when it is true. We set it through ``Accelerator.sync_gradients``' public setter (checked
        against accelerate 1.16.0) instead of ``accumulate()``, whose fixed ``gradient_accumulation_steps``
        cannot express a last optimizer step with fewer micro-batches.
        """
        self.acc.sync_gradients = boundary

    def clip_and_step(self, model: Any, optimizer: Any, max_norm: float) -> float:
        if self.deepspeed:
            # The engine clipped (config gradient_clipping) and stepped in the boundary backward.
            norm = self.acc.deepspeed_engine_wrapped.get_global_grad_norm()
            self._set_deepspeed_boundary(True)
            return float(norm if norm is not None else math.nan)
        norm = self.acc.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def reduce_sum(self, values: list[float]) -> list[float]:
        import torch

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        return [float(v) for v in self.acc.reduce(t, reduction="sum").tolist()]


def run(spec: WorkerSpec) -> None:
    """Run one rank of the update described by ``spec`` (see the module docstring)."""
    import torch
    from accelerate import Accelerator

    cpu = spec.device == "cpu"
    if cpu and spec.threads:
        torch.set_num_threads(max(1, spec.threads // _world_from_env()))
    accelerator = Accelerator(cpu=cpu)
    cfg, lora = spec.cfg, spec.lora
    runtime = AccelerateRuntime(accelerator, cfg.micro_batch_size)
    if runtime.deepspeed:
        clip = runtime.acc.state.deepspeed_plugin.deepspeed_config.get("gradient_clipping")
        if clip is not None and float(clip) != cfg.grad_clip:
            config_file = ACCELERATE_CONFIG_DIR / ACCELERATE_CONFIGS["deepspeed"]
            raise ModelError(
                f"DeepSpeed config clips gradients at {clip} but grad_clip={cfg.grad_clip}: set "
                f"gradient_clipping in {config_file} to the same value"
            )
    # Created after the Accelerator so ZeRO-3 init (zero3_init_flag) partitions weights while loading.
    model = load_fp32(spec.model_dir)
    # Rows with images: each rank reads their pixels from the files (references, never pixels, travel).
    vision = VisionProcessor.from_pretrained(spec.model_dir) if any(r.images for r in spec.rows) else None
    with torch_rng(spec.seed, str(accelerator.device)):
        model, metrics = train_loop(
            model, list(spec.rows), cfg=cfg, lora=lora, runtime=runtime, vision=vision
        )
    _save(runtime, model, spec.model_dir, spec.out_dir, lora, spec.error_dir)
    if runtime.is_main:
        spec.metrics_path.write_text(json.dumps(metrics))
    accelerator.wait_for_everyone()
    accelerator.end_training()


def _save(
    runtime: AccelerateRuntime, model: Any, model_dir: Path, out: Path, lora: LoraConfig, work: Path
) -> None:
    """Rank 0 writes the updated weights as an fp32 checkpoint (LoRA merged) plus the tokenizer."""
    from transformers import AutoTokenizer

    acc = runtime.acc
    acc.wait_for_everyone()
    if runtime.deepspeed:
        # ZeRO-3's 16-bit gather would save bf16 weights; the fp32 master weights come from zero_to_fp32.
        ds_dir = work / "zero"
        model.save_checkpoint(str(ds_dir))
        acc.wait_for_everyone()
        state = None
        if runtime.is_main:
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

            state = get_fp32_state_dict_from_zero_checkpoint(str(ds_dir))
    elif runtime.fsdp:
        state = acc.get_state_dict(model)  # full state dict on rank 0 (fp32 flat parameters)
    else:
        state = None
    if runtime.is_main:
        unwrapped = acc.unwrap_model(model)
        if state is None:  # DDP: the local replica holds every weight
            merged = merge_lora(unwrapped, lora).to("cpu")
            merged.save_pretrained(out)
        else:
            base = unwrapped.get_base_model() if lora.enabled else unwrapped
            sd = merge_lora_state_dict(state, lora) if lora.enabled else state
            base.save_pretrained(out, state_dict={k: v.float() for k, v in sd.items()})
        AutoTokenizer.from_pretrained(model_dir).save_pretrained(out)
        copy_processor_files(model_dir, out)
    acc.wait_for_everyone()


def merge_lora_state_dict(state: dict[str, Any], lora: LoraConfig) -> dict[str, Any]:
    """A peft LoRA model's full state dict as the merged base model's: W ← W + (α/r)·B·A per adapted layer.

    For strategies whose weights only exist as a gathered state dict (FSDP, ZeRO-3), where peft's
    ``merge_and_unload`` cannot run on the sharded module.
    """
    prefix = "base_model.model."
    scaling = lora.alpha / lora.r
    out: dict[str, Any] = {}
    for key, value in state.items():
        if ".lora_A." in key or ".lora_B." in key:
            continue
        name = key.removeprefix(prefix).replace(".base_layer.", ".")
        if key.endswith(".base_layer.weight"):
            stem = key.removesuffix(".base_layer.weight")
            a, b = state[f"{stem}.lora_A.default.weight"], state[f"{stem}.lora_B.default.weight"]
            value = value.float() + scaling * (b.float() @ a.float())
        out[name] = value
    return out


def _world_from_env() -> int:
    import os

    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: accelerate launch ... -m rla_core.models.train_worker SPEC.json", file=sys.stderr)
        return 2
    spec = WorkerSpec.read(Path(argv[0]))
    try:
        run(spec)
    except BaseException as exc:
        import os

        rank = os.environ.get("RANK", "0")
        (spec.error_dir / f"error-rank{rank}.txt").write_text(
            f"rank {rank}: {type(exc).__name__}: {exc}{ERROR_SEPARATOR}{traceback.format_exc()}"
        )
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
