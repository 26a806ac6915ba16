"""The ``rla`` command line (design §6): run, resume, status, inspect, eval, export.

Errors print one line and exit non-zero; set ``RLA_DEBUG=1`` for the traceback. Heavy imports
(Prefect, torch, MLflow) happen inside the commands, so ``rla --help`` and ``rla status`` stay fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from rla_core.config import load_config
from rla_core.errors import RlaError

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=False,
    help="RLAnything: train an agent's policy, its step-wise reward model and its task set together.",
)
console = Console(stderr=True)
out = Console()

T = TypeVar("T")

ROOT_OPTION = typer.Option("--root", help="Artifact root (local path or s3:// URI) that holds the runs.")


def _fail(message: str, code: int = 1) -> None:
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _guard(fn: Callable[[], T]) -> T:
    """Run a command body; turn known errors into one line and a non-zero exit."""
    try:
        return fn()
    except RlaError as exc:
        if os.environ.get("RLA_DEBUG"):
            raise
        _fail(str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__)
    except KeyboardInterrupt:
        _fail("interrupted; `rla resume RUN_ID` continues where it stopped", code=130)
    except Exception as exc:
        if os.environ.get("RLA_DEBUG"):
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        _fail(
            f"{exc.__class__.__name__}: {first} (unexpected; the stage logs above have the details, RLA_DEBUG=1 "
            "shows the traceback, and `rla resume RUN_ID` continues after a fix)"
        )
    raise AssertionError("unreachable")


def _store(root: str) -> Any:
    from rla_core.store import ArtifactStore

    return ArtifactStore(root)


def _say(message: str) -> None:
    console.print(message, highlight=False)


@app.command()
def run(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML config file.")] = None,
    preset: Annotated[
        str | None, typer.Option(help="Base preset (default, coding, gui, paper-*, test).")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a key: --set rollout.max_steps=12.")
    ] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Run id (default: run-<UTC time>).")] = None,
    reconfigure: Annotated[bool, typer.Option(help="Allow a changed config for an existing run id.")] = False,
) -> None:
    """Start a run (with no options: the embedded default — tiny local models, TextWorld, 3 iterations)."""

    def body() -> None:
        from flows.runs import execute_run, new_run_id

        cfg = load_config(config, preset=preset, overrides=tuple(set_ or ()))
        rid = run_id or new_run_id()
        existing = rid in _store(cfg.artifact_root).list_runs()
        execute_run(cfg, rid, reconfigure=reconfigure, existing=existing, say=_say)

    _guard(body)


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The run to continue.")],
    iterations: Annotated[int | None, typer.Option(help="Continue to this many iterations in total.")] = None,
    from_stage: Annotated[
        str | None, typer.Option("--from-stage", help="Force this stage and its downstream to re-run.")
    ] = None,
    iteration: Annotated[int | None, typer.Option(help="Iteration of --from-stage.")] = None,
    root: Annotated[str, ROOT_OPTION] = "runs",
) -> None:
    """Continue a run, re-running only what is missing (or forced with --from-stage)."""

    def body() -> None:
        from flows.runs import execute_run, invalidate_from, load_run_config, with_iterations
        from rla_core.errors import ConfigError, RunNotFoundError

        store = _store(root)
        if run_id not in store.list_runs():
            raise RunNotFoundError(
                f"no run '{run_id}' under '{root}'; `rla status --root {root}` lists the runs"
            )
        cfg = with_iterations(load_run_config(store, run_id), iterations)
        if (from_stage is None) != (iteration is None):
            raise ConfigError(
                "--from-stage and --iteration go together (e.g. --from-stage judge --iteration 2)"
            )
        if from_stage is not None and iteration is not None:
            with store.lock(run_id):
                marked = invalidate_from(
                    store, run_id, setting=cfg.setting, iteration=iteration, stage=from_stage
                )
            console.print(
                f"forced to re-run: {', '.join(marked) or '(nothing was done yet)'}", highlight=False
            )
        execute_run(cfg, run_id, reconfigure=False, existing=True, say=_say)

    _guard(body)


@app.command()
def status(
    run_id: Annotated[str | None, typer.Argument(help="A run id; without it, list the runs.")] = None,
    root: Annotated[str, ROOT_OPTION] = "runs",
) -> None:
    """Runs, iterations, stage states, durations, and where artifacts and metrics are."""

    def body() -> None:
        from flows.runs import load_run_config, run_status
        from rla_core.errors import RunNotFoundError

        store = _store(root)
        runs = store.list_runs()
        if run_id is None:
            table = Table("run", "setting", "iterations", "stages done", "config hash")
            for rid in runs:
                cfg = load_run_config(store, rid)
                done = sum(s.state == "done" for s in run_status(store, rid))
                table.add_row(rid, str(cfg.setting), str(cfg.iterations), str(done), cfg.config_hash()[:12])
            out.print(table if runs else f"no runs under '{root}'")
            return
        if run_id not in runs:
            raise RunNotFoundError(
                f"no run '{run_id}' under '{root}'; `rla status --root {root}` lists the runs"
            )
        cfg = load_run_config(store, run_id)
        out.print(
            f"run {run_id}: {store.run_location(run_id)}  mlflow: {cfg.tracking.mlflow_uri}", highlight=False
        )
        table = Table("iter", "stage", "state", "attempt", "seconds", "key metrics")
        for s in run_status(store, run_id):
            shown = ", ".join(
                f"{k}={v:.3g}" for k, v in sorted(s.metrics.items()) if not k.startswith("timing_s/")
            )[:90]
            table.add_row(
                str(s.iteration), s.stage, s.state, str(s.attempt or "-"),
                f"{s.seconds:.1f}" if s.seconds is not None else "-", shown,
            )  # fmt: skip
        out.print(table)

    _guard(body)


@app.command()
def inspect(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    iteration: Annotated[int, typer.Option(help="Iteration number.")],
    artifact: Annotated[str, typer.Option(help="Artifact name (rollouts, judgments, policy_samples, …).")],
    limit: Annotated[int, typer.Option(help="Rows to print.")] = 20,
    root: Annotated[str, ROOT_OPTION] = "runs",
) -> None:
    """Print an artifact of one iteration as a table."""

    def body() -> None:
        import polars as pl

        from flows.runs import find_frame
        from rla_core.schemas import get_schema

        get_schema(artifact)
        store = _store(root)
        stage = find_frame(store, run_id, iteration, artifact)
        df = store.read_frame(run_id, iteration, stage, artifact)
        out.print(f"{artifact} of iteration {iteration} (stage {stage}): {df.height} rows", highlight=False)
        with pl.Config(tbl_rows=limit, tbl_cols=-1, fmt_str_lengths=48, tbl_width_chars=200):
            out.print(str(df.head(limit)), highlight=False)

    _guard(body)


@app.command(name="eval")
def eval_(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    checkpoint: Annotated[
        int | None, typer.Option(help="Iteration whose policy to evaluate (default: latest).")
    ] = None,
    tasks_file: Annotated[Path | None, typer.Option("--tasks", help="JSONL of held-out task specs.")] = None,
    root: Annotated[str, ROOT_OPTION] = "runs",
) -> None:
    """Evaluate a policy checkpoint of a run on held-out tasks."""

    def body() -> None:
        from flows.runs import latest_checkpoint_stage, load_run_config
        from tasks.evaluate import evaluate_checkpoint

        store = _store(root)
        cfg = load_run_config(store, run_id)
        it, stage = latest_checkpoint_stage(store, run_id, "policy", checkpoint)
        local = Path(cfg.models.cache_dir).parent / "export" / run_id / f"iter-{it}"
        policy_dir = store.get_dir(run_id, it, stage, "policy", local / "policy")
        df = evaluate_checkpoint(cfg, policy_dir, tasks_file=tasks_file, iteration=it)
        success = float((df["outcome"] > 0).mean() or 0.0) if df.height else float("nan")
        out.print(
            f"policy of iteration {it}: {df.height} episodes, success rate {success:.3f}", highlight=False
        )

    _guard(body)


@app.command()
def export(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    to: Annotated[Path, typer.Option("--to", help="Directory to write policy/ and reward/ into.")],
    iteration: Annotated[
        int | None, typer.Option(help="Export checkpoints of this iteration (default: latest).")
    ] = None,
    root: Annotated[str, ROOT_OPTION] = "runs",
) -> None:
    """Copy the latest (or a chosen iteration's) policy and reward-model checkpoints to a directory."""

    def body() -> None:
        from flows.runs import latest_checkpoint_stage

        store = _store(root)
        if run_id not in store.list_runs():
            from rla_core.errors import RunNotFoundError

            raise RunNotFoundError(f"no run '{run_id}' under '{root}'")
        for role in ("policy", "reward"):
            it, stage = latest_checkpoint_stage(store, run_id, role, iteration)
            target = to / role
            if target.exists() and any(target.iterdir()):
                from rla_core.errors import ArtifactError

                raise ArtifactError(f"'{target}' exists and is not empty; choose an empty --to directory")
            store.get_dir(run_id, it, stage, role, target)
            out.print(f"{role}: iteration {it} ({stage}) → {target}", highlight=False)

    _guard(body)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
