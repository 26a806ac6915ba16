"""The plug-in seam: resolved once per stage, one instance per use (closed, one thread), the warm start's
episodes on the guarded path (replayed like a rollout's, a task that cannot be played named by its id),
the preflight's look at the seed tasks, a required option, and a plug-in written from docs/environments.md.

Plug-ins are registered under an entry point of this module for the test (``register``): what an
installed package's metadata gives ``rla_core.plugins.installed``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import EntryPoint
from typing import Any, ClassVar

import pytest
from rla_numberline import NumberLine, Options, State

import rla_core.plugins
import rla_core.settings.plugin
from rla_core import dispatch
from rla_core.algo.adaptation import Goal
from rla_core.algo.curriculum import PlayTask
from rla_core.config import ClusterConfig, load_config
from rla_core.envs.plugin_env import GuardedPlugin, PluginRewriter, check_variant
from rla_core.envs.rewriter import RewriteRequest, rewrite_tasks
from rla_core.errors import ConfigError, DemonstrationError, EnvironmentSpecError
from rla_core.plugins import (
    ENTRY_POINT_GROUP,
    EnvironmentPlugin,
    Field,
    InstalledPlugin,
    Observation,
    PluginOptions,
    RewriteSpace,
    Task,
)
from rla_core.preflight import preflight
from rla_core.settings import adapter_of
from rla_core.settings.plugin import PluginSetting
from rla_core.stage_inputs import BootstrapInputs, JudgeInputs, RolloutInputs
from tasks.stage import RunContext, StageRef, all_stages
from tests.recorded import RecordedGenerator

RIGHT = "I should move right. \\boxed{1}"  # index 1 of (move left, move right, stay)


def register(monkeypatch: pytest.MonkeyPatch, **classes: str) -> None:
    """Entry points ``name = tests.plugins.test_plugin_lifecycle:<Class>`` beside the installed ones."""
    real = rla_core.plugins.installed
    extra = {name: EntryPoint(name, f"{__name__}:{cls}", ENTRY_POINT_GROUP) for name, cls in classes.items()}
    monkeypatch.setattr(rla_core.plugins, "installed", lambda: {**real(), **extra})


def plugin_config(name: str, *overrides: str) -> Any:
    return load_config(overrides=["setting=plugin", f"plugin.name={name}", *overrides])


class Spec:
    """A generator spec that opens recorded outputs (what a stage's GeneratorSpec opens)."""

    role = "policy"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    @contextmanager
    def open(self) -> Iterator[RecordedGenerator]:
        yield RecordedGenerator(self.texts)


# ---- one resolution per stage, one instance per use ------------------------------------------------


class Counted(NumberLine):
    """NumberLine that counts its instances, closes and the threads that call it."""

    made: ClassVar[list[Counted]] = []  # the test resets it

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.closed = 0
        self.threads: set[int] = set()
        Counted.made.append(self)

    def step(self, state: State, action: str) -> tuple[State, Observation]:
        self.threads.add(threading.get_ident())
        return super().step(state, action)

    def close(self) -> None:
        self.closed += 1


def test_a_stage_resolves_the_plugin_once_and_each_use_opens_one_closed_instance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    register(monkeypatch, counted="Counted")
    Counted.made = []
    scans, finds = [], []
    installed, find = rla_core.plugins.installed, rla_core.settings.plugin.find_plugin
    monkeypatch.setattr(rla_core.plugins, "installed", lambda: scans.append(1) or installed())
    monkeypatch.setattr(
        rla_core.settings.plugin, "find_plugin", lambda name: finds.append(name) or find(name)
    )
    cfg = plugin_config("counted", "plugin.options={train_tasks: 2}")
    # The stage key reads the plug-in's versions: one scan of the entry points, nothing loaded.
    refs = {name: StageRef("k", 0, name, 1, f"ck-{name}", {}) for name in ("tasks", "policy")}
    all_stages()["rollout"].key(RunContext(run_id="k", config=cfg), 1, refs)
    assert (len(scans), finds) == (1, [])
    # The body, as tasks/rollout.py runs it: the adapter resolved once and handed down to the one path.
    inputs = RolloutInputs.from_config(cfg)
    adapter = adapter_of(inputs)
    tasks = (PlayTask("line-0", "line-0", False, {"distance": 1, "seed": 0}),)
    request = inputs.request(tasks, seed=1, iteration=1, workdir=None)
    frames = dispatch.rollout(
        request,
        adapter=adapter,
        generator=Spec([RIGHT] * 8),
        cluster=ClusterConfig(),  # type: ignore[arg-type]
    )
    assert frames["rollouts"]["status"].unique().to_list() == ["won"]
    assert finds == ["counted"]  # one resolution (entry point, options) for the stage
    assert [(c.closed, len(c.threads)) for c in Counted.made] == [(1, 1)]  # one instance, closed, one thread


class NeedsLength(NumberLine):
    class Options(Options):
        length: int = Field(ge=1, le=8, description="A required option: no default.")


def test_a_required_option_fails_the_config_check_and_only_stages_that_open_the_plugin_need_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    register(monkeypatch, needs="NeedsLength")
    cfg = plugin_config("needs")  # the config names the plug-in; its options are the plug-in's to check
    [problem] = preflight(cfg)
    assert problem.line() == "plugin: plug-in 'needs': invalid options: plugin.options.length: Field required"
    assert preflight(plugin_config("needs", "plugin.options={length: 3}")) == []
    # The judge reads only the plug-in's name (its prompt): it resolves without the options.
    assert adapter_of(JudgeInputs.from_config(cfg)).env_name == "needs"
    with pytest.raises(ConfigError, match=r"plugin\.options\.length: Field required"):
        adapter_of(RolloutInputs.from_config(cfg))


# ---- the constructor's contract -----------------------------------------------------------------


class OwnInit(NumberLine):
    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.rewrite_space = RewriteSpace(bounds={"distance": (1, 3)}, difficulty=("distance",))


class RaisesInInit(NumberLine):
    def __init__(self, options: Options) -> None:
        raise RuntimeError("no simulator licence")


class NoSpace(EnvironmentPlugin):
    def tasks(self, split: str) -> list[Task]:
        return [Task("t", {})]

    def instruction(self, spec: dict[str, Any]) -> str:
        return "x"

    def reset(self, spec: dict[str, Any], *, seed: int) -> tuple[int, Observation]:
        return 0, Observation("x", ("a",))

    def step(self, state: int, action: str) -> tuple[int, Observation]:
        return 0, Observation("x", (), done=True)

    def score(self, state: int) -> float:
        return 1.0


def test_the_constructor_takes_the_validated_options_and_what_it_breaks_names_the_plugin() -> None:
    env = GuardedPlugin(InstalledPlugin("own", OwnInit, "tests", "0", Options(train_tasks=2)))
    assert env.plugin.options == Options(train_tasks=2) and env.plugin.rewrite_space.bounds == {
        "distance": (1, 3)
    }
    with pytest.raises(
        ConfigError, match=r"plug-in 'x' raised in __init__\(options\): RuntimeError: no simulator"
    ):
        GuardedPlugin(InstalledPlugin("x", RaisesInInit, "tests", "0", Options()))
    with pytest.raises(ConfigError, match=r"plug-in 'x' .* declares no rewrite_space"):
        GuardedPlugin(InstalledPlugin("x", NoSpace, "tests", "0", NoSpace.Options()))


# ---- the warm start on the guarded path ---------------------------------------------------------


class FailsOnce(NumberLine):
    """Its first step of the process raises (a simulator that crashed once), then it plays."""

    failed: ClassVar[list[bool]] = [False]

    def step(self, state: State, action: str) -> tuple[State, Observation]:
        if not FailsOnce.failed[0]:
            FailsOnce.failed[0] = True
            raise RuntimeError("the simulator crashed")
        return super().step(state, action)


class AlwaysFails(NumberLine):
    def step(self, state: State, action: str) -> tuple[State, Observation]:
        raise RuntimeError("the simulator crashed")


class CannotDemonstrate(NumberLine):
    def demonstration(self, spec: dict[str, Any]) -> list[str]:
        raise ValueError("no walkthrough for this map")


def warm_start(cls: type[NumberLine], *overrides: str) -> Any:
    inputs = BootstrapInputs.from_config(
        plugin_config("numberline", "plugin.options={train_tasks: 2}", *overrides)
    )
    adapter = PluginSetting(InstalledPlugin("numberline", cls, "tests", "0", Options(train_tasks=2)))
    return adapter.warm_start(inputs, seed=0)


def test_a_warm_start_episode_whose_plugin_failed_is_replayed_like_a_rollouts() -> None:
    clean = warm_start(NumberLine)
    FailsOnce.failed[0] = False
    replayed = warm_start(FailsOnce, "rollout.env_retries=1")
    assert FailsOnce.failed[0]  # it did fail once, and its episode was played again with the same choices
    assert replayed.corpus == clean.corpus
    assert replayed.policy_rows.equals(clean.policy_rows) and replayed.reward_rows.equals(clean.reward_rows)


def test_a_seed_task_the_warm_start_cannot_play_fails_it_naming_the_plugin_and_the_task() -> None:
    with pytest.raises(
        DemonstrationError,
        match=r"numberline: the warm start could not play .* \(2 tries, rollout.env_retries=1\): plugin: "
        r"plug-in 'numberline' raised in step: RuntimeError: the simulator crashed \(task 'line-0'\)",
    ):
        warm_start(AlwaysFails, "rollout.env_retries=1")
    with pytest.raises(
        EnvironmentSpecError,
        match=r"plug-in 'numberline' raised in demonstration \(task 'line-0'\): ValueError: no walkthrough",
    ):
        warm_start(CannotDemonstrate)


# ---- the preflight demonstrates each seed task once and asks the plug-in about it --------------------


class LosesOneSpurnsOne(NumberLine):
    def demonstration(self, spec: dict[str, Any]) -> list[str]:
        return ["stay"] if spec["seed"] == 1 else list(super().demonstration(spec))

    def check_variant(self, spec: dict[str, Any]) -> str | None:
        return "the flag at 3 is in a wall" if spec["distance"] == 3 else None


def test_config_check_demonstrates_each_seed_task_and_runs_check_variant_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    register(monkeypatch, spurns="LosesOneSpurnsOne")
    lines = [p.line() for p in preflight(plugin_config("spurns", "plugin.options={train_tasks: 3}"))]
    assert lines == [
        "plugin: plug-in 'spurns', seed task 'line-1' cannot be demonstrated: its demonstration ['stay'] "
        "does not win it",
        "plugin: plug-in 'spurns', seed task 'line-2' is not a playable task: plug-in 'spurns': the flag at "
        "3 is in a wall",
    ]


# ---- a plug-in written from docs/environments.md alone ----------------------------------------------


class CountdownOptions(PluginOptions):
    train_tasks: int = Field(2, ge=1, le=5, description="Seed tasks: start at 2, 3, ...")


class Countdown(EnvironmentPlugin):
    """Reach exactly 0 from ``start`` by taking 1 or 2."""

    Options = CountdownOptions
    rewrite_space = RewriteSpace(bounds={"start": (1, 6)}, difficulty=("start",), anchor_radius=3)

    def tasks(self, split: str) -> list[Task]:
        if split == "eval":
            return [Task("eval-4", {"start": 4})]
        return [Task(f"count-{i}", {"start": 2 + i}) for i in range(self.options.train_tasks)]

    def instruction(self, spec: dict[str, Any]) -> str:
        return f"Count down from {spec['start']} to exactly 0."

    def _observe(self, left: int) -> Observation:
        if left <= 0:
            return Observation(f"You are at {left}.", (), done=True)
        return Observation(f"{left} left.", ("take 1", "take 2"))

    def reset(self, spec: dict[str, Any], *, seed: int) -> tuple[int, Observation]:
        return spec["start"], self._observe(spec["start"])

    def step(self, state: int, action: str) -> tuple[int, Observation]:
        left = state - int(action.split()[-1])
        return left, self._observe(left)

    def score(self, state: int) -> float:
        return 1.0 if state == 0 else 0.0

    def demonstration(self, spec: dict[str, Any]) -> list[str]:
        return ["take 2"] * (spec["start"] // 2) + ["take 1"] * (spec["start"] % 2)

    def expert_actions(self, state: int) -> list[str]:
        return ["take 2"] if state >= 2 else ["take 1"]


def test_a_plugin_written_from_the_docs_alone_runs_the_seam(monkeypatch: pytest.MonkeyPatch) -> None:
    register(monkeypatch, countdown="Countdown")
    cfg = plugin_config("countdown")
    assert preflight(cfg) == []  # resolves, lists both splits, each seed task demonstrated and accepted
    data = adapter_of(BootstrapInputs.from_config(cfg)).warm_start(BootstrapInputs.from_config(cfg), seed=0)
    assert data.policy_rows.height == 3 and data.reward_rows.height > 3  # count-0: 1 step, count-1: 2 steps
    inputs = RolloutInputs.from_config(cfg)
    adapter = adapter_of(inputs)
    tasks = (PlayTask("count-0", "count-0", False, {"start": 2}),)
    request = inputs.request(tasks, seed=0, iteration=1, workdir=None)
    two = "I should take 2. \\boxed{1}"
    frames = dispatch.rollout(request, adapter=adapter, generator=Spec([two] * 8), cluster=ClusterConfig())  # type: ignore[arg-type]
    assert frames["rollouts"]["outcome"].to_list() == [1.0] * inputs.rollout.rollouts_per_task
    # The default moves: one up from the top of the space is a candidate too, invalid with the reason.
    env = GuardedPlugin(rla_core.plugins.load_plugin("countdown"))
    top = {"start": 6}
    request_up = RewriteRequest("count-4", "count-4", top, {"start": 4}, Goal.HARDER, prev_acc=1.0)
    proposals = rewrite_tasks(
        [request_up], rewriter=PluginRewriter(env), env=env, k=3, seed=0, iteration=1,
        check=lambda spec, req: check_variant(env, spec, req),
    )  # fmt: skip
    assert proposals.select("spec", "valid", "invalid_reason").rows() == [
        ('{"start":7}', False, "outside plug-in 'countdown''s rewrite space: 'start'=7 is outside [1, 6]")
    ]
