"""The per-setting sections: coding problems and sandbox limits, text-game tasks, GUI tasks (MiniWoB++, OSWorld), plug-ins."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from rla_core.config.base import (
    SamplingConfig,
    _Section,
)
from rla_core.config.choices import (
    EvalGrader,
    GuiEngine,
    ProblemFormat,
    TextGameEngine,
)


class CodingConfig(_Section):
    """Coding setting: unit-test-writing reward model and execution limits (spec §1.1, §2.3-2.5)."""

    problems: str = Field("data/coding/problems.jsonl", description="Seed problem set (JSONL).")
    eval_problems: str = Field(
        "data/coding/eval.jsonl",
        description="Held-out problems for evaluation: a JSONL or Parquet file in eval_format (CodeContests: "
        "also its own JSON export).",
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
    eval_grader: EvalGrader = Field(
        EvalGrader.NATIVE,
        description="native: each benchmark problem graded by its benchmark's rules; rla: by ours, as the "
        "built-in tasks are (docs/coding-benchmarks.md#graders).",
    )
    livebench_release: str = Field(
        "",
        pattern=r"^(\d{4}-\d{2}-\d{2})?$",
        description="LiveBench release (YYYY-MM-DD) whose questions are evaluated, as LiveBench selects them; "
        "empty: the newest release in the file.",
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
        description="desktop_env's file cache (<cache_dir>/<task id>/…); fill it with `rla osworld fetch` "
        "(downloads) or `python -m rla_core.envs.osworld.cache fill` (a folder of downloaded files).",
    )
    mirrors: dict[str, str] = Field(
        default_factory=dict,
        description="URL prefix -> base URL or local directory that `rla osworld fetch` downloads task files "
        "from instead (the rest of the URL is appended; the longest prefix wins; --mirror adds to it).",
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
        description="The plug-in's entry-point name in the 'rlanything.environments' group (the preflight "
        "resolves it: an unknown name lists the installed ones).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="The plug-in's own options, validated by its options model by the preflight "
        "(`rla config check`, every run's start) and by each stage that opens the plug-in.",
    )
