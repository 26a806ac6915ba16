"""What every setting adapter shares: the interface, its request and result types, data-file helpers.

The adapters (one per setting and engine, registered in :mod:`rla_core.settings`) compose the
environment, model and algorithm modules of rla_core. They do I/O (environments, sandbox, generation)
but hold no reward or acceptance rules — those are in ``rla_core.algo`` (outcomes and pass ratios of
programs: ``coding_rewards.score_programs``; task accuracy, the same rule in every setting:
``labels.task_accuracy``; the step-judged labels of text games and GUI tasks: :func:`judged_labels`;
the rewrite rule: ``adaptation.variant_problem``).

An adapter says only what differs between settings (:class:`SettingAdapter`): how to open its
environment (:class:`EpisodeSetting`) or sample its rollouts in one call (:class:`OneCallSetting`), where
its task files are (:class:`TaskFiles`), what the preflight checks on this machine, and its tasks, warm
start, labels and rewrites. Playing a request's episodes — replays of failed ones, waves, side files,
shards — is written once, in :mod:`rla_core.dispatch`.
"""

from __future__ import annotations

import hashlib
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import polars as pl

from rla_core.config import JudgeSource, RunConfig, Setting
from rla_core.errors import ConfigError, EnvironmentSpecError
from rla_core.store.jsonl import jsonl_lines

if TYPE_CHECKING:
    from rla_core.algo.curriculum import PlayTask, RewriteTarget
    from rla_core.config import SamplingConfig
    from rla_core.envs.base import Environment
    from rla_core.envs.rewriter import RewriteRequest
    from rla_core.models.generator import Generator
    from rla_core.stage_inputs import (
        AdaptInputs,
        BootstrapInputs,
        EnvSection,
        EvaluateInputs,
        LabelInputs,
        RolloutRequest,
        SeedTasksInputs,
    )

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def file_digest(path: str | Path) -> str:
    """sha256 of a data file's bytes (part of the content key of stages that read it)."""
    p = resolve_data_path(path)
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else f"missing:{path}"


def resolve_data_path(path: str | Path) -> Path:
    """A data path from the config: as given if it exists (relative to the cwd), else relative to the project."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    candidate = PROJECT_ROOT / p
    return candidate if candidate.exists() else p


def read_jsonl(path: str | Path, *, what: str) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a specific error names the file and line of any bad row."""
    return [row for _lineno, row in numbered_jsonl(path, what=what)]


def numbered_jsonl(path: str | Path, *, what: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) of every non-blank line of a JSONL file, as :func:`read_jsonl` checks them."""
    p = resolve_data_path(path)
    if not p.is_file():
        raise ConfigError(f"{what} file '{path}' does not exist; set it in the config or pass --tasks")
    rows: list[tuple[int, dict[str, Any]]] = []
    for lineno, row, error in jsonl_lines(p):
        if error is not None:
            raise EnvironmentSpecError(f"{what} file '{p}' line {lineno} is not JSON: {error.msg}") from None
        if not isinstance(row, dict):
            raise EnvironmentSpecError(f"{what} file '{p}' line {lineno} is not a JSON object")
        rows.append((lineno, row))
    if not rows:
        raise EnvironmentSpecError(f"{what} file '{p}' has no tasks")
    return rows


def eval_due(cfg: RunConfig, iteration: int) -> bool:
    """Evaluate every ``evaluation.every`` iterations and after the last one (the flow's schedule)."""
    return iteration % cfg.evaluation.every == 0 or iteration == cfg.iterations


def yardstick_due(cfg: RunConfig, iteration: int) -> bool:
    """Measure the judge on its yardstick (``evaluation.judge_steps``) at the start and the end of a run: the
    warm-started judge at iteration 0 and the trained one after the last iteration — when a judge runs."""
    judged = cfg.evaluation.judge_steps is not None and cfg.judge.source is JudgeSource.REWARD_MODEL
    return judged and iteration in (0, cfg.iterations)


@dataclass(frozen=True)
class WarmStartData:
    """What the bootstrap stage needs: tokenizer corpus and SFT demonstrations for both models, and for a
    tiny environment model the rewrites it should write (None: a setting whose environment model is used
    as it is)."""

    corpus: list[str]
    policy_rows: pl.DataFrame  # prompt, response
    reward_rows: pl.DataFrame  # prompt, response
    environment_rows: pl.DataFrame | None = None  # prompt, response


@dataclass(frozen=True)
class ProposalRequest:
    """What the adapt stage asks a setting to rewrite: this step's frames and targets, seed, iteration.

    ``frames``: rollouts plus the setting's reward-model signals (judgments, or unit tests and
    executions); ``targets``: ``rla_core.algo.curriculum.rewrite_targets``.
    """

    frames: dict[str, pl.DataFrame]
    targets: list[RewriteTarget]
    seed: int
    iteration: int


@dataclass(frozen=True)
class TaskFiles:
    """Where a setting's task files are configured: the fields of its section holding the training and the
    held-out task file (``coding.problems`` / ``coding.eval_problems``)."""

    section: str
    train: str
    held_out: str

    def keys(self) -> tuple[str, str]:
        """The dotted config keys, training first: ``("gui.tasks", "gui.eval_tasks")``."""
        return f"{self.section}.{self.train}", f"{self.section}.{self.held_out}"

    def of(self, inputs: object, *, held_out: bool) -> str:
        """The task file a stage's slice names (its section of this setting)."""
        section = getattr(inputs, self.section)
        return str(getattr(section, self.held_out if held_out else self.train))


class SettingAdapter(Protocol):
    """What differs between settings, as the stages, the preflight and :mod:`rla_core.dispatch` ask it;
    each method receives its stage's typed slice (or request). How its rollouts are played is one of
    :class:`EpisodeSetting` or :class:`OneCallSetting`."""

    @property
    def setting(self) -> Setting:
        """The setting this adapter plays (a Ray shard resolves its own adapter from it)."""
        ...

    @property
    def env_name(self) -> str:
        """The engine's name (a plug-in's entry-point name): the registry's ``env`` of its seed tasks."""
        ...

    @property
    def judge_template(self) -> str | Template:
        """The step judge's prompt: a template name (rla_core/envs/templates) or a plug-in's own template."""
        ...

    @property
    def judge_strict(self) -> bool:
        """OSWorld's strict score parsing instead of AlfWorld's tolerant one (spec §5)."""
        ...

    @property
    def task_files(self) -> TaskFiles | None:
        """Where the task files are configured; None when the tasks come from code (a plug-in's)."""
        ...

    def prerequisites(self) -> list[str]:
        """What this machine lacks to play the setting (a browser, the desktop programs), one line each;
        the preflight reports them under the setting's engine key."""
        ...

    def check_task_file(self, inputs: SeedTasksInputs | EvaluateInputs) -> list[str]:
        """The preflight's look at the training (``SeedTasksInputs``) or held-out (``EvaluateInputs``) task
        file: it loads as that stage loads it (raising what the stage would raise), and the warnings say
        what this machine will leave out (OSWorld tasks that cannot run here)."""
        ...

    def check_seed_tasks(self, inputs: BootstrapInputs) -> list[str]:
        """The preflight's look at the seed tasks themselves, one line per problem: a plug-in's tasks come
        from its code, so each is demonstrated once and checked by the plug-in; [] where the task files were
        checked by loading them."""
        ...

    def seed_tasks(self, inputs: SeedTasksInputs) -> list[tuple[str, str, dict[str, Any]]]: ...

    def eval_tasks(self, inputs: EvaluateInputs, path: str | Path | None) -> list[PlayTask]: ...

    def warm_start(self, inputs: BootstrapInputs, *, seed: int, workdir: Path | None = None) -> WarmStartData:
        """Demonstrations and corpus; ``workdir`` holds their side files (screenshots) until the SFT ends."""
        ...

    def labels(
        self, inputs: LabelInputs, frames: dict[str, pl.DataFrame], *, accepted: set[str], seed: int
    ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, float]]:
        """Policy and reward-model samples with their statistics; ``seed`` is the label stage's (a noisy
        oracle's flips draw from it)."""
        ...

    def propose(
        self, inputs: AdaptInputs, job: ProposalRequest, *, env_model: Generator | None
    ) -> pl.DataFrame:
        """Rewrite candidates for every target, valid or not with the reason (artifact 'proposals')."""
        ...


@runtime_checkable
class EpisodeSetting(SettingAdapter, Protocol):
    """A setting whose rollouts are episodes played in its environment (text games, GUI tasks, plug-ins):
    :func:`rla_core.dispatch.play_episodes` plays a request's episodes in what :meth:`open_env` opens."""

    def open_env(
        self, section: EnvSection, *, max_steps: int, screenshot_dir: Path | None = None
    ) -> AbstractContextManager[Environment]:
        """The environment of a request's ``section`` (``request.env``), released when the block ends;
        ``max_steps`` is the episodes' step budget, ``screenshot_dir`` where GUI screens are kept."""
        ...


@runtime_checkable
class OneCallSetting(SettingAdapter, Protocol):
    """A setting whose rollout samples every episode in one generate call (coding's programs): on a
    cluster its prompts shard, not its episodes."""

    def sample_rollouts(self, request: RolloutRequest, *, generator: Generator) -> dict[str, pl.DataFrame]:
        """The request's rollout frames (and whatever the setting runs with them: coding's GT executions)."""
        ...


def load_task_file(adapter: SettingAdapter, inputs: SeedTasksInputs | EvaluateInputs) -> list[str]:
    """:meth:`SettingAdapter.check_task_file` of a setting whose stages' loaders check every task: load
    the file with them; no warnings (an empty file is an error). An adapter declares it as its method
    (``check_task_file = load_task_file``)."""
    from rla_core.stage_inputs import EvaluateInputs

    held_out = isinstance(inputs, EvaluateInputs)
    tasks = (
        adapter.eval_tasks(inputs, None) if isinstance(inputs, EvaluateInputs) else adapter.seed_tasks(inputs)
    )
    if not tasks:
        files = adapter.task_files
        path = files.of(inputs, held_out=held_out) if files is not None else "its task source"
        raise EnvironmentSpecError(f"'{path}' lists no tasks")
    return []


def seed_tasks_loaded(adapter: SettingAdapter, inputs: BootstrapInputs) -> list[str]:
    """:meth:`SettingAdapter.check_seed_tasks` of a setting whose task files hold its seed tasks: loading
    them (:func:`load_task_file`) checked every one, nothing more to look at (``check_seed_tasks =
    seed_tasks_loaded``)."""
    del adapter, inputs
    return []


# A stage's side files (``writer.put_dir(workdir / SIDE_FILES, SIDE_FILES)``), which GUI artifacts reference
# relative to the stage: screenshots under SCREENSHOTS.
SIDE_FILES = "files"
SCREENSHOTS = Path(SIDE_FILES) / "screenshots"


def screenshot_dir(request: RolloutRequest) -> Path | None:
    """Where a GUI rollout keeps each step's screenshot: under ``request.workdir`` when the rollout stage
    keeps them (``gui.screenshots``) or the policy sees them (``models.images.policy``); else nowhere
    (evaluation keeps none for a text policy)."""
    from rla_core.stage_inputs import GuiRollout

    keep = request.images > 0 or (isinstance(request.env, GuiRollout) and request.env.screenshots)
    return request.workdir / SCREENSHOTS if request.workdir is not None and keep else None


def demo_screens(inputs: BootstrapInputs, workdir: Path | None) -> Path | None:
    """Where a GUI warm start keeps its demonstrations' screenshots: under ``workdir`` when a role sees
    screens (``models.images``), so its demonstrations show them as its prompts will; else nowhere."""
    return workdir / SCREENSHOTS if workdir is not None and inputs.models.images.any else None


def relative_refs(rollouts: pl.DataFrame, workdir: Path | None) -> pl.DataFrame:
    """GUI rollouts with ``observation_ref``, ``next_observation_ref`` and the prompts' ``images`` relative
    to the stage's side-file folder (how the artifacts record screenshots)."""
    if workdir is None:
        return rollouts
    prefix = str(workdir) + "/"
    return rollouts.with_columns(
        *(pl.col(c).str.strip_prefix(prefix) for c in ("observation_ref", "next_observation_ref")),
        pl.col("images").list.eval(pl.element().str.strip_prefix(prefix)),
    )


def judged_labels(
    inputs: LabelInputs, frames: dict[str, pl.DataFrame], *, accepted: set[str], seed: int
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, float]]:
    """Policy and reward-model samples of step-judged rollouts (text games and GUI tasks alike), with
    their statistics namespaced ``policy/…`` and ``reward_model/…``.

    With ``judge.source=oracle`` no judge stage ran: the votes are the engine's labels, turned over with
    ``judge.oracle_flip``'s probabilities (flips drawn from ``seed``), and the votes' own step metrics
    (:func:`~rla_core.algo.judging.judge_step_metrics`: the measured balanced accuracy of the votes used)
    are among the statistics."""
    from rla_core.algo.judging import judge_step_metrics, oracle_judgments
    from rla_core.algo.labels import policy_samples, reward_samples

    rollouts = frames["rollouts"]
    stats: dict[str, float] = {}
    if inputs.judge.source is JudgeSource.ORACLE:  # no judge stage ran: the engine's labels are the votes
        judgments = oracle_judgments(rollouts, m=inputs.judge.m, flip=inputs.judge.oracle_flip, seed=seed)
        stats |= judge_step_metrics(rollouts, judgments)
    else:
        judgments = frames["judgments"]
    policy, p_stats = policy_samples(
        rollouts, judgments, cfg=inputs.reward, m=inputs.judge.m, accepted_pending=accepted
    )
    reward, r_stats = reward_samples(
        rollouts, judgments, cfg=inputs.reward, m=inputs.judge.m, accepted_pending=accepted
    )
    stats |= {f"policy/{k}": float(v) for k, v in p_stats.items()}
    stats |= {f"reward_model/{k}": float(v) for k, v in r_stats.items()}
    return policy, reward, stats


def rewrite_requests(
    job: ProposalRequest,
    *,
    max_steps: int,
    summarizer: Generator | None = None,
    sampling: SamplingConfig | None = None,
) -> list[RewriteRequest]:
    """Every target's rewrite request with the critic feedback on its rollouts
    (:func:`rla_core.envs.feedback.critic_feedback`); with ``summarizer`` (the environment model) and
    ``sampling``, its failure summaries, sampled in one generate call."""
    from rla_core.envs.feedback import critic_feedback
    from rla_core.envs.rewriter import RewriteRequest

    feedback = critic_feedback(
        job.frames["rollouts"], job.frames["judgments"], max_steps=max_steps, summarizer=summarizer,
        sampling=sampling if summarizer is not None else None, seed=job.seed,
    )  # fmt: skip
    return RewriteRequest.for_targets(job.targets, feedback)
