"""What each stage reads of the run configuration: one typed slice per stage (content keys: docs/architecture.md#the-design-contract).

A stage's content key hashes its slice, and the stage body and the adapter methods it calls receive
the slice, never the whole :class:`~rla_core.config.RunConfig`: reading a field the slice does not
declare is an ``AttributeError`` at run time and a type error under mypy, so no field can change a
stage's results without changing its key.

A slice mirrors the config's own layout: its fields carry the names of the config's sections and keys,
and a section it reads only in part is a smaller model of the same name (``models: GenerationModels``
holds ``models.serving``, ``models.device`` …). So :meth:`StageInputs.from_config` builds every slice
with one projection of the config's JSON, and a slice's JSON is literally the part of the config it
reads. Three rules:

- Fields named after a setting (``textgame``, ``coding``, ``gui``) are filled only for the run's own
  setting and are ``None`` otherwise: a text-game stage does not depend on the coding section.
- :data:`~rla_core.config.SPEED_ONLY_KEYS` (parallelism, in-flight limits, process counts, timeouts,
  cache locations) are read through the slice where a stage needs them but never hashed
  (:meth:`StageInputs.key_json`): they change how fast or where, not what.
- Seeds are not config: a stage's seed is derived from the run seed, the iteration and the stage name.

Example:
    >>> from rla_core.config import RunConfig
    >>> inputs = JudgeInputs.from_config(RunConfig())
    >>> inputs.judge.m
    3
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any, Self, TypeVar, get_args

import polars as pl
from pydantic import BaseModel, ConfigDict, model_validator

from rla_core.config import (
    SPEED_ONLY_KEYS,
    AdaptationConfig,
    ClusterConfig,
    EvalGrader,
    GuiEngine,
    InferenceDtype,
    InvalidAction,
    JudgeConfig,
    JudgeSource,
    LoraConfig,
    ModelsConfig,
    OracleFlip,
    ProblemFormat,
    RewardConfig,
    RolloutConfig,
    RunConfig,
    SamplingConfig,
    ServingConfig,
    Setting,
    TextGameEngine,
    TrainConfig,
    TrainDtype,
    TrainStrategy,
    on_cuda,
)
from rla_core.errors import ConfigError

if TYPE_CHECKING:
    from rla_core.algo.curriculum import PlayTask


class StageName(StrEnum):
    """The stages of the loop; ``flows/loop.py`` says in which order and with which inputs they run."""

    SEED_TASKS = "seed_tasks"
    BOOTSTRAP = "bootstrap"
    ROLLOUT = "rollout"
    JUDGE = "judge"
    WRITE_TESTS = "write_tests"
    EXECUTE = "execute"
    LABEL = "label"
    ADAPT = "adapt"
    TRAIN_POLICY = "train_policy"
    TRAIN_REWARD = "train_reward"
    JUDGE_EVAL = "judge_eval"
    EVALUATE = "evaluate"


class Role(StrEnum):
    """The models of a run; each is a checkpoint directory of that name in the stage that wrote it."""

    POLICY = "policy"
    REWARD = "reward"
    ENVIRONMENT = "environment"


class Slice(BaseModel):
    """A frozen part of the run configuration (fields named and nested as in :class:`RunConfig`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


class StageInputs(Slice):
    """The configuration one stage reads; its canonical JSON enters the stage's content key."""

    @classmethod
    def from_config(cls, cfg: RunConfig) -> Self:
        """This stage's slice of ``cfg`` (sections of other settings are ``None``)."""
        return cls.model_validate(_project(cfg.model_dump(mode="json"), cls, cfg.setting))

    def key_json(self) -> dict[str, Any]:
        """The slice as JSON without the speed-only keys: what the content key hashes."""
        dumped: dict[str, Any] = self.model_dump(mode="json")
        for dotted in SPEED_ONLY_KEYS:
            *parents, leaf = dotted.split(".")
            node: Any = dumped
            for part in parents:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(leaf, None)
        plugin = dumped.get("plugin")
        if isinstance(
            plugin, dict
        ):  # a plug-in's code is not ours to hash: its package version stands for it
            from rla_core.plugins import plugin_versions

            # the plug-in's package and the library it wraps, if any: one scan of the entry points
            plugin["version"], plugin["requires"] = plugin_versions(plugin["name"])
        return dumped


_SETTING_FIELDS = {s.value for s in Setting}
# Sections named after an engine, by the ``engine`` value beside them that fills them (``gui.osworld``).
_ENGINE_SECTIONS = {GuiEngine.OSWORLD.value: GuiEngine.OSWORLD.value}


def _project(data: dict[str, Any], model: type[BaseModel], setting: Setting) -> dict[str, Any]:
    """The part of the config JSON ``data`` that ``model`` declares, recursing into smaller sections."""
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if name in _SETTING_FIELDS and name != setting.value:
            out[name] = None
            continue
        if name in _ENGINE_SECTIONS and data.get("engine") != _ENGINE_SECTIONS[name]:
            out[name] = None  # an engine's own section, filled for that engine only (as settings above)
            continue
        sub = _slice_type(info.annotation)
        out[name] = _project(data[name], sub, setting) if sub is not None else data[name]
    return out


def _slice_type(annotation: Any) -> type[Slice] | None:
    """The smaller-section model of a field (``X`` or ``X | None``), or None for a whole value."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, Slice):
            return candidate
    return None


T = TypeVar("T")


def need(section: T | None, setting: Setting) -> T:
    """A setting's own section of a slice; a clear error if an adapter of another setting asks for it."""
    if section is None:
        raise ConfigError(
            f"this stage has no '{setting.value}' section: it was built for another setting "
            "(the adapter and the run's setting disagree)"
        )
    return section


def expect_section(section: object, kind: type[T]) -> T:
    """A request's environment section as the adapter's own kind; a clear error otherwise."""
    if not isinstance(section, kind):
        raise ConfigError(
            f"this rollout request carries {type(section).__name__} but the adapter opens {kind.__name__}: "
            "build the request from the run's own setting section (inputs.env())"
        )
    return section


# ---- smaller sections (named as in RunConfig) ----------------------------------------------------


class GenerationModels(Slice):
    """What opening a generator reads: ``models.serving``, ``models.device``, the generation batch size.

    ``serving.dtype`` is resolved when the slice is made (``auto``: bfloat16 when ``device`` is a CUDA GPU
    on this machine, else float32; :meth:`InferenceDtype.resolve`): rows are generated in that dtype, so it
    (never ``auto``) is what enters the stage key, and a CPU and a GPU run do not share cached rows even
    though ``models.device`` itself is speed only.
    """

    serving: ServingConfig
    device: str
    generation_batch_size: int

    @model_validator(mode="before")
    @classmethod
    def _resolve_dtype(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("device"), str):
            return data
        serving = data.get("serving")
        if isinstance(serving, ServingConfig):
            dtype = serving.dtype.resolve(cuda=on_cuda(data["device"]))
            return {**data, "serving": serving.model_copy(update={"dtype": dtype})}
        if isinstance(serving, dict) and serving.get("dtype", InferenceDtype.AUTO) == InferenceDtype.AUTO:
            dtype = InferenceDtype.AUTO.resolve(cuda=on_cuda(data["device"]))
            return {**data, "serving": {**serving, "dtype": dtype.value}}
        return data


class PolicyImages(Slice):
    policy: int


class RewardImages(Slice):
    reward: bool


class PolicyModels(GenerationModels):
    """A generator for the policy plus the prompt history and screens it shows (rollouts, evaluation)."""

    history_turns: int
    images: PolicyImages


class JudgeModels(GenerationModels):
    """A generator for the reward model plus whether its prompts show the step's screens."""

    images: RewardImages


class AdaptModels(GenerationModels):
    """A generator for the environment model, when one is configured."""

    environment: str | None


class TrainModels(Slice):
    lora: LoraConfig


class TextGameEngineChoice(Slice):
    """Which engine plays the text games: the adapter (:func:`rla_core.settings.adapter_of`) of a stage
    that opens no environment (judge, label)."""

    engine: TextGameEngine


class GuiEngineChoice(Slice):
    """Which engine plays the GUI tasks (as :class:`TextGameEngineChoice`)."""

    engine: GuiEngine


class TextGameEnv(Slice):
    """What opening a text-game environment reads."""

    engine: TextGameEngine
    game_cache_dir: str


class TextGameTasks(TextGameEnv):
    tasks: str


class TextGameEval(TextGameEnv):
    eval_tasks: str


class CodingSandbox(Slice):
    """What running programs in the sandbox reads."""

    max_parallel: int
    memory_limit_mb: int
    output_limit_kb: int


class CodingTasks(Slice):
    problems: str


class CodingWarmStart(CodingSandbox):
    problems: str


class CodingEval(CodingSandbox):
    """The held-out problems, and the reward model's unit tests on them (code accuracy, UT accuracy, detection)."""

    eval_problems: str
    eval_format: ProblemFormat
    eval_limit: int
    benchmark_time_limit_s: float
    eval_grader: EvalGrader
    livebench_release: str
    unit_tests_per_task: int
    unit_test_sampling: SamplingConfig


class CodingUnitTests(Slice):
    unit_tests_per_task: int
    unit_test_sampling: SamplingConfig


class CodingRewrite(Slice):
    max_prompt_test_chars: int
    min_rewrite_tests: int
    env_time_limit_s: float


class OsworldCache(Slice):
    """Where OSWorld task files are cached (whether a task is available)."""

    cache_dir: str


class OsworldEnv(OsworldCache):
    """What opening OSWorld desktops and reading their observations reads."""

    desktops: int
    a11y_max_tokens: int
    max_clicks: int
    step_pause_s: float


class GuiEnv(Slice):
    """What opening the engine reads: a browser pool (miniwob) or a desktop pool (osworld)."""

    engine: GuiEngine
    browsers: int
    call_timeout_s: float
    osworld: OsworldEnv | None  # filled when engine is osworld


class GuiRollout(GuiEnv):
    screenshots: bool


class GuiTasks(Slice):
    engine: GuiEngine
    tasks: str
    osworld: OsworldCache | None


class GuiWarmStart(GuiEnv):
    tasks: str


class GuiEval(GuiEnv):
    eval_tasks: str


class PluginChoice(Slice):
    """Which environment plug-in a stage that opens no environment reads (judge: its template; label);
    its package's version enters the stage key beside it (:meth:`StageInputs.key_json`)."""

    name: str


class PluginSection(PluginChoice):
    """What opening an environment plug-in reads: its name and its own options (and, in the key, its
    package's version)."""

    options: dict[str, Any]


EnvSection = TextGameEnv | CodingSandbox | GuiEnv | PluginSection


class RolloutSteps(Slice):
    max_steps: int


class DemoEpisodes(RolloutSteps):
    """The warm start's episodes: cut at the training step budget, replayed like a rollout's when their
    environment failed (``rollout.env_retries``)."""

    env_retries: int


class EnvRetries(Slice):
    """How often a run whose environment failed is replayed (``rollout.env_retries``): the execute stage's
    sandboxed runs."""

    env_retries: int


class RolloutEnvErrors(Slice):
    """How episodes whose environment failed are replayed and bounded (``rollout.env_retries``, ``rollout.max_env_error_share``)."""

    env_retries: int
    max_env_error_share: float


class JudgeVotes(Slice):
    m: int
    source: JudgeSource
    oracle_flip: OracleFlip


class SftTraining(Slice):
    sft_lr: float
    sft_max_tokens_per_micro_batch: int | None


class _Placement(Slice):
    """Where an update runs (``training.*``; all but ``dtype`` are speed only)."""

    dtype: TrainDtype
    device: str
    processes: int
    strategy: TrainStrategy
    worker_timeout_s: float


class PolicyTraining(_Placement):
    policy: TrainConfig


class RewardTraining(_Placement):
    reward: TrainConfig


# ---- one slice per stage ---------------------------------------------------------------------------


class SeedTasksInputs(StageInputs):
    setting: Setting
    textgame: TextGameTasks | None
    coding: CodingTasks | None
    gui: GuiTasks | None
    plugin: PluginSection | None


class BootstrapInputs(StageInputs):
    setting: Setting
    threads: int
    models: ModelsConfig
    training: SftTraining
    rollout: DemoEpisodes  # demonstrations are cut at the training step budget, replayed when they fail
    textgame: TextGameTasks | None
    coding: CodingWarmStart | None
    gui: GuiWarmStart | None
    plugin: PluginSection | None

    def seed_sources(self) -> SeedTasksInputs:
        """The seed-task part of this slice (the warm start demonstrates the seed tasks)."""
        return SeedTasksInputs.model_validate(
            _project(self.model_dump(mode="json"), SeedTasksInputs, self.setting)
        )


class _PlaysEpisodes(StageInputs):
    """A stage that opens its setting's environment (rollout, evaluate)."""

    setting: Setting

    def env(self) -> EnvSection:
        """The run's own setting's environment section."""
        section: EnvSection | None = getattr(self, self.setting.value)
        if section is None:
            return need(section, self.setting)  # raises: this slice was built for another setting
        return section


class RolloutInputs(_PlaysEpisodes):
    threads: int
    cluster: ClusterConfig  # speed only: where the episodes are played
    rollout: RolloutConfig
    models: PolicyModels
    textgame: TextGameEnv | None
    coding: CodingSandbox | None
    gui: GuiRollout | None
    plugin: PluginSection | None

    def request(
        self, tasks: tuple[PlayTask, ...], *, seed: int, iteration: int, workdir: Path | None
    ) -> RolloutRequest:
        """This iteration's episodes to play: ``rollout.*`` and the policy's history and screens."""
        return _episodes(
            self, tasks, self.rollout, self.rollout.invalid_action, env_retries=self.rollout.env_retries,
            seed=seed, iteration=iteration, workdir=workdir,
        )  # fmt: skip


class EvalEpisodes(Slice):
    """What the evaluate stage plays (``evaluation.*``; the judge's yardstick is judge_eval's)."""

    rollouts_per_task: int
    max_steps: int
    sampling: SamplingConfig


class EvaluateInputs(_PlaysEpisodes):
    threads: int
    cluster: ClusterConfig
    evaluation: EvalEpisodes
    rollout: RolloutEnvErrors  # evaluation replays and bounds env_error episodes as the rollouts do
    models: PolicyModels
    textgame: TextGameEval | None
    coding: CodingEval | None
    gui: GuiEval | None
    plugin: PluginSection | None

    def request(
        self, tasks: tuple[PlayTask, ...], *, seed: int, iteration: int, workdir: Path | None
    ) -> RolloutRequest:
        """The held-out episodes to play: ``evaluation.*`` with the rollouts' replays of failed episodes (the
        fallback action for an invalid answer, so held-out numbers stay comparable)."""
        return _episodes(
            self, tasks, self.evaluation, InvalidAction.FALLBACK, env_retries=self.rollout.env_retries,
            seed=seed, iteration=iteration, workdir=workdir,
        )  # fmt: skip


class JudgeInputs(StageInputs):
    setting: Setting
    threads: int
    cluster: ClusterConfig
    judge: JudgeConfig
    models: JudgeModels
    textgame: TextGameEngineChoice | None  # the engine picks the adapter
    gui: GuiEngineChoice | None
    plugin: PluginChoice | None


class JudgeYardstick(Slice):
    judge_steps: str | None


class JudgeSampling(Slice):
    m: int
    sampling: SamplingConfig


class JudgeEvalInputs(StageInputs):
    """The judge_eval stage: the reward model judges the yardstick's steps as the judge stage judges a rollout's."""

    setting: Setting
    threads: int
    cluster: ClusterConfig
    judge: JudgeSampling
    models: JudgeModels
    evaluation: JudgeYardstick
    textgame: TextGameEngineChoice | None  # the engine picks the adapter (its judge template)
    gui: GuiEngineChoice | None
    plugin: PluginChoice | None

    def steps_file(self) -> str | None:
        """The yardstick file, whose bytes also enter the key."""
        return self.evaluation.judge_steps


class WriteTestsInputs(StageInputs):
    setting: Setting  # every slice with a setting-named section reads the setting (it fills that section)
    threads: int
    cluster: ClusterConfig  # speed only: where the unit tests are sampled
    models: GenerationModels
    coding: CodingUnitTests | None


class ExecuteInputs(StageInputs):
    setting: Setting
    cluster: ClusterConfig  # speed only: where the sandboxed executions run
    rollout: EnvRetries  # a run whose sandbox died is replayed as the rollout's GT runs are
    coding: CodingSandbox | None


class LabelInputs(StageInputs):
    setting: Setting
    reward: RewardConfig
    judge: JudgeVotes
    adaptation: AdaptationConfig
    textgame: TextGameEngineChoice | None  # the engine picks the adapter
    gui: GuiEngineChoice | None
    plugin: PluginChoice | None


class AdaptInputs(StageInputs):
    setting: Setting
    threads: int
    cluster: ClusterConfig  # speed only: where the environment model samples (rewrites, summaries)
    adaptation: AdaptationConfig
    models: AdaptModels
    rollout: RolloutSteps
    textgame: TextGameEnv | None
    coding: CodingRewrite | None
    gui: GuiEnv | None
    plugin: PluginSection | None


class TrainPolicyInputs(StageInputs):
    threads: int
    cluster: ClusterConfig  # speed only: where launched update workers run
    training: PolicyTraining
    models: TrainModels


class TrainRewardInputs(StageInputs):
    threads: int
    cluster: ClusterConfig  # speed only: where launched update workers run
    training: RewardTraining
    models: TrainModels


def _episodes(
    stage: RolloutInputs | EvaluateInputs,
    tasks: tuple[PlayTask, ...],
    episodes: RolloutConfig | EvalEpisodes,
    invalid_action: InvalidAction,
    *,
    env_retries: int,
    seed: int,
    iteration: int,
    workdir: Path | None,
) -> RolloutRequest:
    """A stage's request: ``episodes`` per task, its step budget and sampling, the policy's history and
    screens, and the stage's environment section."""
    return RolloutRequest(
        tasks=tasks, n=episodes.rollouts_per_task, max_steps=episodes.max_steps, sampling=episodes.sampling,
        seed=seed, iteration=iteration, history_turns=stage.models.history_turns, env_retries=env_retries,
        invalid_action=invalid_action, images=stage.models.images.policy, env=stage.env(), workdir=workdir,
    )  # fmt: skip


# ---- what a rollout plays (the rollout and evaluate stages; the unit a shard carries) ------------


@dataclass(frozen=True)
class RolloutRequest:
    """One batch of episodes to play: tasks, budget, sampling, seed, and the environment to open.

    Built by the rollout stage (:meth:`RolloutInputs.request`: training tasks, ``rollout.*``) and the
    evaluate stage (:meth:`EvaluateInputs.request`: held-out tasks, ``evaluation.*``), played by
    :func:`rla_core.dispatch.rollout` in what the setting's adapter opens. ``workdir`` receives side files
    (GUI screenshots under ``workdir/files``); None keeps none. ``env_retries`` is required: how often an
    episode whose environment failed is replayed (``rollout.env_retries``; 0 sees every failure), and for
    coding how often a GT run whose sandbox died runs again.
    """

    tasks: tuple[PlayTask, ...]
    n: int
    max_steps: int
    sampling: SamplingConfig
    seed: int
    iteration: int
    history_turns: int
    env_retries: int
    invalid_action: InvalidAction = InvalidAction.FALLBACK
    # Screens in each policy prompt (``models.images.policy``): 0 text only, k the last k of the episode.
    images: int = 0
    env: EnvSection | None = None  # what the adapter opens; None for a caller that passes its own env
    workdir: Path | None = None
    # A shard's episodes, (task_id, rollout_id) in canonical order (rla_core.cluster.shards); None: all.
    episodes: tuple[tuple[str, int], ...] | None = None
    # Where a coding rollout's sandboxed GT executions run (speed only); None: in this process.
    cluster: ClusterConfig | None = None

    def episode_keys(self) -> list[tuple[str, int]]:
        """The episodes this request plays, in canonical order: task order, then rollout id."""
        if self.episodes is not None:
            return list(self.episodes)
        # task[0] is the task id of a PlayTask, and of the plain (task_id, slot_id, pending, spec) tuples
        # callers may pass for one.
        return [(task[0], rollout_id) for task in self.tasks for rollout_id in range(self.n)]


@dataclass(frozen=True)
class JudgeRequest:
    """The steps to judge and how: the judge and judge_eval stages' work, and what a judge shard carries.

    ``steps``: 'rollouts' rows (or the yardstick's steps) in canonical order; ``m`` judgments per step,
    ``sampling``, ``seed`` and ``iteration`` as :func:`rla_core.envs.judge.judge_steps` takes them;
    ``template`` and ``strict`` are the setting's judge prompt and parsing rule; ``screens`` the directory
    the steps' screenshot references resolve against (``models.images.reward``), None for text only.
    """

    steps: pl.DataFrame
    m: int
    sampling: SamplingConfig
    seed: int
    iteration: int
    template: str | Template
    strict: bool
    screens: Path | None = None
