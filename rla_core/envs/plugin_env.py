"""An environment plug-in (:mod:`rla_core.plugins`) as an :class:`~rla_core.envs.base.Environment`, and its rewrites.

:class:`GuardedPlugin` is the one path every call into a plug-in takes: it checks everything the plug-in
hands back before the loop uses it, and names the plug-in and the task in every error
(docs/environments.md):

- its construction (``cls(options)``) and its declared :class:`~rla_core.plugins.RewriteSpace`: an
  exception or no space is a :class:`~rla_core.errors.ConfigError` naming the plug-in;
- its tasks: :class:`~rla_core.plugins.Task` values, ids non-empty strings unique within a split, specs
  JSON objects inside the rewrite space — else :class:`~rla_core.errors.EnvironmentSpecError` (the stage
  fails before anything is written);
- an exception in ``instruction``, ``reset``, ``step``, ``score`` or ``expert_actions``, or a malformed
  observation or score, is an :class:`~rla_core.errors.EnvironmentFault` of kind ``plugin``: that episode
  ends ``env_error`` (replayed, never the policy's loss; docs/environment-errors.md), in a rollout and in
  the warm start alike (:func:`rla_core.envs.demos.play_demo`);
- an exception in ``demonstration`` (or one that is not a list of actions) is an
  :class:`~rla_core.errors.EnvironmentSpecError` naming the task: a task that cannot be demonstrated;
- a rewrite outside the declared :class:`~rla_core.plugins.RewriteSpace` is an invalid proposal with the
  reason (:func:`check_variant`), as is one the plug-in's own ``check_variant`` rejects (or raises in);
- ``close`` is called once, when the instance is released (:meth:`GuardedPlugin.close`).

A task is named by its id once the instance listed it (``tasks``), else by its spec.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from string import Template
from typing import Any, TypeVar

from rla_core.algo.adaptation import Goal, VariantSpace
from rla_core.envs.base import EnvErrorKind, StepResult, canonical_spec
from rla_core.envs.rewriter import Candidate, RewriteRequest, distinct_moves, parse_candidate
from rla_core.errors import ConfigError, EnvironmentFault, EnvironmentSpecError
from rla_core.plugins import (
    EnvironmentPlugin,
    EpisodeRequest,
    EpisodeResult,
    InstalledPlugin,
    Observation,
    PolicyEndpoint,
    RewriteSpace,
    Split,
    Task,
)

T = TypeVar("T")
_UNDECLARED = object()


def implements(cls: type[EnvironmentPlugin], method: str) -> bool:
    """Whether the plug-in class overrides ``method`` of the contract (not the base's default)."""
    return getattr(cls, method) is not getattr(EnvironmentPlugin, method)


def _is_score(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and 0.0 <= float(value) <= 1.0


def declaration_problem(plugin: EnvironmentPlugin) -> str | None:
    """Why a plug-in's free-form declarations are malformed (``free_form`` a bool, ``system_prompt`` a
    string or None, ``success_score`` a number in (0, 1]), or None."""
    if not isinstance(plugin.free_form, bool):
        return f"free_form is {plugin.free_form!r}, not True or False"
    if plugin.system_prompt is not None and not isinstance(plugin.system_prompt, str):
        return f"system_prompt is {plugin.system_prompt!r}, not a string or None"
    score = plugin.success_score
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0.0 < float(score) <= 1.0:
        return f"success_score is {score!r}; it is the lowest winning score, a number in (0, 1]"
    return None


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


class PluginEpisode:
    """One episode of a plug-in: an :class:`~rla_core.envs.base.Episode` over its state."""

    def __init__(
        self, env: GuardedPlugin, spec: dict[str, Any], instruction: str, state: Any, first: Observation
    ) -> None:
        self.env = env
        self.spec = spec
        self.instruction = instruction
        self.state = state
        self.done = False
        self._show(first)

    def _show(self, obs: Observation) -> None:
        self.current = obs
        self.observation = obs.text
        self.admissible_actions = [] if obs.done else list(obs.actions)

    @property
    def observation_ref(self) -> str | None:
        return self.current.image

    @property
    def free_form(self) -> bool:
        """A turn without an action list while the episode goes on (checked against the plug-in's
        declaration by :meth:`GuardedPlugin.observation`)."""
        return not self.current.done and not self.current.actions

    @property
    def system_prompt(self) -> str | None:
        return self.env.plugin.system_prompt

    def step(self, action: str) -> StepResult:
        state, obs = self.env.call("step", self.spec, lambda: self.env.plugin.step(self.state, action))
        self.state = state
        self._show(self.env.observation(obs, "step", self.spec))
        if not self.current.done:
            return StepResult(self.current.text, done=False, won=False)
        self.done = True
        return self.env.ended(self.current.text, self.env.score(self.state, self.spec))

    def expert_actions(self) -> list[str]:
        if self.done or self.free_form:  # free text has no expert labels (string equality means nothing)
            return []
        found = self.env.call("expert_actions", self.spec, lambda: self.env.plugin.expert_actions(self.state))
        if found is None:
            return []
        if isinstance(found, str) or not all(isinstance(a, str) for a in found):
            raise self.env.fault(
                f"expert_actions returned {found!r}, not a list of action strings", self.spec
            )
        return list(found)

    def close(self) -> None:
        """Episodes are values: nothing to release (the instance is released by :meth:`GuardedPlugin.close`)."""


@dataclass
class GuardedPlugin:
    """An instance of an installed plug-in, opened with its validated options, as the loop's environment:
    the one guarded path into it (module docstring). Close it when done (:meth:`close`)."""

    installed: InstalledPlugin
    plugin: EnvironmentPlugin = field(init=False)
    name: str = field(init=False)
    max_open: int | None = field(init=False, default=None)  # episodes are values: any number at once
    _task_ids: dict[str, str] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.name = self.installed.name
        try:
            self.plugin = self.installed.open()
        except ConfigError:
            raise
        except Exception as exc:  # the plug-in's own constructor failed, whatever it raised: name it
            raise ConfigError(f"plug-in {self.name!r} raised in __init__(options): {_one_line(exc)}") from exc
        where = f"plug-in {self.name!r} ({self.installed.cls.__module__}.{self.installed.cls.__qualname__})"
        space = getattr(self.plugin, "rewrite_space", _UNDECLARED)
        if space is not None and not isinstance(space, RewriteSpace):
            raise ConfigError(
                f"{where} declares no rewrite_space (a RewriteSpace, or None for a plug-in without rewrites; "
                "on the class or set in __init__)"
            )
        problem = declaration_problem(self.plugin)
        if problem is not None:
            raise ConfigError(f"{where}: {problem}")
        turn_by_turn = [m for m in ("reset", "step", "score") if implements(type(self.plugin), m)]
        if not self.plays_itself and len(turn_by_turn) < 3:
            missing = sorted({"reset", "step", "score"} - set(turn_by_turn))
            raise ConfigError(
                f"{where} implements neither reset, step and score (missing: {', '.join(missing)}) nor play "
                "(an environment that plays its own episodes against the policy's endpoint)"
            )

    @property
    def free_form(self) -> bool:
        """The plug-in declares free-form turns (:attr:`~rla_core.plugins.EnvironmentPlugin.free_form`), or
        plays its own episodes (whose turns are free text by construction)."""
        return self.plugin.free_form or self.plays_itself  # a bool: checked at construction

    @property
    def plays_itself(self) -> bool:
        """The plug-in implements :meth:`~rla_core.plugins.EnvironmentPlugin.play`: its episodes are played
        against the policy's recording endpoint (:mod:`rla_core.envs.endpoint_play`)."""
        return implements(type(self.plugin), "play")

    def play(self, episodes: list[EpisodeRequest], policy: PolicyEndpoint) -> list[EpisodeResult]:
        """The plug-in's :meth:`~rla_core.plugins.EnvironmentPlugin.play`, guarded: an exception, or results
        that are not one :class:`~rla_core.plugins.EpisodeResult` per episode with a score in [0, 1] or an
        error, fail every episode of the call as the plug-in's error (``env_error``, replayed), never a loss."""
        try:
            results = list(self.plugin.play(episodes, policy=policy))
        except Exception as exc:  # the plug-in's own failure, whatever it is: env_error, never a loss
            return [
                EpisodeResult(None, e.max_turns, error=f"raised in play: {_one_line(exc)}") for e in episodes
            ]
        problem = None
        if len(results) != len(episodes) or not all(isinstance(r, EpisodeResult) for r in results):
            problem = (
                f"play returned {len(results)} results for {len(episodes)} episodes, or not EpisodeResults"
            )
        else:
            bad = [r.score for r in results if r.error is None and not _is_score(r.score)]
            if bad:
                problem = f"play returned the score {bad[0]!r}; a score is a number in [0, 1] (or an error)"
        if problem is not None:
            return [EpisodeResult(None, e.max_turns, error=problem) for e in episodes]
        return results

    @property
    def space(self) -> RewriteSpace | None:
        """The declared rewrite space; None: the plug-in has no rewrites (adaptation off)."""
        space: RewriteSpace | None = self.plugin.rewrite_space
        return space

    def ended(self, text: str, score: float) -> StepResult:
        """The result of an ended episode with ``score``: won when it reaches the plug-in's success score."""
        return StepResult(text, done=True, won=score >= self.plugin.success_score, score=score)

    def close(self) -> None:
        """The plug-in's own ``close``; what it raises names the plug-in."""
        try:
            self.plugin.close()
        except Exception as exc:  # the plug-in's own failure, whatever it is: the stage fails naming it
            raise EnvironmentSpecError(f"plug-in {self.name!r} raised in close: {_one_line(exc)}") from exc

    def task_name(self, spec: dict[str, Any]) -> str:
        """``task 'line-0'`` for a task this instance listed, else the task by its spec."""
        key = canonical_spec(spec) if isinstance(spec, dict) else repr(spec)
        task_id = self._task_ids.get(key)
        return f"task {task_id!r}" if task_id is not None else f"task {key}"

    def fault(self, message: str, spec: dict[str, Any]) -> EnvironmentFault:
        return EnvironmentFault(
            EnvErrorKind.PLUGIN, f"plug-in {self.name!r} {message} ({self.task_name(spec)})"
        )

    def call(self, what: str, spec: dict[str, Any], fn: Callable[[], T]) -> T:
        """``fn()``, a plug-in method called for task ``spec``; any exception it raises becomes a fault
        naming the plug-in, ``what`` and the task."""
        try:
            return fn()
        except EnvironmentFault:
            raise
        except Exception as exc:  # the plug-in's own failure, whatever it is: env_error, never a loss
            raise self.fault(f"raised in {what}: {_one_line(exc)}", spec) from exc

    def observation(self, value: Any, what: str, spec: dict[str, Any]) -> Observation:
        """``value`` checked as an observation from ``what``; a fault says what is wrong with it."""
        if not isinstance(value, Observation):
            raise self.fault(
                f"returned a malformed observation from {what}: {value!r} is not an Observation", spec
            )
        problem = None
        if not isinstance(value.text, str):
            problem = f"text is {type(value.text).__name__}, not str"
        elif not isinstance(value.actions, Sequence) or isinstance(value.actions, str):
            problem = f"actions is {value.actions!r}, not a tuple of strings"
        elif not all(isinstance(a, str) and a for a in value.actions):
            problem = f"actions {list(value.actions)!r} are not all non-empty strings"
        elif not value.done and not value.actions and not self.free_form:
            problem = (
                "no admissible action while the episode goes on (done=False); a plug-in whose turns are free "
                "text declares free_form = True"
            )
        elif value.image is not None and not isinstance(value.image, str):
            problem = f"image is {value.image!r}, not a path or None"
        if problem is not None:
            raise self.fault(f"returned a malformed observation from {what}: {problem}", spec)
        return value

    def score(self, state: Any, spec: dict[str, Any]) -> float:
        value = self.call("score", spec, lambda: self.plugin.score(state))
        if not _is_score(value):
            raise self.fault(f"score returned {value!r}; a score is a number in [0, 1] (1 = won)", spec)
        return float(value)

    # ---- the Environment protocol ------------------------------------------------------------------

    def validate_spec(self, spec: dict[str, Any]) -> None:
        if not isinstance(spec, dict):
            raise EnvironmentSpecError(f"plug-in {self.name!r}: a task spec is a JSON object, got {spec!r}")
        problem = self.space.problem(spec) if self.space is not None else None
        if problem is not None:
            raise EnvironmentSpecError(
                f"plug-in {self.name!r}: task spec {canonical_spec(spec)} is outside its rewrite space: {problem}"
            )

    def open(self, spec: dict[str, Any], *, seed: int) -> PluginEpisode:
        instruction = self.call("instruction", spec, lambda: self.plugin.instruction(spec))
        if not isinstance(instruction, str):
            raise self.fault(f"instruction returned {instruction!r}, not a string", spec)
        state, obs = self.call("reset", spec, lambda: self.plugin.reset(spec, seed=seed))
        first = self.observation(obs, "reset", spec)
        if first.done:
            raise self.fault(
                "returned a malformed observation from reset: the episode is done before any step", spec
            )
        return PluginEpisode(self, spec, instruction, state, first)

    def demonstrations(self, spec: dict[str, Any], *, seed: int) -> list[list[str]]:
        """The plug-in's demonstration of ``spec`` (a function of the task: ``seed`` is unused); one that
        raises or is not a list of actions is an EnvironmentSpecError naming the task."""
        del seed
        try:
            demo = self.plugin.demonstration(spec)
        except Exception as exc:  # the plug-in's own failure, whatever it is: the task cannot be demonstrated
            raise EnvironmentSpecError(
                f"plug-in {self.name!r} raised in demonstration ({self.task_name(spec)}): {_one_line(exc)}"
            ) from exc
        if demo is None:
            return []
        if isinstance(demo, str) or not all(isinstance(a, str) for a in demo):
            raise EnvironmentSpecError(
                f"plug-in {self.name!r}: demonstration of {self.task_name(spec)} is {demo!r}, not a list of actions"
            )
        return [list(demo)]

    def check_winnable(self, spec: dict[str, Any]) -> str | None:
        """The plug-in's own verdict on a variant inside its rewrite space (an exception is a rejection)."""
        try:
            verdict = self.plugin.check_variant(spec)
        except Exception as exc:  # the plug-in's own failure: the candidate is rejected with the reason
            return f"plug-in {self.name!r} raised in check_variant: {_one_line(exc)}"
        return verdict if verdict is None else f"plug-in {self.name!r}: {verdict}"

    # ---- tasks, texts ------------------------------------------------------------------------------

    def corpus(self) -> list[str]:
        """The plug-in's extra tokenizer texts (a failure names the plug-in)."""
        try:
            texts = list(self.plugin.corpus())
        except Exception as exc:  # the plug-in's own failure, whatever it is: the warm start fails naming it
            raise EnvironmentSpecError(f"plug-in {self.name!r} raised in corpus: {_one_line(exc)}") from exc
        if not all(isinstance(t, str) for t in texts):
            raise EnvironmentSpecError(
                f"plug-in {self.name!r}: corpus returned {texts!r}, not a list of strings"
            )
        return texts

    def tasks(self, split: Split) -> list[Task]:
        """The plug-in's tasks of ``split``, checked (module docstring)."""
        try:
            found = list(self.plugin.tasks(split))
        except Exception as exc:  # a plug-in that cannot list its tasks: the stage fails naming it
            raise EnvironmentSpecError(
                f"plug-in {self.name!r} raised in tasks({split!r}): {_one_line(exc)}"
            ) from exc
        if not found:
            raise EnvironmentSpecError(f"plug-in {self.name!r} lists no {split} tasks")
        seen: set[str] = set()
        for i, task in enumerate(found):
            where = f"plug-in {self.name!r}, {split} task {i}"
            if not isinstance(task, Task):
                raise EnvironmentSpecError(f"{where} is {task!r}, not an rla_core.plugins.Task")
            if not isinstance(task.task_id, str) or not task.task_id.strip():
                raise EnvironmentSpecError(f"{where} has task id {task.task_id!r}; ids are non-empty strings")
            if task.task_id in seen:
                raise EnvironmentSpecError(
                    f"{where} repeats task id {task.task_id!r}; ids name one task each (stable across runs)"
                )
            seen.add(task.task_id)
            self.validate_spec(task.spec)
        self._task_ids.update({canonical_spec(t.spec): t.task_id for t in found})
        return found

    def task(self, split: Split, task_id: str) -> Task:
        """The task ``task_id`` of ``split``; an unknown id lists the known ones."""
        tasks = {t.task_id: t for t in self.tasks(split)}
        if task_id not in tasks:
            raise EnvironmentSpecError(
                f"plug-in {self.name!r} has no {split} task {task_id!r}; its {split} tasks: {', '.join(tasks)}"
            )
        return tasks[task_id]


# ---- rewrites --------------------------------------------------------------------------------------


def variant_space(env: GuardedPlugin) -> VariantSpace:
    """The plug-in's declared :class:`~rla_core.plugins.RewriteSpace` as the space of the one rewrite rule."""
    space = env.space
    if space is None:
        raise ConfigError(f"plug-in {env.name!r} declares no rewrite space: its tasks have no variants")
    return VariantSpace(
        bounds=space.bounds, difficulty=space.difficulty, anchor_radius=space.anchor_radius,
        owner=f"plug-in {env.name!r}",
    )  # fmt: skip


def check_variant(env: GuardedPlugin, spec: dict[str, Any], request: RewriteRequest) -> str | None:
    """Why a candidate rewrite is not a valid variant of its task, or None (then the plug-in's own check runs).

    The one rewrite rule (:func:`rla_core.algo.adaptation.variant_problem`) over the plug-in's space: in
    order, inside the declared space (keys, integers, bounds); every other spec key as in the root task;
    not identical to the parent; moves in the goal's direction on the difficulty keys (none against it,
    one with it); each difficulty key within the space's ``anchor_radius`` of the root's value.
    """
    return request.problem(spec, variant_space(env))


@dataclass(frozen=True)
class PluginRewriter:
    """The plug-in's own moves (:meth:`~rla_core.plugins.EnvironmentPlugin.variants`) as candidates."""

    env: GuardedPlugin

    def propose(self, request: RewriteRequest, *, k: int, seed: int) -> list[Candidate]:
        del seed  # the plug-in's moves are a function of the task and the goal
        try:
            specs = list(
                self.env.plugin.variants(dict(request.parent_spec), harder=request.goal is Goal.HARDER)
            )
        except Exception as exc:  # recorded as the reason of a candidate without a spec
            reason = f"plug-in {self.env.name!r} raised in variants: {_one_line(exc)}"
            return [Candidate(spec=None, raw=canonical_spec(request.parent_spec), reason=reason)]
        bad = next((s for s in specs if not isinstance(s, dict)), None)
        if bad is not None:
            reason = f"plug-in {self.env.name!r}: variants returned {bad!r}, not a spec object"
            return [Candidate(spec=None, raw=json.dumps(str(bad)), reason=reason)]
        none_left = f"plug-in {self.env.name!r} has no {request.goal.value} variant of this task"
        return distinct_moves(specs, request.parent_spec, k=k, canonical=canonical_spec, none_left=none_left)


class PluginPrompts:
    """The environment model rewrites a plug-in's task from the plug-in's own rewrite prompt (the prompts
    and parsing of a :class:`~rla_core.envs.rewriter.ModelRewriter`)."""

    def __init__(self, env: GuardedPlugin) -> None:
        self.env = env

    def prompts(self, request: RewriteRequest, *, k: int) -> list[str]:
        space = variant_space(self.env)
        template = Template(self.env.plugin.rewrite_template)
        feedback = request.feedback.summaries() if request.feedback is not None else []
        return [
            template.safe_substitute(
                root_spec=canonical_spec(request.root_spec),
                current_spec=canonical_spec(request.parent_spec),
                prev_acc=f"{request.prev_acc:.2f}",
                feedback=json.dumps(list(feedback)) if feedback else "none",
                goal_word=request.goal.value.upper(),
                bounds=", ".join(f"{key} {lo}..{hi}" for key, (lo, hi) in space.bounds.items()),
                attempt=i + 1,
                attempts=k,
            )
            for i in range(k)
        ]

    def candidates(self, request: RewriteRequest, texts: list[str]) -> list[Candidate]:
        return [parse_candidate(text) for text in texts]
