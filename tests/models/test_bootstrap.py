"""Bootstrap and model resolution: offline, cached, atomic, ids kept by AutoTokenizer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rla_core.errors import ModelError
from rla_core.models.bootstrap import (
    EOS_TOKEN,
    PAD_TOKEN,
    ensure_tiny_model,
    resolve_model,
    validate_checkpoint,
)
from tests.models.conftest import CORPUS


def test_bootstrap_reloads_with_identical_ids(tiny_model: Path) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoConfig, AutoTokenizer

    trained = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(tiny_model)
    for text in [*CORPUS[:5], "take key 1234 \\boxed{-1}\n\n  x", "Ünïcode\ttext"]:
        assert auto(text, add_special_tokens=False)["input_ids"] == trained.encode(text).ids
        assert auto.decode(auto(text, add_special_tokens=False)["input_ids"]) == text
    assert auto.eos_token == EOS_TOKEN and auto.pad_token == PAD_TOKEN
    # Digits are single tokens and \boxed{ is one token: "\boxed{12}" = [\boxed{, 1, 2, }] = 4 tokens.
    assert len(auto("\\boxed{12}", add_special_tokens=False)["input_ids"]) == 4
    cfg = AutoConfig.from_pretrained(tiny_model)
    # head_dim = hidden 128 / 2 heads = 64 (vLLM's CPU kernels need 64).
    assert (cfg.model_type, cfg.hidden_size // cfg.num_attention_heads) == ("qwen2", 64)
    assert cfg.vocab_size == trained.get_vocab_size()


def test_cache_hit_and_key(tiny_model: Path, model_cache: Path) -> None:
    # Same (name, arch, corpus) → same directory, not rebuilt (mtime unchanged).
    before = (tiny_model / "model.safetensors").stat().st_mtime_ns
    assert ensure_tiny_model("policy", corpus=CORPUS, cache_dir=model_cache) == tiny_model
    assert (tiny_model / "model.safetensors").stat().st_mtime_ns == before
    # No temp dirs left behind by the atomic write.
    assert not [p for p in model_cache.iterdir() if p.name.startswith(".tmp-")]


def test_resolve_model_forms(tiny_model: Path, model_cache: Path, tmp_path: Path) -> None:
    assert resolve_model("tiny:policy", corpus=CORPUS, cache_dir=model_cache) == tiny_model
    assert resolve_model(str(tiny_model), corpus=[], cache_dir=model_cache) == tiny_model
    with pytest.raises(ModelError, match="model path does not exist"):
        resolve_model(str(tmp_path / "nope"), corpus=[], cache_dir=model_cache)
    with pytest.raises(ModelError, match="model path does not exist"):
        resolve_model("./relative/nope", corpus=[], cache_dir=model_cache)
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE"):
        resolve_model("some-org/some-model", corpus=[], cache_dir=model_cache)
    with pytest.raises(ModelError, match="name"):
        resolve_model("tiny:bad name!", corpus=[], cache_dir=model_cache)


def test_checkpoint_missing_tokenizer(tiny_model: Path, tmp_path: Path) -> None:
    broken = tmp_path / "ckpt"
    broken.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model / name, broken / name)
    with pytest.raises(ModelError, match=r"missing tokenizer_config\.json, tokenizer files"):
        validate_checkpoint(broken)
    with pytest.raises(ModelError, match="incomplete"):
        resolve_model(str(broken), corpus=[], cache_dir=tmp_path)
