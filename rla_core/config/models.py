"""Which models play policy, reward model and environment model, their sizes, and how they generate (``models.*``)."""

from __future__ import annotations

from pydantic import Field

from rla_core.config.base import (
    _Section,
)
from rla_core.config.choices import (
    Backend,
    InferenceDtype,
    ServerLifetime,
)


class LoraConfig(_Section):
    """Optional LoRA adapters (peft) for policy and reward model; off by default."""

    enabled: bool = Field(False, description="Train LoRA adapters instead of all weights.")
    r: int = Field(8, ge=1, le=1024, description="LoRA rank.")
    alpha: int = Field(16, ge=1, description="LoRA scaling alpha.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout.")
    target_modules: tuple[str, ...] = Field(
        ("q_proj", "k_proj", "v_proj", "o_proj"), description="Module names that get adapters."
    )


class RoleSizes(_Section):
    """One size per model role (spec §6: policy TP 4, reward and environment model TP 8)."""

    policy: int = Field(1, ge=1, description="For the policy's server.")
    reward: int = Field(1, ge=1, description="For the reward model's server.")
    environment: int = Field(1, ge=1, description="For the environment model's server.")


class ServingConfig(_Section):
    """How a stage turns its input checkpoint into a generator (docs/architecture.md#cross-module-interfaces).

    With the vLLM backend every generating stage generates from exactly its input checkpoint: by
    default (``lifetime: run``) from the run's one server of the stage's role, whose weights are
    reloaded in place when the stage's checkpoint differs from what it serves (and checked by hash
    before any request); with ``lifetime: stage`` from a server started on the checkpoint and stopped
    when the stage ends. Keys in :data:`SPEED_ONLY_KEYS` change speed, not results, and stay out of
    stage keys.
    """

    backend: Backend = Field(
        Backend.AUTO,
        description="'transformers' (in process), 'vllm' (a vLLM server: see 'lifetime'), or 'auto': vLLM when "
        "'interpreter' exists and a CUDA GPU is visible, else transformers.",
    )
    dtype: InferenceDtype = Field(
        InferenceDtype.AUTO,
        description="Weights dtype generation runs in, on both backends: 'auto' is bfloat16 when "
        "models.device resolves to a CUDA GPU and float32 on the CPU (resolved before it enters a stage "
        "key, and passed to vLLM as that value); or 'float32', 'bfloat16', 'float16'.",
    )
    chat_template: bool = Field(
        False,
        description="Render prompts in the tokenizer's chat markup (one user turn) when it has a chat "
        "template; the recorded prompt is the marked-up text the model saw.",
    )
    extra_args: tuple[str, ...] = Field(
        (), description="Extra `vllm serve` arguments (e.g. ['--max-model-len', '8192'])."
    )
    interpreter: str = Field(
        ".venv-vllm/bin/python",
        description="Python of the environment that has vLLM (relative paths from the working directory).",
    )
    tensor_parallel: RoleSizes = Field(
        default_factory=lambda: RoleSizes(), description="vLLM tensor-parallel size per role."
    )
    max_in_flight: int = Field(64, ge=1, description="Concurrent requests per vLLM server at most.")
    startup_timeout_s: float = Field(900.0, gt=0.0, description="How long a vLLM server may take to load.")
    lifetime: ServerLifetime = Field(
        ServerLifetime.RUN,
        description="'run': one vLLM server per role for the whole `rla run`, its weights reloaded in place "
        "when a stage's input checkpoint differs (its GPUs stay taken during the train stages); 'stage': "
        "a server per generating stage, stopped when the stage ends (the GPUs are free for training). "
        "With cluster.backend=ray and 'run', each replica's actor is kept for the run with a server of its own.",
    )


# Model references of the tiny models the project builds locally (rla_core.models.bootstrap.resolve_model):
# 'tiny:<name>' a text model, 'tiny-vl:<name>' a vision-language one.
TINY_PREFIX = "tiny:"
TINY_VL_PREFIX = "tiny-vl:"


class ImagesConfig(_Section):
    """Which screenshots the vision-language roles see (GUI setting; docs/vision-language.md)."""

    policy: int = Field(
        0,
        ge=0,
        le=8,
        description=(
            "Screens in the policy's prompt: 0 none (text only), 1 the current screen, k the current one "
            "and the k-1 before it in the episode."
        ),
    )
    reward: bool = Field(
        False, description="The judge sees the step's screen and the screen after it (spec §1.3)."
    )

    @property
    def any(self) -> bool:
        return self.policy > 0 or self.reward


class TinySize(_Section):
    """The size of a bootstrapped tiny model (``tiny:<name>``, ``tiny-vl:<name>``): Qwen2 with head_dim 64."""

    width: int = Field(
        128, ge=64, le=4096, multiple_of=64,
        description="Hidden size; attention heads = width / 64 (vLLM's CPU kernels need head_dim 64), "
        "MLP size = 2 × width.",
    )  # fmt: skip
    layers: int = Field(2, ge=1, le=64, description="Transformer layers.")


class TinySizes(_Section):
    """Per role, the size a tiny model is bootstrapped at (it enters the model's cache key)."""

    policy: TinySize = Field(default_factory=lambda: TinySize(), description="The tiny policy.")
    reward: TinySize = Field(default_factory=lambda: TinySize(), description="The tiny judge (reward model).")
    environment: TinySize = Field(
        default_factory=lambda: TinySize(), description="The tiny environment model."
    )


class ModelsConfig(_Section):
    """Which models play policy, reward model and environment model, and how they generate."""

    policy: str = Field(
        "tiny:policy",
        description="Local checkpoint dir, hub id (needs network), or 'tiny:<name>' to bootstrap a tiny local model.",
    )
    reward: str = Field("tiny:reward", description="Reward model (generative judge); same forms as policy.")
    environment: str | None = Field(
        None,
        description="Environment model (task rewriter / failure summaries); None uses the parametric rewriter.",
    )
    serving: ServingConfig = Field(
        default_factory=lambda: ServingConfig(),
        description="How checkpoints generate: backend, vLLM servers, chat markup (docs/architecture.md#cross-module-interfaces).",
    )
    device: str = Field("auto", description="'auto', 'cpu' or 'cuda[:N]' for the transformers backend.")
    generation_batch_size: int = Field(32, ge=1, description="Prompts per transformers generate call.")
    history_turns: int = Field(
        2, ge=0, description="Earlier (observation, action) turns shown in the policy prompt."
    )
    images: ImagesConfig = Field(
        default_factory=lambda: ImagesConfig(),
        description="Screenshots in the prompts of vision-language policy and judge (GUI setting).",
    )
    warm_start: bool = Field(True, description="SFT tiny models on expert demonstrations before iteration 1.")
    warm_start_epochs: int = Field(20, ge=0, description="Passes over the warm-start demonstrations.")
    reward_warm_start_epochs: int | None = Field(
        None, ge=0, description="Passes over the judge's demonstrations; None uses warm_start_epochs."
    )
    environment_warm_start_epochs: int | None = Field(
        None,
        ge=0,
        description="Passes over a tiny environment model's rewrite demonstrations (OSWorld); None uses "
        "warm_start_epochs.",
    )
    warm_start_seed: int | None = Field(
        None,
        description="Seed of the warm start; None derives it from the run seed. A fixed one shares it across seeds.",
    )
    reward_label_noise: float = Field(
        0.0,
        ge=0.0,
        le=0.5,
        description="Share of the judge's warm-start step labels flipped (seeded): a weak judge (benchmarks).",
    )
    policy_demo_noise: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description=(
            "Multi-step settings: 0 warm-starts the policy on the tasks' walkthroughs; above 0 on "
            "policy_demo_episodes noisy-expert episodes per task, each step a random admissible action "
            "with this probability (a weak but well-formed policy: benchmarks)."
        ),
    )
    policy_demo_episodes: int = Field(
        4, ge=1, description="Noisy-expert demonstration episodes per task (when policy_demo_noise > 0)."
    )
    policy_reading_drills: int = Field(
        0,
        ge=0,
        description=(
            "Text games, tiny policy: reading drills (a random listed action and its number, on "
            "demonstration prompts and made-up lists) trained for one pass before the demonstrations, so "
            "a policy trained from scratch reads its action list (benchmarks; 0 = none)."
        ),
    )
    policy_reading_lr: float = Field(
        1e-3, gt=0.0, lt=1.0, description="Peak learning rate of the reading drills."
    )
    cache_dir: str = Field(".cache/models", description="Where bootstrapped tiny models are cached.")
    tiny: TinySizes = Field(
        default_factory=lambda: TinySizes(),
        description="Sizes of the tiny models, per role (tiny:<name> refs).",
    )
    lora: LoraConfig = Field(default_factory=LoraConfig)
