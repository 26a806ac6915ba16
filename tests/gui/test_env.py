"""The MiniWoB++ environment on real pages in headless Chromium: solvers, outcomes, runner, demos."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rla_core.algo.curriculum import PlayTask
from rla_core.config import SamplingConfig
from rla_core.dispatch import play_episodes
from rla_core.envs.demos import policy_demos
from rla_core.envs.miniwob.env import MiniWobEnv
from rla_core.envs.miniwob.pool import BrowserOptions
from rla_core.envs.miniwob.tasks import load_specs
from rla_core.envs.prompts import render_policy_prompt
from rla_core.envs.rollout import GenerationMode, run_rollouts
from rla_core.errors import EnvironmentSpecError
from rla_core.stage_inputs import RolloutRequest
from tests.gui.conftest import DATA, RecordedGenerator, spec, train_specs
from tests.recorded import rollout_request


def test_scripted_solver_wins_every_shipped_task(env: MiniWobEnv) -> None:
    train = load_specs(DATA / "train.jsonl", known_tasks=env.known_tasks)
    held_out = load_specs(DATA / "eval.jsonl", known_tasks=env.known_tasks)
    assert len(train) == len(held_out) == 13
    for s in held_out:
        assert env.check_winnable(s) is None, s
    for s in train:
        # the demonstration replayed from scratch wins again: refs are stable for a seeded instance
        (plan,) = env.demonstrations(s, seed=0)
        episode = env.play(s, plan)
        assert episode.won and episode.score is not None and episode.score > 0, s
        episode.close()


def test_observation_lists_elements_and_candidate_actions(env: MiniWobEnv) -> None:
    # enter-text seed 3: 'Enter "Myron" into the text field and press Submit.' (field target=Myron)
    episode = env.open(spec("enter-text"), seed=0)
    try:
        assert episode.instruction == 'Enter "Myron" into the text field and press Submit.'
        # two interactive leaves: the text input (ref 5) and the Submit button (ref 6)
        assert episode.observation.splitlines()[1].startswith('ref=5 input_text value=""')
        assert episode.observation.splitlines()[2].startswith('ref=6 button "Submit"')
        # 2 clicks + 1 typing action (1 string x 1 text input)
        assert episode.admissible_actions == [
            "click ref=5 (input_text)",
            'click ref=6 (button "Submit")',
            'type "Myron" into ref=5 (input_text)',
        ]
        assert episode.expert_actions() == ['type "Myron" into ref=5 (input_text)']
        result = episode.step('type "Myron" into ref=5 (input_text)')
        assert not result.done and 'value="Myron"' in result.observation
        assert episode.expert_actions() == ['click ref=6 (button "Submit")']
        result = episode.step('click ref=6 (button "Submit")')
        assert result.done and result.won and episode.expert_actions() == []
    finally:
        episode.close()


def test_wrong_actions_lose(env: MiniWobEnv) -> None:
    # click-button seed 3: the target is "no" (ref 4); "Okay" (ref 7) ends the episode with -1
    episode = env.play(spec("click-button"), ['click ref=7 (button "Okay")'])
    assert episode.done and not episode.won and episode.score == -1.0
    episode.close()
    # click-button-sequence: TWO then ONE (the second click ends the episode) -> -1
    episode = env.play(
        spec("click-button-sequence"), ['click ref=5 (button "TWO")', 'click ref=4 (button "ONE")']
    )
    assert episode.done and not episode.won and episode.score == -1.0 and len(episode.history) == 2
    episode.close()
    # enter-text: submitting the empty field loses
    episode = env.play(spec("enter-text"), ['click ref=6 (button "Submit")'])
    assert episode.done and not episode.won
    episode.close()


def test_unlisted_action_is_a_no_op(env: MiniWobEnv) -> None:
    episode = env.open(spec("click-test"), seed=0)
    try:
        result = episode.step("click ref=99 (button)")
        assert not result.done and "not one of the listed actions" in result.observation
        assert episode.step(episode.expert_actions()[0]).won
    finally:
        episode.close()


def test_hint_levels(env: MiniWobEnv) -> None:
    first = env.open(spec("click-checkboxes", hint_level=1), seed=0)
    expert = first.expert_actions()[0]
    assert first.instruction.endswith(f" Hint: start with: {expert}.")
    assert "Hint" not in first.observation
    first.close()
    every = env.open(spec("click-checkboxes", hint_level=2), seed=0)
    assert every.observation.endswith(f"Hint: next do: {expert}")
    every.close()


def test_unknown_task_and_bad_spec_are_specific_errors(env: MiniWobEnv) -> None:
    with pytest.raises(
        EnvironmentSpecError, match=r"unknown MiniWoB task 'click-buton'.*did you mean click-button"
    ):
        env.open(spec("click-buton"), seed=0)
    with pytest.raises(EnvironmentSpecError, match=r"'hint_level' must be an integer in \[0, 2\], got 5"):
        env.validate_spec(spec("click-test", hint_level=5))
    with pytest.raises(EnvironmentSpecError, match=r"unknown keys \['level'\]"):
        env.validate_spec({"task": "click-test", "seed": 0, "hint_level": 0, "level": 1})


def test_load_specs_names_the_bad_line(env: MiniWobEnv, tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(spec("click-test")) + "\n" + json.dumps(spec("nope")) + "\n")
    with pytest.raises(EnvironmentSpecError, match=r"tasks.jsonl:2: unknown MiniWoB task 'nope'"):
        load_specs(path, known_tasks=env.known_tasks)


def test_rollouts_through_the_shared_runner(env: MiniWobEnv) -> None:
    # click-option seed 3: radios ch0..ch4 (refs 6, 8, 10, 12, 14), Submit ref 15; target 'Vdpn2dP' = ref 10.
    episode = env.open(spec("click-option"), seed=0)
    actions = list(episode.admissible_actions)
    episode.close()
    target = actions.index('click ref=10 (input_radio "Vdpn2dP")')
    submit = actions.index('click ref=15 (button "Submit")')
    wrong = actions.index('click ref=6 (input_radio "91YPF")')
    # turn 0: rollout 0 answers without a box -> fallback index 0 (the first radio, spec §5);
    #         rollout 1 answers an out-of-range index -> clamped to the last action = Submit with
    #         nothing selected -> rollout 1 ends at once and loses.
    # turn 1: rollout 0 selects the target radio (replacing the first one); turn 2: Submit -> win.
    gen = RecordedGenerator(
        ["no box", f"\\boxed{{{len(actions) + 5}}}", f"\\boxed{{{target}}}", f"\\boxed{{{submit}}}"]
    )
    frame = run_rollouts(
        rollout_request([PlayTask("t0", "s0", False, spec("click-option"))], n=2, max_steps=4, seed=0),
        env=env,
        generator=gen,
        mode=GenerationMode.JOINT,
    )
    r0, r1 = frame.filter(frame["rollout_id"] == 0), frame.filter(frame["rollout_id"] == 1)
    assert r0["action_valid"].to_list() == [False, True, True]
    assert r0["invalid_reason"][0] is not None
    assert r0["action"].to_list() == [actions[0], actions[target], actions[submit]]
    assert json.loads(r0["expert_actions"][0]) == [actions[target]]  # solver ground truth for the judge
    assert r0["outcome"].to_list() == [1.0, 1.0, 1.0] and r0["done"].to_list() == [False, False, True]
    assert r1["action_valid"].to_list() == [False]
    assert r1["invalid_reason"][0] == f"index {len(actions) + 5} out of range 0..{len(actions) - 1}"
    assert r1["action"].to_list() == [actions[-1]] == [actions[submit]]
    assert r1["outcome"].to_list() == [-1.0] and r1["done"].to_list() == [True]
    assert wrong != target


def test_policy_demos_reuse_the_shared_helpers(env: MiniWobEnv) -> None:
    s = spec("click-button-sequence")
    demos = policy_demos(env, [s])
    # two steps: ONE (ref 4, index 0) then TWO (ref 5, index 1)
    assert demos["response"].to_list() == [
        'I should click ref=4 (button "ONE"). \\boxed{0}',
        'I should click ref=5 (button "TWO"). \\boxed{1}',
    ]
    episode = env.open(s, seed=0)
    expected_first = render_policy_prompt(
        instruction=episode.instruction,
        history=[],
        observation=episode.observation,
        actions=episode.admissible_actions,
        history_turns=2,
    )
    episode.close()
    assert demos["prompt"][0] == expected_first
    assert train_specs()[0] == {"task": "click-test", "seed": 0, "hint_level": 0}


def test_screenshots_are_png_paths(gui_runtime: Path, tmp_path: Path) -> None:
    with MiniWobEnv(
        browsers=BrowserOptions(size=1, runtime_dir=gui_runtime), screenshot_dir=tmp_path / "shots"
    ) as shot_env:
        episode = shot_env.play(spec("click-test"), [])
        assert len(episode.screenshots) == 1
        assert Path(episode.screenshots[0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        episode.close()


def test_gui_rollouts_keep_a_screenshot_per_step_referenced_from_the_artifact(tmp_path: Path) -> None:
    from rla_core.algo.curriculum import PlayTask
    from rla_core.config import load_config
    from rla_core.settings.gui import MiniWobSetting
    from rla_core.stage_inputs import RolloutInputs

    cfg = load_config(preset="gui", overrides=["gui.browsers=1"])
    # Two unparsable answers on click-test: fallback index 0 is played each turn (two steps, max 2).
    request = RolloutRequest(
        tasks=(PlayTask("t0", "s0", False, spec("click-test-2")),), n=1, max_steps=2, sampling=SamplingConfig(),
        seed=0, iteration=1, history_turns=2, env=RolloutInputs.from_config(cfg).env(), workdir=tmp_path, env_retries=0,
    )  # fmt: skip
    frames = play_episodes(MiniWobSetting(), request, generator=RecordedGenerator(["x", "y"]))
    refs = frames["rollouts"]["observation_ref"].to_list()
    after = frames["rollouts"]["next_observation_ref"].to_list()
    assert refs and all(r is not None and r.startswith("files/screenshots/") for r in refs + after)
    for ref in refs + after:
        assert (tmp_path / ref).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # a real PNG next to the artifact
    assert after[:-1] == refs[1:]  # the screen after a step is the screen of the next one
    assert after[-1] not in refs  # and the last step's is its own: every judged step has both
