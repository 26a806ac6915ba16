"""The run configuration: one typed, validated, hashable config for the whole loop.

Load with :func:`load_config` (an optional YAML file, an optional preset, then ``key=value``
overrides). Every field documents its meaning and the spec section it comes from. Unknown keys,
wrong types and out-of-range values raise :class:`~rla_core.errors.ConfigError` naming the key.

Example:
    >>> cfg = load_config(overrides=["rollout.rollouts_per_task=4"])
    >>> cfg.rollout.rollouts_per_task
    4
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rla_core.errors import ConfigError


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


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    @model_validator(mode="before")
    @classmethod
    def _given_in_part(cls, data: Any) -> Any:
        """A subsection given in part keeps its *declared* value for every key it does not name.

        The declared value of a subsection is the field's default here (e.g. ``judge.sampling``'s
        ``top_p=1.0``), not its class's defaults: without this merge, setting one key of a section would
        silently move its siblings to the class defaults.
        """
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, info in cls.model_fields.items():
            section = _section_type(info.annotation)
            if section is not None and isinstance(out.get(name), dict):
                declared = info.get_default(call_default_factory=True)
                if isinstance(declared, BaseModel):
                    out[name] = merge_config(section, declared.model_dump(), out[name])
        return out


def _section_type(annotation: Any) -> type[BaseModel] | None:
    """The section model a field holds, or None for a leaf (a dict-typed field is a leaf: replaced whole)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def merge_config(model: type[BaseModel], base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` merged onto ``base`` key by key, walking only into ``model``'s sections.

    A leaf in ``top`` replaces the one in ``base`` whole, so a list or a dict (``cluster.resources``)
    given in a later layer is the value, never a union with the earlier one.

    >>> merge_config(RunConfig, {"judge": {"m": 3, "sampling": {"top_p": 1.0}}}, {"judge": {"sampling": {"top_p": 0.9}}})
    {'judge': {'m': 3, 'sampling': {'top_p': 0.9}}}
    """
    out = dict(base)
    for key, value in top.items():
        info = model.model_fields.get(key)
        section = _section_type(info.annotation) if info is not None else None
        if section is not None and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_config(section, out[key], value)
        else:
            out[key] = value
    return out


def config_leaves(model: type[BaseModel], data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted key, value)`` of every leaf of ``data`` that ``model`` declares, in declaration order.

    Sections are walked into; any other value (scalars, lists, tuples, dicts, nulls) is one leaf.

    >>> config_leaves(RunConfig, {"judge": {"m": 3, "sampling": {"stop": []}}, "cluster": {"resources": {}}})
    [('judge.m', 3), ('judge.sampling.stop', []), ('cluster.resources', {})]
    """
    out: list[tuple[str, Any]] = []
    for name, info in model.model_fields.items():
        if name not in data:
            continue
        section = _section_type(info.annotation)
        if section is not None and isinstance(data[name], dict):
            out.extend(config_leaves(section, data[name], f"{prefix}{name}."))
        else:
            out.append((f"{prefix}{name}", data[name]))
    return out


class Band(_Section):
    """An inclusive accuracy band ``low <= acc <= high``."""

    low: float = Field(ge=0.0, le=1.0, description="Lower bound, inclusive.")
    high: float = Field(ge=0.0, le=1.0, description="Upper bound, inclusive.")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.low > self.high:
            raise ValueError(
                f"band low={self.low} is above high={self.high}: no task could pass the filter; "
                "set low <= high"
            )
        return self

    def contains(self, acc: float) -> bool:
        """Whether ``acc`` lies inside the band (both ends inclusive)."""
        return self.low <= acc <= self.high


class SamplingConfig(_Section):
    """Sampling parameters of one generation request (spec §6)."""

    temperature: float = Field(0.8, ge=0.0, le=5.0, description="0 means greedy decoding.")
    top_p: float = Field(0.95, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(64, ge=1, le=65536, description="New tokens per sample at most.")
    stop: tuple[str, ...] = Field(
        default=(), description="Stop strings; the text is cut before the first one (spec §6)."
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


# Keys that change how fast or where a stage computes, never what it produces: stages read them through
# their typed slices (rla_core.stage_inputs) but they are left out of content keys, so moving a run to
# more GPUs, processes or another machine keeps its cached stages. The one declaration of that rule.
SPEED_ONLY_KEYS: tuple[str, ...] = (
    "models.serving.interpreter",
    "models.serving.tensor_parallel",
    "models.serving.max_in_flight",
    "models.serving.startup_timeout_s",
    # A reloaded server holds the same weights (checked by hash) as one started on the checkpoint.
    "models.serving.lifetime",
    # Rows are generated per prompt from their own seeded stream, so how prompts are batched does not
    # change them (tests/envs/test_rollout.py: joint = per-episode rows); the device only changes float
    # reduction order, as training.device below. The dtype it picks with models.serving.dtype=auto does
    # change rows: that enters the generating stages' keys resolved (stage_inputs.GenerationModels).
    "models.generation_batch_size",
    "models.device",
    # Content-addressed caches: where they live changes nothing they hold.
    "models.cache_dir",
    "textgame.game_cache_dir",
    # OSWorld: how many desktops play at once (episodes are cut into waves, each played alone: the same rows),
    # and where the downloaded task files live (a missing file makes a task unavailable, never different).
    "gui.osworld.desktops",
    "gui.osworld.cache_dir",
    # Where updates run: same objective, row order and effective batch on every placement;
    # only float reduction order differs (2 CPU processes with one thread each match 1 bit for bit),
    # like tensor_parallel above. training.dtype is NOT here: bf16/fp16 autocast changes the numbers.
    "training.device",
    "training.processes",
    "training.strategy",
    "training.worker_timeout_s",
    # Where generating stages run: shards are cut from the canonical episode/step order and
    # every row is sampled from its own seeded stream, so the merged artifacts equal the local ones.
    "cluster",
)


def speed_only(key: str) -> bool:
    """Whether dotted config ``key`` is (or lies under) one of :data:`SPEED_ONLY_KEYS`."""
    return any(key == k or key.startswith(f"{k}.") for k in SPEED_ONLY_KEYS)


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
    lora: LoraConfig = Field(default_factory=LoraConfig)


class RolloutConfig(_Section):
    """Policy rollouts per iteration (spec §1, §6)."""

    tasks_per_iter: int = Field(4, ge=1, description="Active slots sampled per iteration (plus all pending).")
    rollouts_per_task: int = Field(4, ge=1, description="n: rollouts per task.")
    max_steps: int = Field(8, ge=1, description="Episode cut after this many agent steps.")
    sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(temperature=0.8, top_p=0.95, max_new_tokens=24)
    )
    invalid_action: InvalidAction = Field(
        InvalidAction.FALLBACK,
        description=(
            "Multi-step settings, training rollouts only: 'fallback' plays the spec's fallback action "
            "(index 0, or the clamped index); 'fail' ends the episode at an invalid answer as a failure. "
            "Evaluation always uses the fallback, so held-out numbers stay comparable."
        ),
    )
    env_retries: int = Field(
        2,
        ge=0,
        description=(
            "Replays of an episode whose environment failed (env_error: a desktop, browser or sandbox died), "
            "on a fresh environment with the same seeds; rollout and evaluate stages, and coding's execute "
            "stage (a reward-model test run whose sandbox died). It changes which attempts are kept, so it "
            "is part of their stage keys (docs/environment-errors.md)."
        ),
    )
    max_env_error_share: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description=(
            "If more than this share of a rollout or evaluate stage's episodes is still env_error after the "
            "retries, the stage fails loudly (not committed; `rla resume` plays it again)."
        ),
    )


class JudgeConfig(_Section):
    """Reward-model step judgments (spec §1.2(b), §5)."""

    m: int = Field(3, ge=1, description="Independent judgments per step.")
    source: JudgeSource = Field(
        JudgeSource.REWARD_MODEL,
        description="reward_model: the reward model judges every step; oracle (a diagnostic, never a default): "
        "every vote is +1 when the played action is one of the engine's optimal next actions and -1 otherwise, "
        "and no judge stage runs — the upper bound of the step-wise reward (privileged information).",
    )
    sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(temperature=0.8, top_p=1.0, max_new_tokens=24)
    )


class RewardConfig(_Section):
    """Integrated and consistency rewards (spec §2.1, §2.2)."""

    lam: float = Field(1.0, ge=0.0, description="λ: weight on the mean step score (paper knob; code uses 1).")
    use_outcome: bool = Field(True, description="False sets O := 0 (step-wise-only ablation, spec §8.1).")
    use_stepwise: bool = Field(True, description="False drops the step term (outcome-only ablation).")
    std_eps: float = Field(1e-8, ge=0.0, description="Group std at or below this gives advantage 0.")
    invalid_judgment_penalty: float = Field(-2.0, le=0.0, description="RM reward for an unparsable judgment.")
    policy_acc_band: Band = Field(
        default_factory=lambda: Band(low=0.125, high=0.875),
        description="Tasks whose acc lies outside are dropped from policy data (setting defaults, spec §6).",
    )
    rm_acc_band: Band = Field(
        default_factory=lambda: Band(low=0.2, high=0.8),
        description="Tasks whose acc lies outside are dropped from RM data (setting defaults, spec §6).",
    )


class CodingConfig(_Section):
    """Coding setting: unit-test-writing reward model and execution limits (spec §1.1, §2.3-2.5)."""

    problems: str = Field("data/coding/problems.jsonl", description="Seed problem set (JSONL).")
    eval_problems: str = Field(
        "data/coding/eval.jsonl",
        description="Held-out problems for evaluation: a JSONL or Parquet file in eval_format.",
    )
    eval_format: ProblemFormat = Field(
        ProblemFormat.RLA,
        description="Layout of eval_problems: rla (ours), livebench, livecodebench or codecontests "
        "(a user's local copy of the paper's benchmarks, docs/coding-benchmarks.md).",
    )
    eval_limit: int = Field(
        0, ge=0, description="Evaluate on the first N valid problems of eval_problems; 0 = all of them."
    )
    benchmark_time_limit_s: float = Field(
        6.0,
        gt=0.0,
        le=60.0,
        description="Per-test limit for benchmark problems whose rows carry none (LiveBench and "
        "LiveCodeBench grade with 6 s); CodeContests rows carry their own.",
    )
    unit_tests_per_task: int = Field(4, ge=1, description="K: unit tests the RM writes per task.")
    unit_test_sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(temperature=0.8, top_p=1.0, max_new_tokens=64)
    )
    env_time_limit_s: float = Field(4.0, gt=0.0, le=60.0, description="Per-test limit for rewritten tasks.")
    memory_limit_mb: int = Field(256, ge=16, description="Address-space limit per program.")
    output_limit_kb: int = Field(256, ge=1, description="Largest stdout a program may write.")
    max_parallel: int = Field(0, ge=0, description="Concurrent executions; 0 = number of cores.")
    min_rewrite_tests: int = Field(4, ge=1, description="A rewritten problem needs at least this many tests.")
    max_prompt_test_chars: int = Field(
        100, ge=1, description="Tests longer than this are left out of the env prompt."
    )


class TextGameConfig(_Section):
    """Text-game setting task sets and engine (TextWorld games, or ALFWorld-style household games)."""

    engine: TextGameEngine = Field(
        TextGameEngine.TEXTWORLD,
        description="textworld: generated TextWorld games; alfworld: ALFRED-domain games (rla_core/envs/alfworld).",
    )
    tasks: str = Field("data/textworld/train.jsonl", description="Seed training task specs (JSONL).")
    eval_tasks: str = Field("data/textworld/eval.jsonl", description="Held-out evaluation task specs.")
    game_cache_dir: str = Field(".cache/games", description="Compiled games, cached by spec hash.")


class OsworldConfig(_Section):
    """OSWorld tasks on local desktops (``gui.engine: osworld``; docs/osworld.md)."""

    desktops: int = Field(
        0,
        ge=0,
        le=64,
        description="Local desktops in the pool (one per open episode); 0 sizes it to the machine.",
    )
    cache_dir: str = Field(
        ".cache/osworld",
        description="desktop_env's file cache (<cache_dir>/<task id>/…); fill it with "
        "`python -m rla_core.envs.osworld.cache fill`.",
    )
    a11y_max_tokens: int = Field(
        600,
        ge=50,
        description="Budget of the linearised accessibility tree in the observation (words and marks).",
    )
    max_clicks: int = Field(
        12,
        ge=0,
        description="Click candidates offered per step: those sharing the most words with the task first "
        "(docs/osworld.md).",
    )
    step_pause_s: float = Field(
        0.5, ge=0.0, le=30.0, description="Seconds DesktopEnv.step waits after an action before observing."
    )


class GuiConfig(_Section):
    """GUI setting task sets: MiniWoB++ in headless Chromium (browsers), or OSWorld on local desktops."""

    engine: GuiEngine = Field(
        GuiEngine.MINIWOB,
        description="miniwob: MiniWoB++ web tasks; osworld: OSWorld-format tasks on local desktops (docs/osworld.md).",
    )
    tasks: str = Field(
        "data/gui/train.jsonl",
        description="Seed training tasks: MiniWoB++ specs (JSONL); osworld: an OSWorld meta list (.json) or JSONL of examples.",
    )
    eval_tasks: str = Field("data/gui/eval.jsonl", description="Held-out evaluation tasks (same forms).")
    browsers: int = Field(
        0, ge=0, le=64, description="Browser instances in the pool; 0 sizes it to the machine."
    )
    call_timeout_s: float = Field(10.0, gt=0.0, le=600.0, description="Timeout of every browser call.")
    screenshots: bool = Field(True, description="Keep a PNG per training step (rollouts.observation_ref).")
    osworld: OsworldConfig = Field(
        default_factory=lambda: OsworldConfig(), description="Used when engine is osworld."
    )


class PluginConfig(_Section):
    """An environment plug-in from its own package (``setting: plugin``; docs/environments.md)."""

    name: str = Field(
        "",
        description="The plug-in's entry-point name in the 'rlanything.environments' group (an unknown name "
        "lists the installed ones).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="The plug-in's own options, validated by its options model when the config is loaded.",
    )


class AdaptationConfig(_Section):
    """Environment task adaptation (spec §3)."""

    enabled: bool = Field(True, description="False keeps the task set static (ablation).")
    alpha_low: float = Field(0.2, ge=0.0, le=1.0, description="acc at/below this → make easier.")
    alpha_high: float = Field(0.8, ge=0.0, le=1.0, description="acc at/above this → make harder.")
    low_inclusive: bool = Field(
        True, description="Easier when acc <= alpha_low (coding uses acc < alpha_low)."
    )
    accept_band: Band = Field(
        default_factory=lambda: Band(low=0.2, high=0.8),
        description="Harder variants need new_acc >= low; easier ones new_acc <= high (spec §3).",
    )
    rewriter: RewriterKind = Field(RewriterKind.PARAMETRIC, description="Parametric or LLM rewriter.")
    candidates: int = Field(3, ge=1, description="k: rewrite candidates per task; first valid wins.")
    sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(temperature=0.8, top_p=1.0, max_new_tokens=256)
    )

    @model_validator(mode="after")
    def _thresholds(self) -> Self:
        if self.alpha_low >= self.alpha_high:
            raise ValueError(
                f"alpha_low={self.alpha_low} must be below alpha_high={self.alpha_high}: otherwise a task "
                "could be both too easy and too hard"
            )
        return self


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


class EvalConfig(_Section):
    """Held-out evaluation (spec §1.2 step 5)."""

    every: int = Field(2, ge=1, description="Evaluate every k iterations and after the last.")
    rollouts_per_task: int = Field(2, ge=1, description="Rollouts per held-out task.")
    max_steps: int = Field(10, ge=1, description="Episode cut for evaluation.")
    sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(temperature=0.8, top_p=0.95, max_new_tokens=24)
    )


class ClusterBackend(StrEnum):
    """Where generating stages do their work: in the stage's process, or sharded over a Ray cluster."""

    LOCAL = "local"
    RAY = "ray"


class RoleReplicas(_Section):
    """Shards (replicas of the stage's input checkpoint) per generating role; null: ``cluster.workers``."""

    policy: int | None = Field(None, ge=1, description="Rollout and evaluate shards.")
    reward: int | None = Field(None, ge=1, description="Judge shards.")
    environment: int | None = Field(None, ge=1, description="Shards generating with the environment model.")


class ClusterConfig(_Section):
    """Sharding generating stages and running updates over Ray (docs/cluster.md). Every key is speed-only
    (SPEED_ONLY_KEYS)."""

    backend: ClusterBackend = Field(
        ClusterBackend.LOCAL,
        description="'local': each stage plays, judges and evaluates in its own process; 'ray': it splits its "
        "work into deterministic shards ('replicas' of its role, else 'workers'), one Ray actor each, and merges them in canonical order, "
        "and multi-process updates (training.processes > 1, fsdp, deepspeed) run as training.processes Ray "
        "Train workers with the per-worker resources below instead of `accelerate launch`.",
    )
    address: str | None = Field(
        None,
        description="null: start an embedded Ray for this process (stopped at exit); 'auto' or 'ray://host:port' "
        "or 'host:port': attach to a running cluster.",
    )
    workers: int = Field(
        2,
        ge=1,
        description="Shards (one Ray actor each) per generating stage, unless 'replicas' sets its role's "
        "count; also the Ray workers of sandboxed executions.",
    )
    replicas: RoleReplicas = Field(
        default_factory=lambda: RoleReplicas(),
        description="Shards per generating stage by the role it generates with (policy: rollout and "
        "evaluate; reward: judge), each serving the stage's input checkpoint; null: 'workers'.",
    )
    cpus_per_worker: float = Field(1.0, gt=0.0, description="Ray CPUs reserved by each shard's actor.")
    gpus_per_worker: float = Field(
        0.0,
        ge=0.0,
        description="Ray GPUs reserved by each actor that computes in its own process (transformers "
        "shards, Ray Train workers). Above 0 also puts vLLM shards on GPUs: each reserves its role's "
        "models.serving.tensor_parallel GPUs (0: the CPU vLLM build, no GPUs).",
    )
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources each actor needs, e.g. {'rla_worker': 1} on nodes started with "
        "--resources '{\"rla_worker\": 1}' to place one shard per node.",
    )
    node_ip_address: str | None = Field(
        None, description="Embedded Ray only: the node address to bind (e.g. 127.0.0.1); null lets Ray pick."
    )
    start_timeout_s: float = Field(
        120.0, gt=0.0, description="Seconds to wait for the shard actors to start."
    )
    connect_timeout_s: float = Field(
        5.0,
        gt=0.0,
        le=600.0,
        description="Seconds the preflight (`rla config check`, and every run before it writes anything) "
        "waits for 'address' to accept a connection; past it the run is refused.",
    )

    def replicas_for(self, role: str) -> int:
        """Shards of a stage that generates with ``role``: ``replicas.<role>``, or ``workers`` when null."""
        if str(role) not in RoleReplicas.model_fields:
            raise ConfigError(
                f"role {role!r} has no cluster.replicas entry; roles: {', '.join(RoleReplicas.model_fields)}"
            )
        count = getattr(self.replicas, str(role))
        return self.workers if count is None else int(count)

    def most_actors(self) -> int:
        """The most shard actors one stage starts: what an embedded Ray is sized for."""
        return max([self.workers, *(n for n in self.replicas.model_dump().values() if n is not None)])

    def kept_actors(self) -> int:
        """The most replica actors a run keeps at once (vLLM with ``models.serving.lifetime: run``, each with
        its own server: docs/gpus-and-scale.md#server-lifetime): one per replica of every role."""
        return sum(self.replicas_for(role) for role in RoleReplicas.model_fields)


class TrackingConfig(_Section):
    """MLflow tracking."""

    mlflow_uri: str = Field("sqlite:///mlflow.db", description="MLflow tracking URI.")
    experiment: str = Field("rlanything", description="MLflow experiment name.")


class StorageConfig(_Section):
    """Checkpoint retention (operations.md, "Checkpoint retention"): iteration 0 is never pruned."""

    # No stage reads it (it is in no stage slice), so changing it re-runs nothing.

    keep_last: int | None = Field(
        None,
        description="Keep the checkpoints of the last k iterations (any of their stages can re-run) and the "
        "ones the earliest of them started from; older ones are deleted after each iteration. null: keep all.",
    )
    keep_every: int | None = Field(None, description="Also keep iterations n, 2n, …; needs keep_last.")

    @model_validator(mode="after")
    def _at_least_one(self) -> Self:
        for key, value in (("keep_last", self.keep_last), ("keep_every", self.keep_every)):
            if value is not None and value < 1:
                raise ValueError(f"storage.{key}={value}: must be at least 1; null keeps every checkpoint")
        if self.keep_every is not None and self.keep_last is None:
            raise ValueError(
                f"storage.keep_every={self.keep_every} thins what keep_last prunes, and keep_last is null (keep "
                "everything): set storage.keep_last too, or leave keep_every null"
            )
        return self

    def describe(self) -> str:
        """``storage.keep_last=2, storage.keep_every=5``: the setting as an error message names it."""
        return ", ".join(f"storage.{k}={'null' if v is None else v}" for k, v in self.model_dump().items())


class RunConfig(_Section):
    """Everything one training run needs. Its hash identifies the run's configuration."""

    setting: Setting = Field(Setting.TEXTGAME, description="Which setting to train on.")
    seed: int = Field(10086, description="Master seed (spec §4); every stage derives its own.")
    iterations: int = Field(3, ge=1, description="RL iterations (one iteration = one RL step).")
    artifact_root: str = Field("runs", description="Local path or s3:// URI for artifacts.")
    threads: int = Field(2, ge=1, description="torch threads on CPU (determinism needs a fixed value).")
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    adaptation: AdaptationConfig = Field(default_factory=AdaptationConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    evaluation: EvalConfig = Field(default_factory=EvalConfig)
    textgame: TextGameConfig = Field(default_factory=TextGameConfig)
    coding: CodingConfig = Field(default_factory=CodingConfig)
    gui: GuiConfig = Field(default_factory=GuiConfig)
    plugin: PluginConfig = Field(default_factory=PluginConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)

    @model_validator(mode="before")
    @classmethod
    def _setting_defaults(cls, data: Any) -> Any:
        """Fill the per-setting defaults of spec §6 for keys the user did not set."""
        if not isinstance(data, dict):
            return data
        return merge_config(RunConfig, setting_defaults(Setting(data.get("setting", Setting.TEXTGAME))), data)

    @model_validator(mode="after")
    def _rewriter_needs_model(self) -> Self:
        if (
            self.adaptation.enabled
            and self.adaptation.rewriter is RewriterKind.LLM
            and self.models.environment is None
        ):
            raise ValueError(
                "adaptation.rewriter=llm needs an environment model: set models.environment (a checkpoint, "
                "hub id or tiny:<name>) or use adaptation.rewriter=parametric"
            )
        if (
            self.adaptation.enabled
            and self.setting is Setting.CODING
            and self.adaptation.rewriter is RewriterKind.PARAMETRIC
        ):
            raise ValueError(
                "coding problems have no generation parameters to move: set adaptation.rewriter=llm with "
                "models.environment, or adaptation.enabled=false for a static problem set"
            )
        return self

    @model_validator(mode="after")
    def _plugin_is_installed(self) -> Self:
        """``setting: plugin`` names an installed plug-in whose own model accepts ``plugin.options``."""
        if self.setting is not Setting.PLUGIN:
            return self
        from rla_core.plugins import load_plugin

        if not self.plugin.name:
            raise ValueError("setting=plugin needs plugin.name: the entry-point name of an installed plug-in")
        try:
            load_plugin(self.plugin.name, self.plugin.options)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    @model_validator(mode="after")
    def _oracle_judge_needs_steps(self) -> Self:
        if self.judge.source is not JudgeSource.ORACLE:
            return self
        if self.setting is Setting.CODING:
            raise ValueError(
                "judge.source=oracle replaces step judgments, which the coding setting does not use (its reward "
                "model writes unit tests): set judge.source=reward_model"
            )
        needs = [
            f"{key}=false"
            for key, on in (
                ("training.reward.enabled", self.training.reward.enabled),  # no judgments to learn from
                ("adaptation.enabled", self.adaptation.enabled),  # the critic feedback reads judgments
            )
            if on
        ]
        if needs:
            raise ValueError(
                "judge.source=oracle runs no judge, so nothing can learn from or read judgments: set "
                f"{' and '.join(needs)} (the oracle arm is the policy arm with the engine's labels as votes), "
                "or judge.source=reward_model"
            )
        return self

    @model_validator(mode="after")
    def _images_need_screens(self) -> Self:
        images = self.models.images
        if not images.any:
            return self
        on = ", ".join(
            f"models.images.{k}={v}" for k, v in images.model_dump().items() if v not in (0, False)
        )
        if self.setting is not Setting.GUI:
            raise ValueError(
                f"{on}: only the gui setting has screenshots (setting={self.setting.value}); "
                "set models.images.policy=0 and models.images.reward=false"
            )
        if not self.gui.screenshots:
            raise ValueError(
                f"{on} needs the screenshots the rollouts keep: set gui.screenshots=true, or turn the images off"
            )
        for role, seen in (("policy", images.policy > 0), ("reward", images.reward)):
            ref = getattr(self.models, role)
            if seen and ref.startswith(TINY_PREFIX):
                raise ValueError(
                    f"models.images.{role} is on but models.{role}={ref!r} is a tiny text-only model: use a "
                    f"vision-language one (e.g. models.{role}=tiny-vl:{role}) or turn its images off"
                )
        return self

    def config_hash(self) -> str:
        """Stable sha256 of the canonical JSON of the whole config."""
        return hash_jsonable(self.model_dump(mode="json"))


# The one derived layer of defaults: keys whose value follows from `setting` (spec §6: the accuracy filters
# and thresholds differ by setting). Each entry differs from the field's declared default, which is the
# text games' value (tests/test_config_properties.py holds both).
_SETTING_DEFAULTS: dict[Setting, dict[str, Any]] = {
    Setting.TEXTGAME: {},
    Setting.CODING: {
        # The policy filter is the pass-all band [0.2, 0.8]; RM data uses that band too (the declared
        # rm_acc_band), since the reference's policy-filter `continue` skips the task's RM block (spec §2.4).
        "reward": {"policy_acc_band": {"low": 0.2, "high": 0.8}},
        # Problems are rewritten by an environment model (spec §3.1); on a laptop a tiny local one.
        "adaptation": {"low_inclusive": False, "rewriter": "llm"},
        "models": {"environment": "tiny:environment"},
        "rollout": {"max_steps": 1},
    },
    Setting.GUI: {"reward": {"policy_acc_band": {"low": 0.0, "high": 1.0}}},
    Setting.PLUGIN: {},
}


def setting_defaults(setting: Setting) -> dict[str, Any]:
    """The keys whose default follows from ``setting`` (a deep copy), as a partial config dict."""
    return json.loads(json.dumps(_SETTING_DEFAULTS[setting]))


def embedded_defaults() -> dict[str, Any]:
    """The embedded default configuration (setting ``textgame``, no preset) as JSON-ready values."""
    return RunConfig().model_dump(mode="json")


PRESETS: tuple[str, ...] = (
    "default",
    "coding",
    "gui",
    "osworld",
    "alfworld",
    "bench",
    "bench-long",
    "paper-textgame",
    "paper-coding",
    "paper-gui",
    "reasoning-gym",
    "textarena",
    "test",
)


def hash_jsonable(value: Any) -> str:
    """sha256 hex digest of canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _dotted_dict(dotted: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``"a.b"``."""
    *parents, leaf = dotted.split(".")
    out: dict[str, Any] = {leaf: value}
    for part in reversed(parents):
        out = {part: out}
    return out


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``data`` with each ``key=value`` override merged in, in order, key by key (a new dict).

    A section given as a mapping (``--set rollout.sampling='{temperature: 0.5}'``) changes the keys it
    names and keeps the others, as a file's section does.

    >>> apply_overrides({"judge": {"m": 3}}, ["judge.sampling={top_p: 0.9}", "seed=7"])
    {'judge': {'m': 3, 'sampling': {'top_p': 0.9}}, 'seed': 7}
    """
    out = dict(data)
    for text in overrides:
        key, value = parse_override(text)
        node: Any = out
        for part in key.split(".")[:-1]:
            node = node.get(part, {}) if isinstance(node, dict) else node
            if not isinstance(node, dict):
                raise ConfigError(f"override '{key}': '{part}' is a value, not a section")
        out = merge_config(RunConfig, out, _dotted_dict(key, value))
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``key=value`` override; the value is read as YAML (``4``, ``true``, ``[a, b]``)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override '{text}' is not of the form key=value (e.g. rollout.max_steps=12)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override '{text}': value is not valid YAML ({exc.__class__.__name__})") from exc
    return key, value


def preset_dict(name: str) -> dict[str, Any]:
    """The raw dict of a shipped preset (``rla_core/presets/<name>.yaml``)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset '{name}'; choose one of: {', '.join(PRESETS)}")
    text = resources.files("rla_core").joinpath("presets", f"{name}.yaml").read_text(encoding="utf-8")
    loaded = yaml.safe_load(text) or {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"preset '{name}' is not a mapping")
    return loaded


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a dict, with specific errors for missing or malformed files."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file '{p}' does not exist; pass an existing YAML file to --config")
    try:
        loaded = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file '{p}' is not valid YAML: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file '{p}' must contain a mapping at the top level")
    return loaded


# Keys that earlier versions wrote into run.json and that no longer exist. A stored config drops them
# when read back, so runs started before an upgrade can still be resumed; a new config naming them fails.
RETIRED_KEYS: tuple[str, ...] = (
    "training.keep_checkpoints",
    "models.vllm_base_url",  # one shared server cannot serve each stage's own checkpoint
    "models.vllm_tensor_parallel",  # now models.serving.tensor_parallel, per role
    # Read by nothing: seed problems' GT tests run with each problem's own time limit.
    "coding.gt_time_limit_s",
)
# Keys that moved: a stored config's value is carried to the new place (unless that is set already).
MOVED_KEYS: dict[str, str] = {"models.backend": "models.serving.backend"}


def upgrade_stored_config(data: dict[str, Any]) -> dict[str, Any]:
    """A stored run config with :data:`MOVED_KEYS` moved and :data:`RETIRED_KEYS` removed (a deep copy)."""
    out = json.loads(json.dumps(data))
    for old, new in MOVED_KEYS.items():
        *old_parents, old_leaf = old.split(".")
        node = out
        for part in old_parents:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict) and old_leaf in node:
            value = node.pop(old_leaf)
            *new_parents, new_leaf = new.split(".")
            target = out
            for part in new_parents:
                target = target.setdefault(part, {})
            target.setdefault(new_leaf, value)
    for dotted in RETIRED_KEYS:
        *parents, leaf = dotted.split(".")
        node = out
        for part in parents:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(leaf, None)
    return out


def build_config(data: dict[str, Any]) -> RunConfig:
    """Validate a raw dict into a :class:`RunConfig`, turning pydantic errors into one ConfigError."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "<root>"
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown key '{where}' (check the spelling; see docs/configuration.md)")
            elif where == "<root>" or err["type"] == "value_error":
                problems.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
            else:
                problems.append(f"'{where}': {err['msg']} (got {err.get('input')!r})")
        raise ConfigError("invalid config: " + "; ".join(problems)) from None


@dataclass(frozen=True)
class ResolvedConfig:
    """A loaded config and, for every leaf key, where its value came from.

    ``origins`` maps each dotted leaf key to ``default`` (the field's declared value), ``setting NAME``
    (the per-setting defaults), ``preset NAME``, ``file PATH`` or ``--set``: the last layer that named it.
    """

    config: RunConfig
    origins: dict[str, str]

    def non_default(self) -> list[tuple[str, Any, str]]:
        """``(key, value, origin)`` of every leaf whose value differs from the embedded default."""
        return [
            (key, value, self.origins.get(key, "default")) for key, value in diff_from_defaults(self.config)
        ]


def diff_from_defaults(cfg: RunConfig) -> list[tuple[str, Any]]:
    """``(key, value)`` of every leaf of ``cfg`` (JSON values) that differs from :func:`embedded_defaults`."""
    embedded = dict(config_leaves(RunConfig, embedded_defaults()))
    return [
        (key, value)
        for key, value in config_leaves(RunConfig, cfg.model_dump(mode="json"))
        if value != embedded[key]
    ]


def resolve_config(
    path: str | Path | None = None,
    *,
    preset: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> ResolvedConfig:
    """Load a config as :func:`load_config` does, keeping where each value came from (``rla config show``)."""
    file_data = read_config_file(path) if path is not None else {}
    base_name = str(preset or file_data.pop("preset", None) or "default")
    layers = [(f"preset {base_name}", preset_dict(base_name))]
    if path is not None:
        layers.append((f"file {path}", file_data))
    data = apply_overrides(merge_config(RunConfig, layers[0][1], file_data), overrides)
    layers.append(("--set", apply_overrides({}, overrides)))
    cfg = build_config(data)
    origins = {key: "default" for key, _ in config_leaves(RunConfig, embedded_defaults())}
    derived = setting_defaults(cfg.setting)
    origins |= {key: f"setting {cfg.setting.value}" for key, _ in config_leaves(RunConfig, derived)}
    for source, layer in layers:
        origins |= {key: source for key, _ in config_leaves(RunConfig, layer)}
    return ResolvedConfig(config=cfg, origins=origins)


def load_config(
    path: str | Path | None = None,
    *,
    preset: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> RunConfig:
    """Load a config: the chosen setting's defaults, then the preset (or the embedded default), the YAML
    file and the ``key=value`` overrides, merged key by key.

    A YAML file may name its own base with a top-level ``preset: NAME`` key. A key given in any layer
    changes that key only: its siblings keep their values.
    """
    return resolve_config(path, preset=preset, overrides=overrides).config
