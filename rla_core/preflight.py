"""The preflight: everything a config names is checked before a run writes anything.

:func:`preflight` returns one :class:`Problem` per thing a run would fail on later — minutes in, after its
run directory, lock, MLflow run and Prefect flow run exist — and, as warnings, what it would only report:

* **task files** (training and held-out, per setting: ``textgame.tasks``/``eval_tasks``, ``coding.problems``/
  ``eval_problems``, ``gui.tasks``/``eval_tasks``) exist and parse, read by the very loaders the seed and
  evaluate stages use (:mod:`rla_core.settings`, :func:`rla_core.envs.osworld.tasks.load_tasks`), whose
  errors name the file and the first bad line (OSWorld meta lists: the example that is missing or bad).
  OSWorld tasks that are merely *unavailable* here (files not cached, root, network) are warnings: the
  stages leave them out and log why, as without a preflight;
* **models** (``models.policy``, ``reward``, ``environment``) are known without building or downloading
  anything (:func:`rla_core.models.bootstrap.check_model_ref`);
* **the vLLM interpreter** exists when ``models.serving.backend`` is ``vllm`` (``auto`` uses it only when
  present, so its absence is no problem there), and the temporary directory (``TMPDIR``) is short enough
  for vLLM's IPC socket paths;
* **the Ray cluster** at ``cluster.address`` (with ``cluster.backend=ray``) accepts a connection within
  ``cluster.connect_timeout_s``;
* **GUI prerequisites**: Chromium and chromedriver for MiniWoB++; the desktop programs, the sandbox user
  and ``desktop_env`` for OSWorld.

Every check runs, so one call lists every problem. Nothing here writes a file, starts a process or opens
a model. The stages keep their own checks: a file can change between the preflight and its use.

Example:
    >>> from rla_core.config import load_config
    >>> [p.line() for p in preflight(load_config(overrides=["textgame.tasks=nope.jsonl"]))]
    ["textgame.tasks: 'nope.jsonl' does not exist (relative paths: the working directory, then the project)"]
"""

from __future__ import annotations

import functools
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rla_core.config import Backend, ClusterBackend, GuiEngine, RunConfig, Setting
from rla_core.errors import RlaError


class Severity(StrEnum):
    """An error stops the run before it starts; a warning is printed and the run goes on."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the inputs of a run: the config key it is about and one line saying what and how to fix."""

    key: str
    message: str
    severity: Severity = Severity.ERROR

    def line(self) -> str:
        """The problem as one line: ``<key>: <message>`` (the message alone when it starts with the key)."""
        return self.message if self.message.startswith(self.key) else f"{self.key}: {self.message}"


def task_file_keys(setting: Setting) -> tuple[str, str]:
    """(training, held-out) task-file keys of a setting, e.g. ``("coding.problems", "coding.eval_problems")``."""
    if setting is Setting.CODING:
        return "coding.problems", "coding.eval_problems"
    return f"{setting.value}.tasks", f"{setting.value}.eval_tasks"


def config_value(cfg: RunConfig, dotted: str) -> Any:
    """The value of dotted key ``dotted`` in ``cfg``."""
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def preflight(cfg: RunConfig) -> list[Problem]:
    """Every problem of ``cfg``'s inputs, errors and warnings, in config order; empty when all is well."""
    problems: list[Problem] = []
    for check in (_task_files, _judge_steps, _models, _vllm, _cluster, _gui_prerequisites):
        problems += check(cfg)
    return problems


# ---- task files ------------------------------------------------------------------------------------


def _task_files(cfg: RunConfig) -> list[Problem]:
    problems: list[Problem] = []
    if cfg.setting is Setting.PLUGIN:
        return _plugin_tasks(cfg)
    for key, held_out in zip(task_file_keys(cfg.setting), (False, True), strict=True):
        path = str(config_value(cfg, key))
        problems += _task_file(cfg, key, path, held_out=held_out)
    return problems


def _task_file(cfg: RunConfig, key: str, path: str, *, held_out: bool) -> list[Problem]:
    from rla_core.settings.base import resolve_data_path

    resolved = resolve_data_path(path)
    if not resolved.exists():
        where = (
            "" if Path(path).is_absolute() else " (relative paths: the working directory, then the project)"
        )
        return [Problem(key, f"'{path}' does not exist{where}")]
    if not resolved.is_file():
        return [Problem(key, f"'{path}' is a directory; name the task file in it")]
    try:
        if cfg.setting is Setting.GUI and cfg.gui.engine is GuiEngine.OSWORLD:
            return _osworld_tasks(cfg, key, resolved)
        count = len(_load_tasks(cfg, path, held_out=held_out))
    except RlaError as exc:
        return [Problem(key, _first_line(exc))]
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        return [Problem(key, f"'{path}' line {line} is not UTF-8 text (a binary file?): {exc.reason}")]
    except ImportError as exc:
        return [Problem(key, f"cannot read '{path}': {exc} (install the setting's extra, docs/settings.md)")]
    except OSError as exc:
        return [Problem(key, f"cannot read '{path}': {exc.strerror or exc}")]
    if count == 0:
        return [Problem(key, f"'{path}' lists no tasks")]
    return []


def _plugin_tasks(cfg: RunConfig) -> list[Problem]:
    """A plug-in's tasks come from its code: both splits load and are well-formed (ids, specs)."""
    for held_out in (False, True):
        try:
            if not _load_tasks(cfg, None, held_out=held_out):
                return [Problem("plugin.name", f"plug-in {cfg.plugin.name!r} lists no tasks")]
        except RlaError as exc:
            return [Problem("plugin.name", _first_line(exc))]
    return []


def _load_tasks(cfg: RunConfig, path: str | None, *, held_out: bool) -> list[Any]:
    """The tasks of a file as the seed (training) or evaluate (held-out) stage reads them."""
    from rla_core.settings import adapter_of
    from rla_core.stage_inputs import EvaluateInputs, SeedTasksInputs

    if held_out:
        evaluate = EvaluateInputs.from_config(cfg)
        return adapter_of(evaluate).eval_tasks(evaluate, path)
    seed = SeedTasksInputs.from_config(cfg)
    return adapter_of(seed).seed_tasks(seed)


def _osworld_tasks(cfg: RunConfig, key: str, path: Path) -> list[Problem]:
    """OSWorld: the task list must load (every listed example present and valid); unavailable tasks warn."""
    from rla_core.envs.osworld.tasks import load_tasks, task_key, unavailable

    tasks = load_tasks(path)
    cache = Path(cfg.gui.osworld.cache_dir)
    blocked = [(task_key(t), reasons) for t in tasks if (reasons := unavailable(t, cache))]
    if not blocked:
        return []
    first_id, reasons = blocked[0]
    return [
        Problem(
            key,
            f"{len(blocked)} of the {len(tasks)} OSWorld tasks of '{path}' cannot run here and will be left "
            f"out (first: {first_id}: {reasons[0]}); fill the file cache with `python -m "
            "rla_core.envs.osworld.cache fill` (docs/osworld.md)",
            Severity.WARNING,
        )
    ]


def _judge_steps(cfg: RunConfig) -> list[Problem]:
    """The judge's yardstick (``evaluation.judge_steps``), when set, reads as the judge_eval stage reads it."""
    if cfg.evaluation.judge_steps is None:
        return []
    from rla_core.envs.judge import read_steps_file
    from rla_core.settings.base import resolve_data_path

    path = resolve_data_path(cfg.evaluation.judge_steps)
    return _catch("evaluation.judge_steps", lambda: read_steps_file(path, where="evaluation.judge_steps"))


# ---- models, serving, cluster --------------------------------------------------------------------


def _models(cfg: RunConfig) -> list[Problem]:
    from rla_core.models.bootstrap import check_model_ref

    problems = []
    for role in ("policy", "reward", "environment"):
        ref = getattr(cfg.models, role)
        if ref is None:
            continue
        problems += _catch(f"models.{role}", functools.partial(check_model_ref, ref))
    return problems


def _vllm(cfg: RunConfig) -> list[Problem]:
    if cfg.models.serving.backend is not Backend.VLLM:
        return []  # 'auto' uses vLLM only when its interpreter exists
    from rla_core.models.serving import check_ipc_room, resolve_interpreter

    return _catch(
        "models.serving.interpreter", lambda: resolve_interpreter(cfg.models.serving.interpreter)
    ) + _catch("models.serving.backend", check_ipc_room)


def _cluster(cfg: RunConfig) -> list[Problem]:
    cluster = cfg.cluster
    if cluster.backend is not ClusterBackend.RAY or cluster.address is None:
        return []  # local stages, or an embedded Ray this process starts
    shown = f"cluster.address={cluster.address!r}"
    fix = "start it (`ray start --head`), fix the address, or set cluster.address=null for an embedded Ray"
    try:
        host, port = _ray_endpoint(cluster.address)
    except ValueError as exc:
        return [Problem("cluster.address", f"{shown}: {exc}; {fix}")]
    try:
        with socket.create_connection((host, port), timeout=cluster.connect_timeout_s):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else f"{exc.__class__.__name__}: {exc}"
        return [
            Problem(
                "cluster.address",
                f"{shown}: the Ray cluster at {host}:{port} did not answer within cluster.connect_timeout_s="
                f"{cluster.connect_timeout_s:g} s ({reason}); {fix}",
            )
        ]
    return []


def _ray_endpoint(address: str) -> tuple[str, int]:
    """(host, port) that ``ray.init(address=...)`` connects to first: the Ray client server of a
    ``ray://`` address, the GCS of ``host:port``, the latest local cluster for ``auto`` (as Ray finds it)."""
    if address == "auto":
        from ray._private.services import canonicalize_bootstrap_address

        try:
            found = canonicalize_bootstrap_address("auto")
        except ConnectionError as exc:
            raise ValueError(f"no running Ray cluster found ({exc})") from None
        if found is None:
            raise ValueError("no running Ray cluster found")
        address = found
    parts = urlsplit(address if "://" in address else f"gcs://{address}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ValueError("is not 'auto', 'host:port' or 'ray://host:port'")
    return parts.hostname, port


# ---- GUI prerequisites ---------------------------------------------------------------------------


def _gui_prerequisites(cfg: RunConfig) -> list[Problem]:
    if cfg.setting is not Setting.GUI:
        return []
    if cfg.gui.engine is GuiEngine.MINIWOB:
        from rla_core.envs.browser import find_browser

        return _catch("gui.engine", find_browser, prefix="miniwob: ")
    from rla_core.envs.desktop.desktop import NEEDED, _host_ids

    problems = []
    missing = [name for name in NEEDED if shutil.which(name) is None]
    if missing:
        problems.append(
            Problem(
                "gui.engine",
                f"osworld: the local desktops need {', '.join(missing)}, not found on PATH; install the Debian "
                "packages scripts/setup.sh lists (docs/osworld.md)",
            )
        )
    return problems + _catch("gui.engine", _host_ids, prefix="osworld: ")


def _catch(key: str, check: Callable[[], object], *, prefix: str = "") -> list[Problem]:
    """Run ``check``; an :class:`RlaError` it raises becomes one problem about ``key``."""
    try:
        check()
    except RlaError as exc:
        return [Problem(key, prefix + _first_line(exc))]
    return []


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__
