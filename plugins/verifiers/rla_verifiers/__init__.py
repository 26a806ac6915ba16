"""verifiers environments, run unmodified, as an rlanything environment plug-in (docs/environments.md).

verifiers 0.4 (``import verifiers.v1 as vf``) writes an environment as a *taskset* — an installed package
exporting a ``vf.Taskset`` whose tasks are scored by ``@vf.reward`` methods — optionally with an ``vf.Env``
that drives its agents turn by turn (``agent.interaction``), played by a *harness* (the agent program). This
plug-in plays one taskset (``plugin.options.environment``: its id, as ``vf-eval <id>`` takes it):

* **Tasks**: the taskset's training and held-out selections (``train``, ``eval``: verifiers' own
  ``SelectConfig`` — ``limit``, ``skip``, ``include``, ``shuffle`` …), each task's id the task's own
  (``TaskData.id``, else its name, else its content key), its spec the task's key.
* **Episodes** are played by verifiers itself (:meth:`Verifiers.play`): its environment loaded with
  ``vf.load_environment``, every agent seat on the plain chat loop (the ``null`` harness) in the
  ``subprocess`` runtime, its model client pointed at the policy's endpoint (the stage's recording
  endpoint) with the episode's seed, and the turn limit the smaller of the loop's (``rollout.max_steps``)
  and the seat's own ``max_turns``. The raw score is the policy's trace's reward (verifiers' weighted sum
  of its rewards); a failed episode (the environment, a reward or the harness raised, a timeout) is an
  error with verifiers' own message: the loop records it as ``env_error``, never as the policy's loss.
* **Offline**: the ``null`` harness runs a PEP 723 script whose packages ``uv`` resolves on first use; the
  set-up pre-syncs them into a wheel folder (``scripts/setup.sh``), and every harness here resolves from it
  alone (``UV_FIND_LINKS`` the folder, ``UV_DEFAULT_INDEX`` an empty local index, no Python downloads),
  with the ``uv`` beside this interpreter on ``PATH``.

No rewrite space: a taskset declares no difficulty to move, so a run plays it with adaptation off.
Not supported yet: tool calling (the tiny policies produce no tool-call format), episodes with more than
one trainable seat or another model in them (every seat would share the policy's seed), the older
``vf.Environment`` API (it does not install beside the project's pins: docs/environments.md).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import pkgutil
import re
import shutil
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import model_validator

from rla_core.plugins import (
    EnvironmentPlugin,
    EpisodeRequest,
    EpisodeResult,
    Field,
    PluginOptions,
    PolicyEndpoint,
    Task,
)

HARNESS = "null"  # verifiers' plain chat loop: no tools, no shell
RUNTIME = "subprocess"  # the harness program runs as a local process (no container, no account)
KEY_VARIABLE = "RLA_POLICY_API_KEY"  # verifiers' client reads the endpoint's key from a variable it names
WHEELS_DIR = ".verifiers-wheels"  # in the virtual environment: what scripts/setup.sh pre-synced for uv
EMPTY_INDEX_DIR = "empty-index"  # inside the wheel folder: uv's default index, holding nothing


def builtin_environments() -> list[str]:
    """The tasksets that ship with verifiers (``verifiers.v1.tasksets``)."""
    from verifiers.v1 import tasksets

    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(tasksets.__path__))


def installed_environments() -> list[str]:
    """The taskset ids installed here: verifiers' own and every distribution that requires ``verifiers``
    (a ``vf-init`` package is named as its taskset id), this plug-in's package left out."""
    found = set(builtin_environments())
    for dist in importlib.metadata.distributions():
        name = str(dist.metadata.get("Name") or "")
        needs = [re.split(r"[\s\[<>=!~;(]", line.strip(), maxsplit=1)[0] for line in dist.requires or ()]
        if name and name != "rla-verifiers" and "verifiers" in needs:
            found.add(name.lower().replace("_", "-"))
    return sorted(found)


def harness_requirements() -> list[str]:
    """The packages the ``null`` harness's program declares (its PEP 723 ``dependencies``), which ``uv``
    resolves when verifiers first runs it."""
    import tomllib

    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

    block = re.search(r"^# /// script\n((?:#.*\n)+?)# ///", CHAT_PROGRAM_SOURCE, re.MULTILINE)
    if block is None:
        raise RuntimeError("verifiers' chat program declares no PEP 723 script block")
    body = "\n".join(line.removeprefix("#").removeprefix(" ") for line in block.group(1).splitlines())
    return list(tomllib.loads(body).get("dependencies", []))


def presync(wheels: Path) -> None:
    """Download the harness's packages (:func:`harness_requirements`, as wheels for this interpreter) into
    ``wheels`` and make its empty default index: what every harness then resolves from, offline."""
    import subprocess

    wheels.mkdir(parents=True, exist_ok=True)
    (wheels / EMPTY_INDEX_DIR).mkdir(exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(wheels),
         *harness_requirements()],
        check=True,
    )  # fmt: skip


def default_wheels() -> Path:
    """The wheel folder the set-up fills for the harness's packages: ``<venv>/.verifiers-wheels``."""
    return Path(sys.prefix) / WHEELS_DIR


class VerifiersOptions(PluginOptions):
    environment: str = Field(description="The verifiers taskset id (as `vf-eval <id>` takes it).")
    env: str = Field(
        "", description="An Env to pair with the taskset (verifiers' --env.id); empty: the taskset's own."
    )
    taskset: dict[str, Any] = Field(
        default_factory=dict,
        description="The taskset's own config (verifiers' --env.taskset.*), checked by verifiers.",
    )
    train: dict[str, Any] = Field(
        default_factory=lambda: {"limit": 4},
        description="The training tasks: verifiers' task selection (limit, skip, include, exclude, shuffle, seed).",
    )
    eval: dict[str, Any] = Field(
        default_factory=lambda: {"skip": 4, "limit": 2}, description="The held-out tasks, the same way."
    )
    success_score: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="The lowest reward that counts as won (the ±1 outcome); the raw reward is kept.",
    )
    concurrency: int = Field(4, ge=1, le=256, description="Episodes verifiers plays at once.")
    episode_timeout_s: float = Field(
        600.0, gt=0, description="An episode taking longer is an environment error."
    )
    wheels: str = Field(
        "", description="The folder uv resolves the harness's packages from; empty: <venv>/.verifiers-wheels."
    )

    @model_validator(mode="after")
    def _resolves(self) -> VerifiersOptions:
        """The taskset loads and the config validates in verifiers itself (an unknown id lists the installed)."""
        import verifiers.v1 as vf
        from verifiers.v1.utils.loaders import taskset_class

        try:
            taskset_class(self.environment)
        except (ModuleNotFoundError, AttributeError, TypeError, ValueError) as exc:
            raise ValueError(
                f"environment {self.environment!r} is not an installed verifiers taskset ({_line(exc)}); "
                f"installed: {', '.join(installed_environments())} (install one with pip install -e <its package>)"
            ) from None
        try:
            _env_config(self, max_turns=1)
            for part in (self.train, self.eval):
                vf.SelectConfig.model_validate(part)
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            raise ValueError(f"verifiers rejects the configuration: {_line(exc)}") from None
        return self


def _line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _env_config(options: VerifiersOptions, *, max_turns: int) -> Any:
    """verifiers' environment config: the taskset, and every seat on the null harness in the subprocess
    runtime with the turn limit the smaller of ``max_turns`` and the seat's own."""
    import verifiers.v1 as vf

    raw: dict[str, Any] = {"taskset": {**options.taskset, "id": options.environment}}
    if options.env:
        raw["id"] = options.env
    config_type = vf.env_config_type(options.environment, options.env)
    for name, field in config_type.model_fields.items():
        if isinstance(field.default, vf.AgentConfig):
            own = field.default.max_turns
            raw[name] = {
                "harness": {"id": HARNESS, "env": _harness_env(options)},
                "runtime": {"type": RUNTIME},
                "max_turns": max_turns if own is None else min(own, max_turns),
            }
    return vf.resolve_env_config(raw)


def seat_turn_limits(options: VerifiersOptions) -> dict[str, int | None]:
    """Each seat's own ``max_turns`` as the environment declares it (None: no limit)."""
    import verifiers.v1 as vf

    config_type = vf.env_config_type(options.environment, options.env)
    return {
        name: field.default.max_turns
        for name, field in config_type.model_fields.items()
        if isinstance(field.default, vf.AgentConfig)
    }


def _harness_env(options: VerifiersOptions) -> dict[str, str]:
    """The harness program's variables: ``uv`` on PATH, and uv resolving from the pre-synced wheels only."""
    wheels = Path(options.wheels) if options.wheels else default_wheels()
    uv_dir = Path(sys.executable).parent
    path = os.environ.get("PATH", "")
    return {
        "PATH": f"{uv_dir}{os.pathsep}{path}" if path else str(uv_dir),
        "UV_FIND_LINKS": str(wheels),
        "UV_DEFAULT_INDEX": (wheels / EMPTY_INDEX_DIR).as_uri(),
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
    }


def offline_problems(options: VerifiersOptions) -> list[str]:
    """What stands between the harness and an offline run (empty: nothing): ``uv`` beside this interpreter,
    the wheel folder and its empty index, a writable home (verifiers keeps its runtimes and uv its cache there)."""
    wheels = Path(options.wheels) if options.wheels else default_wheels()
    problems = []
    if shutil.which("uv", path=str(Path(sys.executable).parent)) is None:
        problems.append(f"no uv beside {sys.executable}: pip install uv (scripts/setup.sh does)")
    if not any(wheels.glob("*.whl")) or not (wheels / EMPTY_INDEX_DIR).is_dir():
        problems.append(
            f"{wheels} holds no pre-synced wheels with an {EMPTY_INDEX_DIR}/ folder: run scripts/setup.sh (it "
            "downloads the harness's packages there) or set plugin.options.wheels"
        )
    home = Path(os.path.expanduser("~"))
    if not os.access(home, os.W_OK):
        problems.append(
            f"the home directory {home} is not writable (verifiers and uv keep their caches there)"
        )
    return problems


class Verifiers(EnvironmentPlugin):
    """One verifiers taskset, its episodes played by verifiers against the policy's endpoint."""

    Options = VerifiersOptions
    rewrite_space = None  # a taskset declares no difficulty: adaptation is off

    def __init__(self, options: VerifiersOptions) -> None:
        super().__init__(options)
        self.opts = options
        self.success_score = options.success_score
        self.turn_limits = seat_turn_limits(options)

    @cached_property
    def _taskset(self) -> Any:
        import verifiers.v1 as vf

        return vf.load_taskset(_env_config(self.opts, max_turns=1).taskset)

    def _selected(self, split: str) -> list[Any]:
        import verifiers.v1 as vf

        view = self._taskset.select(
            vf.SelectConfig.model_validate(self.opts.eval if split == "eval" else self.opts.train)
        )
        if not view.bounded:
            raise ValueError(
                f"the {split} selection of {self.opts.environment!r} is endless (an infinite taskset): bound it with "
                f"plugin.options.{split}.limit"
            )
        return list(view)

    @cached_property
    def _by_key(self) -> dict[str, Any]:
        return {task.key: task for split in ("train", "eval") for task in self._selected(split)}

    def tasks(self, split: str) -> list[Task]:
        return [Task(_task_id(t), {"key": t.key}) for t in self._selected(split)]

    def instruction(self, spec: dict[str, Any]) -> str:
        return str(self._task(spec).data.prompt_text)

    def _task(self, spec: dict[str, Any]) -> Any:
        task = self._by_key.get(str(spec.get("key")))
        if task is None:
            raise KeyError(
                f"no task with key {spec.get('key')!r} in the selections of {self.opts.environment!r}"
            )
        return task

    def corpus(self) -> list[str]:
        """The tasks' prompts and system prompts (the tiny tokenizer learns their words)."""
        out: list[str] = []
        for task in self._by_key.values():
            out += [task.data.prompt_text, task.data.system_prompt or ""]
        return [t for t in out if t]

    def play(self, episodes: Sequence[EpisodeRequest], *, policy: PolicyEndpoint) -> list[EpisodeResult]:
        """Each episode played by verifiers against ``policy`` (``concurrency`` at once), in a fresh event loop
        of its own thread (whatever loop the caller runs)."""
        problems = offline_problems(self.opts)
        if problems:
            return [
                EpisodeResult(score=None, max_turns=e.max_turns, error="; ".join(problems)) for e in episodes
            ]
        with ThreadPoolExecutor(1, thread_name_prefix="rla-verifiers") as pool:
            return pool.submit(asyncio.run, self._play(list(episodes), policy)).result()

    async def _play(self, episodes: list[EpisodeRequest], policy: PolicyEndpoint) -> list[EpisodeResult]:
        import verifiers.v1 as vf

        os.environ[KEY_VARIABLE] = policy.api_key
        client = vf.EvalClientConfig(base_url=policy.base_url, api_key_var=KEY_VARIABLE)
        gate = asyncio.Semaphore(self.opts.concurrency)
        results: dict[int, EpisodeResult] = {}
        for limit in sorted({e.max_turns for e in episodes}):
            env = vf.load_environment(_env_config(self.opts, max_turns=limit))
            mine = [i for i, e in enumerate(episodes) if e.max_turns == limit]
            async with env.serving():
                played = await asyncio.gather(
                    *(self._one(env, episodes[i], policy, client, gate) for i in mine)
                )
            results.update(zip(mine, played, strict=True))
        return [results[i] for i in range(len(episodes))]

    async def _one(
        self, env: Any, request: EpisodeRequest, policy: PolicyEndpoint, client: Any, gate: asyncio.Semaphore
    ) -> EpisodeResult:
        import verifiers.v1 as vf

        own = [t for t in self.turn_limits.values() if t is not None]
        limit = min([request.max_turns, *own])
        sampling = vf.SamplingConfig(
            temperature=policy.temperature,
            top_p=policy.top_p,
            max_tokens=policy.max_tokens,
            seed=request.seed,
        )
        ctx = vf.ModelContext(model=policy.model, client=client, sampling=sampling)
        async with gate:
            try:
                episode = await asyncio.wait_for(
                    env.run_episode(self._task(request.spec), ctx), self.opts.episode_timeout_s
                )
            except TimeoutError:
                return EpisodeResult(
                    None, limit, error=f"the episode took longer than {self.opts.episode_timeout_s:g} s"
                )
        errors = [*episode.errors, *(e for t in episode.traces for e in t.errors)]
        if not episode.ok or errors:
            text = "; ".join(f"{e.type}: {' '.join(e.message.split())}"[:400] for e in errors) or "not ok"
            return EpisodeResult(None, limit, error=f"verifiers ended the episode with errors: {text}")
        policy_traces = [t for t in episode.traces if t.agent.trainable]
        if len(policy_traces) != 1 or len(episode.traces) != 1:
            return EpisodeResult(
                None, limit,
                error=f"the episode ran {len(episode.traces)} agents ({len(policy_traces)} trainable): only episodes "
                "of one agent, the policy, are supported yet",
            )  # fmt: skip
        return EpisodeResult(float(policy_traces[0].reward), limit)


def _task_id(task: Any) -> str:
    """A task's own stable id: its data's ``id``, else its ``name``, else its content key."""
    return str(task.data.id or task.data.name or f"task-{task.key[:16]}")


def main(argv: Sequence[str]) -> None:
    """The set-up's step: ``python -m rla_verifiers presync [FOLDER]`` (default: ``<venv>/.verifiers-wheels``)."""
    if list(argv[:1]) != ["presync"]:
        raise SystemExit(
            "usage: python -m rla_verifiers presync [FOLDER]  (default: <venv>/.verifiers-wheels)"
        )
    presync(Path(argv[1]) if len(argv) > 1 else default_wheels())
