"""Text generation backends behind one small Protocol (docs/architecture.md#cross-module-interfaces, ``Generator``).

* :class:`TransformersGenerator` — in-process Hugging Face ``generate`` on CPU or GPU, batched with left
  padding, ``n`` samples per prompt, stop strings, per-prompt seeds.
* :class:`VllmServerGenerator` — an OpenAI-compatible vLLM server (``/v1/completions``), up to
  ``max_in_flight`` concurrent requests so vLLM's continuous batching sees many prompts at once.

:meth:`GeneratorSpec.open` picks one from ``models.serving.backend``: ``transformers``; ``vllm`` — a
per-stage server started on exactly the given checkpoint (:mod:`rla_core.models.serving`), served
under a name unique to it and stopped by :meth:`Generator.close`; ``auto`` — vLLM when the configured
vLLM interpreter exists and a CUDA GPU is visible, else transformers. A server that does not serve the
requested name is an error naming both; nothing ever falls back to another model.

Seeds (docs/architecture.md#determinism-scope): ``generate(prompts, ..., seeds=[s_0, s_1, ...])`` makes sample j of
prompt i a function of (prompt i, s_i, j) only — never of the other prompts in the call or of the
micro-batch size — so a batched caller gets the same samples as one call per prompt. Without
``seeds``, prompt i uses ``s_i = seed + i`` (reproducible for the same prompt list).

Chat markup: with ``models.serving.chat_template`` on and a tokenizer that has a chat template,
:meth:`Generator.format_prompt` renders a prompt as one user turn plus the assistant header. Callers
format before generating and record the formatted text, so the trainer sees what the model saw.

Images: a prompt is a ``str`` or an :class:`~rla_core.models.multimodal.ImagePrompt` (text plus image
file references). ``format_prompt(ImagePrompt)`` returns an ImagePrompt whose text has one image slot
per image (:meth:`VisionProcessor.format`); ``generate`` takes both kinds, in one list. The
transformers backend runs a vision-language checkpoint (one whose config has a ``vision_config``) with
:class:`~rla_core.models.multimodal.VisionProcessor`; an image prompt for a text-only checkpoint is a
:class:`ModelError`, never a text-only fallback. The vLLM backend sends an image prompt to the chat API
as content parts that render to exactly the recorded text (:class:`VllmServerGenerator`). A text-only
checkpoint given text prompts runs exactly as before, on both backends.

Example:
    >>> models = ModelsConfig(serving=ServingConfig(backend=Backend.TRANSFORMERS))
    >>> with GeneratorSpec(model_dir, models=models, threads=2).open() as gen:
    ...     out = gen.generate(["go north"], n=2, sampling=SamplingConfig(temperature=0.8), seed=1)
    >>> len(out), len(out[0])
    (1, 2)
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from pydantic import ValidationError

from rla_core import progress
from rla_core.config import Backend, InferenceDtype, ModelsConfig, SamplingConfig, ServingConfig, on_cuda
from rla_core.errors import ConfigError, ModelError
from rla_core.models.bootstrap import resolve_device, validate_checkpoint
from rla_core.models.multimodal import (
    ChatPrompts,
    ImagePrompt,
    Prompt,
    VisionProcessor,
    chat_content,
    is_vision_language,
    load_vl_model,
    prompt_images,
    require_vision_language,
)
from rla_core.models.sampling import RowSampler, StopCriterion, eos_ids, sample_seed
from rla_core.models.server_pool import active_pool
from rla_core.models.serving import (
    VllmServer,
    check_served,
    may_serve_with_vllm,
    resolve_interpreter,
    served_models,
)

if TYPE_CHECKING:
    import httpx
    import torch

    from rla_core.stage_inputs import GenerationModels

log = logging.getLogger(__name__)

T = TypeVar("T")

# A reachability probe must fail fast: an unreachable endpoint is a config error, not a slow network.
_CONNECT_TIMEOUT_S = 2.0
_REQUEST_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class TokenSample:
    """One sampled completion as tokens (:meth:`TransformersGenerator.generate_tokens`): every token the model
    generated (its EOS included when it stopped there) and each one's log-probability under the model's own
    distribution (temperature 1, untruncated: the log π the update computes for the same tokens)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str  # "stop" (EOS) | "length"


@dataclass(frozen=True)
class Generation:
    """One sampled completion."""

    text: str  # stop string removed
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" | "length"


class Generator(Protocol):
    """Samples ``n`` completions per prompt; the result is ``[prompt_index][sample_index]``.

    ``seeds`` (one per prompt) makes sample j of prompt i depend only on (prompt i, seeds[i], j);
    without it prompt i is seeded with ``seed + i``.
    """

    def generate(
        self,
        prompts: Sequence[Prompt],
        *,
        n: int,
        sampling: SamplingConfig,
        seed: int,
        seeds: Sequence[int] | None = None,
    ) -> list[list[Generation]]: ...

    @overload
    def format_prompt(self, prompt: str) -> str: ...
    @overload
    def format_prompt(self, prompt: ImagePrompt) -> ImagePrompt: ...
    def format_prompt(self, prompt: Prompt) -> Prompt:
        """``prompt`` in the model's chat markup when that is switched on and available, else unchanged;
        an :class:`ImagePrompt` also gets one image slot per image."""
        ...

    def close(self) -> None: ...


def resolve_backend(serving: ServingConfig) -> Backend:
    """``transformers`` or ``vllm``: ``auto`` is vLLM when the interpreter exists and a CUDA GPU is visible."""
    if serving.backend is not Backend.AUTO:
        return serving.backend
    import torch

    try:
        resolve_interpreter(serving.interpreter)
    except ModelError:
        return Backend.TRANSFORMERS
    return Backend.VLLM if torch.cuda.is_available() else Backend.TRANSFORMERS


def set_torch_threads(threads: int) -> None:
    """torch's intra-op thread count: part of what a row computes on CPU (float reduction order)."""
    import torch

    torch.set_num_threads(threads)


@dataclass(frozen=True)
class GeneratorSpec:
    """Everything needed to open the same generator in any process: a stage's, a Ray shard's, a script's.

    ``checkpoint``: a local directory (on a cluster, a path every node sees); ``threads``: torch threads,
    set before the model loads (a stage's is the run's ``threads``, part of its key); ``role`` picks the
    vLLM tensor-parallel size; ``name``: the vLLM served name (a stage passes
    :func:`~rla_core.models.serving.served_name`; None: :func:`checkpoint_name`).
    """

    checkpoint: Path
    models: GenerationModels | ModelsConfig
    threads: int
    role: str = "policy"
    name: str | None = None

    def serves_with_vllm(self) -> bool:
        """Whether opening this generator may start a vLLM server (:func:`~rla_core.models.serving.may_serve_with_vllm`)."""
        return may_serve_with_vllm(self.models.serving)

    def tensor_parallel(self) -> int:
        """GPUs one vLLM server of this generator's role spans (``models.serving.tensor_parallel``)."""
        return int(getattr(self.models.serving.tensor_parallel, str(self.role)))

    @contextmanager
    def open(self, *, runtime_dir: Path | None = None) -> Iterator[Generator]:
        """The generation backend chosen by ``models.serving.backend`` for the checkpoint, closed (its vLLM
        server stopped) when the block ends, also on errors.

        ``transformers``: in process. ``vllm``: inside ``rla run`` with ``models.serving.lifetime=run``,
        the run's server of the role, leased from :func:`~rla_core.models.server_pool.active_pool` and
        proved to hold the checkpoint's weights; else a server started on the checkpoint, served as
        ``name`` (its pidfile and log under ``runtime_dir``). A missing vLLM interpreter with ``backend=vllm`` is a
        :class:`ModelError`, never a fallback.
        """
        set_torch_threads(self.threads)
        with ExitStack() as leases:
            generator = self._start(runtime_dir, leases)
            try:
                yield generator
            finally:
                generator.close()

    def _start(self, runtime_dir: Path | None, leases: ExitStack) -> Generator:
        models, model = self.models, self.checkpoint
        # The dtype resolved for models.device (a stage's slice is resolved already: then this is a no-op).
        serving = models.serving.model_copy(
            update={"dtype": models.serving.dtype.resolve(cuda=on_cuda(models.device))}
        )
        if resolve_backend(serving) is Backend.VLLM:
            validate_checkpoint(Path(model))
            pool = active_pool()
            if pool is not None:  # the run's server of the role, holding this checkpoint (hash-checked)
                server = leases.enter_context(pool.lease(Path(model), role=self.role, serving=serving))
                owned = None
            else:
                server = owned = VllmServer.start(
                    model, name=self.name or checkpoint_name(model, self.role), role=self.role,
                    serving=serving, runtime_dir=runtime_dir,
                )  # fmt: skip
            try:
                return VllmServerGenerator(
                    server.base_url, model=server.name, max_in_flight=serving.max_in_flight,
                    tokenizer_dir=Path(model) if serving.chat_template else None, server=owned,
                    vision_dir=Path(model) if is_vision_language(Path(model)) else None,
                )  # fmt: skip
            except BaseException:
                if owned is not None:
                    owned.stop()
                raise
        return TransformersGenerator(
            Path(model), device=models.device, batch_size=models.generation_batch_size,
            chat_template=serving.chat_template, dtype=serving.dtype,
        )  # fmt: skip


def checkpoint_name(model: str | Path, role: str) -> str:
    """A served name for a checkpoint opened outside a stage (e.g. ``rla eval``): its resolved path's hash."""
    digest = hashlib.sha256(str(Path(model).resolve()).encode()).hexdigest()[:16]
    return f"rla-path-{digest}-{role}"


def chat_formatter(tokenizer: Any) -> Callable[[str], str] | None:
    """A function rendering a prompt as one user turn in ``tokenizer``'s chat markup; None without a template."""
    if not getattr(tokenizer, "chat_template", None):
        return None

    def render(prompt: str) -> str:
        messages = [{"role": "user", "content": prompt}]
        return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    return render


def prompt_seeds(prompts: Sequence[Prompt], seed: int, seeds: Sequence[int] | None) -> list[int]:
    """One seed per prompt: ``seeds`` as given (checked), else ``seed + i``."""
    if seeds is None:
        return [seed + i for i in range(len(prompts))]
    if isinstance(seeds, (str, bytes)) or len(seeds) != len(prompts):
        raise ModelError(
            f"seeds has {len(seeds)} entries for {len(prompts)} prompts: pass exactly one int per prompt"
        )
    out = []
    for i, s in enumerate(seeds):
        if isinstance(s, bool) or not isinstance(s, int):
            raise ModelError(f"seeds[{i}] is a {type(s).__name__}, not an int")
        out.append(int(s))
    return out


def _check_request(prompts: Sequence[Prompt], n: int, sampling: SamplingConfig) -> SamplingConfig:
    if isinstance(prompts, str) or not isinstance(prompts, Sequence):
        raise ModelError("prompts must be a list of strings, not a single string: wrap it in a list")
    if len(prompts) == 0:
        raise ModelError("generate() got an empty prompt list: pass at least one prompt")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, (str, ImagePrompt)):
            raise ModelError(f"prompt {i} is a {type(prompt).__name__}, not a string (or an ImagePrompt)")
    if n < 1:
        raise ModelError(f"n={n} samples per prompt: n must be at least 1")
    try:
        # Re-validate: a config built with model_construct() would bypass the range checks.
        return SamplingConfig.model_validate(sampling.model_dump())
    except ValidationError as err:
        first = err.errors()[0]
        raise ConfigError(
            f"sampling.{'.'.join(str(p) for p in first['loc'])}: {first['msg']} (got {first.get('input')!r})"
        ) from None


def _check_token_request(
    prompts: Sequence[Sequence[int]], sampling: SamplingConfig, seeds: Sequence[int]
) -> SamplingConfig:
    """The token-level request checked: one seed per non-empty prompt of token ids, no stop strings."""
    if len(seeds) != len(prompts):
        raise ModelError(
            f"seeds has {len(seeds)} entries for {len(prompts)} prompts: pass one int per prompt"
        )
    if any(not p or isinstance(p, str) for p in prompts):
        raise ModelError("generate_tokens takes non-empty lists of token ids, one per prompt")
    if sampling.stop:
        raise ModelError(
            f"sampling.stop={list(sampling.stop)!r}: token-level generation records every generated token, "
            "so it stops only at EOS or max_new_tokens (stop strings are for text generation)"
        )
    return _check_request(["x"] * len(prompts), 1, sampling)


def _cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` before the earliest stop string; report whether one was found."""
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    if not hits:
        return text, False
    return text[: min(hits)], True


class TransformersGenerator:
    """Batched Hugging Face generation (left padding, micro-batches of ``batch_size`` sequences).

    Prompts are expanded ``n`` times and generated in micro-batches; a stopping criterion ends a sequence
    at EOS or at its first stop string and the whole batch as soon as every sequence has ended.

    Sampling is done here, not by ``generate(do_sample=True)`` (which draws a whole batch from one RNG
    stream, so a row's sample would depend on its batch neighbours): ``generate`` runs greedy over
    logits processed by :class:`~rla_core.models.sampling.RowSampler` — temperature, top-p, then an inverse-CDF draw with one
    uniform per row and token from the row's own counter-based stream (:func:`step_uniforms` of
    ``sample_seed(seeds[i], j)``, indexed by the token's position). Finished rows (which keep being
    processed until the batch ends) change nothing for the others. Temperature 0 is plain greedy. The
    sampler and :class:`~rla_core.models.sampling.StopCriterion` work on the whole batch at once: no per-row kernel and no host
    read per token (stop strings: one read per token for the whole batch).

    ``dtype`` (``models.serving.dtype``) is what the weights run in, whatever dtype the checkpoint was
    saved in: ``auto`` is bfloat16 on a CUDA device and float32 on the CPU (:meth:`InferenceDtype.resolve`);
    the resolved value is :attr:`dtype`.

    A vision-language checkpoint loads with its image-text-to-text class and encodes every batch with
    :class:`VisionProcessor` (text-only prompts too); a batch's images go in with it
    (``pixel_values``, ``image_grid_thw``), so image prompts are batched like text ones.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        device: str = "auto",
        batch_size: int = 32,
        chat_template: bool = False,
        dtype: InferenceDtype = InferenceDtype.AUTO,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        validate_checkpoint(Path(model_dir))
        if batch_size < 1:
            raise ModelError(f"batch_size={batch_size}: must be at least 1")
        self._device = torch.device(resolve_device(device, setting="models.device"))
        self.model_dir = Path(model_dir)
        self.batch_size = batch_size
        self._tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self._tokenizer.padding_side = "left"
        if self._tokenizer.pad_token_id is None:
            # Real checkpoints often ship without a pad token; EOS is the usual stand-in.
            self._tokenizer.pad_token = self._tokenizer.eos_token
        chat = chat_formatter(self._tokenizer) if chat_template else None
        self.format_prompt = ChatPrompts(chat, chat_template, self._vision_processor).format
        self._vision: VisionProcessor | None = None
        if is_vision_language(self.model_dir):
            self._vision = VisionProcessor.from_pretrained(self.model_dir, tokenizer=self._tokenizer)
            model: Any = load_vl_model(self.model_dir)
        else:
            model = AutoModelForCausalLM.from_pretrained(self.model_dir)
        # The checkpoint's saved dtype (float32 masters from the trainer) is not what to generate in.
        self.dtype = InferenceDtype(dtype).resolve(cuda=self._device.type == "cuda")
        self._model: Any = model.to(device=self._device, dtype=getattr(torch, self.dtype.value))
        self._model.eval()

    def generate(
        self,
        prompts: Sequence[Prompt],
        *,
        n: int,
        sampling: SamplingConfig,
        seed: int,
        seeds: Sequence[int] | None = None,
    ) -> list[list[Generation]]:
        """Sample ``n`` completions for each prompt; ``result[i][j]`` is sample j of prompt i.

        Sample j of prompt i is drawn with ``sample_seed(seeds[i], j)`` (``seeds[i] = seed + i`` when
        ``seeds`` is None), independent of the other prompts and of ``batch_size``. The global torch
        RNG is neither used nor advanced.
        """
        sampling = _check_request(prompts, n, sampling)
        if self._vision is None and any(prompt_images(p) for p in prompts):
            require_vision_language(self.model_dir, what="generate() prompts")
        per_prompt = prompt_seeds(prompts, seed, seeds)
        expanded = [
            (p, sample_seed(s, j)) for p, s in zip(prompts, per_prompt, strict=True) for j in range(n)
        ]
        flat: list[Generation] = []
        with progress.track("generation", total=len(expanded), unit="sequences", log_end=False) as counter:
            for start in range(0, len(expanded), self.batch_size):
                chunk = expanded[start : start + self.batch_size]
                flat.extend(self._generate_batch([p for p, _ in chunk], [s for _, s in chunk], sampling))
                counter.advance(len(chunk))
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    def _vision_processor(self) -> VisionProcessor:
        if self._vision is None:
            require_vision_language(self.model_dir, what="format_prompt() prompts")
        assert self._vision is not None
        return self._vision

    def generate_tokens(
        self, prompts: Sequence[Sequence[int]], *, sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[TokenSample]:
        """One sample per prompt of token ids (a prompt is already token ids: e.g. a rendered chat), each
        sampled token with its log-probability (:class:`TokenSample`).

        Prompt i is sampled exactly as :meth:`generate` samples ``n=1`` with ``seeds[i]`` (same row seed,
        same tokens for the same ids), in micro-batches of ``batch_size``. No stop strings: the tokens
        recorded are all the model generated, up to EOS (included) or ``max_new_tokens``.
        """
        import torch

        sampling = _check_token_request(prompts, sampling, seeds)
        if self._vision is not None:
            raise ModelError(
                f"generate_tokens takes text prompts; {self.model_dir} is a vision-language model"
            )
        pad = int(self._tokenizer.pad_token_id)
        out: list[TokenSample] = []
        rows = [(list(p), sample_seed(int(s), 0)) for p, s in zip(prompts, seeds, strict=True)]
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            width = max(len(ids) for ids, _ in chunk)
            ids = torch.tensor([[pad] * (width - len(p)) + p for p, _ in chunk], device=self._device)
            mask = torch.tensor(
                [[0] * (width - len(p)) + [1] * len(p) for p, _ in chunk], device=self._device
            )
            for used, hit_eos, logps in zip(
                *self._sample(ids, mask, {}, [s for _, s in chunk], sampling, logprobs=True), strict=True
            ):
                out.append(TokenSample(tuple(used), tuple(logps), "stop" if hit_eos else "length"))
        return out

    def _generate_batch(
        self, prompts: list[Prompt], row_seeds: list[int], sampling: SamplingConfig
    ) -> list[Generation]:
        tok = self._tokenizer
        vision: dict[str, Any] = {}
        if self._vision is not None:
            enc = self._vision.encode(prompts, padding_side="left")
            # The batch's images and the per-token modality (the model's M-RoPE needs it).
            vision = {
                k: v.to(self._device) for k, v in enc.items() if k not in ("input_ids", "attention_mask")
            }
        else:
            enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        attention_mask = enc["attention_mask"].to(self._device)
        tokens, eos_hits, _ = self._sample(
            enc["input_ids"].to(self._device), attention_mask, vision, row_seeds, sampling, logprobs=False
        )
        results = []
        for row, (used, hit_eos) in enumerate(zip(tokens, eos_hits, strict=True)):
            text = str(tok.decode(used[:-1] if hit_eos else used, skip_special_tokens=True))
            text, hit_stop = _cut_at_stop(text, sampling.stop)
            results.append(
                Generation(
                    text=text,
                    prompt_tokens=int(attention_mask[row].sum()),
                    completion_tokens=len(used),
                    finish_reason="stop" if (hit_eos or hit_stop) else "length",
                )
            )
        return results

    def _sample(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        vision: dict[str, Any],
        row_seeds: list[int],
        sampling: SamplingConfig,
        *,
        logprobs: bool,
    ) -> tuple[list[list[int]], list[bool], list[list[float]]]:
        """Decode a left-padded batch: each row's new tokens (up to its stop, EOS included), whether it ended
        at EOS, and with ``logprobs`` each token's log-probability under the model (the raw logits' log-softmax:
        temperature 1, no top-p, as the update computes log π)."""
        import torch
        from transformers import LogitsProcessorList, StoppingCriteriaList

        tok = self._tokenizer
        if input_ids.shape[1] == 0:
            raise ModelError("every prompt in the batch is empty: give the model some text to continue")
        prompt_len = input_ids.shape[1]
        stop_ids = self._eos_ids()
        criterion = StopCriterion(
            tok, prompt_len=prompt_len, stops=sampling.stop, eos_ids=stop_ids, rows=len(row_seeds),
            device=self._device,
        )  # fmt: skip
        kwargs: dict[str, Any] = {
            "max_new_tokens": sampling.max_new_tokens,
            "pad_token_id": tok.pad_token_id,
            "eos_token_id": stop_ids,
            "stopping_criteria": StoppingCriteriaList([criterion]),
            # Greedy over our processed logits; the checkpoint's own sampling defaults must not apply.
            "do_sample": False,
            "temperature": None,
            "top_p": None,
            "top_k": None,
            # The raw logits of every step (before our sampler), for the sampled tokens' log-probabilities.
            "output_logits": logprobs,
            "return_dict_in_generate": True,
        }
        if sampling.temperature > 0.0:
            sampler = RowSampler(
                row_seeds, temperature=sampling.temperature, top_p=sampling.top_p, prompt_len=prompt_len,
                steps=sampling.max_new_tokens, device=self._device,
            )  # fmt: skip
            kwargs["logits_processor"] = LogitsProcessorList([sampler])
        with torch.inference_mode():
            out = self._model.generate(input_ids=input_ids, attention_mask=attention_mask, **vision, **kwargs)
        new = out.sequences[:, prompt_len:]
        chosen: list[list[float]] = [[] for _ in row_seeds]
        if logprobs and new.shape[1]:
            logits = torch.stack(out.logits, dim=1).float()  # (rows, steps, vocab)
            picked = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
            chosen = picked.tolist()
        tokens, eos_hits, logps = [], [], []
        for row, ids in enumerate(new.tolist()):
            done_at = criterion.finished_at()[row]
            used = ids[:done_at] if done_at is not None else ids
            tokens.append(used)
            eos_hits.append(bool(used) and used[-1] in stop_ids)
            logps.append(chosen[row][: len(used)])
        return tokens, eos_hits, logps

    def _eos_ids(self) -> list[int]:
        return eos_ids(self._model.generation_config.eos_token_id, self._tokenizer)

    def close(self) -> None:
        """Drop the model (frees its memory)."""
        self._model = None


class VllmServerGenerator:
    """Generation through an OpenAI-compatible vLLM server (``/v1/completions``), requests in parallel.

    The constructor checks ``/models``: the server must serve ``model`` (else :class:`ModelError` naming
    both the requested and the served names — never another model). ``generate`` sends one request per
    prompt with up to ``max_in_flight`` in flight (a thread pool over one connection pool), so vLLM's
    continuous batching sees many prompts at once; results come back in input order. ``server``, when
    given, is the per-stage server this generator owns and stops on :meth:`close`.

    Image prompts (``vision_dir``: the vision-language checkpoint the server serves) go to
    ``/v1/chat/completions`` as OpenAI-style content parts (:func:`chat_content`: the formatted text cut
    at its image slots, each image a base64 PNG); the server renders them with
    :func:`verbatim_chat_template` (:meth:`VllmServer.start` sets it for a vision-language checkpoint),
    so the model sees exactly the recorded text, with vLLM's processor expanding each image's slot.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        max_in_flight: int = 64,
        tokenizer_dir: Path | None = None,
        server: VllmServer | None = None,
        vision_dir: Path | None = None,
    ) -> None:
        import httpx

        if max_in_flight < 1:
            raise ModelError(f"max_in_flight={max_in_flight}: must be at least 1")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_in_flight = max_in_flight
        self._server = server
        self._client: httpx.Client | None = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(_REQUEST_TIMEOUT_S, connect=_CONNECT_TIMEOUT_S),
            limits=httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight),
        )
        chat: Callable[[str], str] | None = None
        self._vision: VisionProcessor | None = None
        try:
            check_served(self.base_url, model, served_models(self.base_url))
            if tokenizer_dir is not None:
                from transformers import AutoTokenizer

                chat = chat_formatter(AutoTokenizer.from_pretrained(tokenizer_dir))
            if vision_dir is not None:
                self._vision = VisionProcessor.from_pretrained(vision_dir)
        except BaseException:
            self.close()
            raise
        self.format_prompt = ChatPrompts(chat, tokenizer_dir is not None, self._vision_processor).format

    def _http(self) -> httpx.Client:
        if self._client is None:
            raise ModelError("this VllmServerGenerator is closed: open a new one with GeneratorSpec.open()")
        return self._client

    def _vision_processor(self) -> VisionProcessor:
        if self._vision is None:
            raise ModelError(
                f"image prompts for {self.model}, which this generator was not opened as a vision-language "
                "checkpoint for (GeneratorSpec.open passes vision_dir for one): give the role a vision-language "
                "checkpoint or turn its images off"
            )
        return self._vision

    def generate(
        self,
        prompts: Sequence[Prompt],
        *,
        n: int,
        sampling: SamplingConfig,
        seed: int,
        seeds: Sequence[int] | None = None,
    ) -> list[list[Generation]]:
        """Sample ``n`` completions per prompt: one request per prompt, seeded ``seeds[i]`` (or ``seed + i``).

        Up to ``max_in_flight`` requests are in flight; ``result[i]`` answers ``prompts[i]``. vLLM gives
        a request with a ``seed`` its own RNG (per-request generator), so its samples do not depend on
        what else the server batches with it: the same batch independence as the transformers backend
        (though not the same samples).
        """
        sampling = _check_request(prompts, n, sampling)
        slot = self._vision_processor().slot if any(isinstance(p, ImagePrompt) for p in prompts) else ""
        per_prompt = prompt_seeds(prompts, seed, seeds)
        bodies = []
        for prompt, prompt_seed in zip(prompts, per_prompt, strict=True):
            body: dict[str, Any] = {
                "model": self.model,
                "n": n,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "max_tokens": sampling.max_new_tokens,
                "stop": list(sampling.stop),
                "seed": prompt_seed,
            }
            if isinstance(prompt, ImagePrompt):
                # The recorded text already holds the chat markup: rendered verbatim, no header added.
                body["messages"] = [{"role": "user", "content": chat_content(prompt, slot)}]
                body |= {"add_generation_prompt": False, "logprobs": True, "top_logprobs": 0}
            else:
                # logprobs=0 returns the sampled tokens, so each choice's token count is known.
                body |= {"prompt": prompt, "logprobs": 0}
            bodies.append(body)
        return self._send(bodies, n, self._parse_any)

    def generate_tokens(
        self, prompts: Sequence[Sequence[int]], *, sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[TokenSample]:
        """One sample per prompt of token ids, each sampled token with its log-probability (:class:`TokenSample`):
        one ``/v1/completions`` request per prompt whose prompt is its token ids, seeded ``seeds[i]``, the
        sampled tokens answered as ids (``return_tokens_as_token_ids``) with their own log-probabilities
        (``logprobs=0``; vLLM's default log-probabilities are the raw model's, as the update computes them).
        No stop strings (as :meth:`TransformersGenerator.generate_tokens`)."""
        sampling = _check_token_request(prompts, sampling, seeds)
        bodies = [
            {
                "model": self.model, "prompt": list(ids), "n": 1, "temperature": sampling.temperature,
                "top_p": sampling.top_p, "max_tokens": sampling.max_new_tokens, "seed": int(seed),
                "logprobs": 0, "return_tokens_as_token_ids": True, "skip_special_tokens": False,
            }
            for ids, seed in zip(prompts, seeds, strict=True)
        ]  # fmt: skip
        return [one for (one,) in self._send(bodies, 1, _parse_token_samples)]

    def _send(
        self,
        bodies: list[dict[str, Any]],
        n: int,
        parse: Callable[[dict[str, Any], dict[str, Any], int], list[T]],
    ) -> list[list[T]]:
        """Each body posted (up to ``max_in_flight`` at once), its answer parsed; results in body order."""
        client = self._http()
        with progress.track("generation", total=len(bodies) * n, unit="sequences", log_end=False) as counter:
            if len(bodies) == 1 or self.max_in_flight == 1:
                out = []
                for body in bodies:
                    out.append(self._request(client, body, n, parse))
                    counter.advance(n)
                return out
            with ThreadPoolExecutor(max_workers=min(self.max_in_flight, len(bodies))) as pool:
                futures = [pool.submit(self._request, client, body, n, parse) for body in bodies]
                for done in as_completed(futures):  # progress as answers arrive; the first error raises
                    done.result()
                    counter.advance(n)
                return [f.result() for f in futures]

    def _request(
        self,
        client: httpx.Client,
        body: dict[str, Any],
        n: int,
        parse: Callable[[dict[str, Any], dict[str, Any], int], list[T]],
    ) -> list[T]:
        import httpx

        route = "/chat/completions" if "messages" in body else "/completions"
        try:
            resp = client.post(route, json=body)
        except httpx.HTTPError as err:
            raise ModelError(f"vLLM request to {self.base_url}{route} failed: {err}") from None
        if resp.status_code != 200:
            raise ModelError(f"vLLM {self.base_url}{route} answered {resp.status_code}: {resp.text[:500]}")
        return parse(body, resp.json(), n)

    def _parse_any(self, body: dict[str, Any], payload: dict[str, Any], n: int) -> list[Generation]:
        return self._parse_chat(payload, n) if "messages" in body else self._parse(payload, n)

    def _parse_chat(self, payload: dict[str, Any], n: int) -> list[Generation]:
        """Chat completions: the text is ``message.content``, the token count that of ``logprobs.content``."""
        out = []
        for choice, reason, prompt_tokens in _finished_choices(payload, n):
            tokens = (choice.get("logprobs") or {}).get("content")
            if tokens is None:
                raise ModelError(
                    "vLLM chat response has no logprobs.content: the server ignored logprobs=true"
                )
            out.append(Generation(choice["message"]["content"] or "", prompt_tokens, len(tokens), reason))
        return out

    def _parse(self, payload: dict[str, Any], n: int) -> list[Generation]:
        out = []
        for choice, reason, prompt_tokens in _finished_choices(payload, n):
            tokens = (choice.get("logprobs") or {}).get("tokens")
            if tokens is None:
                raise ModelError("vLLM response has no logprobs.tokens: the server ignored logprobs=0")
            # vLLM already removes the stop string (include_stop_str_in_output defaults to False).
            out.append(Generation(choice["text"], prompt_tokens, len(tokens), reason))
        return out

    def close(self) -> None:
        """Close the HTTP client and stop the per-stage server this generator owns (idempotent)."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._server is not None:
            self._server.stop()
            self._server = None


def _parse_token_samples(body: dict[str, Any], payload: dict[str, Any], n: int) -> list[TokenSample]:
    """A token-id completion's choices: ``logprobs.tokens`` are ``token_id:<id>`` strings, with their
    ``token_logprobs``; the EOS vLLM stopped at is among them (it generated it)."""
    del body
    out = []
    for choice, reason, _prompt_tokens in _finished_choices(payload, n):
        logprobs = choice.get("logprobs") or {}
        tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
        if tokens is None or values is None or len(tokens) != len(values):
            raise ModelError(
                "vLLM response has no logprobs.tokens/token_logprobs of equal length (logprobs=0)"
            )
        if not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            raise ModelError(
                f"vLLM answered tokens {tokens[:3]!r} as text, not token_id:<id>: the server ignored "
                "return_tokens_as_token_ids (vLLM >= 0.6 supports it)"
            )
        ids = tuple(int(t.removeprefix("token_id:")) for t in tokens)
        out.append(TokenSample(ids, tuple(float(v) for v in values), reason))
    return out


def _finished_choices(payload: dict[str, Any], n: int) -> list[tuple[dict[str, Any], str, int]]:
    """A vLLM completion response's ``n`` choices in index order, each with its finish reason (stop or
    length, else :class:`ModelError`) and the prompt's token count."""
    choices = sorted(payload["choices"], key=lambda c: c["index"])
    if len(choices) != n:
        raise ModelError(f"vLLM returned {len(choices)} choices, expected n={n}")
    prompt_tokens = int(payload["usage"]["prompt_tokens"])
    out = []
    for choice in choices:
        reason = choice.get("finish_reason")
        if reason not in ("stop", "length"):
            raise ModelError(f"vLLM finished a completion with reason {reason!r} (expected stop/length)")
        out.append((choice, str(reason), prompt_tokens))
    return out
