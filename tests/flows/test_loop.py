"""The staged loop end to end: full run, resume after SIGKILL, idempotent resume, config
changes that reuse upstream stages, the run lock and MLflow metrics."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from flows.runs import load_run_config
from rla_core.algo.judging import oracle_judgments
from rla_core.algo.labels import policy_samples
from rla_core.procs import group_members
from rla_core.store import ArtifactStore
from tests.flows.conftest import FlowEnv, kill_group, planned

TEST_RUN = ["--preset", "test"]


def attempts_in_use(store: ArtifactStore, run_id: str) -> dict[tuple[int, str], int]:
    """(iteration, stage) → attempt in use, for every committed stage of a run."""
    return {where: manifest.attempt for where, manifest in store.committed(run_id).items()}


def content_keys(store: ArtifactStore, run_id: str) -> dict[tuple[int, str], str]:
    return {where: manifest.content_key for where, manifest in store.committed(run_id).items()}


def attempt_dirs(root: Path, run_id: str) -> set[str]:
    return {str(p.relative_to(root)) for p in (root / run_id).glob("iter-*/*/attempt-*")}


@pytest.fixture(scope="module")
def baseline(base_run: tuple[Path, str]) -> tuple[Path, str]:
    """One uninterrupted test-sized run (shared with tests/flows/test_operator.py); later tests compare against it."""
    return base_run


def test_full_run_writes_every_stage_and_logs_metrics(flow_env: FlowEnv, baseline: tuple[Path, str]) -> None:
    root, run_id = baseline
    store = ArtifactStore(str(root))
    done = attempts_in_use(store, run_id)
    expected = planned(store, run_id)
    assert set(done) == expected and {s for it, s in expected if it == 0} == {
        "seed_tasks",
        "bootstrap",
        "evaluate",
    }
    # Every iteration has rollouts, judgments and a changed policy checkpoint.
    for it in (1, 2):
        assert store.read_frame(run_id, it, "rollout", "rollouts").height > 0
        assert store.read_frame(run_id, it, "judge", "judgments").height > 0
    # MLflow: namespaced metrics with step = iteration, config hash as a tag.
    with sqlite3.connect(flow_env.base / "mlflow.db") as db:
        steps = {
            row[0] for row in db.execute("select distinct step from metrics where key='policy/success_rate'")
        }
        tags = {row[0] for row in db.execute("select key from tags")}
        timing = db.execute("select count(*) from metrics where key like 'timing_s/%'").fetchone()[0]
    assert steps == {1, 2}
    assert {"rla.config_hash", "rla.artifact_uri", "rla.run_id"} <= tags
    assert timing >= len([1 for it, _s in expected if it > 0])
    # The CLI can show what was written.
    shown = flow_env.rla("inspect", run_id, "--iteration", "1", "--artifact", "rollouts", "--root", str(root))
    assert "rollouts of iteration 1" in shown.stdout
    status = flow_env.rla("status", run_id, "--root", str(root))
    assert "train_policy" in status.stdout


def test_second_resume_of_a_finished_run_does_no_stage_work(
    flow_env: FlowEnv, baseline: tuple[Path, str]
) -> None:
    root, run_id = baseline
    store = ArtifactStore(str(root))
    before, dirs_before = attempts_in_use(store, run_id), attempt_dirs(root, run_id)
    proc = flow_env.rla("resume", run_id, "--root", str(root))
    assert attempts_in_use(store, run_id) == before
    assert attempt_dirs(root, run_id) == dirs_before  # not even an attempt was begun
    assert " done in " not in proc.stderr + proc.stdout


def wait_for_judge(proc: subprocess.Popen[str], root: Path, run_id: str, iteration: int) -> None:
    """Return once the run's judge stage of ``iteration`` has begun; fail if the run ends first or after 400 s."""
    target = root / run_id / f"iter-{iteration:04d}" / "judge" / "attempt-0001" / "_begun.json"
    deadline = time.monotonic() + 400
    while not target.exists():
        assert proc.poll() is None, f"the run ended before the judge stage of iteration {iteration} began"
        assert time.monotonic() < deadline, f"the judge stage of iteration {iteration} never began"
        time.sleep(0.05)


def wait_or_dump_stacks(proc: subprocess.Popen[str], log: Path, *, timeout: float) -> int:
    """``proc``'s exit code; if it has not exited within ``timeout`` s, fail with every thread's stack (the CLI
    writes them to its stderr, ``log``, on SIGUSR1) so that a hang says where it hangs."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(3)
        raise AssertionError(
            f"rla did not exit within {timeout:.0f} s of SIGTERM; its stderr, with its threads' stacks at the "
            f"end:\n{log.read_text(errors='replace')[-12000:]}"
        ) from None


def test_sigterm_then_sigkill_mid_stage_each_resume_to_the_uninterrupted_run(
    flow_env: FlowEnv, baseline: tuple[Path, str]
) -> None:
    """One run, stopped twice mid-stage and resumed each time (one run's start serves both checks):

    1. SIGTERM (what a scheduler or `kill` sends) during iteration 1's judge: the flow run crashes, the
       ephemeral Prefect server stops, the run lock is released, and `rla` exits 143 with a one-line hint;
    2. SIGKILL (the OOM killer) of the resumed process during iteration 2's judge: what it started (its
       Prefect server) is orphaned, and the next `rla resume` reaps it and finishes the run.

    No stage committed before an interruption runs again, and the final artifacts are exactly those of the
    uninterrupted run (same seed)."""
    root, base_id = baseline
    run_id = "interrupted"
    flow_env = flow_env.ephemeral()  # the ephemeral server is what must be stopped, or orphaned and reaped
    store = ArtifactStore(str(root))
    log = flow_env.base / "terminated.log"
    with log.open("w") as err:
        proc = flow_env.popen("run", *TEST_RUN, *flow_env.settings(root), "--run-id", run_id, stderr=err)
        try:
            wait_for_judge(proc, root, run_id, 1)
            proc.send_signal(signal.SIGTERM)  # the CLI process only, not its group
            assert wait_or_dump_stacks(proc, log, timeout=60) == 143
            time.sleep(0.5)
            with pytest.raises(ProcessLookupError):  # nothing it started is left (the Prefect server)
                os.killpg(proc.pid, 0)
        finally:
            kill_group(proc)
    assert "terminated (SIGTERM); `rla resume RUN_ID` continues" in log.read_text()
    committed_before = [attempts_in_use(store, run_id)]
    assert (0, "bootstrap") in committed_before[0] and (1, "rollout") in committed_before[0]

    proc = flow_env.popen("resume", run_id, "--root", str(root))  # the lock was released
    try:
        wait_for_judge(proc, root, run_id, 2)
        proc.kill()  # the CLI process only, as the OOM killer would: what it started is orphaned
        proc.wait(timeout=30)
        orphans = group_members(proc.pid)
        assert orphans, "the ephemeral Prefect server should outlive a SIGKILLed CLI until it is reaped"
        committed_before.append(attempts_in_use(store, run_id))
        assert (1, "judge") in committed_before[1] and (2, "rollout") in committed_before[1]

        flow_env.rla("resume", run_id, "--root", str(root))
        assert not set(orphans) & set(group_members(proc.pid)), "resume reaps the dead run's Prefect server"
    finally:
        kill_group(proc)
    after = attempts_in_use(store, run_id)
    for before in committed_before:  # no stage that had committed before an interruption ran again…
        for key, attempt in before.items():
            assert after[key] == attempt, key
    # …and the twice-resumed run produced exactly the artifacts of the uninterrupted one.
    assert content_keys(store, run_id) == content_keys(store, base_id)


@dataclass(frozen=True)
class Reconfigured:
    """Run 'r' under ``root``: attempts and content keys before and after a re-run with only a new lr."""

    root: Path
    before: dict[tuple[int, str], int]
    keys_before: dict[tuple[int, str], str]
    after: dict[tuple[int, str], int]
    keys_after: dict[tuple[int, str], str]


@pytest.fixture(scope="module")
def reconfigured(flow_env: FlowEnv) -> Reconfigured:
    """Run 'r', then run it again with only training.policy.lr changed (--reconfigure)."""
    root = flow_env.base / "runs-reconf"
    flow_env.rla("run", *TEST_RUN, *flow_env.settings(root), "--run-id", "r")
    store = ArtifactStore(str(root))
    before, keys_before = attempts_in_use(store, "r"), content_keys(store, "r")
    flow_env.rla(
        "run", *TEST_RUN, *flow_env.settings(root), "--run-id", "r", "--reconfigure",
        "--set", "training.policy.lr=0.0003",
    )  # fmt: skip
    return Reconfigured(root, before, keys_before, attempts_in_use(store, "r"), content_keys(store, "r"))


def test_changing_only_training_config_reuses_rollout_judge_label(reconfigured: Reconfigured) -> None:
    before, keys_before = reconfigured.before, reconfigured.keys_before
    after, keys_after = reconfigured.after, reconfigured.keys_after
    for stage in ("seed_tasks", "bootstrap"):
        assert after[(0, stage)] == before[(0, stage)]
    for stage in ("rollout", "judge", "label", "adapt", "train_reward"):
        assert after[(1, stage)] == before[(1, stage)], stage  # reused
    for it in (1, 2):
        assert after[(it, "train_policy")] == before[(it, "train_policy")] + 1  # re-run with the new lr
    # Iteration 2 plays the new policy: it re-runs exactly when iteration 1's update changed the checkpoint
    # (with no policy rows the update is a recorded no-op and the checkpoint, hence the key, is unchanged).
    policy_changed = keys_after[(1, "train_policy")] != keys_before[(1, "train_policy")]
    assert after[(2, "rollout")] == before[(2, "rollout")] + int(policy_changed)


def test_second_process_on_a_locked_run_fails_fast(flow_env: FlowEnv, baseline: tuple[Path, str]) -> None:
    root, run_id = baseline
    store = ArtifactStore(str(root))
    with store.lock(run_id):
        started = time.monotonic()
        proc = flow_env.rla("resume", run_id, "--root", str(root), check=False)
        elapsed = time.monotonic() - started
    assert proc.returncode != 0
    assert "locked" in proc.stderr.lower() or "lock" in proc.stderr.lower()
    assert elapsed < 60  # fails fast: no stage ran (only interpreter and import start-up)
    assert str(__import__("os").getpid()) in proc.stderr  # names the holder


def test_resume_from_stage_reruns_it_and_downstream(flow_env: FlowEnv, reconfigured: Reconfigured) -> None:
    root = reconfigured.root
    store = ArtifactStore(str(root))
    before = attempts_in_use(store, "r")
    flow_env.rla("resume", "r", "--root", str(root), "--from-stage", "train_reward", "--iteration", "2")
    after = attempts_in_use(store, "r")
    assert after[(2, "train_reward")] == before[(2, "train_reward")] + 1
    assert after[(2, "evaluate")] == before[(2, "evaluate")] + 1
    for stage in ("rollout", "judge", "label", "adapt", "train_policy"):
        assert after[(2, stage)] == before[(2, stage)], stage


def test_ablations_frozen_reward_model_and_static_environment(flow_env: FlowEnv) -> None:
    root = flow_env.base / "runs-ablation"
    flow_env.rla(
        "run", *TEST_RUN, *flow_env.settings(root), "--run-id", "abl", "--set", "iterations=2",
        "--set", "training.reward.enabled=false", "--set", "adaptation.enabled=false",
        "--set", "reward.use_stepwise=false",
    )  # fmt: skip
    store = ArtifactStore(str(root))
    done = attempts_in_use(store, "abl")
    # Frozen reward model: no train_reward stage, iteration 2 judges with the bootstrap checkpoint.
    assert not any(stage == "train_reward" for _it, stage in done)
    judge_2 = store.manifest("abl", 2, "judge")
    bootstrap = store.manifest("abl", 0, "bootstrap")
    assert judge_2 is not None and bootstrap is not None
    assert judge_2.inputs["reward_model"] == bootstrap.content_key
    # Static environment: no adapt stage and no pending task ever.
    assert not any(stage == "adapt" for _it, stage in done)
    for it in (1, 2):
        assert store.read_frame("abl", it, "label", "decisions").height == 0
    # Outcome-only rewards: every kept policy row's reward is the rollout outcome (±1).
    rewards = set(store.read_frame("abl", 1, "label", "policy_samples")["reward"].to_list())
    assert rewards <= {1.0, -1.0}


def test_the_oracle_arm_labels_with_the_engines_optimal_actions(flow_env: FlowEnv) -> None:
    root = flow_env.base / "runs-oracle"
    flow_env.rla(
        "run", *TEST_RUN, *flow_env.settings(root), "--run-id", "orc", "--set", "iterations=1",
        "--set", "training.reward.enabled=false", "--set", "adaptation.enabled=false",
        "--set", "judge.source=oracle", "--set", "reward.policy_acc_band.low=0",
        "--set", "reward.policy_acc_band.high=1",
    )  # fmt: skip
    store = ArtifactStore(str(root))
    assert {stage for _it, stage in attempts_in_use(store, "orc")} == {
        "seed_tasks", "bootstrap", "evaluate", "rollout", "label", "train_policy"
    }  # fmt: skip
    # The label stage's rows are those of the engine's labels as votes: R = O ± 1 for every step.
    rollouts = store.read_frame("orc", 1, "rollout", "rollouts")
    cfg = load_run_config(store, "orc")
    expected, _ = policy_samples(
        rollouts, oracle_judgments(rollouts, m=cfg.judge.m), cfg=cfg.reward, m=cfg.judge.m
    )
    stored = store.read_frame("orc", 1, "label", "policy_samples")
    assert stored.height > 0 and set(stored["reward"].to_list()) <= {-2.0, 0.0, 2.0}
    assert stored.select("task_id", "rollout_id", "step", "reward", "advantage").equals(
        expected.select("task_id", "rollout_id", "step", "reward", "advantage")
    )


def test_eval_and_export_of_a_finished_run(
    flow_env: FlowEnv, baseline: tuple[Path, str], tmp_path: Path
) -> None:
    root, run_id = baseline
    shown = flow_env.rla("eval", run_id, "--checkpoint", "1", "--root", str(root))
    assert "policy of iteration 1:" in shown.stdout and "success rate" in shown.stdout
    flow_env.rla("export", run_id, "--to", str(tmp_path / "out"), "--root", str(root))
    for role in ("policy", "reward"):
        assert (tmp_path / "out" / role / "config.json").is_file()
        assert (tmp_path / "out" / role / "tokenizer.json").is_file()
    again = flow_env.rla("export", run_id, "--to", str(tmp_path / "out"), "--root", str(root), check=False)
    assert again.returncode != 0 and "is not empty" in again.stderr  # never overwrites an export
