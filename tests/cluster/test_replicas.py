"""Replicas per generating role: how many shards a stage cuts, and what each shard's Ray actor
reserves, derived from ``cluster.*`` and ``models.serving.tensor_parallel`` (no Ray started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rla_core.cluster.ray_session import ShardRequest, _embedded_init, _shortfall, shard_needs, stage_needs
from rla_core.config import ClusterConfig, RunConfig, load_config, speed_only
from rla_core.dispatch import shard_request
from rla_core.errors import ConfigError
from rla_core.models.generator import GeneratorSpec
from rla_core.stage_inputs import GenerationModels

FIELDS = set(GenerationModels.model_fields)
PAPER_TP = "models.serving.tensor_parallel={policy: 4, reward: 8, environment: 8}"


def _spec(cfg: RunConfig, role: str) -> ShardRequest:
    """What a shard opening the role's generator asks for (the dispatch layer reads it off the spec)."""
    return shard_request(
        GeneratorSpec(
            checkpoint=Path("ckpt"),
            models=GenerationModels.model_validate(cfg.models.model_dump(include=FIELDS)),
            role=role,
            name=None,
            threads=1,
        )
    )


def _cfg(*overrides: str) -> RunConfig:
    return load_config(preset="test", overrides=["cluster.backend=ray", *overrides])


def test_replicas_per_role_default_to_workers() -> None:
    cfg = _cfg("cluster.workers=3", "cluster.replicas={policy: 2, reward: 1}").cluster
    assert [cfg.replicas_for(r) for r in ("policy", "reward", "environment")] == [2, 1, 3]
    assert cfg.most_actors() == 3
    assert _cfg("cluster.workers=1", "cluster.replicas.policy=4").cluster.most_actors() == 4
    assert _cfg().cluster.replicas_for("policy") == 2  # no replicas set: cluster.workers (default 2)
    assert speed_only("cluster.replicas.policy")  # like every cluster key: never in a stage key


def test_a_vllm_replica_on_gpus_reserves_its_roles_tensor_parallel_gpus() -> None:
    """The paper's 8-GPU node: two TP-4 policy replicas (4 + 4 = 8 GPUs), one TP-8 judge (8 GPUs)."""
    cfg = _cfg(
        "models.serving.backend=vllm", PAPER_TP, "cluster.gpus_per_worker=1",
        "cluster.replicas={policy: 2, reward: 1}", "cluster.resources={rla_gpu_node: 1}",
    )  # fmt: skip
    policy, reward = _spec(cfg, "policy"), _spec(cfg, "reward")
    assert shard_needs(cfg.cluster, policy) == {"CPU": 1.0, "GPU": 4.0, "rla_gpu_node": 1.0}
    assert shard_needs(cfg.cluster, reward) == {"CPU": 1.0, "GPU": 8.0, "rla_gpu_node": 1.0}
    rollout = stage_needs(cfg.cluster, policy, cfg.cluster.replicas_for("policy"))
    judge = stage_needs(cfg.cluster, reward, cfg.cluster.replicas_for("reward"))
    assert rollout == {"CPU": 2.0, "GPU": 8.0, "rla_gpu_node": 2.0}
    assert judge == {"CPU": 1.0, "GPU": 8.0, "rla_gpu_node": 1.0}
    # An embedded Ray counts this machine's GPUs (None) and holds CPUs for the most actors of a stage.
    init = _embedded_init(cfg.cluster)
    assert (init["num_cpus"], init["num_gpus"], init["resources"]) == (2, None, {"rla_gpu_node": 2.0})


def test_shards_without_a_vllm_server_on_gpus_reserve_gpus_per_worker() -> None:
    # The CPU vLLM build (gpus_per_worker=0): no GPUs, whatever the tensor-parallel size says.
    cpu = _cfg("models.serving.backend=vllm", PAPER_TP, "cluster.cpus_per_worker=0.5")
    assert shard_needs(cpu.cluster, _spec(cpu, "policy")) == {"CPU": 0.5}
    assert _embedded_init(cpu.cluster)["num_gpus"] == 0
    # transformers computes in the actor's own process: gpus_per_worker, not the tensor-parallel size.
    hf = _cfg("models.serving.backend=transformers", PAPER_TP, "cluster.gpus_per_worker=0.5")
    assert shard_needs(hf.cluster, _spec(hf, "policy")) == {"CPU": 1.0, "GPU": 0.5}
    # auto serves with vLLM only where its interpreter exists; a missing one means transformers.
    auto = _cfg("models.serving.interpreter=/nonexistent/python", PAPER_TP, "cluster.gpus_per_worker=1")
    assert shard_needs(auto.cluster, _spec(auto, "reward")) == {"CPU": 1.0, "GPU": 1.0}
    # Work that generates nothing (sandbox batches).
    assert shard_needs(ClusterConfig(gpus_per_worker=1), ShardRequest()) == {"CPU": 1.0, "GPU": 1.0}


def test_a_generators_shard_request_names_its_threads_role_and_vllm_gpus() -> None:
    vllm = _cfg("models.serving.backend=vllm", PAPER_TP)
    assert _spec(vllm, "reward") == ShardRequest(threads=1, role="reward", vllm_gpus=8)
    hf = _cfg("models.serving.backend=transformers", PAPER_TP)
    assert _spec(hf, "policy") == ShardRequest(threads=1, role="policy", vllm_gpus=None)


def test_bad_replica_counts_are_config_errors_that_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"cluster\.replicas\.policy.*greater than or equal to 1"):
        _cfg("cluster.replicas.policy=0")
    with pytest.raises(ConfigError, match=r"unknown key 'cluster\.replicas\.judge'"):
        _cfg("cluster.replicas.judge=2")
    with pytest.raises(ConfigError, match=r"role 'judge' has no cluster\.replicas entry"):
        ClusterConfig().replicas_for("judge")


def test_a_stage_too_big_for_the_cluster_names_what_it_lacks() -> None:
    cfg = _cfg(
        "models.serving.backend=vllm", PAPER_TP, "cluster.gpus_per_worker=1", "cluster.replicas.policy=3"
    )
    needs = stage_needs(cfg.cluster, _spec(cfg, "policy"), cfg.cluster.replicas_for("policy"))
    eight_gpus = {"CPU": 16.0, "GPU": 8.0, "memory": 1e11}
    assert _shortfall(needs, eight_gpus) == "12 GPU needed, 8 in all"  # 3 TP-4 replicas on 8 GPUs
    assert _shortfall(stage_needs(cfg.cluster, _spec(cfg, "policy"), 2), eight_gpus) == ""


def test_an_embedded_ray_that_keeps_replicas_holds_them_beside_a_stages_own_actors() -> None:
    """With vLLM and lifetime run the run keeps one actor per replica of every role (the slow Ray test's
    sizes: 2 policy replicas, workers=1 for the rest); a stage's own actors (sandbox batches) come on top."""
    from rla_core.cluster.ray_session import keep_actors

    cfg = _cfg("cluster.workers=1", "cluster.replicas.policy=2").cluster
    assert cfg.kept_actors() == 2 + 1 + 1  # policy, reward (workers), environment (workers)
    assert _embedded_init(cfg)["num_cpus"] == 2  # no actors kept: the most one stage starts
    with keep_actors():
        assert _embedded_init(cfg)["num_cpus"] == 4 + 1
