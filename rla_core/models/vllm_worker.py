"""Reloading a running vLLM server's weights in place, and the hash that proves which weights it serves.

This module is imported by two interpreters: ours (:mod:`rla_core.models.serving` computes
:func:`weights_hash` of the checkpoint a stage asks for) and vLLM's, whose workers get
:class:`CheckpointReload` as their extension class (``--worker-extension-cls
rla_core.models.vllm_worker.CheckpointReload``, with the repository root on the server's ``PYTHONPATH``).
So it imports nothing beyond the standard library at module level: one declaration of the hash, used
on both sides.

The reload itself is vLLM's own ``Worker.reload_weights(weights_path=…)`` (vLLM 0.32:
``vllm.model_executor.model_loader.reload.inplace``, shared by the GPU and the CPU workers, which
subclass the GPU one): it streams the checkpoint's safetensors into the loaded model's parameters. The
extension only wraps it so that each worker reports the hash of the files it read, reached through the
server's ``POST /collective_rpc`` route (``VLLM_SERVER_DEV_MODE=1``: ``{"method": …, "kwargs": {…}}``,
answered ``{"results": [one value per worker]}``). The caller then resets the prefix cache
(``POST /reset_prefix_cache``): cached KV blocks were computed by the old weights.

Example:
    >>> weights_hash(Path("ckpt"))  # doctest: +SKIP
    'c0ffee…'
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

WEIGHTS_GLOB = "*.safetensors"
_CHUNK = 1 << 20


def weights_hash(checkpoint: Path) -> str:
    """SHA-256 over the checkpoint's safetensors files: each file's name and content, in name order.

    Two directories with byte-equal weight files have the same hash wherever they live; any changed
    byte, added or removed shard changes it. A directory without weights is an error (nothing to serve).
    Files are read once per process: the hash is kept by each file's (path, size, mtime), so a stage that
    leases the checkpoint a run already served does not read its gigabytes again.
    """
    files = sorted(Path(checkpoint).glob(WEIGHTS_GLOB))
    if not files:
        raise FileNotFoundError(f"{checkpoint} has no {WEIGHTS_GLOB} files to serve")
    stamps = tuple((p.name, str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _hash_files(stamps)


@functools.lru_cache(maxsize=64)
def _hash_files(stamps: tuple[tuple[str, str, int, int], ...]) -> str:
    total = hashlib.sha256()
    for name, path, _size, _mtime in stamps:
        total.update(name.encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                total.update(chunk)
        total.update(b"\0")
    return total.hexdigest()


def _refresh_cpu_kernel(module: Any, before: Any) -> None:
    """Rebuild a CPU matmul kernel the reload left on the old weights.

    vLLM's CPU build multiplies with a kernel prepared from the weights once they are loaded
    (``module.cpu_linear``: a packed oneDNN copy). The reload re-prepares it for every layer whose weights
    the checkpoint holds, but a layer with none of its own — the output projection tied to the input
    embeddings (``tie_word_embeddings``) — keeps the kernel of the old weights while the shared embedding
    table is new: measured on the test preset's tiny model, log-probs off by ~1.5. Such a module still
    holds its (new, shared) weight, so its kernel is prepared again from it.
    """
    weight = getattr(module, "weight", None)
    if before is None or getattr(module, "cpu_linear", None) is not before or weight is None:
        return
    if weight.numel() > 0:  # a packed linear layer drops its weight: the reload has re-prepared those
        module.quant_method.process_weights_after_loading(module)


class CheckpointReload:
    """vLLM worker extension: ``rla_reload(path)`` loads ``path``'s weights, ``rla_weights_hash()`` says
    which files were loaded last (the start checkpoint's until the first reload)."""

    _rla_hash: str | None = None

    def rla_reload(self, path: str) -> str:
        """Load the safetensors of checkpoint directory ``path`` into the running model; their hash."""
        digest = weights_hash(Path(path))  # the files about to be read (checkpoints are never rewritten)
        worker: Any = self
        model = worker.model_runner.model
        kernels = {name: getattr(m, "cpu_linear", None) for name, m in model.named_modules()}
        worker.reload_weights(weights_path=path, is_checkpoint_format=True)
        for name, module in model.named_modules():
            _refresh_cpu_kernel(module, kernels.get(name))
        self._rla_hash = digest
        return digest

    def rla_weights_hash(self) -> str:
        """The hash of the weights this worker holds."""
        if self._rla_hash is None:
            worker: Any = self
            self._rla_hash = weights_hash(Path(worker.vllm_config.model_config.model))
        return self._rla_hash
