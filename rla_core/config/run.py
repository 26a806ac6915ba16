"""The whole run's configuration (:class:`RunConfig`, its cross-section rules) and the per-setting defaults."""

from __future__ import annotations

import json
from typing import Any, Self

from pydantic import Field, model_validator

from rla_core.config.base import (
    _Section,
    hash_jsonable,
    merge_config,
)
from rla_core.config.choices import (
    JudgeSource,
    RewriterKind,
    Setting,
)
from rla_core.config.environments import CodingConfig, GuiConfig, PluginConfig, TextGameConfig
from rla_core.config.infra import (
    ClusterConfig,
    StorageConfig,
    TrackingConfig,
)
from rla_core.config.method import (
    AdaptationConfig,
    EvalConfig,
    JudgeConfig,
    RewardConfig,
    RolloutConfig,
)
from rla_core.config.models import (
    TINY_PREFIX,
    ModelsConfig,
)
from rla_core.config.training import TrainingConfig


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
    def _plugin_is_named(self) -> Self:
        """``setting: plugin`` names a plug-in. Whether it is installed and accepts ``plugin.options`` is the
        plug-in's code to say: the preflight resolves it (``rla config check``, every run's start) and each
        stage that opens it validates its options again (docs/environments.md)."""
        if self.setting is Setting.PLUGIN and not self.plugin.name:
            raise ValueError("setting=plugin needs plugin.name: the entry-point name of an installed plug-in")
        return self

    @model_validator(mode="after")
    def _demonstration_knobs_fit_the_setting(self) -> Self:
        """The warm start's benchmark knobs apply where their demonstrations exist (spec §6 defaults: off)."""
        models = self.models
        if models.policy_demo_noise > 0 and self.setting is Setting.CODING:
            raise ValueError(
                "models.policy_demo_noise plays noisy-expert episodes of a multi-step game; coding has no "
                "expert to follow: leave it at 0 for setting=coding"
            )
        if models.reward_label_noise > 0 and self.setting is Setting.CODING:
            raise ValueError(
                "models.reward_label_noise flips step-judge labels; the coding reward model writes unit "
                "tests instead: leave it at 0 for setting=coding"
            )
        tiny_text_policy = self.setting is Setting.TEXTGAME and models.policy.startswith(TINY_PREFIX)
        if models.warm_start and models.policy_reading_drills > 0 and not tiny_text_policy:
            raise ValueError(
                "models.policy_reading_drills teaches a tiny text-game policy to read its numbered action "
                f"list; this run has setting={self.setting.value} and policy={models.policy}: set it to 0"
            )
        return self

    @model_validator(mode="after")
    def _oracle_judge_needs_steps(self) -> Self:
        if self.evaluation.judge_steps is not None and self.setting is Setting.CODING:
            raise ValueError(
                "evaluation.judge_steps is a step judge's yardstick; the coding reward model writes unit tests "
                "instead of judging steps: unset it for setting=coding"
            )
        if self.reward.rm_outcome_balance and self.setting is Setting.CODING:
            raise ValueError(
                "reward.rm_outcome_balance weighs the judge's step rows by their episode's outcome; the coding "
                "reward model writes unit tests, whose rows have no episode outcome: set it to false"
            )
        if self.judge.source is not JudgeSource.ORACLE:
            if self.judge.oracle_flip.any:
                raise ValueError(
                    f"judge.oracle_flip (good={self.judge.oracle_flip.good}, bad={self.judge.oracle_flip.bad}) "
                    "turns over the oracle's votes, but judge.source=reward_model casts none: set "
                    "judge.source=oracle, or leave judge.oracle_flip at 0"
                )
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
