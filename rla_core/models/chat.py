"""Chat requests as the policy answers them: OpenAI Chat Completions in, the checkpoint's chat markup and
token ids out, one recorded turn back (:mod:`rla_core.models.endpoint` serves them over HTTP).

A :class:`ChatRequest` is the body of ``POST /v1/chat/completions`` as this project accepts it: plain text
turns (``system``, ``user``, ``assistant``; a content may be a list of text parts), one choice, the
episode's ``seed``. What it does not take is refused with the reason, never half-served: tools (the tiny
models produce no tool-call format the endpoint could parse), images, ``n`` > 1, stop sequences (the
recorded tokens are exactly what the model generated, up to EOS or ``max_tokens``).

:func:`render_chat` turns the messages into the checkpoint's chat markup (its tokenizer's chat template,
with the assistant header) and token ids; the turn's sampling seed is
:func:`~rla_core.algo.seeds.turn_seed` of the request's ``seed`` and the number of assistant messages
the conversation already holds.

Example:
    >>> req = ChatRequest.model_validate({"model": "m", "seed": 3, "messages": [
    ...     {"role": "user", "content": [{"type": "text", "text": "2+2?"}]}]})
    >>> req.turns(), req.turn_index()
    ([{'role': 'user', 'content': '2+2?'}], 0)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rla_core.config import SamplingConfig
from rla_core.errors import ModelError

ROLES = ("system", "user", "assistant")


class ChatRequestError(ModelError):
    """A chat request this endpoint cannot serve; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class ChatRequest(BaseModel):
    """The fields of an OpenAI Chat Completions request that the endpoint reads (others are ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    seed: int | None = None
    temperature: float | None = Field(None, ge=0.0, le=5.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int = 1
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    tools: list[Any] | None = None
    logprobs: bool = False

    @classmethod
    def parse(cls, body: Any) -> ChatRequest:
        """``body`` validated, or a :class:`ChatRequestError` naming the field and the problem."""
        try:
            return cls.model_validate(body)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in exc.errors()
            )
            raise ChatRequestError(f"invalid chat request: {problems}") from None

    def turns(self) -> list[dict[str, str]]:
        """The conversation as ``{"role", "content"}`` text turns (content parts joined), checked."""
        if self.n != 1:
            raise ChatRequestError(f"n={self.n}: the endpoint answers one choice per request (n=1)")
        if self.tools:
            raise ChatRequestError(
                "tool calling is not supported yet: the policy's tiny models produce no tool-call format the "
                "endpoint could parse (run the environment without tools, e.g. verifiers' null harness)"
            )
        if self.stop:
            raise ChatRequestError(
                "stop sequences are not supported: the endpoint records every token the model generated, up "
                "to EOS or max_tokens"
            )
        return [_text_turn(i, m) for i, m in enumerate(self.messages)]

    def turn_index(self) -> int:
        """The 0-based index of the assistant turn this request asks for: the assistant turns so far."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    def sampling(self, defaults: SamplingConfig) -> SamplingConfig:
        """The request's temperature, top-p and token limit over ``defaults`` (the stage's policy sampling)."""
        limit = self.max_completion_tokens or self.max_tokens
        return SamplingConfig(
            temperature=defaults.temperature if self.temperature is None else self.temperature,
            top_p=defaults.top_p if self.top_p is None else self.top_p,
            max_new_tokens=defaults.max_new_tokens if limit is None else limit,
        )


def _text_turn(index: int, message: dict[str, Any]) -> dict[str, str]:
    where = f"messages[{index}]"
    role = message.get("role")
    if role not in ROLES:
        raise ChatRequestError(
            f"{where}.role={role!r}: the endpoint takes {', '.join(ROLES)} turns (tool turns: tool calling is "
            "not supported yet)"
        )
    if message.get("tool_calls"):
        raise ChatRequestError(f"{where} carries tool_calls: tool calling is not supported yet")
    content = message.get("content")
    if content is None:
        return {"role": role, "content": ""}
    if isinstance(content, str):
        return {"role": role, "content": content}
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ChatRequestError(
                    f"{where}.content[{j}] is a {kind!r} part: the endpoint takes text parts only"
                )
            texts.append(part["text"])
        return {"role": role, "content": "".join(texts)}
    raise ChatRequestError(f"{where}.content is a {type(content).__name__}: a string or a list of text parts")


@dataclass(frozen=True)
class RenderedChat:
    """A conversation in the checkpoint's chat markup, ending with the assistant header: text and ids."""

    text: str
    ids: tuple[int, ...]


# The turns of a checkpoint without a chat template (the tiny models; base models): ChatML's turn opener as
# plain text, and the tokenizer's EOS as the end of a turn, so generation from the assistant header stops
# where a turn ends (the generation config's EOS).
PLAIN_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def render_chat(tokenizer: Any, turns: list[dict[str, str]], *, where: str) -> RenderedChat:
    """``turns`` rendered with ``tokenizer``'s chat template (the assistant header appended) and tokenised
    without added special tokens: exactly the ids the model continues. A tokenizer without a chat template
    (the tiny models, a base model) renders with :data:`PLAIN_CHAT_TEMPLATE`; one without an EOS token
    cannot end a turn: a :class:`~rla_core.errors.ModelError` naming ``where`` (the checkpoint)."""
    template = getattr(tokenizer, "chat_template", None) or PLAIN_CHAT_TEMPLATE
    if template is PLAIN_CHAT_TEMPLATE and not getattr(tokenizer, "eos_token", None):
        raise ModelError(
            f"{where} has neither a chat template nor an EOS token, so a conversation cannot be rendered "
            "for it: give the policy a checkpoint with one (tokenizer.chat_template = ...)"
        )
    text = str(
        tokenizer.apply_chat_template(
            turns, chat_template=template, tokenize=False, add_generation_prompt=True
        )
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return RenderedChat(text, tuple(int(i) for i in ids))


@dataclass(frozen=True)
class EndpointRecord:
    """One answered chat request, as recorded (:class:`~rla_core.models.endpoint.RecordingEndpoint`).

    ``episode_seed``: the request's ``seed``; ``turn``: its assistant-turn index; ``seed``: the turn's
    sampling seed (:func:`~rla_core.algo.seeds.turn_seed`); ``messages``: the conversation (JSON text
    turns); ``prompt`` / ``prompt_ids``: it rendered in the chat markup; ``response_ids`` / ``logprobs``:
    every generated token (EOS included when it stopped there) with its log-probability; ``response``:
    their text (EOS and special tokens left out); ``checkpoint``: the sha256 of the weights that answered.
    """

    episode_seed: int
    turn: int
    seed: int
    messages: str
    prompt: str
    prompt_ids: tuple[int, ...]
    response: str
    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    temperature: float
    top_p: float
    max_tokens: int
    checkpoint: str

    @staticmethod
    def messages_json(turns: list[dict[str, str]]) -> str:
        return json.dumps(turns, ensure_ascii=False, separators=(",", ":"))
