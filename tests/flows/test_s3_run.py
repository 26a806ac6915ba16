"""A full run with artifact_root on S3 (a moto server on loopback), checkpoints included, resumed from S3."""

from __future__ import annotations

from rla_core.store import ArtifactStore
from tests.conftest import S3Endpoint
from tests.flows.conftest import FlowEnv


def test_run_on_s3_then_resume_to_more_iterations(flow_env: FlowEnv, s3: S3Endpoint) -> None:
    root = f"s3://{s3.make_bucket()}/runs"
    env = dict(flow_env.env) | {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "FSSPEC_S3_ENDPOINT_URL": s3.endpoint_url,  # fsspec's config: s3fs gets endpoint_url from it
    }
    remote = FlowEnv(base=flow_env.base, env=env)
    remote.rla(
        "run", "--preset", "test", *flow_env.settings(root), "--set", "iterations=1", "--run-id", "s3run"
    )
    store = ArtifactStore(root, storage_options=s3.storage_options)
    policy_1 = store.manifest("s3run", 1, "train_policy")
    assert policy_1 is not None and any(e.path.startswith("policy/") for e in policy_1.artifacts)

    # A second process continues from what is on S3: iteration 2 starts from iteration 1's checkpoints.
    remote.rla("resume", "s3run", "--iterations", "2", "--root", root)
    assert store.manifest("s3run", 1, "train_policy") == policy_1  # not re-run
    rollout_2 = store.manifest("s3run", 2, "rollout")
    assert rollout_2 is not None and rollout_2.inputs["policy"] == policy_1.content_key
    assert store.read_frame("s3run", 2, "rollout", "rollouts").height > 0
    status = remote.rla("status", "s3run", "--root", root)
    assert "evaluate" in status.stdout
