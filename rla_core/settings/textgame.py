"""The text-game setting: spec §1.2, §2.1-2.2, §3.2; one setting, two engines (docs/settings.md).

``textgame.engine`` picks the adapter: :data:`TEXTWORLD` (generated TextWorld games) or :data:`ALFWORLD`
(ALFWorld-style household games of the ALFRED domain played through TextWorld's PDDL engine,
:mod:`rla_core.envs.alfworld`). Both engines are :class:`~rla_core.envs.base.Environment` s, so rollouts,
judging, labels and warm start are the same :class:`TextGameSetting` code; each engine brings only its
environment and its rewrites (ALFWorld: the paper's two-token rewrite with an environment model, else
the parametric extension).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import polars as pl

from rla_core.algo.curriculum import PlayTask
from rla_core.config import RewriterKind, Setting
from rla_core.errors import EnvironmentSpecError
from rla_core.settings.base import (
    ProposalRequest,
    TaskFiles,
    WarmStartData,
    judged_labels,
    load_task_file,
    numbered_jsonl,
    rewrite_requests,
    seed_tasks_loaded,
)
from rla_core.stage_inputs import (
    AdaptInputs,
    BootstrapInputs,
    EnvSection,
    EvaluateInputs,
    SeedTasksInputs,
    TextGameEnv,
    expect_section,
    need,
)

if TYPE_CHECKING:
    from rla_core.envs.alfworld.env import AlfworldEnv
    from rla_core.envs.rewriter import RewriteRequest
    from rla_core.envs.textworld_env import TextWorldEnv
    from rla_core.models.generator import Generator


def _spec_rows(
    path: str | Path, *, what: str, env: TextWorldEnv | AlfworldEnv
) -> list[tuple[str, dict[str, Any]]]:
    """(slot id, spec) of every row of a task file, each spec checked by ``env``; errors name the line."""
    out = []
    for lineno, row in numbered_jsonl(path, what=what):
        if not isinstance(row.get("slot_id"), str) or not isinstance(row.get("spec"), dict):
            raise EnvironmentSpecError(
                f"{what} file '{path}' line {lineno} needs a string 'slot_id' and an object 'spec' "
                '(e.g. {"slot_id": "tw-0", "spec": {"world_size": 1, "nb_objects": 3, "quest_length": 1, "seed": 1}})'
            )
        try:
            env.validate_spec(row["spec"])
        except EnvironmentSpecError as exc:
            raise EnvironmentSpecError(
                f"{what} file '{path}' line {lineno} (slot {row['slot_id']!r}): {exc}"
            ) from None
        out.append((row["slot_id"], row["spec"]))
    return out


def _seed_tasks(
    env: TextWorldEnv | AlfworldEnv, inputs: SeedTasksInputs
) -> list[tuple[str, str, dict[str, Any]]]:
    rows = _spec_rows(need(inputs.textgame, Setting.TEXTGAME).tasks, what="training task", env=env)
    return [(slot, env.name, spec) for slot, spec in rows]


def _eval_tasks(
    env: TextWorldEnv | AlfworldEnv, inputs: EvaluateInputs, path: str | Path | None
) -> list[PlayTask]:
    section = need(inputs.textgame, Setting.TEXTGAME)
    rows = _spec_rows(path or section.eval_tasks, what="evaluation task", env=env)
    return [PlayTask(slot, slot, False, spec) for slot, spec in rows]


def _warm_start(env: TextWorldEnv | AlfworldEnv, inputs: BootstrapInputs, *, seed: int) -> WarmStartData:
    from rla_core.envs.demos import corpus_texts, judge_demos, policy_warm_start_rows

    specs = [spec for _slot, _env, spec in _seed_tasks(env, inputs.seed_sources())]
    turns = inputs.models.history_turns  # demos show the history the rollouts will show
    retries = inputs.rollout.env_retries  # a demonstration whose environment failed is replayed
    return WarmStartData(
        corpus=corpus_texts(env, specs, seed=seed, history_turns=turns, retries=retries),
        policy_rows=policy_warm_start_rows(inputs, env, specs, seed=seed),
        reward_rows=judge_demos(env, specs, seed=seed, history_turns=turns, retries=retries),
    )


def _env_model(inputs: AdaptInputs, env_model: Generator | None) -> Generator | None:
    """The environment model when it rewrites (``adaptation.rewriter=llm``), else None."""
    return env_model if inputs.adaptation.rewriter is RewriterKind.LLM else None


E = TypeVar("E", bound="TextWorldEnv | AlfworldEnv")
TEXTGAME_FILES = TaskFiles("textgame", "tasks", "eval_tasks")


@dataclass
class TextGameSetting(Generic[E]):
    """A text-game engine's adapter: multi-turn episodes, step judgments by the reward model.

    ``open_env``: the engine's environment for a ``textgame`` section; ``rewrite``: the engine's rewrites
    of the targets' requests (``inputs``, ``job``, requests, the environment model when it rewrites, the
    environment) as the 'proposals' frame.
    """

    env_name: str
    make_env: Callable[[TextGameEnv], E]
    rewrite: Callable[[AdaptInputs, ProposalRequest, list[RewriteRequest], Generator | None, E], pl.DataFrame]
    judge_template: str = "judge"
    judge_strict: bool = False
    setting: Setting = Setting.TEXTGAME
    task_files: TaskFiles = TEXTGAME_FILES

    def env(self, section: TextGameEnv) -> E:
        return self.make_env(section)

    @contextmanager
    def open_env(
        self, section: EnvSection, *, max_steps: int, screenshot_dir: Path | None = None
    ) -> Iterator[E]:
        """The engine's games (text observations: no side files, nothing to release). In-process engines
        raise only on our bugs (the stage fails); an episode of a broken game that offers no action is the
        one env_error they can record."""
        yield self.env(expect_section(section, TextGameEnv))

    def prerequisites(self) -> list[str]:
        """Nothing beyond the Python packages: the games are compiled and played in process."""
        return []

    check_task_file = load_task_file  # the stages' loaders check every task
    check_seed_tasks = seed_tasks_loaded

    def seed_tasks(self, inputs: SeedTasksInputs) -> list[tuple[str, str, dict[str, Any]]]:
        return _seed_tasks(self.env(need(inputs.textgame, Setting.TEXTGAME)), inputs)

    def eval_tasks(self, inputs: EvaluateInputs, path: str | Path | None) -> list[PlayTask]:
        return _eval_tasks(self.env(need(inputs.textgame, Setting.TEXTGAME)), inputs, path)

    def warm_start(self, inputs: BootstrapInputs, *, seed: int, workdir: Path | None = None) -> WarmStartData:
        return _warm_start(self.env(need(inputs.textgame, Setting.TEXTGAME)), inputs, seed=seed)

    labels = staticmethod(judged_labels)  # step-judged labels, the same rule in every such setting

    def propose(
        self, inputs: AdaptInputs, job: ProposalRequest, *, env_model: Generator | None
    ) -> pl.DataFrame:
        """Critic feedback, then the engine's rewrites. With ``env_model``: its failure summaries in one
        generate call and, with ``adaptation.rewriter=llm``, every target's attempts in one more; each
        shards over a Ray cluster when ``env_model`` is a :class:`~rla_core.dispatch.ShardedGenerator`."""
        requests = rewrite_requests(
            job, max_steps=inputs.rollout.max_steps, summarizer=env_model, sampling=inputs.adaptation.sampling
        )
        env = self.env(need(inputs.textgame, Setting.TEXTGAME))
        return self.rewrite(inputs, job, requests, _env_model(inputs, env_model), env)


def _textworld_env(section: TextGameEnv) -> TextWorldEnv:
    """TextWorld games cached in ``textgame.game_cache_dir``."""
    from rla_core.envs.textworld_env import TextWorldEnv

    return TextWorldEnv(Path(section.game_cache_dir))


def _textworld_rewrites(
    inputs: AdaptInputs, job: ProposalRequest, requests: list[RewriteRequest], writer: Generator | None,
    env: TextWorldEnv,
) -> pl.DataFrame:  # fmt: skip
    """The environment model's rewrites (:class:`~rla_core.envs.rewriter.TextWorldPrompts`), else the parametric ones."""
    from rla_core.envs.rewriter import (
        ModelRewriter,
        ParametricRewriter,
        TaskRewriter,
        TextWorldPrompts,
        rewrite_tasks,
    )

    rewriter: TaskRewriter = (
        ModelRewriter(TextWorldPrompts(), writer, sampling=inputs.adaptation.sampling)
        if writer is not None
        else ParametricRewriter()
    )
    return rewrite_tasks(
        requests, rewriter=rewriter, env=env, k=inputs.adaptation.candidates, seed=job.seed,
        iteration=job.iteration,
    )  # fmt: skip


def _alfworld_env(section: TextGameEnv) -> AlfworldEnv:
    """ALFWorld games cached in ``textgame.game_cache_dir/alfworld``."""
    from rla_core.envs.alfworld.env import AlfworldEnv

    return AlfworldEnv(Path(section.game_cache_dir) / "alfworld")


def _alfworld_rewrites(
    inputs: AdaptInputs, job: ProposalRequest, requests: list[RewriteRequest], writer: Generator | None,
    env: AlfworldEnv,
) -> pl.DataFrame:  # fmt: skip
    """The paper's two-token rewrite by the environment model, else the parametric extension; each
    candidate checked in the game."""
    from rla_core.envs.alfworld import rewriter as alfw
    from rla_core.envs.rewriter import ModelRewriter, TaskRewriter, rewrite_tasks

    rewriter: TaskRewriter
    if writer is not None:
        rewriter = ModelRewriter(alfw.TwoTokenPrompts(env), writer, sampling=inputs.adaptation.sampling)

        def check(spec: dict[str, Any], request: RewriteRequest) -> str | None:
            return alfw.check_two_token(env, spec, request)
    else:
        rewriter, check = alfw.ParametricRewriter(), alfw.check_parametric
    return rewrite_tasks(
        requests, rewriter=rewriter, env=env, k=inputs.adaptation.candidates, seed=job.seed,
        iteration=job.iteration, check=check,
    )  # fmt: skip


TEXTWORLD: TextGameSetting[TextWorldEnv] = TextGameSetting("textworld", _textworld_env, _textworld_rewrites)
ALFWORLD: TextGameSetting[AlfworldEnv] = TextGameSetting("alfworld", _alfworld_env, _alfworld_rewrites)
