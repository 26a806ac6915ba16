"""The config's string choices (each an Enum, so a typo fails with the list of valid names) and the device helpers."""

from __future__ import annotations

from enum import StrEnum


class Setting(StrEnum):
    """Which of the paper's settings a run trains on."""

    TEXTGAME = "textgame"
    CODING = "coding"
    GUI = "gui"
    PLUGIN = "plugin"  # an installed environment plug-in (plugin.name; docs/environments.md)


class Backend(StrEnum):
    """Generation backend. ``auto`` picks vLLM when its interpreter exists and a CUDA GPU is visible."""

    AUTO = "auto"
    TRANSFORMERS = "transformers"
    VLLM = "vllm"


class ServerLifetime(StrEnum):
    """How long a vLLM server lives (docs/gpus-and-scale.md#server-lifetime)."""

    RUN = "run"  # one server per role for the whole run, its weights reloaded in place between stages
    STAGE = "stage"  # a server per generating stage, stopped when it ends (frees the GPUs for training)


class ProblemFormat(StrEnum):
    """The layout of a coding problem file (docs/coding-benchmarks.md)."""

    RLA = "rla"  # ours: data/coding/README.md
    LIVEBENCH = "livebench"  # LiveBench's coding category (LCB_generation, coding_completion)
    LIVECODEBENCH = "livecodebench"  # LiveCodeBench code-generation release files
    CODECONTESTS = "codecontests"  # DeepMind CodeContests


class EvalGrader(StrEnum):
    """Who grades the evaluation problems' tests (docs/coding-benchmarks.md#graders)."""

    NATIVE = "native"  # each problem's own benchmark grader, as its loader stamped it
    RLA = "rla"  # ours (whitespace tokens, coding.memory_limit_mb, coding.output_limit_kb) for every problem


class RewriterKind(StrEnum):
    """How environment tasks are rewritten (``TaskRewriter``, docs/architecture.md#cross-module-interfaces)."""

    PARAMETRIC = "parametric"
    LLM = "llm"


class InvalidAction(StrEnum):
    """What a training rollout does with an invalid answer (no ``\\boxed{}`` index, or one out of range)."""

    FALLBACK = "fallback"  # spec §5: play index 0, or the clamped index, and go on
    FAIL = "fail"  # the episode ends there as a failure (a format penalty through the outcome)


class TextGameEngine(StrEnum):
    """Which engine plays the text-game setting's tasks (docs/settings.md: one setting, several engines)."""

    TEXTWORLD = "textworld"
    ALFWORLD = "alfworld"


class InferenceDtype(StrEnum):
    """The weights dtype a generator runs in (``models.serving.dtype``); ``auto`` follows the device."""

    AUTO = "auto"
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"

    def resolve(self, *, cuda: bool) -> InferenceDtype:
        """The concrete dtype: ``auto`` is bfloat16 on a CUDA GPU (half the bytes per decoded token of
        float32) and float32 on the CPU (whose bf16 matmuls are slower); others stay as they are.

        Example:
            >>> InferenceDtype.AUTO.resolve(cuda=True), InferenceDtype.AUTO.resolve(cuda=False)
            (<InferenceDtype.BFLOAT16: 'bfloat16'>, <InferenceDtype.FLOAT32: 'float32'>)
        """
        if self is not InferenceDtype.AUTO:
            return self
        return InferenceDtype.BFLOAT16 if cuda else InferenceDtype.FLOAT32


def machine_device(device: str) -> str:
    """A config ``device`` value (``models.device``, ``training.device``) with ``auto`` made concrete on this
    machine: ``cuda`` when torch sees a GPU, else ``cpu`` (torch is imported only then); others as given.
    The one place that reads ``auto``; :func:`rla_core.models.bootstrap.resolve_device` also checks the rest."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def on_cuda(device: str) -> bool:
    """Whether a config ``device`` value computes on a CUDA GPU on this machine (``auto``: when torch sees one)."""
    return machine_device(device).startswith("cuda")


class JudgeSource(StrEnum):
    """Where the policy's step-wise reward comes from: the reward model's judgments, or (a diagnostic that
    reads privileged information) the engine's optimal actions."""

    REWARD_MODEL = "reward_model"
    ORACLE = "oracle"


class GuiEngine(StrEnum):
    """Which engine plays the GUI setting's tasks: MiniWoB++ web pages, or OSWorld tasks on local desktops."""

    MINIWOB = "miniwob"
    OSWORLD = "osworld"


class TrainDtype(StrEnum):
    """Autocast dtype of training forward/backward passes. Weights and AdamW state stay fp32 always."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


class TrainStrategy(StrEnum):
    """How multi-process updates shard the model: ``infra/accelerate/<strategy>.yaml``."""

    DDP = "ddp"
    FSDP = "fsdp"
    DEEPSPEED = "deepspeed"


class ClusterBackend(StrEnum):
    """Where generating stages do their work: in the stage's process, or sharded over a Ray cluster."""

    LOCAL = "local"
    RAY = "ray"
