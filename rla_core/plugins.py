"""The public environment plug-in API: a user's own environment, registered from its own package (docs/environments.md).

A plug-in is a subclass of :class:`EnvironmentPlugin` exposed under the entry-point group
:data:`ENTRY_POINT_GROUP` of its package's metadata::

    [project.entry-points."rlanything.environments"]
    numberline = "rla_numberline:NumberLine"

and chosen by configuration: ``setting: plugin``, ``plugin.name: numberline``, ``plugin.options: {...}``
(validated by the plug-in's own :attr:`EnvironmentPlugin.Options` model by the preflight, ``rla config
check``, and again when a stage resolves the plug-in: :func:`find_plugin`, :meth:`InstalledPlugin.with_options`).
The loop plays it like any built-in environment: rollouts, step judgments, labels, rewrites of its tasks
inside its declared :class:`RewriteSpace`, training and evaluation.

This module is the whole surface a plug-in package imports; it depends on nothing else of rlanything, so
importing it is cheap and safe from a plug-in (it sits beside the configuration in the layer list).

Example:
    >>> RewriteSpace(bounds={"length": (1, 9)}, difficulty=("length",)).problem({"length": 12})
    "'length'=12 is outside [1, 9]"
"""

from __future__ import annotations

import importlib.metadata
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rla_core.errors import ConfigError

ENTRY_POINT_GROUP = "rlanything.environments"

Split = Literal["train", "eval"]


__all__ = [
    "DEFAULT_JUDGE_TEMPLATE",
    "DEFAULT_REWRITE_TEMPLATE",
    "ENTRY_POINT_GROUP",
    "EnvironmentPlugin",
    "Field",
    "NoOptions",
    "Observation",
    "PluginOptions",
    "RewriteSpace",
    "Task",
]


class PluginOptions(BaseModel):
    """The base of a plug-in's options model (pydantic; declare fields with :func:`Field`): frozen, and an
    unknown key is an error, as everywhere in the configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoOptions(PluginOptions):
    """The options model of a plug-in that takes none: any key given is an error."""


@dataclass(frozen=True)
class Task:
    """One task as data: a stable id (the task's slot; never reused for another task) and its spec.

    ``spec`` is a JSON object; the keys of the plug-in's :class:`RewriteSpace` are what a rewrite may change,
    every other key is kept as it is.
    """

    task_id: str
    spec: dict[str, Any]


@dataclass(frozen=True)
class Observation:
    """What the policy sees after ``reset`` or a ``step``.

    ``text``: the observation; ``actions``: the admissible actions (the policy answers with the index of
    one). Empty while the episode goes on means a *free-form turn* (only in a plug-in that declares
    :attr:`EnvironmentPlugin.free_form`): the policy writes free text, ``step`` receives it as it is.
    ``done``: the episode ended; ``image``: optionally the path of a PNG of the state (shown to
    vision-language models).
    """

    text: str
    actions: tuple[str, ...] = ()
    done: bool = False
    image: str | None = None


@dataclass(frozen=True)
class RewriteSpace:
    """What a harder or easier variant of a task may change: integer spec keys with inclusive bounds.

    ``difficulty``: the keys whose increase makes a task harder (a harder variant raises at least one and
    lowers none; an easier one the reverse); ``bounds`` also may hold keys that are not difficulty (they
    may move freely inside their bounds). Every other spec key must stay as in the root task. A variant
    that passes these checks then goes through :meth:`EnvironmentPlugin.check_variant`.
    """

    bounds: Mapping[str, tuple[int, int]]
    difficulty: tuple[str, ...]
    anchor_radius: int | None = None  # a difficulty key may be at most this far from the root task's value

    def __post_init__(self) -> None:
        unknown = [k for k in self.difficulty if k not in self.bounds]
        if unknown or not self.difficulty:
            raise ValueError(f"difficulty keys {list(self.difficulty)} must be non-empty and have bounds")

    def problem(self, spec: Mapping[str, Any]) -> str | None:
        """Why ``spec`` lies outside the space (a key missing, not an integer, out of bounds), or None."""
        return bounds_problem(spec, self.bounds)


def bounds_problem(spec: Mapping[str, Any], bounds: Mapping[str, tuple[int, int]]) -> str | None:
    """Why ``spec`` does not hold every key of ``bounds`` as an integer inside its inclusive bounds, or None:
    the first key missing, not an integer, or out of bounds (every engine's rewrite check uses it too)."""
    for key, (low, high) in bounds.items():
        if key not in spec:
            return f"missing key '{key}'"
        value = spec[key]
        if isinstance(value, bool) or not isinstance(value, int):
            return f"'{key}' must be an integer, got {value!r}"
        if not low <= value <= high:
            return f"'{key}'={value} is outside [{low}, {high}]"
    return None


# The judge's prompt when a plug-in brings none ($prompt: the policy's prompt, $response: its answer,
# $next_observation: what the environment showed next).
DEFAULT_JUDGE_TEMPLATE = """Judge ONE step of an agent in an environment.
[Agent prompt]
${prompt}
[Agent response]
${response}
[Next observation]
${next_observation}
Score +1 only if the action moves the task forward and the reasoning is consistent. Otherwise -1.
Reason first, then give the score: \\boxed{1} or \\boxed{-1}."""

# The environment model's rewrite prompt when a plug-in brings none (adaptation.rewriter=llm).
DEFAULT_REWRITE_TEMPLATE = """You adjust the difficulty of a task.
ROOT task (anchor; stay close to it): ${root_spec}
Current task: ${current_spec} (success rate ${prev_acc})
Failure summaries: ${feedback}
Make the task ${goal_word}. Allowed keys and ranges: ${bounds}
Answer with one JSON object with the same keys. (Attempt ${attempt}/${attempts})"""


class EnvironmentPlugin(ABC):
    """An environment the loop can train on; subclass it, set the class attributes, implement the methods.

    Required: :attr:`rewrite_space`, :meth:`tasks`, :meth:`instruction`, :meth:`reset`, :meth:`step`,
    :meth:`score`. Optional (with their defaults): :attr:`Options` (none), :meth:`demonstration` (None:
    no warm start on demonstrations), :meth:`expert_actions` (None: no step labels, the judge's accuracy
    diagnostics are empty), :meth:`corpus` (texts for the tiny models' tokenizer), :attr:`judge_template`,
    :attr:`rewrite_template`, :meth:`variants`, :meth:`check_variant` and :meth:`close`.

    **Lifecycle.** The loop constructs the class as ``cls(options)`` with the validated options (an
    instance of :attr:`Options`; this base keeps it as ``self.options``: a plug-in with its own
    ``__init__(self, options)`` calls ``super().__init__(options)``). It makes one instance per use —
    listing a stage's tasks, playing its episodes, its warm start, its rewrites, the preflight's checks —
    in the process doing that work (a Ray shard makes its own), calls it from one thread at a time, and
    calls :meth:`close` once it is done with it (also when the work failed). Episodes are values:
    ``reset`` returns a state that ``step`` and ``score`` take and return, so many episodes are played at
    once on one instance. A plug-in that raises in ``reset``, ``step`` or ``score`` ends that episode as
    ``env_error`` (it is replayed, never counted as the policy's loss).

    **Free-form turns.** A plug-in with :attr:`free_form` set may return observations without actions: the
    policy then answers in free text, and ``step`` receives that text unparsed (a malformed or empty answer
    is the plug-in's to score; it never fails the episode). The policy's prompt is then the plug-in's own
    conversation, used as given: :attr:`system_prompt`, the instruction and first observation as the first
    user turn, each earlier answer and the observation that followed it. The judge judges each assistant
    turn (its prompt shows the conversation up to the turn, the turn and the environment's reply). Free
    text has no expert labels: :meth:`expert_actions` is not asked on a free-form turn, ``judge.source:
    oracle`` is refused for such a plug-in, and its judge's warm start labels the demonstration's turns
    good and the turns of another task's demonstration played here by that episode's outcome.

    **Scores and the outcome.** :meth:`score` is kept in the rows as the episode's raw ``score`` (partial
    credit, a rubric's weighted sum); the ±1 outcome the method trains on is +1 when the score is at least
    :attr:`success_score` (default 1.0: only a full score wins), else -1.

    **No rewrite space.** ``rewrite_space = None`` declares that a task has no harder or easier variants:
    the run plays the plug-in with environment adaptation off (said once at start and by ``rla config
    show``).

    **Why a base class** (everything else in rlanything is composed, with Protocols): it is the clearest
    API for plug-in authors — one import, the optional members' defaults written once and documented
    here, and a class the loader can check (``issubclass``). It holds no state of ours and has no hooks:
    the loop calls each method directly, through one guarded path that names the plug-in and the task.
    """

    Options: ClassVar[type[PluginOptions]] = NoOptions
    # On the class, or set in ``__init__`` when it depends on the options (one library generator among many);
    # None: no rewrites (adaptation off).
    rewrite_space: RewriteSpace | None
    # Free-form turns (see above); on the class, or set in ``__init__`` when an option chooses it.
    free_form: bool = False
    system_prompt: str | None = None  # a free-form plug-in's system prompt (None: none)
    success_score: float = 1.0  # the lowest score that wins (the ±1 outcome)
    judge_template: ClassVar[str] = DEFAULT_JUDGE_TEMPLATE
    rewrite_template: ClassVar[str] = DEFAULT_REWRITE_TEMPLATE

    def __init__(self, options: BaseModel) -> None:
        self.options = options

    @abstractmethod
    def tasks(self, split: Split) -> Sequence[Task]:
        """The seed training tasks (``train``) or the held-out ones (``eval``), ids unique within a split."""

    @abstractmethod
    def instruction(self, spec: dict[str, Any]) -> str:
        """The goal text of a task, shown above every observation."""

    def reset(self, spec: dict[str, Any], *, seed: int) -> tuple[Any, Observation]:
        """Start an episode of ``spec``: its state and first observation (required unless :meth:`play` is
        implemented)."""
        self._unimplemented("reset")

    def step(self, state: Any, action: str) -> tuple[Any, Observation]:
        """Play one of the admissible ``action`` s (on a free-form turn: the policy's text, as it wrote it):
        the next state and observation (required unless :meth:`play` is implemented)."""
        self._unimplemented("step")

    def score(self, state: Any) -> float:
        """The episode's score in [0, 1], kept in the rows; at least :attr:`success_score` wins (read once the
        episode is done; an episode cut at the step budget is lost, its score not read; required unless
        :meth:`play` is implemented)."""
        self._unimplemented("score")

    def play(self, episodes: Sequence[EpisodeRequest], *, policy: PolicyEndpoint) -> Sequence[EpisodeResult]:
        """Play ``episodes`` yourself, sending every model request of each to ``policy`` (an OpenAI-compatible
        Chat Completions endpoint that records every turn) with the episode's ``seed``; one result per
        episode, in order. Implement it instead of ``reset``/``step``/``score`` for an environment written
        against an OpenAI client (a verifiers taskset): its episodes are free-form by construction."""
        self._unimplemented("play")

    def _unimplemented(self, method: str) -> NoReturn:
        """The base's body of the two ways of playing: a plug-in implements ``reset``/``step``/``score`` or
        ``play``; the loop checks which when it opens one and never calls the other."""
        raise ConfigError(
            f"plug-in class {type(self).__name__} does not implement {method}: a plug-in implements reset, step "
            "and score (turn by turn), or play (its own episodes against the policy's endpoint)"
        )

    def demonstration(self, spec: dict[str, Any]) -> Sequence[str] | None:
        """Actions that win ``spec`` from its reset (the warm start's demonstrations; a free-form plug-in's:
        the answers of each turn), or None."""
        return None

    def expert_actions(self, state: Any) -> Sequence[str] | None:
        """The optimal next actions from ``state`` (step labels: warm-start judge, accuracy diagnostics)."""
        return None

    def corpus(self) -> Sequence[str]:
        """Extra texts for the tiny models' tokenizer (the observations and actions are added anyway)."""
        return ()

    def variants(self, spec: dict[str, Any], *, harder: bool) -> Sequence[dict[str, Any]]:
        """Candidate rewrites without an environment model, most preferred first: each difficulty key moved
        by one in the goal's direction (override for other moves). One that leaves the bounds is a candidate
        too: the rewrite check records it as an invalid ``proposals`` row with the reason."""
        step = 1 if harder else -1
        space = self.rewrite_space
        return [] if space is None else [{**spec, key: int(spec[key]) + step} for key in space.difficulty]

    def check_variant(self, spec: dict[str, Any]) -> str | None:
        """Why a variant inside the rewrite space is still not a playable task (e.g. unwinnable), or None.
        The preflight (``rla config check``) also asks it about every seed task."""
        return None

    def close(self) -> None:
        """Release what the instance holds (a simulator, a subprocess, files); called once per instance,
        when the loop is done with it. Nothing to release by default."""
        return None


@dataclass(frozen=True)
class InstalledPlugin:
    """A plug-in found through its entry point: its name, class and distribution (name, version), and its
    validated options once a stage that opens it gave them (:meth:`with_options`)."""

    name: str
    cls: type[EnvironmentPlugin]
    distribution: str
    version: str
    options: BaseModel | None = None

    def with_options(self, options: Mapping[str, Any] | None) -> InstalledPlugin:
        """The plug-in with ``options`` validated by its own options model; a :class:`ConfigError` names
        every bad key (``plugin.options.<key>``) and the problem, a required one missing included."""
        try:
            opts = self.cls.Options.model_validate(dict(options or {}))
        except ValidationError as exc:
            problems = "; ".join(
                f"plugin.options.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
            )
            raise ConfigError(f"plug-in {self.name!r}: invalid options: {problems}") from None
        return replace(self, options=opts)

    def open(self) -> EnvironmentPlugin:
        """An instance with the validated options (the plug-in's own constructor: the caller guards it)."""
        if self.options is None:
            raise ConfigError(
                f"plug-in {self.name!r} was resolved without its options (a stage that only reads its name): "
                "resolve it with with_options(plugin.options) to open it"
            )
        return self.cls(self.options)


def installed() -> dict[str, importlib.metadata.EntryPoint]:
    """Every entry point of :data:`ENTRY_POINT_GROUP`, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def find_plugin(name: str) -> InstalledPlugin:
    """The installed plug-in ``name``: its entry point loaded and checked (one scan of the entry points).

    Raises ConfigError naming the installed plug-ins for an unknown name, and the problem for an entry
    point that does not load or is not an :class:`EnvironmentPlugin`.
    """
    found = installed()
    ep = found.get(name)
    if ep is None:
        names = ", ".join(sorted(found)) or "none"
        raise ConfigError(
            f"plugin.name={name!r} is not an installed environment plug-in; installed ({ENTRY_POINT_GROUP} "
            f"entry points): {names}. Install the plug-in's package (pip install -e <path>) or fix the name"
        )
    try:
        cls = ep.load()
    except Exception as exc:  # a plug-in's own import error: name it, whatever it is
        raise ConfigError(
            f"plug-in {name!r} ({ep.value}) does not load: {type(exc).__name__}: {exc}"
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, EnvironmentPlugin)):
        raise ConfigError(
            f"plug-in {name!r}: entry point {ep.value} is {cls!r}, not a subclass of "
            "rla_core.plugins.EnvironmentPlugin"
        )
    dist = ep.dist
    return InstalledPlugin(
        name=name,
        cls=cls,
        distribution=dist.name if dist is not None else "",
        version=dist.version if dist is not None else "",
    )


def load_plugin(name: str, options: Mapping[str, Any] | None = None) -> InstalledPlugin:
    """The installed plug-in ``name`` with ``options`` validated by its own options model
    (:func:`find_plugin`, then :meth:`InstalledPlugin.with_options`)."""
    return find_plugin(name).with_options(options)


def plugin_versions(name: str) -> tuple[str, dict[str, str]]:
    """The version of the distribution that provides plug-in ``name`` ("" when it is not installed: the
    preflight has said so already) and the installed versions of what that distribution declares it
    requires (a library it wraps: its behaviour is the plug-in's too), by distribution name; one not
    installed is "". One scan of the entry points (a stage's key reads both)."""
    ep = installed().get(name)
    if ep is None or ep.dist is None:
        return "", {}
    out: dict[str, str] = {}
    for line in ep.dist.requires or ():
        if ";" in line and "extra" in line.split(";", 1)[1]:
            continue  # an optional extra's requirement
        dist = re.split(r"[\s\[<>=!~;(]", line.strip(), maxsplit=1)[0]
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = ""
    return ep.dist.version, out


# ---- episodes a plug-in plays itself, against the policy's endpoint --------------------------------------


@dataclass(frozen=True)
class PolicyEndpoint:
    """The policy as an OpenAI-compatible Chat Completions endpoint: the stage's recording endpoint, on
    loopback. Send every chat request of an episode to ``base_url`` with the bearer ``api_key``, ``model``,
    these sampling values and the episode's ``seed`` (:class:`EpisodeRequest`); requests stream or not."""

    base_url: str
    api_key: str
    model: str
    temperature: float
    top_p: float
    max_tokens: int


@dataclass(frozen=True)
class EpisodeRequest:
    """One episode for :meth:`EnvironmentPlugin.play`: the task, the ``seed`` every chat request of the
    episode carries (its turns are sampled from it and their index), and the loop's turn limit."""

    task_id: str
    spec: dict[str, Any]
    seed: int
    max_turns: int


@dataclass(frozen=True)
class EpisodeResult:
    """How an episode :meth:`EnvironmentPlugin.play` played ended: its raw ``score`` (None with an
    ``error``: the environment failed, an ``env_error`` episode), the turn limit that applied (the smaller
    of the loop's and the environment's own) and, optionally, the environment's last message (what the
    judge sees after the last turn)."""

    score: float | None
    max_turns: int
    error: str | None = None
    final_observation: str = ""
