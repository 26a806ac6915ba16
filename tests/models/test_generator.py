"""Transformers generation backend and backend selection, on the session's tiny model."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rla_core.config import Backend, ModelsConfig, SamplingConfig, build_config
from rla_core.errors import ConfigError, ModelError
from rla_core.models.generator import Generation, TransformersGenerator, VllmServerGenerator, open_generator

PROMPTS = ["You are in a kitchen.", "Goal: take the key and open the chest. Action:", "go"]


@pytest.fixture(scope="module")
def gen(tiny_model: Path) -> Iterator[TransformersGenerator]:
    g = TransformersGenerator(tiny_model, device="cpu", batch_size=4)
    yield g
    g.close()


def test_n_samples_per_prompt_and_token_counts(gen: TransformersGenerator) -> None:
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=6)
    out = gen.generate(PROMPTS, n=3, sampling=sampling, seed=7)
    # 3 prompts x 3 samples = 9 sequences, generated in micro-batches of 4, 4, 1.
    assert [len(samples) for samples in out] == [3, 3, 3]
    tok = gen._tokenizer
    for prompt, samples in zip(PROMPTS, out, strict=True):
        for g in samples:
            assert isinstance(g, Generation)
            assert g.prompt_tokens == len(tok(prompt, add_special_tokens=False)["input_ids"])
            assert 1 <= g.completion_tokens <= 6
            # No stop strings: "length" means all 6 tokens were used, "stop" means EOS came earlier.
            assert (g.finish_reason == "length") == (g.completion_tokens == 6)


def test_seed_reproducible_and_different_seeds_differ(gen: TransformersGenerator) -> None:
    sampling = SamplingConfig(temperature=1.0, top_p=0.95, max_new_tokens=8)
    a = gen.generate(PROMPTS, n=2, sampling=sampling, seed=123)
    b = gen.generate(PROMPTS, n=2, sampling=sampling, seed=123)
    c = gen.generate(PROMPTS, n=2, sampling=sampling, seed=124)
    assert a == b
    assert [g.text for s in a for g in s] != [g.text for s in c for g in s]


def test_stop_strings_cut_text(gen: TransformersGenerator) -> None:
    free = gen.generate(PROMPTS, n=4, sampling=SamplingConfig(temperature=1.0, max_new_tokens=16), seed=3)
    # Use a character that the free run produced in some sample as the stop string.
    stop = next(ch for s in free for g in s for ch in g.text if ch.isalpha())
    stopped = gen.generate(
        PROMPTS, n=4, sampling=SamplingConfig(temperature=1.0, max_new_tokens=16, stop=(stop, "zzz")), seed=3
    )
    hits = 0
    for samples in stopped:
        for g in samples:
            assert stop not in g.text and "zzz" not in g.text
            hits += g.finish_reason == "stop"
    assert hits >= 1


def test_left_padding_matches_unbatched_greedy(gen: TransformersGenerator) -> None:
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=8)
    batched = gen.generate(PROMPTS, n=1, sampling=greedy, seed=0)
    single = [gen.generate([p], n=1, sampling=greedy, seed=0)[0] for p in PROMPTS]
    assert batched == single


def test_bad_requests_raise_specific_errors(gen: TransformersGenerator) -> None:
    ok = SamplingConfig()
    with pytest.raises(ModelError, match="empty prompt list"):
        gen.generate([], n=1, sampling=ok, seed=0)
    with pytest.raises(ModelError, match="n must be at least 1"):
        gen.generate(["go"], n=0, sampling=ok, seed=0)
    with pytest.raises(ModelError, match="not a single string"):
        gen.generate("go", n=1, sampling=ok, seed=0)
    # A config that bypassed validation is still caught, naming the field.
    with pytest.raises(ConfigError, match=r"sampling\.temperature"):
        gen.generate(["go"], n=1, sampling=SamplingConfig.model_construct(temperature=-1.0), seed=0)
    with pytest.raises(ConfigError, match="top_p"):
        build_config({"rollout": {"sampling": {"top_p": 1.5}}})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_vllm_endpoint(tiny_model: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(ModelError, match=f"vLLM endpoint {url} is unreachable"):
        VllmServerGenerator(url, model="x")
    with pytest.raises(ModelError, match="unreachable"):
        open_generator(tiny_model, models=ModelsConfig(backend=Backend.VLLM, vllm_base_url=url))
    with pytest.raises(ModelError, match=r"needs models\.vllm_base_url"):
        open_generator(tiny_model, models=ModelsConfig(backend=Backend.VLLM))
    # auto with an unreachable endpoint falls back to transformers.
    fallback = open_generator(
        tiny_model, models=ModelsConfig(backend=Backend.AUTO, vllm_base_url=url, device="cpu")
    )
    assert isinstance(fallback, TransformersGenerator)
    fallback.close()


def test_missing_model_dir(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="model path does not exist"):
        TransformersGenerator(tmp_path / "nope")
