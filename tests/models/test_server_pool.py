"""The run's vLLM server pool, without vLLM: the weights hash, the start identity, the pool's decisions,
and a pool over stand-in servers (start, reuse, reload, restart on death or on a failed reload, a server
of its own for a conflicting lease, everything stopped at the end). The real server: test_vllm_server.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from rla_core.config import Backend, ServerLifetime, ServingConfig
from rla_core.errors import ModelError
from rla_core.models import server_pool
from rla_core.models.server_pool import Action, Held, active_pool, decide, pool_name, run_servers
from rla_core.models.serving import start_files, start_identity
from rla_core.models.vllm_worker import weights_hash

SERVING = ServingConfig(backend=Backend.VLLM)


def _ckpt(path: Path, weights: bytes, config: str = '{"model_type": "qwen2"}') -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(config)
    (path / "tokenizer.json").write_text("{}")
    (path / "model.safetensors").write_bytes(weights)
    return path


def test_weights_hash_is_content_only(tmp_path: Path) -> None:
    a = _ckpt(tmp_path / "a", b"w1")
    b = _ckpt(tmp_path / "b", b"w1", config='{"other": 1}')  # same weights, elsewhere, other config
    c = _ckpt(tmp_path / "c", b"w2")
    assert weights_hash(a) == weights_hash(b) != weights_hash(c)
    (c / "model.safetensors").write_bytes(b"w1")
    (c / "model-00002.safetensors").write_bytes(b"")  # an extra (even empty) shard counts
    assert weights_hash(c) != weights_hash(a)
    with pytest.raises(FileNotFoundError, match=r"no \*\.safetensors"):
        weights_hash(tmp_path)


def test_start_identity_ignores_weights_only(tmp_path: Path) -> None:
    a = _ckpt(tmp_path / "a", b"w1")
    b = _ckpt(tmp_path / "b", b"w2")
    c = _ckpt(tmp_path / "c", b"w1", config='{"model_type": "llama"}')
    assert [p.name for p in start_files(a)] == ["config.json", "tokenizer.json"]
    ident = start_identity(a, role="policy", serving=SERVING)
    assert start_identity(b, role="policy", serving=SERVING) == ident  # a reload can change weights
    assert start_identity(c, role="policy", serving=SERVING) != ident  # not the config
    assert start_identity(a, role="reward", serving=SERVING) != ident
    other = SERVING.model_copy(update={"extra_args": ("--max-model-len", "64")})
    assert start_identity(a, role="policy", serving=other) != ident


@pytest.mark.parametrize(
    ("held", "expected"),
    [
        (None, Action.START),
        (Held("i", "w", alive=True), Action.REUSE),
        (Held("i", "w0", alive=True), Action.RELOAD),
        (Held("i", "w", alive=False), Action.RESTART),  # killed or crashed
        (Held("i0", "w", alive=True), Action.RESTART),  # another config or tokenizer: a reload cannot do it
        (Held("i", "w", alive=True, leases=1), Action.REUSE),  # two leases of the same weights share it
        (Held("i", "w0", alive=True, leases=1), Action.OWN),  # in use for other weights
        (Held("i0", "w", alive=True, leases=2), Action.OWN),
    ],
)
def test_decide(held: Held | None, expected: Action) -> None:
    assert decide(held, identity="i", weights="w") is expected


class FakeServer:
    """Stands in for VllmServer: holds a weights hash, can die, can refuse reloads."""

    started: ClassVar[list[FakeServer]] = []

    def __init__(self, checkpoint: Path, name: str) -> None:
        self.checkpoint, self.name, self.held = checkpoint, name, weights_hash(checkpoint)
        self.running, self.reload_fails, self.reloads = True, False, 0
        self.base_url = f"http://fake/{len(FakeServer.started)}/v1"
        FakeServer.started.append(self)

    @classmethod
    def start(cls, checkpoint: Path, *, name: str, **_: Any) -> FakeServer:
        return cls(Path(checkpoint), name)

    def alive(self) -> bool:
        return self.running

    def stop(self) -> None:
        self.running = False

    def reload(self, checkpoint: Path, expected: str | None = None) -> float:
        if self.reload_fails:
            raise ModelError("reload refused")
        self.held, self.checkpoint, self.reloads = weights_hash(checkpoint), checkpoint, self.reloads + 1
        return 0.0

    def require_weights(self, checkpoint: Path, expected: str | None = None) -> None:
        if self.held != (expected or weights_hash(checkpoint)):
            raise ModelError(f"holds {self.held}, not {checkpoint}")

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeServer]]:
    FakeServer.started = []
    monkeypatch.setattr(server_pool, "VllmServer", FakeServer)
    yield FakeServer


def test_pool_starts_once_reloads_and_restarts(tmp_path: Path, fake: type[FakeServer]) -> None:
    c1, c2 = _ckpt(tmp_path / "c1", b"w1"), _ckpt(tmp_path / "c2", b"w2")
    r1 = _ckpt(tmp_path / "r1", b"r1")
    with run_servers(SERVING) as pool:
        assert pool is not None and active_pool() is pool
        with pool.lease(c1, role="policy", serving=SERVING) as s:
            assert s.name == pool_name("policy") and s.held == weights_hash(c1)
        with pool.lease(c1, role="policy", serving=SERVING) as again:
            assert again is s  # same weights: reused
        with pool.lease(r1, role="reward", serving=SERVING) as rm:
            assert rm is not s and rm.name == pool_name("reward")
        with pool.lease(c2, role="policy", serving=SERVING) as s2:
            assert s2 is s and s.reloads == 1 and s.held == weights_hash(c2)
        s.stop()  # killed between stages: the next lease restarts it on the asked weights
        with pool.lease(c1, role="policy", serving=SERVING) as s3:
            assert s3 is not s and s3.alive() and s3.held == weights_hash(c1)
        s3.reload_fails = True  # a server that cannot reload is replaced
        with pool.lease(c2, role="policy", serving=SERVING) as s4:
            assert s4 is not s3 and not s3.alive() and s4.held == weights_hash(c2)
        assert pool.counts == {
            Action.START: 2, Action.REUSE: 1, Action.RELOAD: 2, Action.RESTART: 2,
        }  # fmt: skip
    assert active_pool() is None
    assert len(fake.started) == 4 and not any(s.alive() for s in fake.started)


def test_pool_conflicting_lease_gets_its_own_server(tmp_path: Path, fake: type[FakeServer]) -> None:
    c1, c2 = _ckpt(tmp_path / "c1", b"w1"), _ckpt(tmp_path / "c2", b"w2")
    with run_servers(SERVING) as pool:
        assert pool is not None
        with pool.lease(c1, role="policy", serving=SERVING) as s1:
            with pool.lease(c2, role="policy", serving=SERVING) as own:
                assert own is not s1 and own.held == weights_hash(c2) and s1.held == weights_hash(c1)
            assert not own.alive() and s1.alive()  # the lease's own server ends with the lease
        with pool.lease(c2, role="policy", serving=SERVING) as s:
            assert s is s1 and s.reloads == 1


def test_pool_stops_servers_on_error(tmp_path: Path, fake: type[FakeServer]) -> None:
    c1 = _ckpt(tmp_path / "c1", b"w1")
    with pytest.raises(RuntimeError, match="stage failed"), run_servers(SERVING) as pool:
        assert pool is not None
        with pool.lease(c1, role="policy", serving=SERVING):
            raise RuntimeError("stage failed")
    assert fake.started and not fake.started[0].alive() and active_pool() is None


def test_stage_lifetime_opens_no_pool(tmp_path: Path) -> None:
    with run_servers(SERVING.model_copy(update={"lifetime": ServerLifetime.STAGE})) as pool:
        assert pool is None and active_pool() is None


def test_weights_hash_reads_the_files_each_time(tmp_path: Path) -> None:
    """Copies hash equal (checkpoints are compared by content, not by path)."""
    a = _ckpt(tmp_path / "a", b"abc")
    shutil.copytree(a, tmp_path / "copy")
    assert weights_hash(tmp_path / "copy") == weights_hash(a)


def test_a_ray_replica_holds_a_pool_of_its_own_while_the_run_keeps_its_actors(
    tmp_path: Path, fake: type[FakeServer]
) -> None:
    """What a kept Ray actor runs (no Ray here): the run's pool decides that shards hold a pool, the
    replica's pool is the active one in its process, and the run folds what each replica did into its
    summary once the kept actors are released."""
    from rla_core.cluster import ray_session
    from rla_core.cluster.ray_session import ShardRequest

    c1, c2 = _ckpt(tmp_path / "c1", b"w1"), _ckpt(tmp_path / "c2", b"w2")
    assert server_pool.replica_hold(SERVING) is None  # no run keeps servers: a per-stage actor
    # (an actor's process has no run pool of its own: what its hold opens is the active one there)
    with server_pool.replica_servers() as counts:
        replica = active_pool()
        assert replica is not None
        for ckpt in (c1, c1, c2):  # evaluate@0, rollout@1 (same weights), evaluate@1 (trained)
            with replica.lease(ckpt, role="policy", serving=SERVING):
                pass
    assert active_pool() is None and not any(s.alive() for s in fake.started)
    assert counts == {Action.START: 1, Action.REUSE: 1, Action.RELOAD: 1}
    with run_servers(SERVING) as pool:
        assert pool is not None and ray_session._keeper is not None  # the run keeps its Ray actors
        assert server_pool.replica_hold(SERVING) is server_pool.replica_servers
        hf = SERVING.model_copy(update={"backend": Backend.TRANSFORMERS})
        assert server_pool.replica_hold(hf) is None  # no vLLM server to keep: per-stage actors
        ray_session._keeper.released.append((ShardRequest(role="policy"), 1, counts))  # what close hands back
    assert ray_session._keeper is None
    assert pool.summary() == "vLLM servers of the run: here none; policy replica 2 reload=1 reuse=1 start=1"
    with run_servers(SERVING.model_copy(update={"backend": Backend.TRANSFORMERS})) as pool:
        assert ray_session._keeper is None  # a transformers run keeps no actors: its Ray is sized as before
