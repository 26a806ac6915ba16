"""The recording endpoint: a real HTTP server on loopback in front of the in-process tiny policy, driven by
OpenAI's own client (streaming and not), its records checked against the checkpoint."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import polars as pl
import pytest
import torch

from rla_core.algo.seeds import turn_seed
from rla_core.config import SamplingConfig, load_config
from rla_core.models.chat import EndpointRecord
from rla_core.models.endpoint import RecordingEndpoint
from rla_core.models.generator import TransformersGenerator
from rla_core.models.logprobs import scored_token_logps
from rla_core.models.packing import layout_rows
from rla_core.models.rows import prepare_rl_rows
from rla_core.models.vllm_worker import weights_hash

openai = pytest.importorskip("openai")  # installed with the verifiers extra (its harnesses use it)

# The tolerance the project holds its generators' log-probabilities to (vLLM vs the trainer, fp32).
LOGPROB_TOL = 1e-3
SAMPLING = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=12)
QUESTION = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "take key?"}]


@pytest.fixture(scope="module")
def endpoint(tiny_model: Path) -> Iterator[RecordingEndpoint]:
    gen = TransformersGenerator(tiny_model, device="cpu", batch_size=4)
    with RecordingEndpoint(gen, checkpoint=tiny_model, model="rla-policy", sampling=SAMPLING) as ep:
        yield ep
    gen.close()


@pytest.fixture(scope="module")
def client(endpoint: RecordingEndpoint) -> openai.OpenAI:
    return openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)


def test_stream_and_plain_answers_are_the_recorded_turn(
    endpoint: RecordingEndpoint, client: openai.OpenAI, tiny_model: Path
) -> None:
    plain = client.chat.completions.create(model="rla-policy", messages=QUESTION, seed=11)
    (record,) = endpoint.records(11)
    assert plain.choices[0].message.content == record.response
    assert plain.usage is not None and plain.usage.completion_tokens == len(record.response_ids)
    # The same request streamed (as verifiers' harnesses send it): the same turn, as server-sent events.
    stream = client.chat.completions.create(
        model="rla-policy", messages=QUESTION, seed=11, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == record.response
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == record.finish_reason
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == len(record.prompt_ids)
    assert endpoint.records(11) == [record]  # a repeated request records the same turn once
    # Another conversation under the same episode seed and turn: two episodes sharing a seed is refused.
    with pytest.raises(openai.APIStatusError, match="already answered a different conversation"):
        client.chat.completions.create(model="rla-policy", messages=QUESTION[1:], seed=11)
    # What was recorded: the conversation, its rendering in the chat markup and the ids the model continued.
    assert json.loads(record.messages) == QUESTION
    assert record.prompt.startswith("<|im_start|>system\nAnswer briefly.") and record.prompt.endswith(
        "<|im_start|>assistant\n"
    )
    tok = endpoint._tokenizer
    assert list(record.prompt_ids) == tok(record.prompt, add_special_tokens=False)["input_ids"]
    assert (record.turn, record.seed) == (0, turn_seed(11, 0))
    assert (record.temperature, record.top_p, record.max_tokens) == (1.0, 1.0, 12)
    assert record.checkpoint == weights_hash(tiny_model)
    assert len(record.logprobs) == len(record.response_ids) >= 1
    assert all(lp <= 0.0 for lp in record.logprobs)


def test_recorded_logprobs_are_the_checkpoints(endpoint: RecordingEndpoint, tiny_model: Path) -> None:
    """Each recorded token's log-probability, recomputed from the checkpoint by the update's own forward pass
    on the recorded ids, agrees within the project's generator tolerance."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with httpx.Client(
        base_url=endpoint.base_url, headers={"Authorization": f"Bearer {endpoint.api_key}"}
    ) as http:
        for seed in (21, 22, 23):
            body = {"model": "rla-policy", "messages": QUESTION, "seed": seed, "max_tokens": 16}
            assert http.post("/chat/completions", json=body).status_code == 200
    records = [r for seed in (21, 22, 23) for r in endpoint.records(seed)]
    # The rows as the update reads them: the recorded ids taken as they are, never re-tokenised from the text.
    frame = pl.DataFrame(
        {
            "prompt": [r.prompt for r in records], "response": [r.response for r in records],
            "advantage": [1.0] * len(records), "prompt_ids": [list(r.prompt_ids) for r in records],
            "response_ids": [list(r.response_ids) for r in records],
        }
    )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    rows, _counts = prepare_rl_rows(frame, tokenizer, load_config().training.policy)
    assert [(t.prompt_ids, t.response_ids) for t in rows] == [
        (list(r.prompt_ids), list(r.response_ids)) for r in records
    ]
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    with torch.no_grad():
        logps, mask = scored_token_logps(model, layout_rows(rows, packed=False), rows, torch.device("cpu"))
    worst = 0.0
    for i, r in enumerate(records):
        recomputed = logps[i][mask[i].bool()].tolist()
        assert len(recomputed) == len(r.logprobs)
        worst = max(worst, *(abs(a - b) for a, b in zip(recomputed, r.logprobs, strict=True)))
    print(f"max |recorded - recomputed| log-prob: {worst:.2e}")
    assert worst <= LOGPROB_TOL, worst


def test_turns_are_seeded_by_episode_and_index_not_arrival(
    endpoint: RecordingEndpoint, tiny_model: Path
) -> None:
    second = [*QUESTION, {"role": "assistant", "content": "go"}, {"role": "user", "content": "and now?"}]
    bodies = [{"model": "rla-policy", "messages": m, "seed": s} for s in (31, 32) for m in (QUESTION, second)]

    def post(body: dict[str, object]) -> str:
        headers = {"Authorization": f"Bearer {endpoint.api_key}"}
        reply = httpx.post(f"{endpoint.base_url}/chat/completions", json=body, headers=headers, timeout=120)
        assert reply.status_code == 200, reply.text
        return str(reply.json()["choices"][0]["message"]["content"])

    with ThreadPoolExecutor(4) as pool:  # all at once, in whatever order they arrive
        together = list(pool.map(post, bodies))
    first = {(r.episode_seed, r.turn): r for s in (31, 32) for r in endpoint.records(s)}
    assert sorted(first) == [(31, 0), (31, 1), (32, 0), (32, 1)]
    assert first[(31, 1)].seed == turn_seed(31, 1) != first[(31, 0)].seed
    # Asked again one by one, in the reverse order, on a fresh endpoint: the same answers and records.
    gen = TransformersGenerator(tiny_model, device="cpu", batch_size=4)
    with RecordingEndpoint(gen, checkpoint=tiny_model, model="rla-policy", sampling=SAMPLING) as fresh:
        again = []
        for body in reversed(bodies):
            reply = httpx.post(
                f"{fresh.base_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {fresh.api_key}"},
                timeout=120,
            )  # fmt: skip
            again.append(reply.json()["choices"][0]["message"]["content"])
        assert again[::-1] == together
        assert fresh.all_records() == [first[k] for k in sorted(first)]
    gen.close()


@pytest.mark.parametrize(
    ("change", "status", "reason"),
    [
        ({"model": "gpt-4"}, 404, "is not served here"),
        ({"seed": None}, 400, "has no seed"),
        (
            {"tools": [{"type": "function", "function": {"name": "bash"}}]},
            400,
            "tool calling is not supported yet",
        ),
        ({"n": 2}, 400, "one choice per request"),
        ({"stop": ["\n"]}, 400, "stop sequences are not supported"),
        ({"messages": [{"role": "tool", "content": "x"}]}, 400, "messages\\[0\\].role='tool'"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "text parts only"),
        ({"temperature": -1}, 400, "temperature"),
    ],
)
def test_requests_it_cannot_serve_are_refused_with_the_reason(
    endpoint: RecordingEndpoint, change: dict[str, object], status: int, reason: str
) -> None:
    body = {"model": "rla-policy", "messages": QUESTION, "seed": 1, **change}
    headers = {"Authorization": f"Bearer {endpoint.api_key}"}
    reply = httpx.post(f"{endpoint.base_url}/chat/completions", json=body, headers=headers)
    assert reply.status_code == status
    assert re.search(reason, reply.json()["error"]["message"]), reply.json()


def test_the_stage_key_is_required_and_only_loopback_listens(endpoint: RecordingEndpoint) -> None:
    url = f"{endpoint.base_url}/models"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    listed = httpx.get(url, headers={"Authorization": f"Bearer {endpoint.api_key}"}).json()
    assert [m["id"] for m in listed["data"]] == ["rla-policy"]
    assert endpoint.base_url.startswith("http://127.0.0.1:")
    assert isinstance(endpoint.records(999), list) and not endpoint.records(999)
    assert (
        EndpointRecord.messages_json([{"role": "user", "content": "é"}]) == '[{"role":"user","content":"é"}]'
    )
