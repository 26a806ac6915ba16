"""OSWorld task sources, the RLAnything adaptive task format, and the checks a task passes before it runs.

**Format** (spec §3.3). A task spec is an OSWorld example JSON in RLAnything's adaptive form:

* ``id``, optional ``config`` (set-up steps; none is an empty list, as OSWorld's ``DesktopEnv`` reads it), ``snapshot``, ``source``, ``related_apps``, ``proxy``;
* ``current_task`` = ``{evaluator_key: instruction}`` — exactly one key: the variant played;
* ``task_template`` = ``{evaluator_key: canonical instruction}`` — the variants a rewrite may switch to,
  easiest first (our parametric rewriter reads the order as difficulty; the paper leaves it to its LLM);
* ``evaluator_list`` = ``{evaluator_key: OSWorld evaluator}``;
* our optional additions: ``hints`` = ``{key: [hint sentences]}`` (an instruction with h hints is the
  template followed by the first h of them, :func:`compose`), ``solutions`` = ``{key: [candidate actions]}``
  (the scripted solution in the action vocabulary of :mod:`~rla_core.envs.osworld.observe`, ending with
  ``DONE``: the judge's ground truth and the warm-start demonstrations), and ``domain``.

A plain OSWorld example (``instruction`` + ``evaluator``) becomes the adaptive form with the one key
``default`` (:func:`normalise`); an adaptive example without ``task_template`` (the paper's multi_apps
files) gets its ``current_task`` as template.

**Sources** (:func:`load_tasks`): an OSWorld ``evaluation_examples``-style meta list
(``{"<domain>": ["<id>", …]}``, e.g. ``test_all.json``) whose examples are ``<its folder>/examples/<domain>/<id>.json``,
or a JSONL file of examples.

**Identity** (:func:`task_key`): a task is its (domain, id) — OSWorld's own ``test_all.json`` lists 11 ids
under both ``chrome`` and ``thunderbird``, different tasks in different files. Its key ``"<domain>/<id>"``
(``"<id>"`` for a task without a domain, e.g. a JSONL line without ``domain``) is its slot in the task set,
its ``task_id`` in every artifact, what seeds derive from and the ``id`` ``DesktopEnv`` receives — so that
its file cache, ``<cache>/<id>`` in ``desktop_env``, is ``<cache>/<domain>/<id>`` (:func:`task_cache`). The
same key twice in one source is an error.

**Checks**: :func:`check_task` — the structure above, and that every set-up type, getter and metric exists
in ``desktop_env`` (an unknown one is an :class:`OsworldTaskError` naming the task and the field, never a
crash in the middle of an episode); :func:`missing_files` — set-up downloads and ``cloud_file`` getters
whose file is not in ``desktop_env``'s cache; :func:`unavailable` — every reason the task cannot run on a
local desktop (:func:`rla_core.envs.desktop.availability.reasons` per evaluator key, with categories).
"""

from __future__ import annotations

import functools
import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rla_core.errors import EnvironmentSpecError
from rla_core.store.jsonl import jsonl_lines

if TYPE_CHECKING:
    from rla_core.envs.desktop.availability import Reason

DEFAULT_KEY = "default"
REQUIRED = ("id", "current_task", "task_template", "evaluator_list")
TYPABLE = "typable"  # optional: the texts the task supplies for typing, offered as ``type`` candidates
OPTIONAL = ("config", "snapshot", "source", "related_apps", "proxy", "hints", "solutions", "domain", "trajectory", "possibility_of_env_change", "fixed_ip", TYPABLE)  # fmt: skip


class OsworldTaskError(EnvironmentSpecError):
    """An OSWorld task JSON is malformed or names something ``desktop_env`` does not have."""


def _fail(task: Any, field: str, problem: str, fix: str) -> OsworldTaskError:
    tid = task.get("id", "<no id>") if isinstance(task, dict) else "<not an object>"
    return OsworldTaskError(f"OSWorld task {tid!r}, field {field}: {problem}; {fix}")


def normalise(example: dict[str, Any], *, domain: str | None = None) -> dict[str, Any]:
    """An OSWorld example (plain or adaptive) in the adaptive form; unknown top-level keys are an error."""
    if not isinstance(example, dict):
        raise _fail(example, "<root>", "is not a JSON object", "an example is one JSON object")
    task = dict(example)
    if "current_task" not in task:
        if "instruction" not in task or "evaluator" not in task:
            raise _fail(task, "current_task", "is missing, and so are instruction/evaluator",
                        "give either OSWorld's instruction + evaluator or current_task + evaluator_list")  # fmt: skip
        task["current_task"] = {DEFAULT_KEY: task.pop("instruction")}
        task["evaluator_list"] = {DEFAULT_KEY: task.pop("evaluator")}
    else:
        task.pop("instruction", None)  # the adaptive form's instruction is current_task's
        task.pop("evaluator", None)
    task.setdefault("task_template", dict(task["current_task"]))
    task.setdefault("config", [])  # as DesktopEnv reads a task without one
    if domain is not None and task.setdefault("domain", domain) != domain:
        raise _fail(task, "domain", f"{task['domain']!r} is not {domain!r}, the domain the meta list names it under",
                    "drop the example's domain or list it under its own")  # fmt: skip
    unknown = sorted(set(task) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise _fail(task, str(unknown), "unknown top-level keys",
                    f"an example has the keys {list(REQUIRED)} and optionally {list(OPTIONAL)}")  # fmt: skip
    return task


@functools.cache
def desktop_env_names() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(set-up types, getter types, metric names) that ``desktop_env`` implements (imported once)."""
    try:
        from rla_core.envs.desktop.provider import install

        install()  # placeholders for uninstallable evaluator dependencies, before the metrics import
        from desktop_env.controllers.setup import SetupController
        from desktop_env.evaluators import getters, metrics
    except ImportError as exc:
        raise OsworldTaskError(
            f"checking OSWorld tasks needs desktop_env ({exc}); install it as docs/osworld.md says "
            '(pip install -e ".[osworld]" and pip install --no-deps desktop-env==1.0.2)'
        ) from None
    setups = frozenset(
        n[1 : -len("_setup")] for n in dir(SetupController) if n.startswith("_") and n.endswith("_setup")
    )
    gets = frozenset(n[len("get_") :] for n in dir(getters) if n.startswith("get_"))
    funcs = frozenset(n for n in dir(metrics) if not n.startswith("_") and callable(getattr(metrics, n)))
    return setups, gets, funcs | {"infeasible"}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _check_steps(task: dict[str, Any], steps: Any, field: str, setups: frozenset[str]) -> None:
    if not isinstance(steps, list):
        raise _fail(task, field, "is not a list", "set-up steps are a list of {type, parameters}")
    for i, step in enumerate(steps):
        kind = step.get("type") if isinstance(step, dict) else None
        if kind not in setups:
            raise _fail(task, f"{field}[{i}].type", f"{kind!r} is not a set-up type of desktop_env",
                        f"use one of {sorted(setups)}")  # fmt: skip
        if not isinstance(step.get("parameters", {}), dict):
            raise _fail(task, f"{field}[{i}].parameters", "is not an object", "parameters are a JSON object")


def check_task(task: dict[str, Any]) -> None:
    """Raise :class:`OsworldTaskError` (task id, field, fix) unless ``task`` is a valid adaptive example."""
    for name in REQUIRED:
        if name not in task:
            raise _fail(task, name, "is missing", "see the format in rla_core/envs/osworld/tasks.py")
    if not isinstance(task["id"], str) or not task["id"] or "/" in task["id"]:
        raise _fail(
            task, "id", f"{task['id']!r} is not a non-empty string without '/'", "ids name cache folders"
        )
    domain = task.get("domain")
    if domain is not None and (not isinstance(domain, str) or not domain or "/" in domain):
        raise _fail(task, "domain", f"{domain!r} is not a non-empty string without '/'",
                    "domains name cache folders (the meta list's keys)")  # fmt: skip
    for name in ("current_task", "task_template", "evaluator_list"):
        value = task[name]
        if not isinstance(value, dict) or not value:
            raise _fail(task, name, "is not a non-empty object", "it maps evaluator keys to values")
    if len(task["current_task"]) != 1:
        raise _fail(
            task,
            "current_task",
            f"has {len(task['current_task'])} keys",
            "it has exactly one: the variant played",
        )
    for key, text in [*task["current_task"].items(), *task["task_template"].items()]:
        if not isinstance(text, str) or not text.strip():
            raise _fail(
                task, f"current_task/task_template[{key!r}]", "is not a non-empty instruction", "write one"
            )
    for key in task["task_template"]:
        if key not in task["evaluator_list"]:
            raise _fail(task, f"task_template[{key!r}]", "has no evaluator in evaluator_list",
                        "every template key needs an evaluator")  # fmt: skip
    key = current_key(task)
    if key not in task["task_template"]:
        raise _fail(task, f"current_task[{key!r}]", "is not a key of task_template",
                    f"use one of {sorted(task['task_template'])}")  # fmt: skip
    setups, gets, funcs = desktop_env_names()
    _check_steps(task, task.get("config", []), "config", setups)
    for ekey, ev in task["evaluator_list"].items():
        where = f"evaluator_list[{ekey!r}]"
        if not isinstance(ev, dict) or "func" not in ev:
            raise _fail(task, where, "has no func", "an evaluator is {func, result, expected, …}")
        for i, func in enumerate(_as_list(ev["func"])):
            if func not in funcs:
                field = f"{where}.func" + (f"[{i}]" if isinstance(ev["func"], list) else "")
                raise _fail(task, field, f"{func!r} is not a metric of desktop_env.evaluators.metrics",
                            "use a metric it defines (e.g. exact_match, check_include_exclude)")  # fmt: skip
        for part in ("result", "expected"):
            getters = ev.get(part)
            if getters is None:
                continue
            for i, getter in enumerate(_as_list(getters)):
                if getter is None and part == "expected":
                    continue
                kind = getter.get("type") if isinstance(getter, dict) else None
                if kind not in gets:
                    field = f"{where}.{part}" + (f"[{i}]" if isinstance(getters, list) else "") + ".type"
                    raise _fail(task, field, f"{kind!r} is not a getter of desktop_env.evaluators.getters",
                                "use a getter it defines (e.g. vm_command_line, vm_file, rule)")  # fmt: skip
        _check_steps(task, ev.get("postconfig", []), f"{where}.postconfig", setups)
    for extra in ("hints", "solutions"):
        value = task.get(extra, {})
        if not isinstance(value, dict) or any(
            k not in task["task_template"]
            or not isinstance(v, list)
            or not all(isinstance(s, str) for s in v)
            for k, v in value.items()
        ):
            raise _fail(
                task,
                extra,
                "is not {template key: [strings]}",
                f"{extra} are lists of strings per template key",
            )
    typable = task.get(TYPABLE, [])
    if not isinstance(typable, list) or not all(isinstance(t, str) and t for t in typable):
        raise _fail(task, TYPABLE, f"{typable!r} is not a list of non-empty strings",
                    "it lists the texts the task supplies for typing")  # fmt: skip


def task_key(task: dict[str, Any]) -> str:
    """A task's identity: ``"<domain>/<id>"``, or ``"<id>"`` for a task without a domain (module docstring).

    >>> task_key({"id": "bb5e4c0d", "domain": "thunderbird"}), task_key({"id": "p1"})
    ('thunderbird/bb5e4c0d', 'p1')
    """
    domain = task.get("domain")
    return f"{domain}/{task['id']}" if domain else str(task["id"])


def task_cache(cache_dir: Path, task: dict[str, Any]) -> Path:
    """The task's folder in ``desktop_env``'s file cache: ``<cache_dir>/<domain>/<id>`` (``<cache_dir>/<id>``
    without a domain). ``DesktopEnv`` builds the same path, ``<cache_dir>/<its task id>``, because
    :func:`desktop_task` hands it the task key as id."""
    return cache_dir.joinpath(*task_key(task).split("/"))


def current_key(task: dict[str, Any]) -> str:
    """The evaluator key being played (the one key of ``current_task``)."""
    return str(next(iter(task["current_task"])))


def instruction(task: dict[str, Any]) -> str:
    return str(task["current_task"][current_key(task)])


def compose(template: str, hints: list[str]) -> str:
    """The instruction of a variant: the template followed by its hints."""
    return " ".join([template, *hints])


def hint_count(task: dict[str, Any]) -> int | None:
    """How many of the key's hints the current instruction carries; None when it is not template + hints."""
    key = current_key(task)
    hints = list(task.get("hints", {}).get(key, []))
    for h in range(len(hints) + 1):
        if compose(task["task_template"][key], hints[:h]) == task["current_task"][key]:
            return h
    return None


def with_variant(task: dict[str, Any], key: str, hints: int) -> dict[str, Any]:
    """``task`` playing template key ``key`` with its first ``hints`` hints (nothing else changes)."""
    text = compose(task["task_template"][key], list(task.get("hints", {}).get(key, []))[:hints])
    return {**task, "current_task": {key: text}}


def difficulty(task: dict[str, Any]) -> tuple[int, int]:
    """Harder is larger: (rank of the key in ``task_template``, minus the hint count)."""
    return list(task["task_template"]).index(current_key(task)), -(hint_count(task) or 0)


def desktop_task(task: dict[str, Any]) -> dict[str, Any]:
    """The OSWorld task JSON ``DesktopEnv.reset`` takes: the current key's instruction and evaluator; its
    ``id`` is the task key, which names the task's cache folder (:func:`task_cache`)."""
    key = current_key(task)
    out = {
        "id": task_key(task),
        "instruction": task["current_task"][key],
        "config": task["config"],
        "evaluator": task["evaluator_list"][key],
    }
    for name in ("snapshot", "proxy", "related_apps"):
        if name in task:
            out[name] = task[name]
    return out


# ---- sources ---------------------------------------------------------------------------------------


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OsworldTaskError(f"{what} '{path}' does not exist") from None
    except json.JSONDecodeError as exc:
        raise OsworldTaskError(f"{what} '{path}' is not JSON: {exc}") from None


def load_tasks(path: Path) -> list[dict[str, Any]]:
    """Every task of a meta list (``.json``: ``{domain: [ids]}``, examples under ``<folder>/examples``) or a
    JSONL file, normalised and checked (:func:`check_task`; errors name the file)."""
    out: list[dict[str, Any]] = []
    if path.suffix == ".json":
        meta = _read_json(path, "OSWorld meta list")
        if not isinstance(meta, dict) or not all(isinstance(v, list) for v in meta.values()):
            raise OsworldTaskError(
                f"OSWorld meta list '{path}' is not {{domain: [example ids]}} (like test_all.json)"
            )
        for domain, ids in meta.items():
            for tid in ids:
                file = path.parent / "examples" / str(domain) / f"{tid}.json"
                example = _read_json(file, f"example {tid!r} of domain {domain!r} listed in '{path}':")
                out.append(_checked(example, domain, str(file)))
    else:
        for lineno, example, error in jsonl_lines(path):
            if error is not None:
                raise OsworldTaskError(f"{path}:{lineno}: not JSON ({error.msg})")
            out.append(_checked(example, None, f"{path}:{lineno}"))
    keys = [task_key(t) for t in out]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise OsworldTaskError(
            f"'{path}' lists the tasks {dup} (domain/id) more than once; a task's domain and id name its "
            "slot and its cache folder, so list each once"
        )
    if not out:
        raise OsworldTaskError(f"'{path}' lists no task")
    return out


def _checked(example: Any, domain: str | None, where: str) -> dict[str, Any]:
    try:
        task = normalise(example, domain=domain)
        check_task(task)
    except OsworldTaskError as exc:
        raise OsworldTaskError(f"{where}: {exc}") from None
    return task


# ---- the file cache and availability ----------------------------------------------------------------


def _all_steps(task: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    steps = [(f"config[{i}]", s) for i, s in enumerate(task.get("config", []))]
    for key, ev in task["evaluator_list"].items():
        steps += [
            (f"evaluator_list[{key!r}].postconfig[{i}]", s) for i, s in enumerate(ev.get("postconfig", []))
        ]
    return steps


def needed_files(task: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(field, URL, file name in :func:`task_cache`) of every file ``desktop_env`` would download."""
    out: list[tuple[str, str, str]] = []
    for field, step in _all_steps(task):
        if step.get("type") == "download":
            for j, f in enumerate(step.get("parameters", {}).get("files", [])):
                name = f"{uuid.uuid5(uuid.NAMESPACE_URL, f['url'])}_{os.path.basename(f['path'])}"
                out.append((f"{field}.parameters.files[{j}]", f["url"], name))
    for key, ev in task["evaluator_list"].items():
        for part in ("result", "expected"):
            for i, getter in enumerate(_as_list(ev.get(part) or [])):
                if isinstance(getter, dict) and getter.get("type") == "cloud_file":
                    urls, dests = (
                        (getter["path"], getter["dest"])
                        if getter.get("multi")
                        else ([getter["path"]], [getter["dest"]])
                    )
                    for url, dest in zip(urls, dests, strict=False):
                        out.append((f"evaluator_list[{key!r}].{part}[{i}]", str(url), str(dest)))
    return out


def missing_files(task: dict[str, Any], cache_dir: Path) -> list[str]:
    """One line per needed file that is not in the cache: the field, the URL it needs and where it goes."""
    folder = task_cache(cache_dir, task)
    return [
        f"{field} needs {url} (not in the cache as {folder / name})"
        for field, url, name in needed_files(task)
        if not (folder / name).is_file()
    ]


def unavailability(task: dict[str, Any], cache_dir: Path) -> list[Reason]:
    """Why ``task`` cannot run on a local desktop, over every evaluator key, with the category of each reason
    (:mod:`rla_core.envs.desktop.availability`); empty: it can."""
    from rla_core.envs.desktop.availability import NETWORK_FILES, Reason, reasons

    out = [Reason(NETWORK_FILES, line) for line in missing_files(task, cache_dir)]
    for key in task["evaluator_list"]:
        variant = desktop_task({**task, "current_task": {key: task["task_template"][key]}})
        for reason in reasons(variant, cache_dir):
            if reason.category != NETWORK_FILES and reason not in out:
                out.append(reason)  # file reasons come from missing_files, with the field
    return out


def unavailable(task: dict[str, Any], cache_dir: Path) -> list[str]:
    """Why ``task`` cannot run on a local desktop (files not cached, root, network, programs …); empty: it can."""
    return [r.text for r in unavailability(task, cache_dir)]
