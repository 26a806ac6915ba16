"""Where a run computes and keeps its records: the cluster, tracking and storage sections, and the speed-only keys."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from rla_core.config.base import (
    _Section,
)
from rla_core.config.choices import (
    ClusterBackend,
)
from rla_core.errors import ConfigError

# Keys that change how fast or where a stage computes, never what it produces: stages read them through
# their typed slices (rla_core.stage_inputs) but they are left out of content keys, so moving a run to
# more GPUs, processes or another machine keeps its cached stages. The one declaration of that rule.
SPEED_ONLY_KEYS: tuple[str, ...] = (
    "models.serving.interpreter",
    "models.serving.tensor_parallel",
    "models.serving.max_in_flight",
    "models.serving.startup_timeout_s",
    # A reloaded server holds the same weights (checked by hash) as one started on the checkpoint.
    "models.serving.lifetime",
    # Rows are generated per prompt from their own seeded stream, so how prompts are batched does not
    # change them (tests/envs/test_rollout.py: joint = per-episode rows); the device only changes float
    # reduction order, as training.device below. The dtype it picks with models.serving.dtype=auto does
    # change rows: that enters the generating stages' keys resolved (stage_inputs.GenerationModels).
    "models.generation_batch_size",
    "models.device",
    # Content-addressed caches: where they live changes nothing they hold.
    "models.cache_dir",
    "textgame.game_cache_dir",
    # OSWorld: how many desktops play at once (episodes are cut into waves, each played alone: the same rows),
    # and where the downloaded task files live and come from (a missing file makes a task unavailable, never
    # different).
    "gui.osworld.desktops",
    "gui.osworld.cache_dir",
    "gui.osworld.mirrors",
    # Where updates run: same objective, row order and effective batch on every placement;
    # only float reduction order differs (2 CPU processes with one thread each match 1 bit for bit),
    # like tensor_parallel above. training.dtype is NOT here: bf16/fp16 autocast changes the numbers.
    "training.device",
    "training.processes",
    "training.strategy",
    "training.worker_timeout_s",
    # Where generating stages run: shards are cut from the canonical episode/step order and
    # every row is sampled from its own seeded stream, so the merged artifacts equal the local ones.
    "cluster",
)


def speed_only(key: str) -> bool:
    """Whether dotted config ``key`` is (or lies under) one of :data:`SPEED_ONLY_KEYS`."""
    return any(key == k or key.startswith(f"{k}.") for k in SPEED_ONLY_KEYS)


class RoleReplicas(_Section):
    """Shards (replicas of the stage's input checkpoint) per generating role; null: ``cluster.workers``."""

    policy: int | None = Field(None, ge=1, description="Rollout and evaluate shards.")
    reward: int | None = Field(None, ge=1, description="Judge shards.")
    environment: int | None = Field(None, ge=1, description="Shards generating with the environment model.")


class ClusterConfig(_Section):
    """Sharding generating stages and running updates over Ray (docs/cluster.md). Every key is speed-only
    (SPEED_ONLY_KEYS)."""

    backend: ClusterBackend = Field(
        ClusterBackend.LOCAL,
        description="'local': each stage plays, judges and evaluates in its own process; 'ray': it splits its "
        "work into deterministic shards ('replicas' of its role, else 'workers'), one Ray actor each, and merges them in canonical order, "
        "and multi-process updates (training.processes > 1, fsdp, deepspeed) run as training.processes Ray "
        "Train workers with the per-worker resources below instead of `accelerate launch`.",
    )
    address: str | None = Field(
        None,
        description="null: start an embedded Ray for this process (stopped at exit); 'auto' or 'ray://host:port' "
        "or 'host:port': attach to a running cluster.",
    )
    workers: int = Field(
        2,
        ge=1,
        description="Shards (one Ray actor each) per generating stage, unless 'replicas' sets its role's "
        "count; also the Ray workers of sandboxed executions.",
    )
    replicas: RoleReplicas = Field(
        default_factory=lambda: RoleReplicas(),
        description="Shards per generating stage by the role it generates with (policy: rollout and "
        "evaluate; reward: judge), each serving the stage's input checkpoint; null: 'workers'.",
    )
    cpus_per_worker: float = Field(1.0, gt=0.0, description="Ray CPUs reserved by each shard's actor.")
    gpus_per_worker: float = Field(
        0.0,
        ge=0.0,
        description="Ray GPUs reserved by each actor that computes in its own process (transformers "
        "shards, Ray Train workers). Above 0 also puts vLLM shards on GPUs: each reserves its role's "
        "models.serving.tensor_parallel GPUs (0: the CPU vLLM build, no GPUs).",
    )
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources each actor needs, e.g. {'rla_worker': 1} on nodes started with "
        "--resources '{\"rla_worker\": 1}' to place one shard per node.",
    )
    node_ip_address: str | None = Field(
        None, description="Embedded Ray only: the node address to bind (e.g. 127.0.0.1); null lets Ray pick."
    )
    start_timeout_s: float = Field(
        120.0, gt=0.0, description="Seconds to wait for the shard actors to start."
    )
    connect_timeout_s: float = Field(
        5.0,
        gt=0.0,
        le=600.0,
        description="Seconds the preflight (`rla config check`, and every run before it writes anything) "
        "waits for 'address' to accept a connection; past it the run is refused.",
    )

    def replicas_for(self, role: str) -> int:
        """Shards of a stage that generates with ``role``: ``replicas.<role>``, or ``workers`` when null."""
        if str(role) not in RoleReplicas.model_fields:
            raise ConfigError(
                f"role {role!r} has no cluster.replicas entry; roles: {', '.join(RoleReplicas.model_fields)}"
            )
        count = getattr(self.replicas, str(role))
        return self.workers if count is None else int(count)

    def most_actors(self) -> int:
        """The most shard actors one stage starts: what an embedded Ray is sized for."""
        return max([self.workers, *(n for n in self.replicas.model_dump().values() if n is not None)])

    def kept_actors(self) -> int:
        """The most replica actors a run keeps at once (vLLM with ``models.serving.lifetime: run``, each with
        its own server: docs/gpus-and-scale.md#server-lifetime): one per replica of every role."""
        return sum(self.replicas_for(role) for role in RoleReplicas.model_fields)


class TrackingConfig(_Section):
    """MLflow tracking."""

    mlflow_uri: str = Field("sqlite:///mlflow.db", description="MLflow tracking URI.")
    experiment: str = Field("rlanything", description="MLflow experiment name.")


class StorageConfig(_Section):
    """Checkpoint retention (operations.md, "Checkpoint retention"): iteration 0 is never pruned."""

    # No stage reads it (it is in no stage slice), so changing it re-runs nothing.

    keep_last: int | None = Field(
        None,
        description="Keep the checkpoints of the last k iterations (any of their stages can re-run) and the "
        "ones the earliest of them started from; older ones are deleted after each iteration. null: keep all.",
    )
    keep_every: int | None = Field(None, description="Also keep iterations n, 2n, …; needs keep_last.")

    @model_validator(mode="after")
    def _at_least_one(self) -> Self:
        for key, value in (("keep_last", self.keep_last), ("keep_every", self.keep_every)):
            if value is not None and value < 1:
                raise ValueError(f"storage.{key}={value}: must be at least 1; null keeps every checkpoint")
        if self.keep_every is not None and self.keep_last is None:
            raise ValueError(
                f"storage.keep_every={self.keep_every} thins what keep_last prunes, and keep_last is null (keep "
                "everything): set storage.keep_last too, or leave keep_every null"
            )
        return self

    def describe(self) -> str:
        """``storage.keep_last=2, storage.keep_every=5``: the setting as an error message names it."""
        return ", ".join(f"storage.{k}={'null' if v is None else v}" for k, v in self.model_dump().items())
