"""The environment seam keeps its rules in one place: the counts of benchmarks/seam_counts.py, held."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_each_rule_of_the_seam_is_written_once() -> None:
    spec = importlib.util.spec_from_file_location("seam_counts", ROOT / "benchmarks" / "seam_counts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    counts = module.counts(ROOT)
    rules = counts["rewrite_rule_functions"]["where"]
    assert rules["generic"] == ["rla_core/algo/adaptation.py::variant_problem"]
    # What stays an engine's own: ALFWorld's goal identity by its tokens, MiniWoB++'s task families.
    assert rules["engine"] == [
        "rla_core/envs/alfworld/rewriter.py::check_two_token",
        "rla_core/envs/miniwob/rewriter.py::check_gui_candidate",
    ]
    assert counts["success_rules_outside_algo"]["count"] == 0
    assert [w.split(":")[0] for w in counts["play_rollouts_calls"]["where"]] == ["rla_core/dispatch.py"]
    assert counts["preflight_setting_branches"]["count"] == 0
    assert counts["warm_start_setting_branches"]["count"] == 0
    assert counts["inheritance_bases"]["classes"] == ["rla_core/plugins.py::EnvironmentPlugin"]
