"""The preflight of `rla run`, `rla resume`, `rla study`, `rla config check` and the scheduled deployment.

:func:`rla_core.preflight.preflight` checks what a config names. For a run that exists, :func:`changed_task_files`
adds the task files whose contents changed since the run's stages hashed them (their manifests record the
path and sha256 they were keyed on: ``tasks.stage.READ_FILE_KEY``). :func:`require_ready` prints the
warnings and raises :class:`~rla_core.errors.PreflightError` with one line per error; it is called before
anything of the run is written (run directory, lock, MLflow run, Prefect flow run).

A changed **training** task file is an error: the seed tasks and the warm start are keyed on its bytes and
every later stage on their outputs, so a resume would silently redo the whole run, on other tasks, under the
same run id. A changed **held-out** file is a warning: only the evaluate stages are keyed on it, so a resume
re-runs every evaluation on the new file (new attempts) and the run's evaluation points stay comparable.
"""

from __future__ import annotations

from collections.abc import Callable

from rla_core.config import RunConfig
from rla_core.errors import PreflightError
from rla_core.preflight import Problem, Severity, preflight
from rla_core.settings import task_files
from rla_core.stage_inputs import StageName
from rla_core.store import ArtifactStore

# Stages that measure (held-out episodes, the judge's yardstick): a file they read may change between
# evaluations with a warning, since nothing that trains depends on it.
EVALUATION_STAGES = frozenset({StageName.EVALUATE, StageName.JUDGE_EVAL})


def changed_task_files(store: ArtifactStore, cfg: RunConfig, run_id: str, *, accept: bool) -> list[Problem]:
    """One problem per task file of ``cfg`` whose bytes differ from those the run's committed stages hashed.

    ``accept`` (``rla run --reconfigure``) turns a changed training file into a warning.
    """
    from tasks.stage import READ_FILE_KEY, all_stages

    stages = {str(name): stage for name, stage in all_stages().items()}
    changed: dict[str, list[tuple[int, str, str, str]]] = {}  # path → (iteration, stage, then, now)
    for (iteration, name), manifest in store.committed(run_id).items():
        recorded = manifest.extra.get(READ_FILE_KEY)
        stage = stages.get(name)
        if not isinstance(recorded, dict) or stage is None or stage.reads_file is None:
            continue  # a stage that reads no file, or a manifest written before files were recorded
        sliced = stage.slice(cfg)
        now = stage.file_digest(sliced) or ""
        if now.startswith("missing:") or now == recorded.get("sha256"):
            continue  # a missing file is the preflight's own problem
        changed.setdefault(str(stage.reads_file(sliced)), []).append(
            (iteration, name, str(recorded.get("sha256")), now)
        )
    files = task_files(cfg)  # a changed file implies the setting has task files
    train_key, eval_key = files.keys() if files is not None else (str(cfg.setting), str(cfg.setting))
    problems = []
    for path, hits in changed.items():
        then, now = hits[0][2][:12], hits[0][3][:12]
        trains = [f"{name} (iteration {it})" for it, name, _, _ in hits if name not in EVALUATION_STAGES]
        if trains:
            problems.append(
                Problem(
                    train_key,
                    f"'{path}' changed since {', '.join(trains)} hashed it (sha256 {then}… now {now}…): the "
                    "seed tasks and the warm start are keyed on its contents and every later stage on theirs, so "
                    "resuming would redo the whole run on other tasks under the same run id; restore the file "
                    f"or start a new run (another --run-id); `rla run --run-id {run_id} --reconfigure` with "
                    "the run's config accepts the change",
                    Severity.WARNING if accept else Severity.ERROR,
                )
            )
            continue
        its = ", ".join(str(it) for it, _, _, _ in hits)
        measured_by = hits[0][1]
        problems.append(
            Problem(
                "evaluation.judge_steps" if measured_by == StageName.JUDGE_EVAL else eval_key,
                f"'{path}' changed since the {measured_by} stages of iterations {its} hashed it (sha256 {then}… "
                f"now {now}…): they re-run on the new contents (new attempts), so every evaluation point of "
                "the run uses the same held-out set; the training stages are kept",
                Severity.WARNING,
            )
        )
    return problems


def require_ready(
    cfg: RunConfig,
    *,
    warn: Callable[[str], None],
    run: tuple[ArtifactStore, str] | None = None,
    reconfigure: bool = False,
) -> None:
    """The preflight of ``cfg`` (and of the existing ``run``: its changed task files); warnings go to
    ``warn``, errors raise :class:`PreflightError` with one line each. Writes nothing."""
    problems = preflight(cfg)
    if run is not None:
        store, run_id = run
        problems += changed_task_files(store, cfg, run_id, accept=reconfigure)
    for problem in problems:
        if problem.severity is Severity.WARNING:
            warn(problem.line())
    errors = [p.line() for p in problems if p.severity is Severity.ERROR]
    if errors:
        raise PreflightError(errors)
