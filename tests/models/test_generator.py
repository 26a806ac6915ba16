"""Transformers generation backend and backend selection, on the session's tiny model."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from rla_core.config import SamplingConfig, build_config
from rla_core.errors import ConfigError, ModelError
from rla_core.models.generator import Generation, TransformersGenerator
from rla_core.models.sampling import RowSampler, step_uniforms

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


def test_missing_model_dir(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="model path does not exist"):
        TransformersGenerator(tmp_path / "nope")


def test_per_prompt_seeds_make_samples_batch_independent(
    gen: TransformersGenerator, tiny_model: Path
) -> None:
    # A stop string ends some rows early, so rows finish at different turns of the same batch.
    sampling = SamplingConfig(temperature=0.9, top_p=0.9, max_new_tokens=10, stop=("e",))
    seeds = [11, 22, 33]
    batched = gen.generate(PROMPTS, n=2, sampling=sampling, seed=0, seeds=seeds)
    # Each prompt alone (its own batch of 2 rows) gives the same two samples.
    alone = [
        gen.generate([p], n=2, sampling=sampling, seed=5, seeds=[s])[0]
        for p, s in zip(PROMPTS, seeds, strict=True)
    ]
    assert batched == alone
    # Reversed prompt order: each prompt keeps its samples.
    rev = gen.generate(PROMPTS[::-1], n=2, sampling=sampling, seed=0, seeds=seeds[::-1])
    assert rev[::-1] == batched
    # Another micro-batch size (1 row per generate call instead of 4) changes nothing.
    small = TransformersGenerator(tiny_model, device="cpu", batch_size=1)
    assert small.generate(PROMPTS, n=2, sampling=sampling, seed=0, seeds=seeds) == batched
    small.close()
    # The seed is really used: other seeds sample other texts.
    other = gen.generate(PROMPTS, n=2, sampling=sampling, seed=0, seeds=[12, 23, 34])
    assert [g.text for s in other for g in s] != [g.text for s in batched for g in s]
    # Without seeds prompt i is seeded seed + i: the same as seeds=[seed, seed + 1, seed + 2].
    assert gen.generate(PROMPTS, n=2, sampling=sampling, seed=11) == gen.generate(
        PROMPTS, n=2, sampling=sampling, seed=0, seeds=[11, 12, 13]
    )


def test_sampling_leaves_global_rng_alone(gen: TransformersGenerator) -> None:
    before = torch.random.get_rng_state()
    gen.generate(PROMPTS, n=2, sampling=SamplingConfig(temperature=1.0, max_new_tokens=4), seed=1)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_temperature_zero_is_greedy_whatever_the_seeds(gen: TransformersGenerator) -> None:
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=8)
    a = gen.generate(PROMPTS, n=2, sampling=greedy, seed=0, seeds=[1, 2, 3])
    b = gen.generate(PROMPTS, n=1, sampling=greedy, seed=9)
    # Greedy ignores seeds: both samples of a prompt equal the single greedy completion.
    assert all(s[0] == s[1] == t[0] for s, t in zip(a, b, strict=True))


def test_seeds_must_match_prompts(gen: TransformersGenerator) -> None:
    with pytest.raises(ModelError, match="seeds has 2 entries for 3 prompts"):
        gen.generate(PROMPTS, n=1, sampling=SamplingConfig(), seed=0, seeds=[1, 2])
    with pytest.raises(ModelError, match=r"seeds\[1\] is a float"):
        gen.generate(PROMPTS[:2], n=1, sampling=SamplingConfig(), seed=0, seeds=[1, 2.0])  # type: ignore[list-item]


def _frequencies(scores: list[float], *, temperature: float, top_p: float, rows: int) -> list[float]:
    """Share of ``rows`` seeded rows on which the sampler picks each token of ``scores`` (first step)."""
    sampler = RowSampler(
        range(rows), temperature=temperature, top_p=top_p, prompt_len=1, steps=1, device=torch.device("cpu")
    )
    logits = torch.tensor([scores] * rows)
    picks = sampler(torch.zeros(rows, 1, dtype=torch.long), logits).argmax(dim=-1)
    return [float((picks == k).float().mean()) for k in range(len(scores))]


def test_sampler_matches_tempered_top_p_softmax() -> None:
    log_p = [math.log(0.5), math.log(0.3), math.log(0.2)]
    # T=1, top_p=0.75: mass before each token (sorted) is 0, 0.5, 0.8; 0.8 >= 0.75 cuts the third.
    # Renormalised nucleus: 0.5/0.8 = 0.625 and 0.3/0.8 = 0.375; 4000 rows -> std ~0.008.
    freq = _frequencies(log_p, temperature=1.0, top_p=0.75, rows=4000)
    assert freq[2] == 0.0
    assert abs(freq[0] - 0.625) < 0.03 and abs(freq[1] - 0.375) < 0.03
    # T=2, top_p=1: p_k^(1/2) = 0.7071, 0.5477, 0.4472 (sum 1.7020) -> 0.4155, 0.3218, 0.2628.
    freq = _frequencies(log_p, temperature=2.0, top_p=1.0, rows=4000)
    for got, want in zip(freq, [0.4155, 0.3218, 0.2628], strict=True):
        assert abs(got - want) < 0.03
    # top_p smaller than the top token's mass keeps only that token: always picked.
    assert _frequencies(log_p, temperature=1.0, top_p=0.1, rows=50) == [1.0, 0.0, 0.0]


def test_sampler_takes_the_first_token_whose_running_mass_reaches_u() -> None:
    # Probabilities 0.5, 0.3, 0.2 (T=1): running mass 0.5, 0.8, 1.0.
    sampler = RowSampler(
        [0, 1, 2, 3], temperature=1.0, top_p=1.0, prompt_len=1, steps=1, device=torch.device("cpu")
    )
    # u = 0.25 -> 0.5 is the first mass >= 0.25: token 0; u = 0.5 -> token 0 (>= is inclusive);
    # u = 0.6 -> 0.8: token 1; u = 1.0 -> 1.0: token 2.
    sampler._uniforms = torch.tensor([[0.25], [0.5], [0.6], [1.0]])
    scores = torch.tensor([[math.log(0.5), math.log(0.3), math.log(0.2)]] * 4)
    out = sampler(torch.zeros(4, 1, dtype=torch.long), scores)
    assert out.argmax(dim=-1).tolist() == [0, 0, 1, 2]
    # Everything else is -inf, so greedy decoding can only take the sampled token.
    assert int(torch.isinf(out).sum()) == 4 * 2


def test_step_uniforms_are_counter_based() -> None:
    # Draw s depends on (seed, s) only: a longer table starts with the shorter one; other seeds differ.
    assert step_uniforms(5, 4).tolist() == step_uniforms(5, 9)[:4].tolist()
    assert step_uniforms(5, 4).tolist() != step_uniforms(6, 4).tolist()
    u = step_uniforms(123, 10_000)
    # (k + 1) / 2**24 for a 24-bit k: never 0, at most 1, mean about 1/2 (std of the mean ~0.003).
    assert u.min() > 0.0 and u.max() <= 1.0 and abs(float(u.mean()) - 0.5) < 0.02
