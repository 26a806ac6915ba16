"""Stage content keys: the code version is derived from what a stage really runs.

Edits are made on a copy of the project's packages in a temporary folder — never on the real tree.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rla_core.stage_inputs import StageName
from tasks.code_closure import PROJECT_PACKAGES, CodeClosureError, CodeIndex, code_version
from tasks.stage import stage_seed

REPO = Path(__file__).resolve().parents[2]
STAGES = tuple(name.value for name in StageName)  # each stage lives in tasks/<name>.py


def copy_tree(dest: Path) -> Path:
    for pkg in PROJECT_PACKAGES:
        shutil.copytree(REPO / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def versions(root: Path) -> dict[str, str]:
    index = CodeIndex.at(root)
    return {name: index.version(f"tasks.{name}") for name in STAGES}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found once in {path}"
    path.write_text(text.replace(old, new))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return copy_tree(tmp_path)


def test_code_version_is_path_independent_and_matches_the_installed_project(tree: Path) -> None:
    copied = versions(tree)
    assert copied == versions(tree)  # deterministic
    assert copied == {name: code_version(f"tasks.{name}") for name in STAGES}  # same bytes, another folder
    (tree / "rla_core" / "algo" / "__pycache__").mkdir(exist_ok=True)
    (tree / "rla_core" / "algo" / "__pycache__" / "junk.py").write_text("# compiled leftovers do not count\n")
    assert versions(tree) == copied


def test_editing_a_helper_used_only_through_a_settings_adapter_changes_the_stage_key(tree: Path) -> None:
    before = versions(tree)
    # tasks/label.py never names rla_core.algo.coding_rewards: it reaches it through adapter_of(...).labels.
    assert "coding_rewards" not in (tree / "tasks" / "label.py").read_text()
    edit(
        tree / "rla_core" / "algo" / "coding_rewards.py",
        "def code_table(",
        "def _unused() -> int:\n    return 1\n\n\ndef code_table(",
    )
    after = versions(tree)
    assert after["label"] != before["label"]
    assert after["rollout"] != before["rollout"]  # the coding rollout builds its outcomes with it


def test_editing_an_unrelated_module_changes_no_stage_key(tree: Path) -> None:
    before = versions(tree)
    for path in (tree / "rla_core" / "algo" / "stats.py", tree / "flows" / "cli.py"):
        # stats: no stage imports it; the CLI drives the stages but no stage imports it.
        path.write_text(path.read_text() + "\n\ndef _edited() -> int:\n    return 2\n")
    assert versions(tree) == before


def test_editing_the_sandbox_launcher_or_a_template_changes_the_keys_of_the_stages_that_use_them(
    tree: Path,
) -> None:
    index = CodeIndex.at(tree)
    launcher = tree / "rla_core" / "sandbox" / "_launcher.py"
    template = tree / "rla_core" / "envs" / "templates" / "judge.txt"
    for name in ("rollout", "execute"):
        assert launcher in index.closure(f"tasks.{name}")
    for name in ("rollout", "judge", "adapt", "bootstrap"):
        assert template in index.closure(f"tasks.{name}")
    before = versions(tree)
    launcher.write_text(launcher.read_text() + "\n# edited\n")
    after_launcher = versions(tree)
    assert after_launcher["execute"] != before["execute"] and after_launcher["rollout"] != before["rollout"]
    template.write_text(template.read_text() + "Be strict.\n")
    after_template = versions(tree)
    assert after_template["judge"] != after_launcher["judge"]
    assert after_template["rollout"] != after_launcher["rollout"]


def test_resource_declarations_must_be_literal_and_point_at_files(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path)
    edit(
        tree / "rla_core" / "sandbox" / "runner.py",
        'CODE_RESOURCES = ("_launcher.py",)',
        'CODE_RESOURCES = ("_gone.py",)',
    )
    with pytest.raises(CodeClosureError, match=r"'_gone\.py' matches no file"):
        CodeIndex.at(tree).version("tasks.execute")
    edit(
        tree / "rla_core" / "sandbox" / "runner.py",
        'CODE_RESOURCES = ("_gone.py",)',
        "CODE_RESOURCES = (str(1),)",
    )
    with pytest.raises(CodeClosureError, match="tuple of literal strings"):
        CodeIndex.at(tree).version("tasks.execute")
    with pytest.raises(CodeClosureError, match="not a module of the project"):
        CodeIndex.at(tree).version("tasks.no_such_stage")


def test_stage_seed_is_a_pure_function_of_seed_iteration_and_stage() -> None:
    # sha256("10086:1:rollout") read as hex, first 8 digits: a fixed value, not just a stable one.
    import hashlib

    assert stage_seed(10086, 1, "rollout") == int(hashlib.sha256(b"10086:1:rollout").hexdigest()[:8], 16)
    assert len({stage_seed(10086, 1, "rollout"), stage_seed(10086, 2, "rollout"), stage_seed(10086, 1, "judge"),
                stage_seed(1, 1, "rollout")}) == 4  # fmt: skip


def test_prefect_cache_key_carries_the_resolved_artifact_root_and_the_run_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rla_core.config import load_config
    from tasks.stage import RunContext, prefect_cache_key

    monkeypatch.chdir(tmp_path)

    def key(root: str, run_id: str, content_key: str = "k") -> str:
        cfg = load_config(overrides=[f"artifact_root={root}"])
        return prefect_cache_key(RunContext(run_id=run_id, config=cfg), content_key)

    (tmp_path / "a").mkdir()
    assert key("a", "one") == key(str(tmp_path / "a"), "one") == key("./a/../a", "one")  # one resolved root
    distinct = {key("a", "one"), key("b", "one"), key("a", "two"), key("a", "one", "k2")}
    assert len(distinct) == 4
