"""The policy and reward-model updates (``training.*``, spec §4)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from rla_core.config.base import (
    _Section,
)
from rla_core.config.choices import (
    TrainDtype,
    TrainStrategy,
)


class TrainConfig(_Section):
    """One model's RL update (spec §4)."""

    enabled: bool = Field(True, description="False freezes this model (e.g. frozen-RM ablation).")
    lr: float = Field(1e-4, gt=0.0, lt=1.0, description="AdamW learning rate (constant).")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    eps: float = Field(1e-8, gt=0.0, description="AdamW epsilon.")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    clip_eps: float = Field(0.2, gt=0.0, lt=1.0, description="ε of the PPO clip.")
    kl_beta: float = Field(0.01, ge=0.0, description="β of the k3 KL penalty against π_old.")
    update_per_step: int = Field(4, ge=1, description="≈ optimizer steps per iteration.")
    max_prompt_len: int = Field(2048, ge=1, description="Rows with longer prompts are dropped (counted).")
    max_gen_len: int = Field(2048, ge=1, description="Responses are right-truncated to this (counted).")
    grad_clip: float = Field(1.0, gt=0.0, description="Gradient norm clip.")
    micro_batch_size: int = Field(8, ge=1, description="Rows per forward pass (memory knob only).")
    max_tokens_per_micro_batch: int | None = Field(
        8192,
        ge=1,
        description="Pack rows: a forward pass holds at most this many tokens (and micro_batch_size rows), "
        "end to end with positions restarting per row instead of right-padded; null pads.",
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in backward (memory knob; spec §4: RM in AlfWorld)."
    )

    @model_validator(mode="after")
    def _betas(self) -> Self:
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas={self.betas} must each lie in [0, 1)")
        return self


class TrainingConfig(_Section):
    """Policy and reward-model updates, and where they run (weights and AdamW state always fp32)."""

    policy: TrainConfig = Field(default_factory=TrainConfig, description="The policy's update.")
    reward: TrainConfig = Field(default_factory=TrainConfig, description="The reward model's update.")
    sft_lr: float = Field(3e-3, gt=0.0, lt=1.0, description="Learning rate of warm-start SFT.")
    sft_max_tokens_per_micro_batch: int | None = Field(
        8192,
        ge=1,
        description="Pack warm-start SFT rows as training.*.max_tokens_per_micro_batch does: each optimizer "
        "step's rows in forward passes of at most this many tokens; null pads (one pass per step).",
    )
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        description="'auto' (cuda if available), 'cpu', 'cuda[:N]'.",
    )
    dtype: TrainDtype = Field(
        TrainDtype.FP32, description="Autocast dtype (bf16/fp16 on GPU); weights and optimizer stay fp32."
    )
    processes: int = Field(
        1, ge=1, description="Worker processes; > 1 (or strategy != ddp) launches `accelerate launch`."
    )
    strategy: TrainStrategy = Field(
        TrainStrategy.DDP, description="ddp | fsdp | deepspeed: config file infra/accelerate/<strategy>.yaml."
    )
    worker_timeout_s: float = Field(
        86400.0, gt=0.0, description="A launched update running longer is killed and the stage fails."
    )
