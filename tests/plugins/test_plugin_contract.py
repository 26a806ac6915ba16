"""The environment plug-in contract: discovery, configuration, keys, and a specific error for each bad plug-in.

Bad plug-ins are subclasses of the example package's game that break one rule each; they run through the
real rollout runner and rewrite validation (the policy's answers are recorded: the subject is the code
around the plug-in, not the model).
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from rla_numberline import NumberLine, Options, State

from rla_core.algo.adaptation import Goal
from rla_core.algo.curriculum import PlayTask
from rla_core.config import RunConfig, SamplingConfig, load_config
from rla_core.envs.plugin_env import GuardedPlugin, PluginRewriter, check_variant
from rla_core.envs.rewriter import RewriteRequest, rewrite_tasks
from rla_core.envs.rollout import play_rollouts
from rla_core.errors import ConfigError, EnvironmentSpecError
from rla_core.plugins import ENTRY_POINT_GROUP, InstalledPlugin, Observation, Task, load_plugin
from rla_core.preflight import preflight
from rla_core.settings import adapter_of
from rla_core.stage_inputs import EvaluateInputs, RolloutRequest
from tasks.stage import RunContext, StageRef, all_stages
from tests.recorded import RecordedGenerator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "numberline"
PLUGIN = ["setting=plugin", "plugin.name=numberline"]
RIGHT = "I should move right. \\boxed{1}"  # index 1 of (move left, move right, stay)


def environment(cls: type[NumberLine], name: str = "bad") -> GuardedPlugin:
    return GuardedPlugin(InstalledPlugin(name, cls, "tests", "0", Options()))


def play(env: GuardedPlugin, *, distance: int = 1) -> pl.DataFrame:
    """Two rollouts of one task, each failed episode replayed once; the final 'rollouts' frame."""
    task = PlayTask("t0", "t0", False, {"distance": distance, "seed": 0})
    request = RolloutRequest(
        tasks=(task,), n=2, max_steps=4, sampling=SamplingConfig(), seed=1, iteration=1, history_turns=2,
        env_retries=1,
    )  # fmt: skip
    gen = RecordedGenerator([RIGHT] * 64)
    return play_rollouts(request, env=env, generator=gen)["rollouts"]


# ---- discovery and configuration -------------------------------------------------------------------


def test_the_example_is_discovered_through_its_entry_point() -> None:
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert found["numberline"].value == "rla_numberline:NumberLine"
    plugin = load_plugin("numberline", {"train_tasks": 2})
    assert plugin.cls is NumberLine and plugin.version == importlib.metadata.version("rla-numberline")
    assert [t.task_id for t in plugin.open().tasks("train")] == ["line-0", "line-1"]


def test_a_good_plugin_plays_wins_and_is_judged_with_its_own_template() -> None:
    rollouts = play(environment(NumberLine, "numberline"), distance=2)
    assert rollouts["status"].to_list() == ["won"] * 4 and rollouts["outcome"].to_list() == [1.0] * 4
    assert rollouts["expert_actions"][0] == json.dumps(["move right"])
    cfg = load_config(overrides=PLUGIN)
    adapter = adapter_of(EvaluateInputs.from_config(cfg))
    assert adapter.judge_template.template == NumberLine.judge_template  # type: ignore[union-attr]


def test_a_plugin_choice_without_a_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"setting=plugin needs plugin\.name"):
        load_config(overrides=["setting=plugin"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["setting=plugin", "plugin.name=nope"], "'nope' is not an installed .*installed .*: .*numberline"),
        ([*PLUGIN, "plugin.options={train_tasks: 99}"], "plugin.options.train_tasks: Input should be less"),
        ([*PLUGIN, "plugin.options={colour: red}"], "plugin.options.colour: Extra inputs are not permitted"),
    ],
)
def test_a_plugin_that_does_not_resolve_is_a_preflight_problem_before_anything_is_written(
    overrides: list[str], message: str
) -> None:
    # The plug-in's code says whether it is installed and takes these options: the preflight asks it
    # (`rla config check`, every run's start: exit 3, tests/flows/test_preflight.py).
    [problem] = preflight(load_config(overrides=overrides))
    assert problem.key == "plugin" and re.search(message, problem.line()), problem.line()


REFS = {name: StageRef("keys", 0, name, 1, f"ck-{name}", {}) for name in ("tasks", "policy", "rollouts")}


def _keys(cfg: RunConfig) -> dict[str, str]:
    run = RunContext(run_id="keys", config=cfg)
    return {str(name): stage.key(run, 1, REFS) for name, stage in all_stages().items()}


def test_the_plugin_options_and_version_enter_the_keys_of_the_stages_that_use_them() -> None:
    base = load_config(overrides=PLUGIN)
    other = load_config(overrides=[*PLUGIN, "plugin.options={slack: 3}"])
    before, after = _keys(base), _keys(other)
    moved = {name for name in before if before[name] != after[name]}
    assert moved == {"seed_tasks", "bootstrap", "rollout", "adapt", "evaluate"}  # the stages that open it
    version = importlib.metadata.version("rla-numberline")
    for name in ("seed_tasks", "bootstrap", "rollout", "judge", "label", "adapt", "evaluate"):
        assert all_stages()[name].slice(base).key_json()["plugin"]["version"] == version, name
    # Another setting's run does not depend on the plug-in section at all.
    textgame = _keys(load_config(overrides=["plugin.name=numberline"]))
    assert textgame == _keys(load_config())


def test_the_example_package_imports_only_the_public_plugin_module() -> None:
    imported: set[str] = set()
    for path in sorted((EXAMPLE / "rla_numberline").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
                imported.add(node.module)
    outside = {m for m in imported if m.split(".")[0] not in sys.stdlib_module_names}
    assert outside == {"rla_core.plugins"}


# ---- bad plug-ins: each gets an error naming it -----------------------------------------------------


class RaisesInReset(NumberLine):
    def reset(self, spec: dict[str, Any], *, seed: int) -> tuple[State, Observation]:
        raise RuntimeError("the simulator did not start")


class RaisesInStep(NumberLine):
    def step(self, state: State, action: str) -> tuple[State, Observation]:
        raise RuntimeError("the simulator crashed")


class RaisesInScore(NumberLine):
    def score(self, state: State) -> float:
        raise RuntimeError("no score today")


@pytest.mark.parametrize(
    ("cls", "method", "why"),
    [
        (RaisesInReset, "reset", "the simulator did not start"),
        (RaisesInStep, "step", "the simulator crashed"),
        (RaisesInScore, "score", "no score today"),
    ],
)
def test_a_plugin_that_raises_ends_its_episodes_env_error_naming_it(
    cls: type[NumberLine], method: str, why: str
) -> None:
    rollouts = play(environment(cls))
    assert set(rollouts["status"]) == {"env_error"} and rollouts["outcome"].null_count() == rollouts.height
    assert set(rollouts["error_kind"]) == {"plugin"}
    assert set(rollouts["attempt"]) == {1}  # replayed once, failed again: never counted as the policy's loss
    task = '{"distance":1,"seed":0}'  # not a task this instance listed: named by its spec
    assert set(rollouts["error_message"]) == {
        f"plug-in 'bad' raised in {method}: RuntimeError: {why} (task {task})"
    }


class ActionsAsOneString(NumberLine):
    def step(self, state: State, action: str) -> tuple[State, Observation]:
        new, obs = super().step(state, action)
        return new, Observation(obs.text, "move right", obs.done)  # type: ignore[arg-type]


class NotAnObservation(NumberLine):
    def reset(self, spec: dict[str, Any], *, seed: int) -> tuple[State, Observation]:
        state, obs = super().reset(spec, seed=seed)
        return state, {"text": obs.text}  # type: ignore[return-value]


class NoActionsMidway(NumberLine):
    def reset(self, spec: dict[str, Any], *, seed: int) -> tuple[State, Observation]:
        state, obs = super().reset(spec, seed=seed)
        return state, Observation(obs.text, ())


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (
            ActionsAsOneString,
            "plug-in 'bad' returned a malformed observation from step: actions is 'move right'",
        ),
        (NotAnObservation, "plug-in 'bad' returned a malformed observation from reset: {'text':"),
        (NoActionsMidway, "plug-in 'bad' returned a malformed observation from reset: no admissible action"),
    ],
)
def test_a_malformed_observation_is_an_env_error_saying_what_is_wrong(
    cls: type[NumberLine], message: str
) -> None:
    rollouts = play(environment(cls), distance=2)
    assert set(rollouts["status"]) == {"env_error"} and set(rollouts["error_kind"]) == {"plugin"}
    assert all(m.startswith(message) for m in rollouts["error_message"]), rollouts["error_message"].to_list()


class RepeatsAnId(NumberLine):
    def tasks(self, split: str) -> list[Task]:
        return [Task("same", {"distance": 1, "seed": 0}), Task("same", {"distance": 2, "seed": 1})]


class NamelessTask(NumberLine):
    def tasks(self, split: str) -> list[Task]:
        return [Task("", {"distance": 1, "seed": 0})]


def test_an_unknown_task_id_lists_the_known_ones(tmp_path: Path) -> None:
    cfg = load_config(overrides=PLUGIN)
    inputs = EvaluateInputs.from_config(cfg)
    adapter = adapter_of(inputs)
    picked = tmp_path / "ids.jsonl"
    picked.write_text('{"task_id": "eval-2"}\n')
    assert [t.task_id for t in adapter.eval_tasks(inputs, picked)] == ["eval-2"]
    picked.write_text('{"task_id": "eval-9"}\n')
    with pytest.raises(
        EnvironmentSpecError, match=r"plug-in 'numberline' has no eval task 'eval-9'; .*: eval-1, eval-2"
    ):
        adapter.eval_tasks(inputs, picked)
    with pytest.raises(EnvironmentSpecError, match="plug-in 'bad', train task 1 repeats task id 'same'"):
        environment(RepeatsAnId).tasks("train")
    with pytest.raises(EnvironmentSpecError, match="plug-in 'bad', train task 0 has task id ''"):
        environment(NamelessTask).tasks("train")


class LeavesItsSpace(NumberLine):
    def variants(self, spec: dict[str, Any], *, harder: bool) -> list[dict[str, Any]]:
        return [
            {**spec, "distance": 12},  # beyond the declared bounds 1..8
            {**spec, "seed": 7, "distance": spec["distance"] + 1},  # a key outside the space
            {**spec, "distance": spec["distance"] + 1},  # a good one
        ]


def test_a_rewrite_outside_the_declared_space_is_an_invalid_proposal_with_the_reason() -> None:
    env = environment(LeavesItsSpace)
    root = {"distance": 2, "seed": 0}
    request = RewriteRequest("line-1", "line-1", root, root, Goal.HARDER, prev_acc=1.0)
    proposals = rewrite_tasks([request], rewriter=PluginRewriter(env), env=env, k=3, seed=0, iteration=1,
                              check=lambda spec, req: check_variant(env, spec, req))  # fmt: skip
    assert proposals["invalid_reason"].to_list() == [
        "outside plug-in 'bad''s rewrite space: 'distance'=12 is outside [1, 8]",
        "outside plug-in 'bad''s rewrite space: changes ['seed'], which a rewrite must keep",
        None,
    ]
    assert proposals["chosen"].to_list() == [False, False, True]
    with pytest.raises(
        EnvironmentSpecError, match=r"plug-in 'bad': task spec .* is outside its rewrite space"
    ):
        env.validate_spec({"distance": 0, "seed": 0})
