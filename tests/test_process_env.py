"""Importing the project changes no environment variable; entry points apply the defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from flows.process_env import PROCESS_DEFAULTS, apply_process_defaults

REPO = Path(__file__).resolve().parents[1]


def test_importing_the_project_leaves_the_environment_alone() -> None:
    # Third-party libraries may set variables on import (polars sets _RJEM_MALLOC_CONF): import them
    # first, then every project module, and compare.
    code = """
import importlib, json, os, sys
import polars, prefect, pydantic  # noqa: F401
from tasks.code_closure import CodeIndex
before = dict(os.environ)
modules = [m for m in CodeIndex.default().modules() if m != "flows.cli" and not m.endswith("__main__")]
for name in modules:
    importlib.import_module(name)
after = dict(os.environ)
print(json.dumps({"modules": len(modules), "changed": sorted(k for k in before.keys() | after.keys()
                  if before.get(k) != after.get(k))}))
"""
    env = {k: v for k, v in os.environ.items() if k not in PROCESS_DEFAULTS}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["modules"] > 90
    assert result["changed"] == []


def test_process_defaults_fill_only_what_is_unset() -> None:
    environ = {"PREFECT_SERVER_ANALYTICS_ENABLED": "true"}
    apply_process_defaults(environ)
    assert environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "true"  # the operator's value wins
    assert environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] == "180"
    assert set(environ) == set(PROCESS_DEFAULTS)
