"""The ``rla`` command line (docs/operations.md): run, resume, status, inspect, eval, export, study, report;
``rla config show|check``; ``rla osworld fetch`` (docs/osworld.md).

Errors print one line and exit non-zero; set ``RLA_DEBUG=1`` for the traceback. Heavy imports
(Prefect, torch, MLflow) happen inside the commands, so ``rla --help`` and ``rla status`` stay fast.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import yaml
from rich.console import Console
from rich.table import Table

from flows import signals
from flows.arms import ARMS
from flows.process_env import apply_process_defaults
from rla_core.config import ProblemFormat, RunConfig, load_config, resolve_config
from rla_core.errors import PREFLIGHT_EXIT_CODE, PreflightError, RlaError

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=False,
    help="RLAnything: train an agent's policy, its step-wise reward model and its task set together.",
)
console = Console(stderr=True)
# A terminal gets its own width; a pipe or a scheduler's log has none, and rich's 80-column default would
# cut the status table's last columns: there a table is as wide as it needs (COLUMNS still wins).
out = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 240)


@app.callback()
def _process_defaults() -> None:
    # Runs before every command, before any of them imports Prefect (flows/process_env.py).
    apply_process_defaults()


T = TypeVar("T")

ROOT_OPTION = typer.Option("--root", help="Artifact root (local path or s3:// URI) that holds the runs.")
CONFIG_OPTION = typer.Option("--config", "-c", help="YAML config file.")
SET_OPTION = typer.Option("--set", help="Override a key: --set rollout.max_steps=12.")


def _fail(message: str, code: int = 1) -> None:
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _guard(fn: Callable[[], T]) -> T:
    """Run a command body; turn known errors into one line and a non-zero exit (signals: flows/signals.py)."""
    signals.install()
    try:
        return fn()
    except PreflightError as exc:  # one line per problem, every problem (docs/operations.md: exit codes)
        for line in exc.problems:
            console.print(f"[bold red]error:[/] {line}", highlight=False, soft_wrap=True)
        raise typer.Exit(PREFLIGHT_EXIT_CODE) from None
    except RlaError as exc:
        if os.environ.get("RLA_DEBUG"):
            raise
        _fail(str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__)
    except signals.Terminated:
        signals.bound_shutdown(143)
        _fail("terminated (SIGTERM); `rla resume RUN_ID` continues where it stopped", code=143)
    except KeyboardInterrupt:
        signals.bound_shutdown(130)
        _fail("interrupted; `rla resume RUN_ID` continues where it stopped", code=130)
    except (
        Exception
    ) as exc:  # kept broad: the last guard of the process, it turns a bug into one line and exit 1
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


def _run_store(root: str, run_id: str) -> Any:
    """The store under ``root``, once it is known to hold run ``run_id`` (else the error naming both)."""
    from flows.runs import require_run

    store = _store(root)
    require_run(store, run_id)
    return store


def _say(message: str) -> None:
    # One message, one line, whatever the terminal's width: schedulers' logs are grepped (artifacts=…).
    console.print(message, highlight=False, soft_wrap=True)


def _preflight(cfg: RunConfig, *, run: tuple[Any, str] | None = None, reconfigure: bool = False) -> None:
    """Check every input ``cfg`` names (and an existing ``run``'s task files) before anything is written."""
    from flows.preflight import require_ready

    def warn(line: str) -> None:
        console.print(f"[yellow]warning:[/] {line}", highlight=False, soft_wrap=True)

    require_ready(cfg, warn=warn, run=run, reconfigure=reconfigure)


@app.command()
def run(
    config: Annotated[Path | None, CONFIG_OPTION] = None,
    preset: Annotated[
        str | None, typer.Option(help="Base preset (default, coding, gui, paper-*, test).")
    ] = None,
    set_: Annotated[list[str] | None, SET_OPTION] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Run id (default: run-<UTC time>).")] = None,
    reconfigure: Annotated[bool, typer.Option(help="Allow a changed config for an existing run id.")] = False,
) -> None:
    """Start a run (with no options: the embedded default — tiny local models, TextWorld, 3 iterations)."""

    def body() -> None:
        from flows.runs import execute_run, new_run_id

        resolved = resolve_config(config, preset=preset, overrides=tuple(set_ or ()))
        cfg = resolved.config
        rid = run_id or new_run_id()
        store = _store(cfg.artifact_root)
        existing = rid in store.list_runs()
        _preflight(cfg, run=(store, rid) if existing else None, reconfigure=reconfigure)
        execute_run(cfg, rid, reconfigure=reconfigure, existing=existing, say=_say, origins=resolved.origins)

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
        from rla_core.errors import ConfigError

        store = _run_store(root, run_id)
        cfg = with_iterations(load_run_config(store, run_id), iterations)
        _preflight(cfg, run=(store, run_id))
        if (from_stage is None) != (iteration is None):
            raise ConfigError(
                "--from-stage and --iteration go together (e.g. --from-stage judge --iteration 2)"
            )
        if from_stage is None:
            from flows.status import pending_stages

            with store.lock(run_id):  # a run another process works on is its business: fail fast, naming it
                pending = pending_stages(store, cfg, run_id)
            if not pending:
                out.print(
                    f"nothing to do: every stage of the {cfg.iterations} iterations of run {run_id} is done "
                    f"(answered from the manifests under {store.run_location(run_id)}; `rla status {run_id}` "
                    "lists them, --iterations N extends the run)",
                    highlight=False,
                    soft_wrap=True,
                )
                return
        if from_stage is not None and iteration is not None:
            from flows.retention import require_kept_inputs
            from flows.runs import from_stage_targets

            # Before anything is marked: a forced stage that would read a pruned checkpoint is refused.
            targets = from_stage_targets(store, run_id, cfg=cfg, iteration=iteration, stage=from_stage)
            doing = f"rla resume {run_id} --from-stage {from_stage} --iteration {iteration}"
            require_kept_inputs(store, cfg, run_id, rerun=targets, doing=doing)
            with store.lock(run_id):
                marked = invalidate_from(store, run_id, cfg=cfg, iteration=iteration, stage=from_stage)
            console.print(
                f"forced to re-run: {', '.join(marked) or '(nothing was done yet)'}", highlight=False
            )
        execute_run(cfg, run_id, reconfigure=False, existing=True, say=_say)

    _guard(body)


@app.command()
def status(
    run_id: Annotated[str | None, typer.Argument(help="A run id; without it, list the runs.")] = None,
    root: Annotated[str, ROOT_OPTION] = "runs",
    full: Annotated[
        bool, typer.Option("--full", help="Also list every metric with its full name and value.")
    ] = False,
) -> None:
    """Runs; or one run's stages in pipeline order with headline metrics, the running stage and its progress."""

    def body() -> None:
        from flows.retention import bytes_table
        from flows.runs import require_run
        from flows.status import run_table, runs_table, where_looked

        store = _store(root)
        runs = store.list_runs()
        if run_id is None:
            out.print(runs_table(store, root) if runs else f"no runs under {where_looked(root)}; pass --root "
                      "<artifact_root of the run> (the run printed it as artifacts=… when it started)")  # fmt: skip
            return
        require_run(store, run_id, where=where_looked(root))
        header, table = run_table(store, run_id, full=full)
        out.print(header, highlight=False, soft_wrap=True)
        # Never cut a stage name or a number to fit a narrow (or unknown: a pipe) terminal.
        wide = Console(width=max(out.width, 130 if not full else 170), file=out.file)
        wide.print(table)
        wide.print(bytes_table(store, run_id))

    _guard(body)


@app.command()
def inspect(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    iteration: Annotated[int, typer.Option(help="Iteration number.")],
    artifact: Annotated[str, typer.Option(help="Artifact name (rollouts, judgments, policy_samples, …).")],
    columns: Annotated[str | None, typer.Option(help="Comma-separated columns to show, in order.")] = None,
    where: Annotated[
        list[str] | None, typer.Option(help="Row filter COLUMN OP VALUE (== != >= <= > < ~); repeatable.")
    ] = None,
    head: Annotated[int, typer.Option("--head", "--limit", help="Rows to print (0: all).")] = 20,
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="auto (table if it fits, else one block per row), table, records, csv, json."
        ),
    ] = "auto",
    width: Annotated[int, typer.Option(help="Characters shown per text cell (table/records).")] = 60,
    root: Annotated[str, ROOT_OPTION] = "runs",
) -> None:
    """Print an artifact of one iteration: pick columns and rows; CSV/JSON for piping."""

    def body() -> None:
        from flows.inspect_cmd import OutputFormat, apply_filters, render, select_columns
        from flows.runs import find_frame
        from rla_core.errors import ConfigError
        from rla_core.schemas import get_schema

        try:
            output = OutputFormat(fmt)
        except ValueError:
            raise ConfigError(
                f"--format {fmt}: choose one of {', '.join(f.value for f in OutputFormat)}"
            ) from None
        get_schema(artifact)
        store = _store(root)
        stage = find_frame(store, run_id, iteration, artifact)
        df = store.read_frame(run_id, iteration, stage, artifact)
        total = df.height
        df = select_columns(apply_filters(df, list(where or ())), columns)
        matched = df.height
        if head > 0:
            df = df.head(head)
        if output in (OutputFormat.CSV, OutputFormat.JSON):
            sys.stdout.write(render(df, output, width=width))
            return
        out.print(
            f"{artifact} of iteration {iteration} (stage {stage}): {total} rows, {matched} match, showing {df.height}",
            highlight=False,
        )
        out.print(render(df, output, width=width), highlight=False, markup=False, soft_wrap=True)

    _guard(body)


@app.command(name="eval")
def eval_(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    checkpoint: Annotated[
        int | None, typer.Option(help="Iteration whose policy to evaluate (default: latest).")
    ] = None,
    tasks_file: Annotated[Path | None, typer.Option("--tasks", help="JSONL of held-out task specs.")] = None,
    tasks_format: Annotated[
        ProblemFormat | None,
        typer.Option(
            "--format",
            help="Coding: layout of --tasks (rla, livebench, livecodebench, codecontests; "
            "docs/coding-benchmarks.md). Default: the run's coding.eval_format.",
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(help="Episode seed (default: the run's evaluation seed, the same at every iteration)."),
    ] = None,
    save: Annotated[
        bool, typer.Option("--save", help="Save the episodes under the run's evals/ area.")
    ] = False,
    root: Annotated[str, ROOT_OPTION] = "runs",
) -> None:
    """Evaluate a policy checkpoint of a run on held-out tasks, with a per-task breakdown."""

    def body() -> None:
        from flows.evals import coding_eval_line, evaluate_run, own_evaluation, save_eval

        store = _run_store(root, run_id)
        result = evaluate_run(
            store, run_id, checkpoint=checkpoint, tasks_file=tasks_file, seed=seed, tasks_format=tasks_format
        )
        how = "the run's evaluation seed" if result.stage_seed else "given with --seed"
        success = result.metrics.get("policy/eval_success_rate", float("nan"))
        out.print(
            f"policy of iteration {result.iteration}: {result.frame.height} episodes, success rate {success:.3f}, "
            f"seed {result.seed} ({how}); checkpoint of stage {result.stage}",
            highlight=False,
            soft_wrap=True,
        )
        coding = coding_eval_line(result.metrics)
        if coding:
            out.print(coding, highlight=False, soft_wrap=True)
        table = Table("task", "episodes", "success", "mean steps")
        for row in result.by_task.iter_rows(named=True):
            table.add_row(
                row["task_id"], str(row["episodes"]),
                "-" if row["success_rate"] is None else f"{row['success_rate']:.3f}",
                "-" if row["mean_steps"] is None else f"{row['mean_steps']:.2f}",
            )  # fmt: skip
        out.print(table)
        own = own_evaluation(store, run_id, result.iteration)
        if own is not None:
            same = result.stage_seed and tasks_file is None
            out.print(
                f"the run's own evaluation of iteration {result.iteration}: success rate {own:.3f}"
                + (" (same seed and tasks)" if same else " (other seed or tasks: expect a different number)"),
                highlight=False,
                soft_wrap=True,
            )
        if save:
            out.print(
                f"saved: {save_eval(store, run_id, result, tasks_file=tasks_file)}",
                highlight=False,
                soft_wrap=True,
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

        store = _run_store(root, run_id)
        from flows.model_card import Exported, model_card
        from rla_core.stage_inputs import Role

        doing = f"rla export {run_id}" + (f" --iteration {iteration}" if iteration is not None else "")
        # Both checkpoints are found (a pruned one refused) before either is copied.
        found = {role: latest_checkpoint_stage(store, run_id, role, iteration, doing=doing)
                 for role in (Role.POLICY, Role.REWARD)}  # fmt: skip
        exported = []
        for role, (it, stage) in found.items():
            target = to / role
            if target.exists() and any(target.iterdir()):
                from rla_core.errors import ArtifactError

                raise ArtifactError(f"'{target}' exists and is not empty; choose an empty --to directory")
            store.get_dir(run_id, it, stage, role, target)
            exported.append(Exported(role, it, stage, str(target.resolve())))
            out.print(f"{role}: iteration {it} ({stage}) → {target}", highlight=False)
        card = to / "README.md"
        card.write_text(model_card(store, run_id, exported), encoding="utf-8")
        out.print(f"model card (source, config hash, prompt format): {card}", highlight=False)

    _guard(body)


@app.command()
def study(
    study_id: Annotated[str, typer.Argument(help="Study id; its runs are <study>-<arm>-s<seed>.")],
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML base config.")] = None,
    preset: Annotated[str | None, typer.Option(help="Base preset of a new study (default: bench).")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a base-config key.")] = None,
    arms: Annotated[
        str | None,
        typer.Option(help=f"Comma-separated arms: {', '.join(ARMS)}."),
    ] = None,
    seeds: Annotated[str | None, typer.Option(help="A count (3) or a list (1,2,3) of seeds.")] = None,
    root: Annotated[str | None, typer.Option("--root", help="Artifact root (default: the config's).")] = None,
) -> None:
    """Run (or continue) an ablation study: arms × seeds, each an ordinary resumable run."""

    def body() -> None:
        from flows.study import open_study, parse_arms, parse_seeds, read_study, run_study, summary_markdown
        from rla_core.config import build_config, upgrade_stored_config

        overrides = [*(set_ or ()), *([f"artifact_root={root}"] if root else [])]
        given = config is not None or preset is not None or bool(set_)
        store = _store(
            root or load_config(config, preset=preset or "bench", overrides=overrides).artifact_root
        )
        base = None
        if given or read_study(store, study_id) is None:
            base = load_config(config, preset=preset or "bench", overrides=overrides)
        spec = open_study(
            store, study_id, base=base, arms=parse_arms(arms) if arms else None,
            seeds=parse_seeds(seeds) if seeds else None,
        )  # fmt: skip
        _preflight(build_config(upgrade_stored_config(spec.base)))  # its runs differ only by reward switches
        summary = run_study(store, spec, say=_say)
        out.print(summary_markdown(summary), highlight=False, soft_wrap=True)

    _guard(body)


@app.command()
def report(
    run_id: Annotated[str | None, typer.Argument(help="The run to report on.")] = None,
    study_id: Annotated[str | None, typer.Option("--study", help="Report on a study instead.")] = None,
    to: Annotated[
        Path | None, typer.Option("--out", help="HTML file (default: <root>/<id>/report.html).")
    ] = None,
    mlflow: Annotated[bool, typer.Option(help="Also log the HTML and figures to MLflow.")] = True,
    png_dir: Annotated[
        Path | None, typer.Option("--png-dir", help="Also save a PNG per figure (headless Chromium).")
    ] = None,
    root: Annotated[str, ROOT_OPTION] = "runs",
) -> None:
    """One self-contained HTML report of a run or a study (learning curves, RM accuracy, update health)."""

    def body() -> None:
        from flows.report import build_report, log_report, write_report
        from flows.runs import load_run_config
        from flows.study import require_study

        store = _store(root)
        owner, rep = build_report(store, run_id=run_id, study_id=study_id)
        where = write_report(store, owner, rep, to)
        for note in rep.missing:
            console.print(f"[yellow]missing:[/] {note}", highlight=False, soft_wrap=True)
        if mlflow:
            from rla_core.config import build_config, upgrade_stored_config

            cfg = (
                load_run_config(store, owner)
                if study_id is None
                else build_config(upgrade_stored_config(require_study(store, owner).base))
            )
            mlflow_id = log_report(
                cfg.tracking.mlflow_uri, cfg.tracking.experiment, owner, rep,
                kind="study" if study_id is not None else "run",
            )  # fmt: skip
            console.print(f"logged to MLflow run {mlflow_id} ({cfg.tracking.mlflow_uri})", highlight=False)
        if png_dir is not None:
            from flows.report import browse

            local = to or png_dir / "report.html"
            if to is None:
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_text(rep.html(), encoding="utf-8")
            browse(local, png_dir)
            console.print(f"figures as PNG: {png_dir}", highlight=False)
        out.print(f"report: {where}", highlight=False)

    _guard(body)


config_app = typer.Typer(
    help="Inspect a configuration without running it: `rla config show` prints what a run would use, "
    "`rla config check` whether everything it names is in place.",
    no_args_is_help=True,
)
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(
    config: Annotated[Path | None, CONFIG_OPTION] = None,
    preset: Annotated[str | None, typer.Option(help="Base preset (default: default).")] = None,
    set_: Annotated[list[str] | None, SET_OPTION] = None,
    diff: Annotated[
        bool,
        typer.Option(
            "--diff",
            help="Only the keys that differ from the embedded default, each with where it came from.",
        ),
    ] = False,
) -> None:
    """Print the effective configuration as YAML: exactly what `rla run` with the same options would use."""

    def body() -> None:
        from rla_core.config import resolve_config

        resolved = resolve_config(config, preset=preset, overrides=tuple(set_ or ()))
        if diff:
            lines = [
                f"{key}: {json.dumps(value)}  # {origin}" for key, value, origin in resolved.non_default()
            ]
            out.print("\n".join(lines) or "# same as the embedded default", highlight=False, soft_wrap=True)
        else:
            text = yaml.safe_dump(
                resolved.config.model_dump(mode="json"), sort_keys=False, allow_unicode=True
            )
            out.print(text.rstrip("\n"), highlight=False, soft_wrap=True, markup=False)
        for note in _plugin_notes(resolved.config):  # what the plug-in's declarations change, as comments
            out.print(f"# {note}", highlight=False, soft_wrap=True, markup=False)

    _guard(body)


def _plugin_notes(cfg: RunConfig) -> list[str]:
    """The warnings a plug-in's declarations give this configuration (adaptation off for a plug-in without
    a rewrite space); none for another setting or a plug-in that does not resolve (`rla config check` says why)."""
    from rla_core.preflight import Severity, plugin_declarations
    from rla_core.settings.plugin import PluginSetting
    from rla_core.stage_inputs import SeedTasksInputs

    section = SeedTasksInputs.from_config(cfg).plugin
    if section is None:  # another setting
        return []
    try:
        adapter = PluginSetting.of(section)
    except RlaError:
        return []
    return [p.line() for p in plugin_declarations(cfg, adapter) if p.severity is Severity.WARNING]


@config_app.command("check")
def config_check(
    config: Annotated[Path | None, CONFIG_OPTION] = None,
    preset: Annotated[
        str | None, typer.Option(help="Base preset (default: the file's, else default).")
    ] = None,
    set_: Annotated[list[str] | None, SET_OPTION] = None,
) -> None:
    """Run the preflight alone: exit 0 when every file, model, address and prerequisite the config names is in
    place, else 3 with one line per problem. Writes nothing (docs/configuration.md)."""

    def body() -> None:
        cfg = load_config(config, preset=preset, overrides=tuple(set_ or ()))
        _preflight(cfg)
        out.print(
            f"ok: setting={cfg.setting}: every task file, model, address and prerequisite the config names "
            "is in place",
            highlight=False,
            soft_wrap=True,
        )

    _guard(body)


osworld_app = typer.Typer(
    help="OSWorld's task files: `rla osworld fetch` downloads what a run's task lists need into "
    "gui.osworld.cache_dir (docs/osworld.md).",
    no_args_is_help=True,
)
app.add_typer(osworld_app, name="osworld")


@osworld_app.command("fetch")
def osworld_fetch(
    tasks: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Task lists (meta list .json or JSONL); default: the config's gui.tasks and gui.eval_tasks."
        ),
    ] = None,
    config: Annotated[Path | None, CONFIG_OPTION] = None,
    preset: Annotated[
        str | None, typer.Option(help="Base preset (default: the file's, else default).")
    ] = None,
    set_: Annotated[list[str] | None, SET_OPTION] = None,
    mirror: Annotated[
        list[str] | None,
        typer.Option(
            "--mirror",
            help="PREFIX=TARGET: fetch URLs under PREFIX from TARGET (a base URL or a "
            "local directory) + the rest of the URL; on top of gui.osworld.mirrors.",
        ),
    ] = None,
    runnable_only: Annotated[
        bool, typer.Option("--runnable-only", help="Only tasks that need nothing but their files.")
    ] = False,
    list_urls: Annotated[
        bool,
        typer.Option("--list-urls", help="Print each URL, its source and cache names; download nothing."),
    ] = False,
    jobs: Annotated[int, typer.Option(min=1, help="Downloads at once.")] = 4,
    retries: Annotated[int, typer.Option(min=0, help="Further attempts per file.")] = 4,
    timeout: Annotated[float, typer.Option(min=0.01, help="Seconds to connect, and without data.")] = 60.0,
) -> None:
    """Download every file the task lists' set-ups and evaluators fetch (Google Drive included) into the
    OSWorld cache, with retries, resume and mirrors; exit 1 when a file is still missing (each with why)."""

    def body() -> int:
        from rla_core.config import GuiEngine
        from rla_core.envs.osworld.cache import run_fetch
        from rla_core.envs.osworld.fetch import FetchOptions, Mirrors
        from rla_core.errors import ConfigError
        from rla_core.settings.base import resolve_data_path

        cfg = load_config(config, preset=preset, overrides=tuple(set_ or ()))
        if not tasks and cfg.gui.engine is not GuiEngine.OSWORLD:
            raise ConfigError(
                "rla osworld fetch: name the task lists, or give a config with gui.engine: osworld "
                "(e.g. --preset osworld)"
            )
        files = list(tasks or [resolve_data_path(cfg.gui.tasks), resolve_data_path(cfg.gui.eval_tasks)])
        section = cfg.gui.osworld
        return run_fetch(
            files,
            Path(section.cache_dir),
            mirrors=Mirrors.from_args(mirror or [], base=section.mirrors),
            options=FetchOptions(jobs=jobs, retries=retries, timeout_s=timeout),
            runnable_only=runnable_only,
            list_urls=list_urls,
            say=lambda line: out.print(line, highlight=False, soft_wrap=True, markup=False),
        )

    code = _guard(body)
    if code:
        raise typer.Exit(code)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
