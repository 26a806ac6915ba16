"""Policy and reward-model updates on a Ray cluster: the accelerate worker under Ray Train's ``TorchTrainer``.

With ``cluster.backend=ray`` a launched update (``training.processes`` > 1, or FSDP/DeepSpeed) does not
``accelerate launch`` its workers on the stage's machine: :func:`run_train_workers` starts
``training.processes`` Ray Train workers (``cluster.cpus_per_worker``, ``gpus_per_worker`` on GPU, the
custom ``resources`` each, so ``{rla_shard: 1}`` puts one worker per node), and each runs the same
:func:`rla_core.models.train_worker.main` on the same spec file that ``accelerate launch`` would run.
``TorchTrainer`` sets up the process group (RANK, WORLD_SIZE, MASTER_ADDR, …; gloo on CPU, NCCL on
GPU); what ``accelerate launch`` would read from ``infra/accelerate/<strategy>.yaml`` (mixed precision,
FSDP, DeepSpeed) arrives as the ``ACCELERATE_*`` variables of :func:`rla_core.models.launch.accelerate_env`,
and the torch threads as ``OMP_NUM_THREADS`` (Ray would set 1).

The spec, the checkpoint rank 0 writes, the metrics, the error files and Ray Train's own run state all
live under directories the caller chose on storage every node sees. Ray is imported lazily: nothing
here loads unless a run asks for the Ray backend.

``timeout_s`` (``training.worker_timeout_s``) bounds the whole update as it bounds ``accelerate launch``:
workers that cannot all be placed fail it after that long (Ray Train's worker-group start timeout,
``RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S``, with no controller retries: by default it would retry
forever); an embedded Ray that can never hold them fails it at once; and each worker runs a watchdog
that ends its process at the update's deadline (the driver's clock plus ``timeout_s``), which Ray
Train sees as a lost worker: it stops the others and fails the run. Either way the caller gets a
:class:`~rla_core.errors.ProcessError` saying the workers did not finish within ``timeout_s``.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rla_core.config import ClusterConfig
from rla_core.errors import ProcessError

START_TIMEOUT_ENV = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"  # read by Ray Train's controller (Ray 2.60)
TIMEOUT_EXIT_CODE = 124  # a worker's exit code at the deadline (as timeout(1))


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
    timeout_s: float | None = None,
    what: str = "training workers",
) -> str | None:
    """``main(argv)`` of ``module`` on ``processes`` Ray Train workers, each with ``env`` set first.

    ``module`` is named, not imported here, as ``accelerate launch -m`` names it (the trainer passes
    :data:`rla_core.models.launch.WORKER_MODULE`, whose module imports the update loop); ``entry``, when given,
    runs instead of the module's ``main`` (tests pass a probe). Returns None
    when every worker finished, else the cluster's error (its first lines); the failing rank's own error
    is in the spec's ``error_dir`` (``error-rank<r>.txt``), as with ``accelerate launch``. ``storage``:
    where Ray Train keeps its run state (a directory every node sees). ``timeout_s`` (None: no bound):
    the update's bound (module docstring); past it, a :class:`~rla_core.errors.ProcessError` naming
    ``what``, and no worker is left running.
    """
    import ray
    import ray.train
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from rla_core.cluster.ray_session import _needs, _shortfall, connect

    connect(cluster.model_copy(update={"workers": processes}))  # an embedded Ray sized for the workers
    resources: dict[str, float] = {"CPU": cluster.cpus_per_worker, **cluster.resources}
    if use_gpu:
        resources["GPU"] = cluster.gpus_per_worker or 1.0
    short = _shortfall({k: v * processes for k, v in resources.items()}, ray.cluster_resources())
    if cluster.address is None and short:  # an embedded Ray never grows: the workers could never start
        raise ProcessError(
            f"{what} cannot start: {processes} Ray Train workers need {_needs(resources)} each, more than "
            f"this machine's embedded Ray has ({short}); lower training.processes or the per-worker resources"
        )
    deadline = None if timeout_s is None else time.time() + timeout_s
    trainer = TorchTrainer(
        _worker,
        train_loop_config={"module": module, "argv": argv, "env": env, "entry": entry, "deadline": deadline},
        scaling_config=ScalingConfig(num_workers=processes, use_gpu=use_gpu, resources_per_worker=resources),
        run_config=RunConfig(
            name="ray-train",
            storage_path=str(storage),
            # No retry of the workers, nor of a worker group that could not start in time. (Ray Train v2's
            # FailureConfig, what ray.train exports by default; the type stubs describe v1's.)
            failure_config=FailureConfig(max_failures=0, controller_failure_limit=0),  # type: ignore[call-arg]
        ),
    )
    try:
        with _start_timeout(timeout_s):
            trainer.fit()
    except ray.train.TrainingFailedError as exc:
        error = "\n".join(str(exc).splitlines()[:20])
        if deadline is not None and time.time() >= deadline:
            raise ProcessError(
                f"{what} did not finish within {timeout_s}s (training.worker_timeout_s); Ray Train stopped "
                f"its workers. The cluster's error:\n{error}"
            ) from None
        return error
    return None


@contextmanager
def _start_timeout(timeout_s: float | None) -> Iterator[None]:
    """Ray Train's worker-group start timeout set to ``timeout_s`` while the trainer starts (the driver's
    variable is passed on to its controller); the process's own value afterwards."""
    if timeout_s is None:
        yield
        return
    before = os.environ.get(START_TIMEOUT_ENV)
    os.environ[START_TIMEOUT_ENV] = str(timeout_s)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(START_TIMEOUT_ENV, None)
        else:
            os.environ[START_TIMEOUT_ENV] = before


def _worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: the accelerate settings and thread count, a watchdog that ends this process at
    the update's deadline (a hung rank cannot hold the run past it), then the accelerate worker."""
    if config["deadline"] is not None:
        watchdog = threading.Timer(max(0.0, config["deadline"] - time.time()), os._exit, (TIMEOUT_EXIT_CODE,))
        watchdog.daemon = True
        watchdog.start()
    os.environ.update(config["env"])
    entry = config["entry"] or importlib.import_module(config["module"]).main
    code = entry(config["argv"])
    if code != 0:
        raise RuntimeError(f"{entry.__qualname__}({config['argv']}) returned {code}")
