"""The run configuration: one typed, validated, hashable config for the whole loop.

Load with :func:`load_config` (an optional YAML file, an optional preset, then ``key=value``
overrides). Every field documents its meaning and the spec section it comes from. Unknown keys,
wrong types and out-of-range values raise :class:`~rla_core.errors.ConfigError` naming the key.

Example:
    >>> cfg = load_config(overrides=["rollout.rollouts_per_task=4"])
    >>> cfg.rollout.rollouts_per_task
    4

The sections live in one module each (``choices``: the enums; ``base``: what every section shares;
``models``, ``method``, ``environments``, ``training``, ``infra``: the sections; ``run``: the whole
:class:`RunConfig`; ``loading``: presets, files and overrides); this package face is the one import path.
"""

from __future__ import annotations

from rla_core.config.base import Band, SamplingConfig, config_leaves, hash_jsonable, merge_config
from rla_core.config.choices import (
    Backend,
    ClusterBackend,
    EvalGrader,
    GuiEngine,
    InferenceDtype,
    InvalidAction,
    JudgeSource,
    ProblemFormat,
    RewriterKind,
    ServerLifetime,
    Setting,
    TextGameEngine,
    TrainDtype,
    TrainStrategy,
    machine_device,
    on_cuda,
)
from rla_core.config.environments import CodingConfig, GuiConfig, OsworldConfig, PluginConfig, TextGameConfig
from rla_core.config.infra import (
    SPEED_ONLY_KEYS,
    ClusterConfig,
    RoleReplicas,
    StorageConfig,
    TrackingConfig,
    speed_only,
)
from rla_core.config.loading import (
    MOVED_KEYS,
    PRESETS,
    RETIRED_KEYS,
    ResolvedConfig,
    apply_overrides,
    build_config,
    diff_from_defaults,
    load_config,
    parse_override,
    preset_dict,
    read_config_file,
    resolve_config,
    upgrade_stored_config,
)
from rla_core.config.method import (
    AdaptationConfig,
    EvalConfig,
    JudgeConfig,
    OracleFlip,
    RewardConfig,
    RolloutConfig,
)
from rla_core.config.models import (
    TINY_PREFIX,
    TINY_VL_PREFIX,
    ImagesConfig,
    LoraConfig,
    ModelsConfig,
    RoleSizes,
    ServingConfig,
    TinySize,
    TinySizes,
)
from rla_core.config.run import RunConfig, embedded_defaults, setting_defaults
from rla_core.config.training import TrainConfig, TrainingConfig

__all__ = [
    "MOVED_KEYS",
    "PRESETS",
    "RETIRED_KEYS",
    "SPEED_ONLY_KEYS",
    "TINY_PREFIX",
    "TINY_VL_PREFIX",
    "AdaptationConfig",
    "Backend",
    "Band",
    "ClusterBackend",
    "ClusterConfig",
    "CodingConfig",
    "EvalConfig",
    "EvalGrader",
    "GuiConfig",
    "GuiEngine",
    "ImagesConfig",
    "InferenceDtype",
    "InvalidAction",
    "JudgeConfig",
    "JudgeSource",
    "LoraConfig",
    "ModelsConfig",
    "OracleFlip",
    "OsworldConfig",
    "PluginConfig",
    "ProblemFormat",
    "ResolvedConfig",
    "RewardConfig",
    "RewriterKind",
    "RoleReplicas",
    "RoleSizes",
    "RolloutConfig",
    "RunConfig",
    "SamplingConfig",
    "ServerLifetime",
    "ServingConfig",
    "Setting",
    "StorageConfig",
    "TextGameConfig",
    "TextGameEngine",
    "TinySize",
    "TinySizes",
    "TrackingConfig",
    "TrainConfig",
    "TrainDtype",
    "TrainStrategy",
    "TrainingConfig",
    "apply_overrides",
    "build_config",
    "config_leaves",
    "diff_from_defaults",
    "embedded_defaults",
    "hash_jsonable",
    "load_config",
    "machine_device",
    "merge_config",
    "on_cuda",
    "parse_override",
    "preset_dict",
    "read_config_file",
    "resolve_config",
    "setting_defaults",
    "speed_only",
    "upgrade_stored_config",
]
