"""Policy and reward-model updates on a Ray cluster: the accelerate worker under Ray Train's ``TorchTrainer``.

With ``cluster.backend=ray`` a launched update (``training.processes`` > 1, or FSDP/DeepSpeed) does not
``accelerate launch`` its workers on the stage's machine: :func:`run_train_workers` starts
``training.processes`` Ray Train workers (``cluster.cpus_per_worker``, ``gpus_per_worker`` on GPU, the
custom ``resources`` each, so ``{rla_shard: 1}`` puts one worker per node), and each runs the same
:func:`rla_core.models.train_worker.main` on the same spec file that ``accelerate launch`` would run.
``TorchTrainer`` sets up the process group (RANK, WORLD_SIZE, MASTER_ADDR, …; gloo on CPU, NCCL on
GPU); what ``accelerate launch`` would read from ``infra/accelerate/<strategy>.yaml`` (mixed precision,
FSDP, DeepSpeed) arrives as the ``ACCELERATE_*`` variables of :func:`rla_core.models.trainer.accelerate_env`,
and the torch threads as ``OMP_NUM_THREADS`` (Ray would set 1).

The spec, the checkpoint rank 0 writes, the metrics, the error files and Ray Train's own run state all
live under directories the caller chose on storage every node sees. Ray is imported lazily: nothing
here loads unless a run asks for the Ray backend.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rla_core.config import ClusterConfig


def run_train_workers(
    cluster: ClusterConfig,
    module: str,
    argv: list[str],
    *,
    processes: int,
    use_gpu: bool,
    env: dict[str, str],
    storage: Path,
    entry: Callable[[list[str]], int] | None = None,
) -> str | None:
    """``main(argv)`` of ``module`` on ``processes`` Ray Train workers, each with ``env`` set first.

    ``module`` is named, not imported here, as ``accelerate launch -m`` names it (the trainer passes
    :data:`rla_core.models.trainer.WORKER_MODULE`, whose module imports the trainer); ``entry``, when given,
    runs instead of the module's ``main`` (tests pass a probe). Returns None
    when every worker finished, else the cluster's error (its first lines); the failing rank's own error
    is in the spec's ``error_dir`` (``error-rank<r>.txt``), as with ``accelerate launch``. ``storage``:
    where Ray Train keeps its run state (a directory every node sees).
    """
    import ray.train
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from rla_core.cluster.ray_session import connect

    connect(cluster.model_copy(update={"workers": processes}))  # an embedded Ray sized for the workers
    resources: dict[str, float] = {"CPU": cluster.cpus_per_worker, **cluster.resources}
    if use_gpu:
        resources["GPU"] = cluster.gpus_per_worker or 1.0
    trainer = TorchTrainer(
        _worker,
        train_loop_config={"module": module, "argv": argv, "env": env, "entry": entry},
        scaling_config=ScalingConfig(num_workers=processes, use_gpu=use_gpu, resources_per_worker=resources),
        run_config=RunConfig(
            name="ray-train", storage_path=str(storage), failure_config=FailureConfig(max_failures=0)
        ),
    )
    try:
        trainer.fit()
    except ray.train.TrainingFailedError as exc:
        return "\n".join(str(exc).splitlines()[:20])
    return None


def _worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: the accelerate settings and thread count, then the accelerate worker."""
    os.environ.update(config["env"])
    entry = config["entry"] or importlib.import_module(config["module"]).main
    code = entry(config["argv"])
    if code != 0:
        raise RuntimeError(f"{entry.__qualname__}({config['argv']}) returned {code}")
