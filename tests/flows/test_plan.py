"""The pipeline has one declaration, the flow: its plan, the stage registry, typed slices as keys."""

from __future__ import annotations

import enum
import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from flows.loop import pipeline_order, plan, stage_order
from rla_core.config import (
    SPEED_ONLY_KEYS,
    InferenceDtype,
    RunConfig,
    Setting,
    build_config,
    load_config,
    on_cuda,
)
from rla_core.errors import ConfigError
from rla_core.stage_inputs import StageName
from tasks.stage import RunContext, StageRef, all_stages
from tests.flows.conftest import CODING_ITERATION, ITERATION


def run(*overrides: str) -> RunContext:
    return RunContext(run_id="plan", config=load_config(overrides=list(overrides)))


@pytest.mark.parametrize(
    ("setting", "iteration"),
    [("textgame", ITERATION), ("gui", ITERATION), ("coding", CODING_ITERATION)],
)
def test_the_plan_is_the_flow_in_order(setting: str, iteration: tuple[str, ...]) -> None:
    order = stage_order(run(f"setting={setting}", "iterations=2", "evaluation.every=1"))
    assert order == {0: ("seed_tasks", "bootstrap", "evaluate"), 1: iteration, 2: iteration}
    assert pipeline_order(run(f"setting={setting}")) == ("seed_tasks", "bootstrap", *iteration)


def test_the_plan_follows_the_ablation_switches_and_the_evaluation_schedule() -> None:
    order = stage_order(run("iterations=5", "evaluation.every=2"))
    assert [it for it in range(1, 6) if "evaluate" in order[it]] == [2, 4, 5]  # every 2nd and the last
    frozen = stage_order(run("iterations=1", "adaptation.enabled=false", "training.reward.enabled=false"))
    assert frozen[1] == ("rollout", "judge", "label", "train_policy", "evaluate")


def test_a_planned_stage_that_must_run_makes_everything_downstream_run(tmp_path: Any) -> None:
    # An empty artifact root: nothing is done, and only stages without inputs have a computable key.
    planned = plan(run(f"artifact_root={tmp_path}", "iterations=1"))
    assert not any(p.done for p in planned)
    assert [p.stage for p in planned if p.key is not None] == ["seed_tasks", "bootstrap"]
    rollout = next(p for p in planned if p.stage == "rollout")
    assert rollout.inputs == {"tasks": "planned:0/seed_tasks", "policy": "planned:0/bootstrap"}


def test_every_stage_name_has_one_registered_stage_in_its_task_module() -> None:
    for name in StageName:
        module = importlib.import_module(f"tasks.{name.value}")
        assert all_stages()[name].body.__module__ == module.__name__, name
    assert set(all_stages()) == set(StageName)


# ---- content keys: a field inside a stage's slice changes its key, a field outside does not ---------


def _leaves(model: type[BaseModel], value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every leaf field of a config model, enumerated from the model itself."""
    for name, info in model.model_fields.items():
        sub, path = getattr(value, name), f"{prefix}{name}"
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaves(annotation, sub, f"{path}.")
        else:
            yield path, sub


def _candidates(value: Any) -> list[Any]:
    """Other values of a leaf's JSON form, tried in order until the config validates."""
    if isinstance(value, InferenceDtype):
        # 'auto' enters keys resolved (float32 on this CPU): only another concrete dtype changes a slice.
        same = value.resolve(cuda=on_cuda("auto"))
        return [m.value for m in InferenceDtype if m not in (value, same)]
    if isinstance(value, enum.Enum):
        return [m.value for m in type(value) if m is not value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1, 0, value * 2]  # doubling: a tiny model's width (a multiple of 64)
    if isinstance(value, float):
        return [value * 0.5, value + 0.1, value * 1.5, value - 0.1]
    if isinstance(value, str):
        # Free text, a model, a dtype, a device, a date (coding.livebench_release).
        return [value + "-changed", "tiny:changed", "float32", "cpu", "2024-01-01"]
    if isinstance(value, tuple):
        return [[*value, "--changed"], list(value[:-1]), [0.5, 0.6]]
    if value is None:
        return ["tiny:changed", 1]
    if isinstance(value, dict):  # cluster.resources (numbers), gui.osworld.mirrors (URL prefix -> base)
        return [{**value, "changed": 1.0}, {**value, "https://changed.example/": "/srv/mirror"}]
    raise AssertionError(f"no candidate values for {value!r}")


def _changed(base: RunConfig, path: str, value: Any) -> RunConfig | None:
    data = base.model_dump(mode="json")
    node = data
    *parents, leaf = path.split(".")
    for part in parents:
        node = node[part]
    original = node[leaf]
    for candidate in _candidates(value):
        if candidate == original:
            continue
        node[leaf] = candidate
        try:
            return build_config(data)
        except ConfigError:
            continue
    return None


def _flat(data: Any, prefix: str = "") -> set[str]:
    if isinstance(data, dict):
        return {leaf for k, v in data.items() for leaf in _flat(v, f"{prefix}{k}.")}
    return {prefix.removesuffix(".")}


REFS = {name: StageRef("keys", 0, name, 1, f"ck-{name}", {}) for name in ("tasks", "policy", "rollouts")}


@pytest.mark.parametrize("setting", [s.value for s in Setting])
def test_a_stage_key_moves_exactly_with_the_fields_of_its_slice(setting: str) -> None:
    # GUI runs with vision-language models, so that switching either role's screens on validates.
    vl = ["models.policy=tiny-vl:policy", "models.reward=tiny-vl:reward"] if setting == "gui" else []
    # A plug-in run names an installed plug-in: the example package (examples/numberline).
    plugin = ["plugin.name=numberline", "plugin.options={train_tasks: 2}"] if setting == "plugin" else []
    base = load_config(
        overrides=[
            f"setting={setting}",
            "adaptation.rewriter=llm",
            "models.environment=tiny:env",
            *vl,
            *plugin,
        ]
    )
    leaves = list(_leaves(RunConfig, base))
    assert len(leaves) > 100  # every field of the config, not a hand-picked few
    base_run = RunContext(run_id="keys", config=base)
    keys = {name: stage.key(base_run, 1, REFS) for name, stage in all_stages().items()}
    slices = {name: _flat(stage.slice(base).key_json()) for name, stage in all_stages().items()}
    unchangeable = []
    for path, value in leaves:
        changed = _changed(base, path, value)
        if changed is None:
            unchangeable.append(path)
            continue
        changed_run = RunContext(run_id="keys", config=changed)
        for name, stage in all_stages().items():
            # The run seed is no config slice: it enters every key through the stage seed.
            in_slice = path in slices[name] or any(leaf.startswith(f"{path}.") for leaf in slices[name])
            expected = path == "seed" or (in_slice and path not in SPEED_ONLY_KEYS)
            moved = stage.key(changed_run, 1, REFS) != keys[name]
            assert moved == expected, f"{name}: changing {path} {'moved' if moved else 'kept'} its key"
    # Fields no value change validates would go untested: only coding's rewriter, which must be 'llm', and
    # outside the GUI setting the screens the models see (only GUI environments have screens).
    screens = [] if setting == "gui" else ["models.images.policy", "models.images.reward"]
    # judge.source=oracle validates only with a frozen reward model in a static environment (and never for
    # coding), and the oracle's flips only with it: their keys are checked by
    # test_the_oracle_arm_runs_no_judge_and_keys_its_labels.
    oracle = ["judge.source", "judge.oracle_flip.good", "judge.oracle_flip.bad"]
    # The warm start's knobs validate only where their demonstrations exist: reading drills for a tiny
    # text-game policy, noisy demonstrations and judge labels outside coding.
    drills = [] if setting == "textgame" else ["models.policy_reading_drills"]
    # storage.keep_every validates only with storage.keep_last set; no stage reads either (keep_last's change
    # above moved no key), and tests/store/test_retention.py checks both.
    retention = ["storage.keep_every"]
    # Coding's reward model writes unit tests: the judge's yardstick and its row balance do not validate there.
    coding = [
        "adaptation.rewriter", "evaluation.judge_steps", "reward.rm_outcome_balance", "models.policy_demo_noise",
        "models.reward_label_noise",
    ]  # fmt: skip
    expected = screens + oracle + drills + retention + (coding if setting == "coding" else [])
    assert sorted(unchangeable) == sorted(expected)


@pytest.mark.parametrize("setting", ["textgame", "gui"])
def test_the_oracle_arm_runs_no_judge_and_keys_its_labels(setting: str) -> None:
    arm = [f"setting={setting}", "iterations=1", "adaptation.enabled=false", "training.reward.enabled=false"]
    oracle, judged = run(*arm, "judge.source=oracle"), run(*arm)
    assert stage_order(oracle)[1] == ("rollout", "label", "train_policy", "evaluate")
    assert stage_order(judged)[1] == ("rollout", "judge", "label", "train_policy", "evaluate")
    moved = {
        str(name)
        for name, stage in all_stages().items()
        if stage.key(oracle, 1, REFS) != stage.key(judged, 1, REFS)
    }
    assert moved == {"judge", "label"}  # the label stage's votes change; the judge slice holds the source too
    # A noisy oracle's flips change the label stage's votes, nothing else.
    for flip in ("judge.oracle_flip.good=0.25", "judge.oracle_flip.bad=0.25"):
        noisy = run(*arm, "judge.source=oracle", flip)
        moved = {
            str(name)
            for name, stage in all_stages().items()
            if stage.key(noisy, 1, REFS) != stage.key(oracle, 1, REFS)
        }
        assert moved == {"judge", "label"}, (
            flip
        )  # the judge slice holds judge.* whole (its stage does not run)


@pytest.mark.parametrize(
    ("overrides", "needs"),
    [
        ([], "training.reward.enabled=false and adaptation.enabled=false"),
        (["adaptation.enabled=false"], "training.reward.enabled=false"),
        (["training.reward.enabled=false"], "adaptation.enabled=false"),
    ],
)
def test_the_oracle_judge_says_what_it_needs(overrides: list[str], needs: str) -> None:
    with pytest.raises(ConfigError, match=f"judge.source=oracle runs no judge.*set {needs} "):
        load_config(overrides=[*overrides, "judge.source=oracle"])
    with pytest.raises(ConfigError, match="coding setting does not use"):
        load_config(overrides=["setting=coding", "judge.source=oracle"])


def test_generating_stage_keys_carry_the_resolved_inference_dtype() -> None:
    # models.device is speed only, but with models.serving.dtype=auto it picks the dtype rows are
    # generated in (bfloat16 on a CUDA GPU, float32 on the CPU): the resolved dtype enters the keys.
    def keys(*overrides: str) -> dict[str, str]:
        run = RunContext(run_id="keys", config=load_config(overrides=list(overrides)))
        return {str(name): stage.key(run, 1, REFS) for name, stage in all_stages().items()}

    generating = {"rollout", "judge", "judge_eval", "write_tests", "adapt", "evaluate"}

    def dtypes(*overrides: str) -> set[str]:
        cfg = load_config(overrides=list(overrides))
        return {all_stages()[name].slice(cfg).key_json()["models"]["serving"]["dtype"] for name in generating}

    cpu, cuda = keys("models.device=cpu"), keys("models.device=cuda")
    assert {name for name in cpu if cpu[name] != cuda[name]} == generating
    assert dtypes("models.device=cpu") == {"float32"} and dtypes("models.device=cuda") == {"bfloat16"}
    # A dtype given explicitly is the same on both devices: the device is speed only again.
    cpu_bf16 = keys("models.device=cpu", "models.serving.dtype=bfloat16")
    cuda_fp32 = keys("models.device=cuda", "models.serving.dtype=float32")
    assert all(cpu_bf16[name] == cuda[name] and cuda_fp32[name] == cpu[name] for name in generating)
