"""Tiny local models: bootstrap a small Qwen2 model with a BPE tokenizer trained on the environments' text.

CPU runs need a policy and a reward model that generate and train in seconds, and tests must never touch
the Hugging Face hub. :func:`ensure_tiny_model` builds such a model (random weights, a real architecture)
and caches it by the content hash of (name, architecture, corpus); :func:`resolve_model` turns a model
reference from the config (``models.policy`` / ``models.reward``) into a local checkpoint directory;
:func:`validate_checkpoint` checks one and :func:`resolve_device` turns a config's ``device`` into the
torch device it runs on (generation and training share both).

The tokenizer is saved with a config naming ``PreTrainedTokenizerFast`` so ``AutoTokenizer`` (and vLLM,
TRL) reload it with the trained ids (dependency notes, "TRL on CPU").

Example:
    >>> path = ensure_tiny_model("policy", corpus=["go north", "take key"], cache_dir=Path(".cache/models"))
    >>> (path / "config.json").exists()
    True
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rla_core.config import TINY_PREFIX, TINY_VL_PREFIX, TinySize, hash_jsonable, machine_device
from rla_core.errors import ModelError
from rla_core.store import publish_dir

log = logging.getLogger(__name__)

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
# Kept whole so answers like \boxed{3} cost two or three tokens however small the corpus is.
BOXED_TOKEN = "\\boxed{"
# Bumped when the bootstrap recipe changes, so stale cache entries are not reused.
_RECIPE_VERSION = 1
# Always part of the tokenizer's training text: digits, answer markers and common punctuation must
# tokenise well even when the caller's corpus is tiny.
_SEED_TEXT: tuple[str, ...] = (
    "0 1 2 3 4 5 6 7 8 9 10 11 12 42 100",
    "\\boxed{0} \\boxed{1} \\boxed{2} \\boxed{3} \\boxed{4} \\boxed{5} \\boxed{6} \\boxed{7} \\boxed{8} \\boxed{9}",
    "\\boxed{+1} \\boxed{-1} </answer> <answer> User: Assistant: Human:",
    "The answer is \\boxed{1}. Step 1: look. Action: go north, take key, open door.",
)
# Qwen2-VL's chat and vision special tokens, with the names its processor, chat template and vLLM use.
VISION_TOKENS: tuple[str, ...] = (
    "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>",
)  # fmt: skip
# Qwen2-VL's chat template reduced to what our prompts use: string or list content, an image part as
# <|vision_start|><|image_pad|><|vision_end|> (the processor expands <|image_pad|> per image patch group).
VL_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or part['type'] == 'image_url' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model")


@dataclass(frozen=True)
class TinyArch:
    """Architecture of a bootstrapped model: Qwen2 with head_dim 64 (vLLM's CPU kernels need 64)."""

    hidden_size: int = 128
    num_attention_heads: int = 2
    num_key_value_heads: int = 2
    num_hidden_layers: int = 2
    intermediate_size: int = 256
    max_position_embeddings: int = 4096
    vocab_size: int = 2048  # BPE target; a small corpus ends with fewer merges


DEFAULT_ARCH = TinyArch()


def tiny_arch(size: TinySize) -> TinyArch:
    """The architecture of a tiny model of ``size`` (``models.tiny.<role>``): heads of 64, MLP twice the width.

    Example: the default size (width 128, 2 layers) is :data:`DEFAULT_ARCH`.
    """
    heads = size.width // 64
    return TinyArch(
        hidden_size=size.width,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        num_hidden_layers=size.layers,
        intermediate_size=2 * size.width,
    )


@dataclass(frozen=True)
class TinyVisionArch:
    """The vision side of a bootstrapped Qwen2-VL model (the text side is a :class:`TinyArch`).

    head_dim is ``embed_dim / num_heads`` = 64 as on the text side (vLLM's CPU kernels). An image of
    w x h pixels is resized to a multiple of ``patch_size * spatial_merge_size`` = 28 with at most
    ``max_pixels`` (64 merged patches = 64 image tokens, which keeps vLLM's profiling pass small).
    ``mrope_section`` (temporal, height, width) sums to the text head_dim / 2.
    """

    depth: int = 2
    embed_dim: int = 128
    num_heads: int = 2
    mlp_ratio: int = 2
    patch_size: int = 14
    spatial_merge_size: int = 2
    temporal_patch_size: int = 2
    min_pixels: int = 4 * 28 * 28
    max_pixels: int = 64 * 28 * 28
    mrope_section: tuple[int, int, int] = (8, 12, 12)


DEFAULT_VISION = TinyVisionArch()


def ensure_tiny_model(
    name: str, *, corpus: Sequence[str], cache_dir: Path, arch: TinyArch = DEFAULT_ARCH
) -> Path:
    """Return the directory of the tiny model ``name``, bootstrapping it on a cache miss.

    The cache key is the sha256 of (name, ``arch``, ``corpus``, recipe version); the model lives in
    ``cache_dir/<name>-<key[:16]>``. It is written to a temporary directory and renamed into place, so a
    killed or concurrent run never leaves a half-written model behind. Weights are random (seeded by the
    key), the tokenizer is a byte-level BPE trained on ``corpus`` plus digits and ``\\boxed{}`` markers,
    with ``<|endoftext|>`` as EOS and ``<|pad|>`` as padding. No network access.

    Example:
        >>> ensure_tiny_model("reward", corpus=["Is this step good? \\\\boxed{1}"], cache_dir=Path("/tmp/m"))
    """
    key_fields = {"name": name, "arch": asdict(arch), "corpus": _check_corpus(name, corpus)}
    return _ensure(
        name, key_fields, cache_dir, lambda out, seed: _build(out, corpus=corpus, arch=arch, seed=seed)
    )


def ensure_tiny_vl_model(
    name: str,
    *,
    corpus: Sequence[str],
    cache_dir: Path,
    arch: TinyArch = DEFAULT_ARCH,
    vision: TinyVisionArch = DEFAULT_VISION,
) -> Path:
    """Return the directory of the tiny vision-language model ``name``, bootstrapping it on a cache miss.

    A Qwen2-VL-class checkpoint (``Qwen2VLForConditionalGeneration``, random init): the text side is
    :func:`ensure_tiny_model`'s (``arch``, the same BPE tokenizer trained on ``corpus``) plus Qwen2-VL's
    chat and vision special tokens (:data:`VISION_TOKENS`) and a chat template
    (:data:`VL_CHAT_TEMPLATE`); the vision tower is ``vision``; a ``preprocessor_config.json`` for
    ``Qwen2VLImageProcessorPil`` (no torchvision needed). No ``processor_config.json``: a
    ``Qwen2VLProcessor`` cannot be built without torchvision
    (:class:`rla_core.models.multimodal.VisionProcessor` does its job). Cached like
    :func:`ensure_tiny_model`, by the content hash of (name, arch, vision, corpus, recipe); nothing
    comes from a hub.

    Example:
        >>> path = ensure_tiny_vl_model("policy", corpus=["click submit"], cache_dir=Path(".cache/models"))
        >>> (path / "preprocessor_config.json").exists()
        True
    """
    key_fields = {
        "name": name, "arch": asdict(arch), "vision": asdict(vision), "corpus": _check_corpus(name, corpus),
    }  # fmt: skip
    return _ensure(
        name, key_fields, cache_dir,
        lambda out, seed: _build_vl(out, corpus=corpus, arch=arch, vision=vision, seed=seed),
    )  # fmt: skip


def is_tiny_ref(ref: str) -> bool:
    """Whether a model reference names a bootstrapped tiny model (``tiny:<name>`` or ``tiny-vl:<name>``)."""
    return ref.startswith((TINY_PREFIX, TINY_VL_PREFIX))


def _check_corpus(name: str, corpus: Sequence[str]) -> list[str]:
    if not _NAME_RE.match(name):
        raise ModelError(
            f"tiny model name {name!r} is invalid: use letters, digits, '_', '.', '-' (e.g. 'tiny:policy')"
        )
    if isinstance(corpus, str):
        raise ModelError("corpus must be a sequence of texts, not one string: wrap it in a list")
    return list(corpus)


def _ensure(name: str, key_fields: dict[str, Any], cache_dir: Path, build: Any) -> Path:
    """``cache_dir/<name>-<key[:16]>`` for the content key of ``key_fields``, built by ``build(out, seed)``
    on a miss (written to a temporary directory and renamed into place; weights seeded by the key)."""
    key = hash_jsonable({**key_fields, "recipe": _RECIPE_VERSION})
    target = Path(cache_dir) / f"{name}-{key[:16]}"
    if (target / "config.json").exists():
        return target
    # Another process that finished the same model first has a complete copy: it is kept.
    publish_dir(target, lambda tmp: build(tmp, int(key[:8], 16)), marker="config.json")
    log.info("bootstrapped tiny model %s at %s", name, target)
    return target


def resolve_model(ref: str, *, corpus: Sequence[str], cache_dir: Path, arch: TinyArch = DEFAULT_ARCH) -> Path:
    """Turn a model reference into a local checkpoint directory.

    ``'tiny:<name>'`` bootstraps (or reuses) a tiny model, ``'tiny-vl:<name>'`` a tiny vision-language
    model (:func:`ensure_tiny_vl_model`), both with the text architecture ``arch`` (:func:`tiny_arch` of the
    role's ``models.tiny`` size); an existing local directory is validated
    (:func:`validate_checkpoint`); a hub id ``org/name`` is downloaded only when ``HF_HUB_OFFLINE`` is not
    set; anything else that looks like a path and does not exist raises :class:`ModelError`.

    Example:
        >>> resolve_model("tiny:policy", corpus=["go north"], cache_dir=Path(".cache/models"))
    """
    if ref.startswith(TINY_PREFIX):
        return ensure_tiny_model(ref.removeprefix(TINY_PREFIX), corpus=corpus, cache_dir=cache_dir, arch=arch)
    if ref.startswith(TINY_VL_PREFIX):
        name = ref.removeprefix(TINY_VL_PREFIX)
        return ensure_tiny_vl_model(name, corpus=corpus, cache_dir=cache_dir, arch=arch)
    path = Path(ref).expanduser()
    if path.exists():
        return _local_checkpoint(ref, path)
    _require_hub_id(ref)
    if os.environ.get("HF_HUB_OFFLINE", "").strip() not in ("", "0", "false", "False"):
        raise ModelError(
            f"model {ref!r} is neither a local directory nor 'tiny:<name>', and HF_HUB_OFFLINE is set, so "
            "the hub id cannot be downloaded; download it beforehand and pass its local directory"
        )
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(ref))


def _local_checkpoint(ref: str, path: Path) -> Path:
    """``path`` (an existing path named by ``ref``) if it is a complete checkpoint directory."""
    if not path.is_dir():
        raise ModelError(f"model path {ref!r} is a file: pass the checkpoint directory containing it")
    validate_checkpoint(path)
    return path


def _require_hub_id(ref: str) -> None:
    """ModelError unless ``ref`` (not an existing path) reads as a hub id ``org/name``."""
    looks_local = ref.startswith(("/", ".", "~")) or (os.sep in ref and not _HUB_ID_RE.match(ref))
    if looks_local or not _HUB_ID_RE.match(ref):
        raise ModelError(
            f"model path does not exist: {ref!r}; pass an existing checkpoint directory, "
            "'tiny:<name>' / 'tiny-vl:<name>' for a bootstrapped tiny (vision-language) model, or a hub id "
            "'org/name'"
        )


def check_model_ref(ref: str) -> None:
    """Raise :class:`ModelError` unless ``ref`` resolves without building, downloading or loading anything.

    The preflight's check of a model reference (no network): ``'tiny:<name>'`` / ``'tiny-vl:<name>'``
    with a name; an existing checkpoint directory (:func:`validate_checkpoint`); a hub id ``org/name``
    whose ``config.json`` is in the local Hugging Face cache (``HF_HUB_CACHE``/``HF_HOME``).

    Example:
        >>> check_model_ref("tiny:policy")
    """
    for prefix in (TINY_PREFIX, TINY_VL_PREFIX):
        if ref.startswith(prefix):
            if not ref.removeprefix(prefix).strip():
                raise ModelError(f"model {ref!r} has no name after '{prefix}'; e.g. '{prefix}policy'")
            return
    path = Path(ref).expanduser()
    if path.exists():
        _local_checkpoint(ref, path)
        return
    _require_hub_id(ref)
    from huggingface_hub import constants, try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(ref, "config.json"), str):
        raise ModelError(
            f"hub model {ref!r} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}); download "
            f"it beforehand (`hf download {ref}`, HF_HOME/HF_HUB_CACHE pointing at that cache) or pass "
            "its local checkpoint directory"
        )


def validate_checkpoint(path: Path) -> None:
    """Check that ``path`` is a loadable Hugging Face checkpoint: config, weights and tokenizer files.

    Raises :class:`ModelError` listing what is missing (e.g. a checkpoint saved without its tokenizer).
    """
    path = Path(path)
    if not path.is_dir():
        raise ModelError(f"model path does not exist: {str(path)!r}; pass an existing checkpoint directory")
    missing: list[str] = []
    if not (path / "config.json").exists():
        missing.append("config.json")
    if not any((path / f).exists() for f in _WEIGHT_FILES):
        missing.append("weights (" + " or ".join(_WEIGHT_FILES) + ")")
    if not (path / "tokenizer_config.json").exists():
        missing.append("tokenizer_config.json")
    if not any((path / f).exists() for f in _TOKENIZER_FILES):
        missing.append("tokenizer files (" + " or ".join(_TOKENIZER_FILES) + ")")
    if missing:
        raise ModelError(
            f"checkpoint {str(path)!r} is incomplete: missing {', '.join(missing)}; save both the model and "
            "its tokenizer (model.save_pretrained(dir); tokenizer.save_pretrained(dir))"
        )


def resolve_device(device: str, *, setting: str) -> str:
    """The torch device a config ``device`` value names (``models.device``, ``training.device``).

    ``auto`` → ``cuda`` when torch sees a GPU, else ``cpu``. Any other value must be a torch device
    string, and a ``cuda*`` one needs a GPU torch sees; otherwise a :class:`ModelError` names
    ``setting`` (the config key) and the values to use.
    """
    import torch

    if machine_device(device) != device:  # auto: what this machine has
        return machine_device(device)
    try:
        torch.device(device)
    except RuntimeError as err:
        raise ModelError(
            f"{setting}={device!r} is not a torch device: use 'auto', 'cpu' or 'cuda:N'"
        ) from err
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"{setting}={device!r} but torch sees no CUDA device; set {setting}=cpu or auto")
    return device


def _training_text(corpus: Sequence[str]) -> Iterator[str]:
    yield from _SEED_TEXT
    for text in corpus:
        if not isinstance(text, str):
            raise ModelError(f"corpus items must be strings, got {type(text).__name__}: {text!r:.80}")
        yield text


def _train_tokenizer(corpus: Sequence[str], arch: TinyArch) -> Any:
    """Byte-level BPE trained on ``corpus`` plus the seed text, as a ``PreTrainedTokenizerFast``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    # Digits are split one by one so every number is spelled with the same ten tokens.
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=arch.vocab_size,
        min_frequency=2,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_training_text(corpus), trainer=trainer)
    bpe.add_tokens([AddedToken(BOXED_TOKEN, normalized=False)])
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=arch.max_position_embeddings,
    )


def _build(out: Path, *, corpus: Sequence[str], arch: TinyArch, seed: int) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = _train_tokenizer(corpus, arch)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=arch.hidden_size,
        intermediate_size=arch.intermediate_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads,
        max_position_embeddings=arch.max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=eos_id,
    )
    save_tiny_checkpoint(out, model_class=Qwen2ForCausalLM, config=config, tokenizer=tokenizer, seed=seed)


def _build_vl(out: Path, *, corpus: Sequence[str], arch: TinyArch, vision: TinyVisionArch, seed: int) -> None:
    from tokenizers import AddedToken
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessorPil

    tokenizer = _train_tokenizer(corpus, arch)
    tokenizer.add_tokens(
        [AddedToken(t, special=True, normalized=False) for t in VISION_TOKENS], special_tokens=True
    )
    tokenizer.chat_template = VL_CHAT_TEMPLATE
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    # eos/pad/bos are generic PretrainedConfig keywords (save_tiny_checkpoint reads them back).
    config_kwargs: dict[str, Any] = dict(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": arch.hidden_size,
            "intermediate_size": arch.intermediate_size, "num_hidden_layers": arch.num_hidden_layers,
            "num_attention_heads": arch.num_attention_heads, "num_key_value_heads": arch.num_key_value_heads,
            "max_position_embeddings": arch.max_position_embeddings,
            "rope_parameters": {
                "rope_type": "default", "rope_theta": 1000000.0, "mrope_section": list(vision.mrope_section),
            },
            "eos_token_id": eos_id, "pad_token_id": pad_id, "bos_token_id": eos_id,
        },
        vision_config={
            "depth": vision.depth, "embed_dim": vision.embed_dim, "num_heads": vision.num_heads,
            "mlp_ratio": vision.mlp_ratio, "hidden_size": arch.hidden_size, "patch_size": vision.patch_size,
            "spatial_merge_size": vision.spatial_merge_size, "temporal_patch_size": vision.temporal_patch_size,
        },
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True, eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=eos_id,
    )  # fmt: skip
    config = Qwen2VLConfig(**config_kwargs)
    save_tiny_checkpoint(
        out, model_class=Qwen2VLForConditionalGeneration, config=config, tokenizer=tokenizer, seed=seed
    )
    Qwen2VLImageProcessorPil(
        patch_size=vision.patch_size, merge_size=vision.spatial_merge_size,
        temporal_patch_size=vision.temporal_patch_size,
        size={"shortest_edge": vision.min_pixels, "longest_edge": vision.max_pixels},
    ).save_pretrained(out)  # fmt: skip


def save_tiny_checkpoint(out: Path, *, model_class: Any, config: Any, tokenizer: Any, seed: int) -> Any:
    """A randomly initialised ``model_class(config)`` (torch seeded with ``seed``, the global RNG untouched),
    saved to ``out`` with ``tokenizer``; returns the model.

    The config's ``eos_token_id``/``pad_token_id`` also make the generation config (BOS = EOS), and the
    saved tokenizer config names ``PreTrainedTokenizerFast`` so that ``AutoTokenizer`` (and vLLM) rebuild
    the trained tokenizer as-is: a Qwen2Tokenizer would change the ids.
    """
    import torch
    from transformers import GenerationConfig

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    # A vision-language config keeps these in its text config (transformers 5.17 has them only there).
    text = config.get_text_config()
    eos_id, pad_id = text.eos_token_id, text.pad_token_id
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=eos_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    cfg_path = out / "tokenizer_config.json"
    tok_cfg = json.loads(cfg_path.read_text())
    tok_cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(tok_cfg, indent=2))
    return model
