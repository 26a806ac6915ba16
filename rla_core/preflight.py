"""The preflight: everything a config names is checked before a run writes anything.

:func:`preflight` returns one :class:`Problem` per thing a run would fail on later — minutes in, after its
run directory, lock, MLflow run and Prefect flow run exist — and, as warnings, what it would only report:

* **task files** (training and held-out, where the setting's adapter declares them: ``textgame.tasks``/
  ``eval_tasks``, ``coding.problems``/``eval_problems``, ``gui.tasks``/``eval_tasks``) exist and parse, read
  by the very loaders the seed and evaluate stages use (the adapter's ``check_task_file``), whose errors name
  the file and the first bad line (OSWorld meta lists: the example that is missing or bad). OSWorld tasks
  that are merely *unavailable* here (files not cached, root, network) are warnings: the stages leave them
  out and log why, as without a preflight;
* **an environment plug-in** resolves (its entry point loads, its options pass its own model: a required
  one missing, a wrong type or range is a problem here), lists both splits of well-formed tasks, and each
  seed task passes the plug-in's ``check_variant`` and is won by its demonstration, played once;
* **models** (``models.policy``, ``reward``, ``environment``) are known without building or downloading
  anything (:func:`rla_core.models.bootstrap.check_model_ref`);
* **the vLLM interpreter** exists when ``models.serving.backend`` is ``vllm`` (``auto`` uses it only when
  present, so its absence is no problem there), and the temporary directory (``TMPDIR``) is short enough
  for vLLM's IPC socket paths;
* **the Ray cluster** at ``cluster.address`` (with ``cluster.backend=ray``) accepts a connection within
  ``cluster.connect_timeout_s``;
* **prerequisites** of the setting's engine, as its adapter lists them: Chromium and chromedriver for
  MiniWoB++; the desktop programs and the sandbox user for OSWorld.

Nothing here asks which setting a run is in: the setting's adapter (:func:`rla_core.settings.adapter_of`)
says where its tasks are and what this machine needs.

Every check runs, so one call lists every problem. Nothing here writes a file, starts a process or opens
a model. The stages keep their own checks: a file can change between the preflight and its use.

Example:
    >>> from rla_core.config import load_config
    >>> [p.line() for p in preflight(load_config(overrides=["textgame.tasks=nope.jsonl"]))]
    ["textgame.tasks: 'nope.jsonl' does not exist (relative paths: the working directory, then the project)"]
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rla_core.config import Backend, ClusterBackend, RunConfig
from rla_core.errors import RlaError

if TYPE_CHECKING:
    from rla_core.settings.base import SettingAdapter
    from rla_core.settings.plugin import PluginSetting
    from rla_core.stage_inputs import EvaluateInputs, SeedTasksInputs


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


def config_value(cfg: RunConfig, dotted: str) -> Any:
    """The value of dotted key ``dotted`` in ``cfg``."""
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def preflight(cfg: RunConfig) -> list[Problem]:
    """Every problem of ``cfg``'s inputs, errors and warnings, in config order; empty when all is well."""
    problems: list[Problem] = []
    for check in (_tasks, _judge_steps, _models, _vllm, _cluster):
        problems += check(cfg)
    return problems


# ---- tasks and the setting's prerequisites ---------------------------------------------------------


def _tasks(cfg: RunConfig) -> list[Problem]:
    """The setting's tasks as its stages read them (task files, or a plug-in's code), then what its engine
    needs on this machine; all asked of the setting's adapter, resolved once (a plug-in: loaded here)."""
    from rla_core.settings import adapter_of
    from rla_core.settings.plugin import PluginSetting
    from rla_core.stage_inputs import BootstrapInputs, EvaluateInputs, SeedTasksInputs

    seed, held_out = SeedTasksInputs.from_config(cfg), EvaluateInputs.from_config(cfg)
    source = cfg.setting.value  # a plug-in's problems are about its section
    try:
        adapter = adapter_of(seed)
    except RlaError as exc:  # a plug-in that does not resolve: unknown name, a bad or missing option
        return [Problem(source, _first_line(exc))]
    files = adapter.task_files
    problems: list[Problem] = []
    for inputs in (seed, held_out):
        if files is None:
            problems += _catch(source, functools.partial(adapter.check_task_file, inputs))
        else:
            key = files.keys()[inputs is held_out]
            problems += _task_file(adapter, inputs, key, str(config_value(cfg, key)))
    if not problems:  # tasks that load: now what loading them cannot show (a plug-in's demonstrations)
        try:
            problems += [
                Problem(source, line) for line in adapter.check_seed_tasks(BootstrapInputs.from_config(cfg))
            ]
        except RlaError as exc:
            problems.append(Problem(source, _first_line(exc)))
    if not problems and isinstance(adapter, PluginSetting):
        problems += plugin_declarations(cfg, adapter)
    engine = f"{cfg.setting.value}.engine"
    return problems + [Problem(engine, f"{adapter.env_name}: {line}") for line in adapter.prerequisites()]


def plugin_declarations(cfg: RunConfig, adapter: PluginSetting) -> list[Problem]:
    """What a plug-in declares against the run's configuration: free text has no expert labels (the oracle
    and the judge's yardstick need them), and a plug-in without a rewrite space runs without adaptation
    (a warning, which ``rla config show`` prints too)."""
    from rla_core.config import JudgeSource
    from rla_core.stage_inputs import BootstrapInputs

    try:
        free_form, rewrites = adapter.declarations(BootstrapInputs.from_config(cfg))
    except RlaError as exc:
        return [Problem(cfg.setting.value, _first_line(exc))]
    name = adapter.env_name
    problems: list[Problem] = []
    if free_form and cfg.judge.source is JudgeSource.ORACLE:
        problems.append(Problem("judge.source", (
            f"the oracle votes by comparing the played action with the expert's; plug-in {name!r} plays "
            "free-form turns, where string equality of free text means nothing: use judge.source=reward_model"
        )))  # fmt: skip
    if free_form and cfg.evaluation.judge_steps is not None:
        problems.append(Problem("evaluation.judge_steps", (
            f"the judge's yardstick is labelled by expert actions; plug-in {name!r} plays free-form turns, "
            "which have none: remove evaluation.judge_steps"
        )))  # fmt: skip
    if not rewrites and cfg.adaptation.enabled:
        problems.append(Problem("adaptation.enabled", (
            f"plug-in {name!r} declares no rewrite space: its tasks are never rewritten, the run plays it with "
            "environment adaptation off (set adaptation.enabled=false to say so)"
        ), Severity.WARNING))  # fmt: skip
    return problems


def _task_file(
    adapter: SettingAdapter, inputs: SeedTasksInputs | EvaluateInputs, key: str, path: str
) -> list[Problem]:
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
        warnings = adapter.check_task_file(inputs)
    except RlaError as exc:
        return [Problem(key, _first_line(exc))]
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        return [Problem(key, f"'{path}' line {line} is not UTF-8 text (a binary file?): {exc.reason}")]
    except ImportError as exc:
        return [Problem(key, f"cannot read '{path}': {exc} (install the setting's extra, docs/settings.md)")]
    except OSError as exc:
        return [Problem(key, f"cannot read '{path}': {exc.strerror or exc}")]
    return [Problem(key, line, Severity.WARNING) for line in warnings]


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
