"""The method's own sections: rollouts, judgments, rewards, environment adaptation and held-out evaluation (spec §1-§3, §6)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from rla_core.config.base import (
    Band,
    SamplingConfig,
    _Section,
)
from rla_core.config.choices import (
    InvalidAction,
    JudgeSource,
    RewriterKind,
)


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
            "Replays of an episode whose environment failed (env_error: a desktop, browser or sandbox died, "
            "a plug-in raised), on a fresh environment with the same seeds; rollout and evaluate stages, the "
            "warm start's demonstrations and random episodes (bootstrap), and coding's GT and execute runs "
            "(a test run whose sandbox died). It changes which attempts are kept, so it is part of their "
            "stage keys (docs/environment-errors.md)."
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


class OracleFlip(_Section):
    """A noisy oracle judge (``judge.source=oracle``): how often a step's votes are turned over.

    All ``m`` votes of a step flip together, so the votes' step-level recall is ``1 - good`` on good steps and
    ``1 - bad`` on bad ones, and their balanced accuracy is ``1 - (good + bad) / 2``. A diagnostic of how good a
    judge must be for the step-wise reward to pay (docs/study.md); both 0 is the perfect oracle.
    """

    good: float = Field(0.0, ge=0.0, le=1.0, description="Probability that a good step's votes say bad.")
    bad: float = Field(0.0, ge=0.0, le=1.0, description="Probability that a bad step's votes say good.")

    @property
    def any(self) -> bool:
        return self.good > 0 or self.bad > 0


class JudgeConfig(_Section):
    """Reward-model step judgments (spec §1.2(b), §5)."""

    m: int = Field(3, ge=1, description="Independent judgments per step.")
    source: JudgeSource = Field(
        JudgeSource.REWARD_MODEL,
        description="reward_model: the reward model judges every step; oracle (a diagnostic, never a default): "
        "every vote is +1 when the played action is one of the engine's optimal next actions and -1 otherwise, "
        "and no judge stage runs — the upper bound of the step-wise reward (privileged information).",
    )
    oracle_flip: OracleFlip = Field(
        default_factory=lambda: OracleFlip(),
        description="judge.source=oracle only: flip each step's oracle votes with these probabilities, "
        "seeded per (iteration, task, rollout, step) — a judge of known quality (diagnostic).",
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
    rm_outcome_balance: bool = Field(
        False,
        description="Ours, not the paper's (docs/method.md#balancing-the-judges-rows-by-outcome): scale the "
        "advantages of the RM rows that enter the update so that won and lost episodes carry equal total weight.",
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


class EvalConfig(_Section):
    """Held-out evaluation (spec §1.2 step 5)."""

    every: int = Field(2, ge=1, description="Evaluate every k iterations and after the last.")
    rollouts_per_task: int = Field(2, ge=1, description="Rollouts per held-out task.")
    max_steps: int = Field(10, ge=1, description="Episode cut for evaluation.")
    sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(temperature=0.8, top_p=0.95, max_new_tokens=24)
    )
    judge_steps: str | None = Field(
        None,
        description="The judge's yardstick: a recorded step set (Parquet with the 'rollouts' columns and the "
        "engine's expert_actions, e.g. data/textworld/bench-long-yardstick.parquet). At iteration 0 and after the "
        "last iteration the reward model judges these same steps (stage judge_eval) and its balanced step "
        "accuracy is logged as reward_model/yardstick_* (docs/study.md). None: no yardstick.",
    )
