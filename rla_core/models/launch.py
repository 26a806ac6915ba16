"""Where an update runs: in process, as ``accelerate launch`` workers, or as Ray Train workers.

:class:`Placement` (from config ``training``) says where. One process trains in the calling process
(:mod:`rla_core.models.update`); with ``training.processes > 1`` or an fsdp/deepspeed strategy,
:func:`launch_update` runs ``accelerate launch --config_file infra/accelerate/<file> --num_processes N
-m rla_core.models.train_worker <spec>`` (``<file>`` per strategy in :data:`ACCELERATE_CONFIGS`; the
:class:`WorkerSpec` JSON) in its own process group (:mod:`rla_core.procs`): the stage stays a batch
job, a worker's failure fails the stage with the worker's error, nothing outlives it. With
``cluster.backend=ray`` the same workers run under Ray Train's ``TorchTrainer`` on the cluster
(:mod:`rla_core.cluster.ray_train`), with the settings ``accelerate launch`` would apply passed on as
environment variables (:func:`accelerate_env`, derived from the same :func:`launch_options`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from rla_core.config import ClusterBackend, ClusterConfig, LoraConfig, TrainConfig, TrainDtype, TrainStrategy
from rla_core.errors import ModelError, ProcessError
from rla_core.models.bootstrap import resolve_device
from rla_core.models.rows import TrainRow
from rla_core.procs import ProcessGroup, default_runtime_dir

log = logging.getLogger(__name__)


WORKER_MODULE = "rla_core.models.train_worker"


CODE_RESOURCES = ("train_worker.py",)


ACCELERATE_CONFIG_DIR = Path(__file__).resolve().parents[2] / "infra" / "accelerate"


ACCELERATE_CONFIGS = {"ddp": "ddp.yaml", "fsdp": "fsdp.yaml", "deepspeed": "deepspeed_zero3.yaml"}


_MIXED_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}


_ACCELERATE_ENV_PREFIXES = ("ACCELERATE_", "FSDP_")


ERROR_SEPARATOR = "\n--- traceback ---\n"


class WorkerSpec(BaseModel):
    """What :func:`rl_update` hands each accelerate worker (:mod:`rla_core.models.train_worker`), as JSON.

    The launcher writes it with :meth:`write` and every rank reads it with :meth:`read`, so both sides
    validate the same declaration: the checkpoint to train; where rank 0 writes the new checkpoint and
    the metrics, and where a failing rank writes ``error-rank<r>.txt``; the prepared rows; the train and
    LoRA config; the seed; the device kind, the autocast dtype and the torch threads the workers share.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_dir: Path
    out_dir: Path
    metrics_path: Path
    error_dir: Path
    rows: tuple[TrainRow, ...]
    cfg: TrainConfig
    lora: LoraConfig
    seed: int
    device: str
    dtype: Literal["fp32", "bf16", "fp16"]
    threads: int | None = None

    def write(self, path: Path) -> None:
        path.write_text(self.model_dump_json())

    @classmethod
    def read(cls, path: Path) -> WorkerSpec:
        return cls.model_validate_json(Path(path).read_text())


class PlacementFields(Protocol):
    """The ``training.*`` keys that say where an update runs (config ``training`` or a stage's slice)."""

    @property
    def device(self) -> str: ...
    @property
    def dtype(self) -> TrainDtype: ...
    @property
    def processes(self) -> int: ...
    @property
    def strategy(self) -> TrainStrategy: ...
    @property
    def worker_timeout_s(self) -> float: ...


@dataclass(frozen=True)
class Placement:
    """Where and how an update runs: config ``training`` with the device resolved.

    ``device`` is ``cpu`` or ``cuda[:N]``; ``dtype`` the autocast dtype (fp32 = none); ``processes`` > 1
    or a ``strategy`` other than ddp launches accelerate workers; ``threads`` caps torch CPU threads
    (shared by the workers); ``timeout_s`` bounds a launched update; ``cluster`` with backend ray runs
    launched workers under Ray Train's ``TorchTrainer`` on that cluster instead of ``accelerate launch``.
    """

    device: str = "cpu"
    dtype: str = "fp32"
    processes: int = 1
    strategy: str = "ddp"
    threads: int | None = None
    timeout_s: float | None = None
    cluster: ClusterConfig | None = None

    @classmethod
    def from_config(
        cls, training: PlacementFields, *, threads: int | None = None, cluster: ClusterConfig | None = None
    ) -> Placement:
        return cls(
            device=resolve_device(training.device, setting="training.device"),
            dtype=str(training.dtype.value),
            processes=training.processes,
            strategy=str(training.strategy.value),
            threads=threads,
            timeout_s=training.worker_timeout_s,
            cluster=cluster,
        )

    @property
    def launched(self) -> bool:
        return self.processes > 1 or self.strategy != "ddp"

    @property
    def on_ray(self) -> bool:
        """Launched workers run under Ray Train (``cluster.backend=ray``), not ``accelerate launch``."""
        return self.launched and self.cluster is not None and self.cluster.backend is ClusterBackend.RAY


def accelerate_config(strategy: str) -> Path:
    """The accelerate config file of ``strategy`` in ``infra/accelerate/``; a typed error when missing."""
    path = ACCELERATE_CONFIG_DIR / ACCELERATE_CONFIGS.get(strategy, f"{strategy}.yaml")
    if not path.is_file():
        raise ModelError(
            f"no accelerate config {path} for training.strategy={strategy!r}; strategies: "
            f"{sorted(ACCELERATE_CONFIGS)} with their files in {ACCELERATE_CONFIG_DIR}"
        )
    return path


def launch_options(strategy: str, processes: int, dtype: str) -> list[str]:
    """The ``accelerate launch`` options of a multi-process update: the strategy's config file plus the
    command-line overrides (processes, mixed precision). The one declaration of the accelerate settings:
    :func:`launch_argv` launches with them, :func:`accelerate_env` derives what they set in a worker."""
    return [
        "--config_file", str(accelerate_config(strategy)),
        "--num_processes", str(processes), "--num_machines", "1",
        "--mixed_precision", _MIXED_PRECISION[dtype], "--dynamo_backend", "no",
        "--main_process_port", "0",
    ]  # fmt: skip


def launch_argv(strategy: str, processes: int, dtype: str, spec_path: Path) -> list[str]:
    """The ``accelerate launch`` command line of a multi-process update (the same on CPU and GPU)."""
    return [
        sys.executable, "-m", "accelerate.commands.launch", *launch_options(strategy, processes, dtype),
        "-m", WORKER_MODULE, str(spec_path),
    ]  # fmt: skip


def accelerate_env(strategy: str, processes: int, dtype: str) -> dict[str, str]:
    """The ``ACCELERATE_*`` / ``FSDP_*`` variables ``accelerate launch`` would set in each worker for
    :func:`launch_options` (mixed precision, FSDP plugin, DeepSpeed config, dynamo).

    For workers that accelerate does not launch (Ray Train's ``TorchTrainer``): there nothing reads the
    YAML, and an ``Accelerator`` falls back to its defaults (mixed precision 'no'). Derived by
    accelerate's own launcher code (checked against accelerate 1.16.0) from the same options, so the
    two paths cannot drift apart. The process-group variables (RANK, MASTER_ADDR, ...) and the thread
    count are the runner's.

    Example:
        >>> accelerate_env("ddp", 2, "bf16")["ACCELERATE_MIXED_PRECISION"]
        'bf16'
    """
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    argv = [*launch_options(strategy, processes, dtype), "-m", WORKER_MODULE, "SPEC"]
    args, defaults, mp_from_config = _validate_launch_command(launch_command_parser().parse_args(argv))
    if args.use_deepspeed:  # as accelerate.commands.launch.launch_command does before its deepspeed launcher
        fields = list(defaults.deepspeed_config) if defaults else []
        args.deepspeed_fields_from_accelerate_config = ",".join(
            [*fields, "mixed_precision"] if mp_from_config else fields
        )
        env = prepare_deepspeed_cmd_env(args)[1]
    else:
        env = prepare_multi_gpu_env(args)  # DDP and FSDP
    return {k: v for k, v in sorted(env.items()) if k.startswith(_ACCELERATE_ENV_PREFIXES)}


def worker_threads(placement: Placement) -> int | None:
    """Torch threads of each update worker on CPU: ``threads`` shared by the processes (None: not CPU)."""
    if placement.device != "cpu":
        return None
    return max(1, (placement.threads or os.cpu_count() or 1) // placement.processes)


def launch_update(
    model_dir: Path,
    prepared: list[TrainRow],
    cfg: TrainConfig,
    lora: LoraConfig,
    seed: int,
    placement: Placement,
    out: Path,
) -> dict[str, float]:
    """Run the update in ``placement.processes`` workers — ``accelerate launch`` on this machine, or
    Ray Train workers on the cluster (:attr:`Placement.on_ray`); rank 0 writes the checkpoint to ``out``.

    On Ray, ``out`` (and the spec, metrics and error files beside it) must be on storage every node
    sees: the caller passes a directory there (``tasks.stage.train_checkpoint``).
    """
    work = Path(tempfile.mkdtemp(prefix=".rla-train-", dir=out.parent))
    try:
        spec = WorkerSpec.model_validate(
            {
                "model_dir": model_dir.resolve(),  # absolute: workers may start elsewhere
                "out_dir": out.resolve(),
                "metrics_path": work / "metrics.json",
                "error_dir": work,
                "rows": prepared,
                "cfg": cfg,
                "lora": lora,
                "seed": seed,
                "device": placement.device,
                "dtype": placement.dtype,
                "threads": placement.threads,
            }
        )
        spec_path = work / "spec.json"
        spec.write(spec_path)
        threads = worker_threads(placement)
        thread_env = {"OMP_NUM_THREADS": str(threads)} if threads is not None else {}
        if placement.on_ray:
            from rla_core.cluster.ray_train import run_train_workers

            assert placement.cluster is not None
            what = f"training workers ({placement.strategy}, {placement.processes} processes on Ray Train)"
            env = {**accelerate_env(placement.strategy, placement.processes, placement.dtype), **thread_env}
            log.info("starting %s with %s", what, env)
            error = run_train_workers(
                placement.cluster, WORKER_MODULE, [str(spec_path)], processes=placement.processes,
                use_gpu=placement.device != "cpu", env=env, storage=work, timeout_s=placement.timeout_s, what=what,
            )  # fmt: skip
            failed = None if error is None else (f"{what} failed", f"the cluster's error:\n{error}")
        else:
            argv = launch_argv(placement.strategy, placement.processes, placement.dtype, spec_path)
            what = f"training workers ({placement.strategy}, {placement.processes} processes)"
            log.info("launching %s: %s", what, " ".join(argv))
            group = ProcessGroup.start(
                argv, kind="train", runtime_dir=default_runtime_dir("train"), log_path=work / "workers.log",
                env={**os.environ, **thread_env}, what=what, tethered=True,
            )  # fmt: skip
            with group:
                code = group.wait(placement.timeout_s)
            tail = f"last lines of the workers' log:\n{group.log_tail(40)}"
            failed = None if code == 0 else (f"{what} failed with exit code {code}", tail)
        if failed is not None:
            headline, tail = failed
            errors = sorted(work.glob("error-rank*.txt"))
            detail = "\n".join(p.read_text(errors="replace").split(ERROR_SEPARATOR)[0] for p in errors)
            raise ProcessError(f"{headline}: {detail or '(no worker error recorded)'}\n{tail}")
        metrics: dict[str, float] = json.loads((work / "metrics.json").read_text())
        return metrics
    finally:
        shutil.rmtree(work, ignore_errors=True)
