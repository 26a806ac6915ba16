"""Setting adapters: what differs between text games, coding and GUI control, behind one interface.

Each stage in ``tasks/`` asks :func:`adapter_for` for its setting's adapter and calls the same
methods; the adapters compose the environment, model and algorithm modules of rla_core. They do I/O
(environments, sandbox, generation) but hold no reward or acceptance rules — those are in
``rla_core.algo`` (outcomes and pass ratios of programs: ``coding_rewards.score_programs``; task
accuracy, the same rule in every setting: ``labels.task_accuracy``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import polars as pl

from rla_core.config import InvalidAction, RunConfig, Setting
from rla_core.errors import ConfigError, EnvironmentSpecError

if TYPE_CHECKING:
    from rla_core.algo.curriculum import PlayTask, RewriteTarget
    from rla_core.config import SamplingConfig
    from rla_core.models.generator import Generator

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def resolve_data_path(path: str | Path) -> Path:
    """A data path from the config: as given if it exists (relative to the cwd), else relative to the project."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    candidate = PROJECT_ROOT / p
    return candidate if candidate.exists() else p


def read_jsonl(path: str | Path, *, what: str) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a specific error names the file and line of any bad row."""
    p = resolve_data_path(path)
    if not p.is_file():
        raise ConfigError(f"{what} file '{path}' does not exist; set it in the config or pass --tasks")
    rows: list[dict[str, Any]] = []
    for lineno, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EnvironmentSpecError(f"{what} file '{p}' line {lineno} is not JSON: {exc.msg}") from None
        if not isinstance(row, dict):
            raise EnvironmentSpecError(f"{what} file '{p}' line {lineno} is not a JSON object")
        rows.append(row)
    if not rows:
        raise EnvironmentSpecError(f"{what} file '{p}' has no tasks")
    return rows


# The one declaration of the stage order (spec §1): the flow runs these, `rla resume --from-stage`
# invalidates downstream in this order and `rla status` / `rla inspect` list stages by it.
SETUP_STAGES: tuple[str, ...] = ("seed_tasks", "bootstrap")
# Iteration 0 runs the setup stages, then evaluates the warm-started policy ("Before").
ITERATION_ZERO_STAGES: tuple[str, ...] = (*SETUP_STAGES, "evaluate")
_SIGNAL_STAGES: dict[Setting, tuple[str, ...]] = {
    Setting.TEXTGAME: ("judge",),  # the reward model judges every step
    Setting.CODING: ("write_tests", "execute"),  # the reward model writes unit tests; the sandbox runs them
    Setting.GUI: ("judge",),
}


def signal_stages(setting: Setting) -> tuple[str, ...]:
    """The stages that produce the reward model's signals in ``setting`` (between rollout and label)."""
    return _SIGNAL_STAGES[setting]


def stage_order(setting: Setting) -> tuple[str, ...]:
    """The stages of one iteration of ``setting``, in the order the flow runs them.

    Example:
        >>> stage_order(Setting.CODING)[:4]
        ('rollout', 'write_tests', 'execute', 'label')
    """
    return ("rollout", *signal_stages(setting), "label", "adapt", "train_policy", "train_reward", "evaluate")


def eval_due(cfg: RunConfig, iteration: int) -> bool:
    """Evaluate every ``evaluation.every`` iterations and after the last one."""
    return iteration % cfg.evaluation.every == 0 or iteration == cfg.iterations


def stage_runs(cfg: RunConfig, iteration: int, stage: str) -> bool:
    """Whether an iteration (>= 1) runs ``stage``: the loop's ablation switches and evaluation schedule.

    The one declaration the flow (``flows/loop.py``) and the fast resume check (``flows/status.py``) share.
    """
    if stage == "adapt":
        return cfg.adaptation.enabled
    if stage == "train_reward":
        return cfg.training.reward.enabled
    if stage == "evaluate":
        return eval_due(cfg, iteration)
    return True


def iteration_stages(setting: Setting, iteration: int) -> tuple[str, ...]:
    """The stages iteration ``iteration`` can hold, in flow order (iteration 0: setup and "Before" evaluation).

    Example:
        >>> iteration_stages(Setting.TEXTGAME, 0)
        ('seed_tasks', 'bootstrap', 'evaluate')
    """
    return ITERATION_ZERO_STAGES if iteration == 0 else stage_order(setting)


def task_files(cfg: RunConfig) -> tuple[str, str]:
    """The (training, evaluation) task files of the run's setting."""
    return {
        Setting.TEXTGAME: (cfg.textgame.tasks, cfg.textgame.eval_tasks),
        Setting.CODING: (cfg.coding.problems, cfg.coding.eval_problems),
        Setting.GUI: (cfg.gui.tasks, cfg.gui.eval_tasks),
    }[cfg.setting]


@dataclass(frozen=True)
class WarmStartData:
    """What the bootstrap stage needs: tokenizer corpus and SFT demonstrations for both models."""

    corpus: list[str]
    policy_rows: pl.DataFrame  # prompt, response
    reward_rows: pl.DataFrame  # prompt, response


class SettingAdapter(Protocol):
    """The per-setting operations the stages call."""

    env_name: str
    judge_template: str  # prompt template of the step judge (rla_core/envs/templates)
    judge_strict: bool  # OSWorld's strict score parsing instead of AlfWorld's tolerant one (spec §5)

    def seed_tasks(self, cfg: RunConfig) -> list[tuple[str, str, dict[str, Any]]]: ...

    def eval_tasks(self, cfg: RunConfig, path: str | Path | None) -> list[PlayTask]: ...

    def warm_start(self, cfg: RunConfig, *, seed: int) -> WarmStartData: ...

    def rollout(
        self,
        cfg: RunConfig,
        tasks: list[PlayTask],
        *,
        generator: Generator,
        n: int,
        max_steps: int,
        sampling: SamplingConfig,
        seed: int,
        iteration: int,
        workdir: Path | None = None,
        invalid_action: InvalidAction = InvalidAction.FALLBACK,
    ) -> dict[str, pl.DataFrame]:
        """Play ``tasks``; frames by artifact name. Side files (GUI screenshots) go under ``workdir/files``."""
        ...

    def labels(
        self, cfg: RunConfig, frames: dict[str, pl.DataFrame], *, accepted: set[str]
    ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, float]]: ...

    def propose(
        self,
        cfg: RunConfig,
        frames: dict[str, pl.DataFrame],
        targets: list[RewriteTarget],
        *,
        env_model: Generator | None,
        seed: int,
        iteration: int,
    ) -> pl.DataFrame: ...


def adapter_for(setting: Setting) -> SettingAdapter:
    """The adapter of a setting."""
    if setting is Setting.TEXTGAME:
        from rla_core.settings.textgame import TextGameSetting

        return TextGameSetting()
    if setting is Setting.CODING:
        from rla_core.settings.coding import CodingSetting

        return CodingSetting()
    from rla_core.settings.gui import GuiSetting

    return GuiSetting()
