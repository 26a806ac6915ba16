"""The preflight through the real CLI (in process): every problem a config's inputs have, one line each, exit
code 3, and nothing created or changed under the working directory, the artifact root, the MLflow store or
the Prefect home — all four live under the test's directory, which is compared file by file before and after."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.preflight import changed_task_files
from flows.runs import load_run_config
from rla_core.config import PRESETS, load_config
from rla_core.errors import PREFLIGHT_EXIT_CODE
from rla_core.models.serving import check_ipc_room
from rla_core.preflight import Severity
from rla_core.store import ArtifactStore
from tasks.stage import READ_FILE_KEY

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's working directory; the Prefect home, artifact root and MLflow store are named inside it."""
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _where(place: Path) -> list[str]:
    return ["--set", f"artifact_root={place / 'runs'}", "--set", f"tracking.mlflow_uri=sqlite:///{place / 'mlflow.db'}"]  # fmt: skip


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


def _rla(place: Path, *args: str) -> tuple[int, list[str]]:
    """Run `rla *args` in ``place``; the exit code and the ``error:`` lines. Asserts nothing was written."""
    before = _snapshot(place)
    result = runner.invoke(app, list(args))
    assert _snapshot(place) == before, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, [ln for ln in result.output.splitlines() if ln.startswith("error:")]


def _error(lines: list[str], key: str, *fragments: str) -> None:
    """Exactly one error line is about ``key``, and it holds every fragment."""
    about = [ln for ln in lines if ln.startswith(f"error: {key}")]
    assert len(about) == 1, lines
    for fragment in fragments:
        assert fragment in about[0], (fragment, about[0])


# ---- missing and malformed task files, every setting ------------------------------------------------


def test_textworld_missing_and_malformed_task_files(place: Path) -> None:
    good = (REPO / "data/textworld/eval.jsonl").read_text().splitlines()[0]
    (place / "eval.jsonl").write_text(f"{good}\n{{not json\n")
    code, lines = _rla(
        place, "run", *_where(place), "--set", "textgame.tasks=train-missing.jsonl", "--set", "textgame.eval_tasks=eval.jsonl"
    )  # fmt: skip
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "textgame.tasks", "'train-missing.jsonl' does not exist")
    _error(lines, "textgame.eval_tasks", "eval.jsonl' line 2 is not JSON")


def test_alfworld_missing_and_malformed_game_files(place: Path) -> None:
    row = json.loads((REPO / "data/alfworld/train.jsonl").read_text().splitlines()[0])
    bad = {**row, "spec": {**row["spec"], "task_type": "juggle"}}
    (place / "games.jsonl").write_text(json.dumps(row) + "\n\n" + json.dumps(bad) + "\n")
    code, lines = _rla(
        place, "run", *_where(place), "--set", "textgame.engine=alfworld",
        "--set", "textgame.tasks=games.jsonl", "--set", "textgame.eval_tasks=held-out-missing.jsonl",
    )  # fmt: skip
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "textgame.tasks", "games.jsonl' line 3", "unknown task_type 'juggle'")
    _error(lines, "textgame.eval_tasks", "'held-out-missing.jsonl' does not exist")


def test_coding_missing_binary_and_malformed_problem_files(place: Path) -> None:
    (place / "binary.jsonl").write_bytes(b'{"task_id": "a"}\n\x89PNG\r\n\x1a\n\x00\xff\xfe')
    code, lines = _rla(
        place, "run", *_where(place), "--set", "setting=coding",
        "--set", "coding.problems=binary.jsonl", "--set", "coding.eval_problems=missing.jsonl",
    )  # fmt: skip
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "coding.problems", "'binary.jsonl' line 2 is not UTF-8 text")
    _error(lines, "coding.eval_problems", "'missing.jsonl' does not exist")

    good = (REPO / "data/coding/eval.jsonl").read_text().splitlines()[0]
    (place / "eval.jsonl").write_text(f'{good}\n{{"task_id": 3}}\n')
    code, lines = _rla(
        place, "config", "check", "--set", "setting=coding", "--set", "coding.eval_problems=eval.jsonl"
    )
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "coding.eval_problems", "1 malformed problem(s); first: eval.jsonl:2")


def test_miniwob_missing_and_malformed_task_files(place: Path) -> None:
    (place / "gui.jsonl").write_text('{"task": "click-test", "seed": 0, "hint_level": 0}\n{"task": "click-tset", "seed": 1, "hint_level": 0}\n')  # fmt: skip
    code, lines = _rla(
        place, "run", *_where(place), "--set", "setting=gui",
        "--set", "gui.tasks=gui.jsonl", "--set", "gui.eval_tasks=nope/eval.jsonl",
    )  # fmt: skip
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "gui.tasks", "gui.jsonl:2", "unknown MiniWoB task 'click-tset'", "did you mean click-test")
    _error(lines, "gui.eval_tasks", "'nope/eval.jsonl' does not exist")


def test_osworld_meta_list_naming_a_missing_example_and_malformed_jsonl(place: Path) -> None:
    shutil.copytree(REPO / "data/gui/osworld/examples", place / "osw/examples")
    meta = json.loads((REPO / "data/gui/osworld/train.json").read_text())
    meta["os"].append("rla-os-not-there")
    (place / "osw/train.json").write_text(json.dumps(meta))
    (place / "eval.jsonl").write_text('{"id": "x", "instruction": "do it"\n')
    code, lines = _rla(
        place, "run", *_where(place), "--preset", "osworld",
        "--set", "gui.tasks=osw/train.json", "--set", "gui.eval_tasks=eval.jsonl",
    )  # fmt: skip
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "gui.tasks", "example 'rla-os-not-there' of domain 'os'", "does not exist")
    _error(lines, "gui.eval_tasks", "eval.jsonl:1: not JSON")


def test_a_plugin_that_does_not_resolve_exits_3_as_documented(place: Path) -> None:
    # docs/configuration.md: `rla config check` exits 3 with one line per problem; a plug-in's options
    # are the plug-in's to check, so a bad or missing one is such a problem (not a config error, exit 1).
    plugin = ["--set", "setting=plugin", "--set", "plugin.name=numberline"]
    code, lines = _rla(place, "config", "check", *plugin, "--set", "plugin.options={train_tasks: 99}")
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "plugin", "plug-in 'numberline': invalid options", "plugin.options.train_tasks", "8")


# ---- models, vLLM, Ray, several problems, resume and study -------------------------------------------


def test_model_path_without_a_checkpoint(place: Path) -> None:
    (place / "ckpt").mkdir()
    (place / "ckpt" / "config.json").write_text("{}")
    code, lines = _rla(
        place, "config", "check", "--set", "models.policy=ckpt", "--set", "models.reward=org/not-cached"
    )
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "models.policy", "checkpoint 'ckpt' is incomplete", "tokenizer_config.json")
    _error(lines, "models.reward", "'org/not-cached' is not in the local Hugging Face cache")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(120)  # a hang guard only: a refused connection answers at once
def test_unreachable_ray_address(place: Path) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    code, lines = _rla(
        place, "run", *_where(place), "--set", "cluster.backend=ray", "--set", f"cluster.address={address}"
    )  # fmt: skip
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "cluster.address", f"cluster.address='{address}'", "cluster.connect_timeout_s=5 s")


def test_vllm_backend_without_its_interpreter(place: Path) -> None:
    code, lines = _rla(place, "run", *_where(place), "--set", "models.serving.backend=vllm")
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "models.serving.interpreter", ".venv-vllm/bin/python", "is not an executable python")


def test_vllm_backend_with_a_temporary_directory_too_long_for_its_sockets(
    place: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM binds Unix sockets <TMPDIR>/rla-vllm-XXXXXXXX/<uuid4> (TMPDIR + 55 characters), at most 107:
    # 53 characters of TMPDIR make 108.
    long_tmp = "/" + "t" * 52
    monkeypatch.setattr(tempfile, "tempdir", long_tmp)
    interpreter = ["--set", f"models.serving.interpreter={sys.executable}"]
    code, lines = _rla(place, "run", *_where(place), "--set", "models.serving.backend=vllm", *interpreter)
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "models.serving.backend", long_tmp, "108 characters", "at most 52 characters")
    monkeypatch.setattr(tempfile, "tempdir", long_tmp[:-1])  # 52: 107, fits exactly
    check_ipc_room()


def test_two_problems_at_once_are_both_reported(place: Path) -> None:
    code, lines = _rla(
        place, "run", *_where(place), "--set", "textgame.tasks=missing.jsonl",
        "--set", "models.serving.backend=vllm", "--set", f"models.serving.interpreter={place / 'no-python'}",
    )  # fmt: skip
    assert code == PREFLIGHT_EXIT_CODE
    assert len(lines) == 2, lines
    _error(lines, "textgame.tasks", "'missing.jsonl' does not exist")
    _error(lines, "models.serving.interpreter", "no-python")


def test_study_is_checked_before_it_writes(place: Path) -> None:
    code, lines = _rla(place, "study", "s1", "--preset", "test", *_where(place), "--set", "textgame.eval_tasks=gone.jsonl")  # fmt: skip
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "textgame.eval_tasks", "'gone.jsonl' does not exist")


def _stored_run(place: Path, run_id: str, *overrides: str) -> ArtifactStore:
    store = ArtifactStore(str(place / "runs"))
    cfg = load_config(preset="test", overrides=[f"artifact_root={place / 'runs'}", *overrides])
    store.write_run_info(
        run_id, config=cfg.model_dump(mode="json"), config_hash=cfg.config_hash(), code_version="x"
    )
    return store


def test_resume_checks_the_stored_config(place: Path) -> None:
    _stored_run(place, "r1", f"textgame.tasks={place / 'moved-away.jsonl'}")
    code, lines = _rla(place, "resume", "r1", "--root", str(place / "runs"))
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "textgame.tasks", "moved-away.jsonl' does not exist")


def _commit_read(store: ArtifactStore, run_id: str, iteration: int, stage: str, path: Path) -> None:
    """A committed attempt of ``stage`` that recorded the bytes of ``path`` it was keyed on."""
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    with store.begin(run_id, iteration, stage) as writer:
        writer.commit("key", inputs={}, extra={READ_FILE_KEY: {"path": str(path), "sha256": sha}})


def test_resume_refuses_a_changed_training_task_file(place: Path) -> None:
    tasks = place / "train.jsonl"
    shutil.copy(REPO / "data/textworld/train.jsonl", tasks)
    store = _stored_run(place, "r2", f"textgame.tasks={tasks}")
    _commit_read(store, "r2", 0, "seed_tasks", tasks)
    assert (
        changed_task_files(store, load_config(overrides=[f"textgame.tasks={tasks}"]), "r2", accept=False)
        == []
    )
    tasks.write_text("\n".join(tasks.read_text().splitlines()[1:]) + "\n")  # one task fewer
    code, lines = _rla(place, "resume", "r2", "--root", str(place / "runs"))
    assert code == PREFLIGHT_EXIT_CODE
    _error(
        lines,
        "textgame.tasks",
        f"'{tasks}' changed since seed_tasks (iteration 0) hashed it",
        "--reconfigure",
    )


def test_a_changed_held_out_file_is_a_warning_and_reconfigure_accepts_a_training_one(tmp_path: Path) -> None:
    train, held_out = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    shutil.copy(REPO / "data/textworld/train.jsonl", train)
    shutil.copy(REPO / "data/textworld/eval.jsonl", held_out)
    store = _stored_run(tmp_path, "r3", f"textgame.tasks={train}", f"textgame.eval_tasks={held_out}")
    _commit_read(store, "r3", 0, "seed_tasks", train)
    for iteration in (0, 1):
        _commit_read(store, "r3", iteration, "evaluate", held_out)
    cfg = load_config(preset="test", overrides=[f"textgame.tasks={train}", f"textgame.eval_tasks={held_out}"])
    held_out.write_text(held_out.read_text() + "\n")  # other bytes, the same tasks: still another key
    (problem,) = changed_task_files(store, cfg, "r3", accept=False)
    assert problem.severity is Severity.WARNING and problem.key == "textgame.eval_tasks"
    assert "evaluate stages of iterations 0, 1" in problem.message
    train.write_text(train.read_text() + "\n")
    severities = {p.key: p.severity for p in changed_task_files(store, cfg, "r3", accept=True)}
    assert severities == {"textgame.tasks": Severity.WARNING, "textgame.eval_tasks": Severity.WARNING}


# ---- rla config check on every shipped preset --------------------------------------------------------


def _fake_hub_cache(root: Path, repo_ids: set[str]) -> Path:
    """A Hugging Face cache holding only each repo's config.json (what the preflight looks for)."""
    for repo_id in repo_ids:
        repo = root / f"models--{repo_id.replace('/', '--')}"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("0" * 40)
        (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
        (repo / "snapshots" / ("0" * 40) / "config.json").write_text("{}")
    return root


def _preset_stand_ins(preset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What a preset needs that this machine lacks by design: the paper presets' hub models (a cache entry
    each) and their vLLM environment (this interpreter). The GUI presets' programs are installed by
    scripts/setup.sh, so those presets are checked for real."""
    cfg = load_config(preset=preset)
    hub = {
        ref for ref in (cfg.models.policy, cfg.models.reward, cfg.models.environment) if ref and "/" in ref
    }
    if not hub:
        return []
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(_fake_hub_cache(tmp_path / "hub", hub)))
    return ["--set", f"models.serving.interpreter={sys.executable}"]


@pytest.mark.parametrize("preset", PRESETS)
def test_config_check_passes_on_every_preset(
    preset: str, place: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_ins = _preset_stand_ins(preset, tmp_path / "stand-ins", monkeypatch)
    code, lines = _rla(place, "config", "check", "--preset", preset, *stand_ins)
    assert (code, lines) == (0, [])


def test_config_check_of_a_paper_preset_names_what_this_machine_lacks(place: Path) -> None:
    code, lines = _rla(
        place, "config", "check", "--preset", "paper-coding", "--set", f"models.policy={place}"
    )
    assert code == PREFLIGHT_EXIT_CODE
    _error(lines, "models.policy", "is incomplete")
    _error(lines, "models.serving.interpreter", "is not an executable python")


def test_stages_record_the_task_file_they_were_keyed_on(base_run: tuple[Path, str]) -> None:
    from rla_core.settings.base import file_digest

    root, run_id = base_run
    store = ArtifactStore(str(root))
    cfg = load_run_config(store, run_id)
    reads = {
        (it, stage): m.extra[READ_FILE_KEY]
        for (it, stage), m in store.committed(run_id).items()
        if READ_FILE_KEY in m.extra
    }
    train = {"path": cfg.textgame.tasks, "sha256": file_digest(cfg.textgame.tasks)}
    held_out = {"path": cfg.textgame.eval_tasks, "sha256": file_digest(cfg.textgame.eval_tasks)}
    evaluations = {(it, "evaluate") for it, stage in reads if stage == "evaluate"}
    assert (
        len(evaluations) == cfg.iterations + 1
    )  # test preset: evaluated before training and after each iteration
    assert reads == {(0, "seed_tasks"): train, (0, "bootstrap"): train} | {k: held_out for k in evaluations}
    assert changed_task_files(store, cfg, run_id, accept=False) == []
