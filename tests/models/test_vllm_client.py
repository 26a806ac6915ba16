"""The vLLM client side without vLLM: backend choice, served names, refusal of a server that serves another
model, and bounded concurrent requests in input order with per-request seeds.

The server here is a small real HTTP server on loopback that answers the two OpenAI endpoints the client
uses (``/v1/models``, ``/v1/completions``) — "another server answering on that port" is exactly the case the
name check exists for. The real vLLM server is exercised by the slow tests in ``test_vllm_server.py``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch

from rla_core.config import Backend, ModelsConfig, SamplingConfig, ServingConfig, load_config
from rla_core.errors import ModelError
from rla_core.models.generator import (
    GeneratorSpec,
    TransformersGenerator,
    VllmServerGenerator,
    resolve_backend,
)
from rla_core.models.serving import free_port, served_name


class _FakeOpenAI(ThreadingHTTPServer):
    served: list[str]
    delay_s: float
    active: int
    peak: int
    lock: threading.Lock


class _Handler(BaseHTTPRequestHandler):
    server: _FakeOpenAI

    def log_message(self, *args: Any) -> None:
        return None

    def _send(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send({"object": "list", "data": [{"id": name} for name in self.server.served]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        with srv.lock:
            srv.active += 1
            srv.peak = max(srv.peak, srv.active)
        time.sleep(srv.delay_s)
        with srv.lock:
            srv.active -= 1
        choices = [
            {"index": j, "text": f"{body['prompt']}|{body['seed']}|{j}", "finish_reason": "length",
             "logprobs": {"tokens": ["a"] * body["max_tokens"]}}
            for j in range(body["n"])
        ]  # fmt: skip
        self._send({"choices": choices, "usage": {"prompt_tokens": 3}})


@pytest.fixture
def fake_server() -> Iterator[_FakeOpenAI]:
    srv = _FakeOpenAI(("127.0.0.1", 0), _Handler)
    srv.served, srv.delay_s, srv.active, srv.peak, srv.lock = ["rla-k1-policy"], 0.05, 0, 0, threading.Lock()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(srv: _FakeOpenAI) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}/v1"


def test_served_name_is_unique_per_key_and_role() -> None:
    names = {served_name(k, r) for k in ("k1", "k2") for r in ("policy", "reward", "environment")}
    assert len(names) == 6 and served_name("k1", "policy") == "rla-k1-policy"
    with pytest.raises(ModelError, match="role 'critic'"):
        served_name("k1", "critic")
    with pytest.raises(ModelError, match="content key"):
        served_name("a/b", "policy")


def test_server_serving_another_model_is_refused(fake_server: _FakeOpenAI) -> None:
    url = _url(fake_server)
    with pytest.raises(ModelError) as err:
        VllmServerGenerator(url, model="rla-k2-policy")
    # Both the requested checkpoint and what the server serves are named; nothing falls back.
    assert "'rla-k2-policy'" in str(err.value) and "['rla-k1-policy']" in str(err.value)
    assert "refusing" in str(err.value)


def test_unreachable_endpoint_is_named() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ModelError, match=f"vLLM endpoint {url} is unreachable"):
        VllmServerGenerator(url, model="x")


def test_concurrent_requests_bounded_in_order_with_seeds(fake_server: _FakeOpenAI) -> None:
    gen = VllmServerGenerator(_url(fake_server), model="rla-k1-policy", max_in_flight=4)
    prompts = [f"p{i}" for i in range(16)]
    seeds = [1000 + 7 * i for i in range(16)]
    out = gen.generate(prompts, n=2, sampling=SamplingConfig(max_new_tokens=3), seed=0, seeds=seeds)
    gen.close()
    assert [[g.text for g in s] for s in out] == [
        [f"p{i}|{seeds[i]}|{j}" for j in range(2)] for i in range(16)
    ]
    assert all(g.completion_tokens == 3 and g.prompt_tokens == 3 for s in out for g in s)
    assert 1 < fake_server.peak <= 4  # requests overlapped, never more than max_in_flight
    with pytest.raises(ModelError, match="closed"):
        gen.generate(["x"], n=1, sampling=SamplingConfig(), seed=0)


def test_concurrent_requests_report_progress_as_answers_arrive(fake_server: _FakeOpenAI) -> None:
    from rla_core import progress

    lines: list[str] = []
    gen = VllmServerGenerator(_url(fake_server), model="rla-k1-policy", max_in_flight=4)
    reporter = progress.Reporter("judge iter 2", log=lines.append, tty=False, log_every_s=0.0)
    with progress.reporting(reporter):
        gen.generate([f"p{i}" for i in range(8)], n=3, sampling=SamplingConfig(max_new_tokens=2), seed=0)
    gen.close()
    # one line per answered request (3 sequences each): 3/24 ... 21/24; generation is an inner loop of
    # its stage (log_end=False), so its end line is left to the stage's own counter
    assert [line.split(": ")[1].split(" ")[0] for line in lines] == [f"{3 * k}/24" for k in range(1, 8)]
    assert lines[0].startswith("judge iter 2 generation: 3/24 sequences")


def test_vllm_backend_without_interpreter_is_an_error(tiny_model: Path, tmp_path: Path) -> None:
    serving = ServingConfig(backend=Backend.VLLM, interpreter=str(tmp_path / "no-venv" / "python"))
    spec = GeneratorSpec(tiny_model, ModelsConfig(serving=serving), threads=torch.get_num_threads())
    with (
        pytest.raises(ModelError, match=r"models\.serving\.interpreter=.*no-venv.*backend=transformers"),
        spec.open(),
    ):
        pass


def test_auto_backend(tiny_model: Path, tmp_path: Path) -> None:
    missing = ServingConfig(interpreter=str(tmp_path / "python"))
    assert resolve_backend(missing) is Backend.TRANSFORMERS
    present = ServingConfig(interpreter=sys.executable)
    assert resolve_backend(present) is (Backend.VLLM if torch.cuda.is_available() else Backend.TRANSFORMERS)
    spec = GeneratorSpec(
        tiny_model, ModelsConfig(serving=missing, device="cpu"), threads=torch.get_num_threads()
    )
    with spec.open() as gen:
        assert isinstance(gen, TransformersGenerator)


def test_speed_only_serving_keys_stay_out_of_stage_keys() -> None:
    from rla_core.stage_inputs import BootstrapInputs, RolloutInputs

    def keys(cfg: Any) -> tuple[Any, Any]:  # a stage that serves a model, and one that reads all of `models`
        return RolloutInputs.from_config(cfg).key_json(), BootstrapInputs.from_config(cfg).key_json()

    base = load_config()
    for override in (
        "models.serving.tensor_parallel.policy=4",
        "models.serving.max_in_flight=7",
        "models.serving.interpreter=/opt/vllm/bin/python",
        "models.serving.startup_timeout_s=60",
    ):
        assert keys(load_config(overrides=[override])) == keys(base), override
    for override in (
        "models.serving.backend=vllm",
        "models.serving.dtype=bfloat16",
        "models.serving.chat_template=true",
        "models.serving.extra_args=['--quantization', 'fp8']",
    ):
        changed = keys(load_config(overrides=[override]))
        assert changed[0] != keys(base)[0] and changed[1] != keys(base)[1], override


def test_stored_config_with_old_vllm_keys_upgrades() -> None:
    from rla_core.config import build_config, upgrade_stored_config

    stored = load_config().model_dump(mode="json")
    del stored["models"]["serving"]
    stored["models"] |= {"backend": "vllm", "vllm_base_url": "http://h:8000/v1", "vllm_tensor_parallel": 4}
    cfg = build_config(upgrade_stored_config(stored))
    assert cfg.models.serving.backend is Backend.VLLM
    assert stored["models"]["backend"] == "vllm"  # the stored dict itself is not changed
