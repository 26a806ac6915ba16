"""Stage content keys: code version covers shipped templates; seeds are pure functions of their inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.stage import code_version, derive_seed


def test_code_version_changes_with_a_template_file_and_ignores_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "pkg_for_key_test"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "judge.txt").write_text("Judge ONE step.\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code_version.cache_clear()
    before = code_version("tasks.judge", ("pkg_for_key_test",))
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "junk.py").write_text("# compiled leftovers do not count\n")
    code_version.cache_clear()
    assert code_version("tasks.judge", ("pkg_for_key_test",)) == before
    (pkg / "judge.txt").write_text("Judge ONE step, strictly.\n")
    code_version.cache_clear()
    assert code_version("tasks.judge", ("pkg_for_key_test",)) != before
    code_version.cache_clear()


def test_derive_seed_is_a_pure_function_of_seed_iteration_and_stage() -> None:
    assert derive_seed(10086, 1, "rollout") == derive_seed(10086, 1, "rollout")
    assert len({derive_seed(10086, 1, "rollout"), derive_seed(10086, 2, "rollout"), derive_seed(10086, 1, "judge"),
                derive_seed(1, 1, "rollout")}) == 4  # fmt: skip
