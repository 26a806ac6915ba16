"""Shared fixtures: a real S3 endpoint on loopback (moto server) and schema-shaped sample frames.

The S3 server starts lazily, once per session, only when a test asks for ``s3`` or ``s3_root``.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import polars as pl
import pytest

from flows.process_env import apply_process_defaults
from rla_core.schemas import get_schema

apply_process_defaults()  # the test session is an entry point: before any test imports Prefect


@dataclass(frozen=True)
class S3Endpoint:
    """A running moto S3 server and the options s3fs needs to reach it."""

    endpoint_url: str
    storage_options: dict[str, Any]

    def make_bucket(self) -> str:
        """Create a fresh bucket and return its name."""
        import s3fs

        name = f"rla-{uuid.uuid4().hex[:12]}"
        # No region_name in client_kwargs: moto rejects the location constraint (dependency notes).
        s3fs.S3FileSystem(**self.storage_options, skip_instance_cache=True).mkdir(name)
        return name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Endpoint]:
    """A moto S3 server on 127.0.0.1 (free port) for the whole session, stopped at the end."""
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as mp:
        # Fake credentials so boto never looks for real ones (no ~/.aws, no instance metadata).
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        port = _free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        url = f"http://127.0.0.1:{port}"
        try:
            yield S3Endpoint(
                endpoint_url=url,
                storage_options={
                    "key": "testing",
                    "secret": "testing",
                    "client_kwargs": {"endpoint_url": url},
                },
            )
        finally:
            server.stop()


@pytest.fixture
def s3_root(s3: S3Endpoint) -> str:
    """An ``s3://`` artifact root in a fresh bucket on the loopback server."""
    return f"s3://{s3.make_bucket()}/runs"


def _column_values(name: str, dtype: pl.DataType, rows: int) -> pl.Series:
    # Deterministic, varied values; every third value of a nullable-looking column is null so that
    # null handling round-trips too.
    if dtype == pl.String:
        values: list[Any] = [f"{name}-{i}-é✓" if i % 3 else None for i in range(rows)]
    elif dtype == pl.Int64:
        values = [i * 7 - 3 for i in range(rows)]
    elif dtype == pl.Float64:
        values = [(i - 1) / 4 if i % 3 else None for i in range(rows)]
    elif dtype == pl.Boolean:
        values = [i % 2 == 0 for i in range(rows)]
    elif dtype == pl.List(pl.String):
        values = [[f"{name}-{i}.png", f"{name}-{i}-b.png"] if i % 3 else None for i in range(rows)]
    elif dtype == pl.List(pl.Int64):
        values = [[i, i + 1, 50_000 + i] if i % 3 else None for i in range(rows)]
    elif dtype == pl.List(pl.Float64):
        values = [[-0.5 * i, -1.25] if i % 3 else None for i in range(rows)]
    else:
        raise AssertionError(f"sample_frame does not know dtype {dtype}; extend it")
    return pl.Series(name, values, dtype=dtype)


@pytest.fixture
def sample_frame() -> Callable[[str, int], pl.DataFrame]:
    """Build a frame matching artifact ``name``'s schema with ``rows`` deterministic rows."""

    def build(name: str, rows: int = 5) -> pl.DataFrame:
        schema = get_schema(name)
        return pl.DataFrame([_column_values(col, dtype, rows) for col, dtype in schema.columns.items()])

    return build


@pytest.fixture(autouse=True)
def _torch_threads_restored() -> Iterator[None]:
    """A test that changes torch's intra-op thread count (stages do: ``threads``) does not leak it.

    The thread count changes float reduction order, so a test's numbers must not depend on which tests
    ran before it in the session (a tolerance check once failed only after such a test).
    """
    import sys

    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    yield
    if before is not None and torch is not None and torch.get_num_threads() != before:
        torch.set_num_threads(before)
