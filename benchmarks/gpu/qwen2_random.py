"""A Qwen2-architecture checkpoint with random weights, built locally, and prompts of an exact token length.

Shared by the measurements in this folder (run as scripts, so it is importable as ``qwen2_random``). The
checkpoint is made with the project's own bootstrap pieces (the byte-level BPE tokenizer of
:mod:`rla_core.models.bootstrap`, :func:`save_tiny_checkpoint`, the atomic :func:`publish_dir`), so the
project's loaders open it as they open a bootstrapped tiny model. Only the sizes differ: the model's
``vocab_size`` is larger than the tokenizer's ~2k trained tokens, as in real Qwen checkpoints (spare
embedding rows), so the logits, softmax and sampling work per token is that of a real vocabulary. Sampled
ids beyond the tokenizer decode to nothing. Weights are saved fp32 (what the trainer writes), cached under
``--cache-dir`` by the hash of the sizes. Nothing is downloaded.

Sizes: ``0.5b`` is Qwen2-0.5B's shape (494 M parameters, vocab 151,936), for a GPU; ``cpu`` keeps a 32k
vocabulary but a narrow two-layer trunk, so a CPU finishes the 64 x 256-token measurement in minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Pronounceable letter-only pseudo-words: digits and punctuation would split into one token each.
_CONSONANTS = "bcdfghjklmnprstvz"
_VOWELS = "aeiou"
_RECIPE = 1  # bump when the build below changes what a size produces


@dataclass(frozen=True)
class Qwen2Size:
    """Sizes of a random Qwen2 checkpoint (``vocab`` is the model's, >= the tokenizer's)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int


SIZES = {
    "0.5b": Qwen2Size(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864, vocab=151936),
    "cpu": Qwen2Size(hidden=64, layers=2, heads=2, kv_heads=2, intermediate=128, vocab=32768),
    "smoke": Qwen2Size(hidden=64, layers=1, heads=2, kv_heads=2, intermediate=128, vocab=4096),
}


def add_size_args(parser: argparse.ArgumentParser, *, default: str = "0.5b") -> None:
    parser.add_argument("--size", choices=sorted(SIZES), default=default, help="model size (see module doc)")
    parser.add_argument(
        "--cache-dir", type=Path, default=Path("/tmp/rla_bench_models"), help="checkpoint cache"
    )


def words(n: int = 240, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(1, 3))))
    return sorted(out)


def build(size: Qwen2Size, cache_dir: Path) -> Path:
    """The checkpoint directory for ``size``, built on a cache miss (atomically: concurrent runs are safe)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rla_core.models.bootstrap import (
        EOS_TOKEN,
        PAD_TOKEN,
        TinyArch,
        _train_tokenizer,
        save_tiny_checkpoint,
    )
    from rla_core.store import publish_dir

    key = hashlib.sha256(json.dumps({**asdict(size), "recipe": _RECIPE}, sort_keys=True).encode()).hexdigest()
    target = Path(cache_dir) / f"qwen2-random-{key[:12]}"
    if (target / "config.json").exists():
        return target
    rng = random.Random(1)
    vocab = words()
    corpus = [" ".join(rng.choice(vocab) for _ in range(64)) for _ in range(400)]

    def write(tmp: Path) -> None:
        tok = _train_tokenizer(corpus, TinyArch(vocab_size=4096))
        eos_id, pad_id = tok.convert_tokens_to_ids(EOS_TOKEN), tok.convert_tokens_to_ids(PAD_TOKEN)
        config = Qwen2Config(
            vocab_size=max(size.vocab, len(tok)), hidden_size=size.hidden, intermediate_size=size.intermediate,
            num_hidden_layers=size.layers, num_attention_heads=size.heads, num_key_value_heads=size.kv_heads,
            max_position_embeddings=4096, tie_word_embeddings=True,
            eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=eos_id,
        )  # fmt: skip
        save_tiny_checkpoint(tmp, model_class=Qwen2ForCausalLM, config=config, tokenizer=tok, seed=1234)

    publish_dir(target, write, marker="config.json")
    return target


def exact_prompt(tokenizer: Any, n_tokens: int, rng: random.Random) -> str:
    """Pseudo-words that tokenise (no special tokens) to exactly ``n_tokens`` ids, so a batch needs no padding."""
    vocab = words()
    ws = [rng.choice(vocab) for _ in range(n_tokens)]
    for _ in range(200):
        count = len(tokenizer(" ".join(ws), add_special_tokens=False)["input_ids"])
        if count == n_tokens:
            return " ".join(ws)
        if count < n_tokens:
            ws += [rng.choice(vocab) for _ in range(max(1, (n_tokens - count) // 2))]
        else:
            del ws[-max(1, (count - n_tokens) // 2) :]
    raise RuntimeError(f"no text of exactly {n_tokens} tokens found (last count {count})")


def param_count(model: Any) -> int:
    """Parameters, tied embeddings counted once."""
    return sum(p.numel() for p in model.parameters())


def sync(device: Any) -> None:
    """Wait for queued device work (a no-op on CPU), so a timer measures the work and not its launch."""
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def result_line(name: str, fields: dict[str, Any]) -> str:
    """``RESULT <name> {json}``: what ``run_all.py`` collects into its table."""
    return f"RESULT {name} " + json.dumps(fields, sort_keys=True)
