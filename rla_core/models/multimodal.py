"""Multimodal prompts (text plus screenshots) and the processor that turns them into model inputs.

A prompt is either a ``str`` (text-only) or an :class:`ImagePrompt`: its text plus an ordered tuple of
image references (PNG paths, e.g. ``rollouts.observation_ref``). Artifacts record the references,
never pixels; the pixels are read from the files whenever a model needs them (generation, the update's
log-probabilities), so π_old and π_θ see exactly what generation saw.

An :class:`ImagePrompt`'s text carries one image slot per image, where the image goes:
``<|vision_start|><|image_pad|><|vision_end|>`` for the Qwen2-VL / Qwen3-VL family.
:meth:`VisionProcessor.format` places the slots (images first, then the text, as in Qwen-VL's own
examples) and applies the chat template when chat markup is on; callers format once and record the
formatted text with the references, as they do for text prompts (``Generator.format_prompt``).

:class:`VisionProcessor` does what ``Qwen2VLProcessor`` does for text plus images: the image processor
(``Qwen2VLImageProcessorPil``), then each image's ``<|image_pad|>`` repeated once per merged patch
group, then the tokenizer, plus ``mm_token_type_ids`` (0 text, 1 image, 2 video) for the model's
M-RoPE. We cannot use ``AutoProcessor``: without torchvision (absent on purpose, the CPU vLLM build
pins its own torch), transformers 5.24 fails to build ``Qwen2VLProcessor`` — measured by
``benchmarks/probe_tiny_vl.py`` (``benchmarks/results/tiny_vl_probe.json``): ``AutoProcessor`` raises
``ImportError: Qwen2VLVideoProcessor requires the Torchvision library but it was not found in your
environment`` and ``Qwen2VLProcessor(..., video_processor=None)`` raises ``AttributeError: type object
'VIDEO_PROCESSOR_MAPPING' has no attribute '_extra_content'``.

The vLLM backend sends a formatted image prompt to the chat API as content parts (:func:`chat_content`)
that the server renders with :func:`verbatim_chat_template`: exactly the recorded text, with vLLM's own
Qwen2-VL processor expanding the slots.

Example:
    >>> vp = VisionProcessor.from_pretrained(model_dir)
    >>> prompt = vp.format(ImagePrompt("Which button submits the form?", ("/runs/obs/0.png",)), chat=True)
    >>> batch = vp.encode([prompt])  # input_ids, attention_mask, pixel_values, image_grid_thw, mm_token_type_ids
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, overload

from rla_core.errors import ModelError

if TYPE_CHECKING:
    import torch

# Files of a vision-language checkpoint besides the model and the tokenizer: copied into every checkpoint
# an update or a warm start writes, so the result is as loadable as its input.
PROCESSOR_FILES: tuple[str, ...] = ("preprocessor_config.json",)


@dataclass(frozen=True)
class ImagePrompt:
    """A prompt with images: ``text`` plus ``images``, an ordered tuple of image file references (PNG paths).

    Before :meth:`VisionProcessor.format` the text is the plain prompt; after it, it holds one image slot
    per image (the form generation and training take).

    Example:
        >>> ImagePrompt("Which button submits the form?", ("obs/step-0.png", "obs/step-1.png"))
    """

    text: str
    images: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ModelError(f"ImagePrompt.text is a {type(self.text).__name__}, not a string")
        if isinstance(self.images, str) or not isinstance(self.images, (tuple, list)):
            raise ModelError(
                f"ImagePrompt.images must be a tuple of image paths, got {type(self.images).__name__} "
                f"{self.images!r:.80} (prompt {self.text[:60]!r})"
            )
        object.__setattr__(self, "images", tuple(self.images))
        if not self.images:
            raise ModelError(
                f"ImagePrompt {self.text[:60]!r} has no images: pass a text-only prompt as a plain str"
            )
        for ref in self.images:
            if not isinstance(ref, str) or not ref:
                raise ModelError(
                    f"ImagePrompt {self.text[:60]!r}: image reference {ref!r} is not a non-empty path string"
                )


# What generators take: a text-only prompt or a prompt with images.
Prompt: TypeAlias = str | ImagePrompt


# An image slot of the Qwen2-VL / Qwen3-VL family, whatever its placeholder tokens (VisionProcessor.slot).
_SLOT_RE = re.compile(r"<\|vision_start\|>.*?<\|vision_end\|>", re.DOTALL)


def strip_image_slots(text: str) -> str:
    """``text`` without its image slots: a recorded image prompt shown as text inside another prompt
    (the judge shows the agent's prompt; its own images are the step's screens)."""
    return _SLOT_RE.sub("", text)


def prompt_images(prompt: Prompt) -> tuple[str, ...]:
    """The image references of ``prompt`` (none for a text-only prompt)."""
    return prompt.images if isinstance(prompt, ImagePrompt) else ()


def prompt_text(prompt: Prompt) -> str:
    """The text of ``prompt``."""
    return prompt.text if isinstance(prompt, ImagePrompt) else prompt


def format_prompt_with(
    prompt: Prompt, *, chat: Callable[[str], str] | None, chat_on: bool, vision: Callable[[], VisionProcessor]
) -> Prompt:
    """What every generator's ``format_prompt`` does: a text prompt in the chat markup (``chat``, None when
    it is off or the tokenizer has none); an :class:`ImagePrompt` with its image slots, in the markup when
    ``chat_on``, by the processor ``vision()`` returns (each generator says how it gets one, or why not)."""
    if isinstance(prompt, ImagePrompt):
        return vision().format(prompt, chat=chat_on)
    return chat(prompt) if chat is not None else prompt


@dataclass(frozen=True)
class ChatPrompts:
    """``format_prompt``, written once for every generator, which holds one (composition, not a base
    class): ``chat`` is the chat formatter (None when it is off or the tokenizer has none), ``chat_on``
    whether image prompts get the markup, and ``vision`` how the generator gets a vision processor for an
    image prompt (or why it cannot). A generator exposes :meth:`format` as its ``format_prompt``."""

    chat: Callable[[str], str] | None
    chat_on: bool
    vision: Callable[[], VisionProcessor]

    @overload
    def format(self, prompt: str) -> str: ...
    @overload
    def format(self, prompt: ImagePrompt) -> ImagePrompt: ...
    def format(self, prompt: Prompt) -> Prompt:
        """``prompt`` as one user turn in the tokenizer's chat markup (chat_template on and available);
        an :class:`ImagePrompt` also gets its image slots (a text-only checkpoint: :class:`ModelError`)."""
        return format_prompt_with(prompt, chat=self.chat, chat_on=self.chat_on, vision=self.vision)


def is_vision_language(model_dir: Path) -> bool:
    """Whether the checkpoint ``model_dir`` takes images: its ``config.json`` has a ``vision_config``
    (Qwen2-VL, Qwen2.5-VL, Qwen3-VL and most Hugging Face image-text-to-text models)."""
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ModelError(f"cannot read the model config {path}: {err}") from None
    return isinstance(config, dict) and "vision_config" in config


def require_vision_language(model_dir: Path, *, what: str) -> None:
    """A :class:`ModelError` when ``model_dir`` is a text-only checkpoint but ``what`` carries images."""
    if not is_vision_language(model_dir):
        config = json.loads((Path(model_dir) / "config.json").read_text())
        raise ModelError(
            f"{what} carry images, but the checkpoint {model_dir} is a text-only model "
            f"({', '.join(config.get('architectures') or ['no architectures listed'])}): give the role a "
            "vision-language checkpoint (e.g. 'tiny-vl:<name>' or a Qwen3-VL directory) or turn its images off"
        )


def load_vl_model(model_dir: Path, **kwargs: Any) -> Any:
    """The vision-language model of ``model_dir`` (``AutoModelForImageTextToText``; e.g.
    ``Qwen2VLForConditionalGeneration``), ``kwargs`` passed to ``from_pretrained``."""
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(model_dir, **kwargs)


def copy_processor_files(src: Path, out: Path) -> None:
    """Copy :data:`PROCESSOR_FILES` that ``src`` has into the checkpoint directory ``out``."""
    import shutil

    for name in PROCESSOR_FILES:
        if (Path(src) / name).is_file():
            shutil.copyfile(Path(src) / name, Path(out) / name)


def verbatim_chat_template(slot: str) -> str:
    """A chat template that renders one message's content parts as they are: text parts verbatim, each
    image part as ``slot``. The vLLM server of a vision-language checkpoint runs with it, so a chat
    request built by :func:`chat_content` from a formatted prompt renders to exactly the recorded text
    (which already holds the checkpoint's own chat markup) with the images in their slots."""
    return (
        "{% for message in messages %}{% for part in message['content'] %}"
        "{% if part['type'] == 'text' %}{{ part['text'] }}{% else %}" + slot + "{% endif %}"
        "{% endfor %}{% endfor %}"
    )


def chat_content(prompt: ImagePrompt, slot: str) -> list[dict[str, Any]]:
    """OpenAI-style content parts of a formatted ``prompt``: its text cut at each ``slot`` into text parts,
    with the image at that slot between them as a base64 PNG data URL (read from its file now)."""
    import base64

    chunks = prompt.text.split(slot)
    if len(chunks) - 1 != len(prompt.images):
        raise ModelError(
            f"prompt {prompt.text[:80]!r} has {len(chunks) - 1} image slot(s) for {len(prompt.images)} "
            "image(s): format each prompt once with the generator's format_prompt"
        )
    parts: list[dict[str, Any]] = [{"type": "text", "text": chunks[0]}] if chunks[0] else []
    for ref, chunk in zip(prompt.images, chunks[1:], strict=True):
        data = base64.b64encode(_read_image_file(ref, prompt.text)).decode()
        parts.append({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}})
        if chunk:
            parts.append({"type": "text", "text": chunk})
    return parts


def _read_image_file(ref: str, prompt: str) -> bytes:
    path = Path(ref)
    if not path.is_file():
        raise ModelError(
            f"image {ref!r} of prompt {prompt[:80]!r} does not exist: image references must point to "
            "files every process sees (the rollout's observation files, kept with the run)"
        )
    return path.read_bytes()


class VisionProcessor:
    """Text plus images to model inputs for a Qwen2-VL-class checkpoint, without torchvision.

    Built from the checkpoint's tokenizer (any ``padding_side``: :meth:`encode` sets it per call) and
    its image processor (``preprocessor_config.json``). The image slot and the token ids come from the
    checkpoint's config (``image_token_id``, ``vision_start_token_id``, ``vision_end_token_id``,
    ``video_token_id``), never from literals. See the module docstring for why not ``AutoProcessor``.
    """

    def __init__(self, tokenizer: Any, image_processor: Any, config: Any) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        missing = [
            k for k in ("image_token_id", "vision_start_token_id", "vision_end_token_id")
            if getattr(config, k, None) is None
        ]  # fmt: skip
        if missing:
            raise ModelError(
                f"model config {type(config).__name__} lacks {missing}: only Qwen2-VL-class checkpoints "
                "(Qwen2-VL, Qwen2.5-VL, Qwen3-VL) are supported for image prompts"
            )
        self.image_token_id = int(config.image_token_id)
        self.video_token_id = getattr(config, "video_token_id", None)
        self.image_token = str(tokenizer.convert_ids_to_tokens(self.image_token_id))
        start = tokenizer.convert_ids_to_tokens(int(config.vision_start_token_id))
        end = tokenizer.convert_ids_to_tokens(int(config.vision_end_token_id))
        # How the chat template renders one image part: what format() puts in a prompt per image.
        self.slot = f"{start}{self.image_token}{end}"
        self.merge = int(image_processor.merge_size) ** 2

    @classmethod
    def from_pretrained(
        cls, model_dir: Path, *, tokenizer: Any = None, what: str = "image prompts"
    ) -> VisionProcessor:
        """The processor of the checkpoint ``model_dir`` (``tokenizer``: one already loaded from it).

        A text-only checkpoint is a :class:`ModelError` naming ``what`` carries the images
        (:func:`require_vision_language`), so no caller has to check first."""
        from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer

        model_dir = Path(model_dir)
        require_vision_language(model_dir, what=what)
        if not (model_dir / "preprocessor_config.json").is_file():
            raise ModelError(
                f"checkpoint {model_dir} has no preprocessor_config.json: a vision-language checkpoint needs "
                "its image processor config next to config.json (save it with image_processor.save_pretrained)"
            )
        return cls(
            tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(model_dir),
            AutoImageProcessor.from_pretrained(model_dir),
            AutoConfig.from_pretrained(model_dir),
        )

    def format(self, prompt: ImagePrompt, *, chat: bool) -> ImagePrompt:
        """``prompt`` with one image slot per image before its text; in the chat markup (one user turn
        plus the assistant header) when ``chat`` and the tokenizer has a chat template."""
        if self.image_token in prompt.text:
            raise ModelError(
                f"prompt {prompt.text[:80]!r} already contains {self.image_token!r}: format a prompt once "
                "(format the plain text, record the result, and generate/train from the recorded one)"
            )
        if chat and getattr(self.tokenizer, "chat_template", None):
            content = [{"type": "image"} for _ in prompt.images] + [{"type": "text", "text": prompt.text}]
            text = str(
                self.tokenizer.apply_chat_template(
                    [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
                )
            )
        else:
            text = self.slot * len(prompt.images) + prompt.text
        return ImagePrompt(text, prompt.images)

    def pixels(self, images: Sequence[str], *, prompt: str) -> dict[str, torch.Tensor]:
        """``pixel_values`` and ``image_grid_thw`` of the image files ``images`` (in order); a missing or
        unreadable file is a :class:`ModelError` naming it and the prompt it belongs to."""
        from PIL import Image, UnidentifiedImageError

        loaded = []
        for ref in images:
            data = _read_image_file(ref, prompt)
            try:
                with Image.open(io.BytesIO(data)) as img:
                    loaded.append(img.convert("RGB"))
            except (OSError, UnidentifiedImageError) as err:
                raise ModelError(
                    f"image {ref!r} of prompt {prompt[:80]!r} is not a readable image: {err}"
                ) from None
        out = self.image_processor(images=loaded, return_tensors="pt")
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}

    def expand(self, prompt: Prompt, grid_thw: Any) -> str:
        """The text of ``prompt`` with each image's single ``<|image_pad|>`` repeated once per merged
        patch group of that image (``grid_thw``: its rows, in image order), as ``Qwen2VLProcessor`` does."""
        text = prompt_text(prompt)
        parts = text.split(self.image_token)
        n_images = len(prompt_images(prompt))
        if len(parts) - 1 != n_images:
            raise ModelError(
                f"prompt {text[:80]!r} has {len(parts) - 1} image slot(s) ({self.image_token!r}) for "
                f"{n_images} image(s): format each prompt once with the generator's format_prompt "
                "(VisionProcessor.format), which puts one slot per image"
            )
        counts = [int(g.prod()) // self.merge for g in grid_thw] if n_images else []
        return parts[0] + "".join(self.image_token * c + p for c, p in zip(counts, parts[1:], strict=True))

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        """The token ids the model sees for ``prompt``: image slots expanded, no special tokens added."""
        images = prompt_images(prompt)
        grid = self.pixels(images, prompt=prompt_text(prompt))["image_grid_thw"] if images else None
        ids: list[int] = self.tokenizer(self.expand(prompt, grid), add_special_tokens=False)["input_ids"]
        return ids

    def token_types(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``mm_token_type_ids`` of ``input_ids``: 1 where an image token is, 2 a video token, else 0."""
        types = (input_ids == self.image_token_id).long()
        if self.video_token_id is not None:
            types = types + 2 * (input_ids == int(self.video_token_id)).long()
        return types

    def encode(self, prompts: Sequence[Prompt], *, padding_side: str = "left") -> dict[str, torch.Tensor]:
        """Model inputs of a batch: ``input_ids``, ``attention_mask`` (padded on ``padding_side``),
        ``mm_token_type_ids``, and, when any prompt has images, ``pixel_values`` (every image of every
        prompt, in order) and ``image_grid_thw`` (one row per image)."""
        import torch

        texts: list[str] = []
        pixel_values, grids = [], []
        for prompt in prompts:
            images = prompt_images(prompt)
            vision = self.pixels(images, prompt=prompt_text(prompt)) if images else None
            texts.append(self.expand(prompt, vision["image_grid_thw"] if vision else None))
            if vision is not None:
                pixel_values.append(vision["pixel_values"])
                grids.append(vision["image_grid_thw"])
        side = self.tokenizer.padding_side
        self.tokenizer.padding_side = padding_side
        try:
            enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        finally:
            self.tokenizer.padding_side = side
        out = {
            "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"],
            "mm_token_type_ids": self.token_types(enc["input_ids"]),
        }
        if pixel_values:
            out["pixel_values"] = torch.cat(pixel_values)
            out["image_grid_thw"] = torch.cat(grids)
        return out
