"""The recording endpoint: the policy behind an OpenAI-compatible Chat Completions server that records every turn.

An environment written against an OpenAI client (a verifiers harness, an agent program) plays the policy
through it. The stage owns it: :class:`RecordingEndpoint` wraps the stage's generator — the in-process
transformers model (a thread of the stage's process: no second copy of the weights) or the role's vLLM
server — and serves, on loopback only, with an API key made for it:

* ``POST /v1/chat/completions`` (``stream`` true or false): the messages rendered with the checkpoint's
  chat template (:func:`~rla_core.models.chat.render_chat`), sampled as token ids with their
  log-probabilities (``generate_tokens``), answered in OpenAI's format — server-sent events when the
  request streams (verifiers' harnesses always do) — and recorded (:class:`~rla_core.models.chat.EndpointRecord`);
* ``GET /v1/models``: the one model it serves.

Seeds: a request carries its episode's seed (``seed``, passed by the adapter that plays the episode);
the turn is sampled with :func:`~rla_core.algo.seeds.turn_seed` of it and the turn's index, so an answer
never depends on when its request arrived. Requests are answered one at a time on the in-process
backend: a turn's tokens and log-probabilities are those of a batch of one, whatever else is in flight,
so the same seed gives the same records. A request repeated (a client's retry) is answered and recorded
again with the same content; a different conversation under an episode seed and turn already answered
is refused (two episodes must not share a seed). What the endpoint does not take (tools, images, ``n`` > 1, stop sequences,
a request without ``seed``, another model's name, a wrong API key) is an OpenAI-style error with the reason.

Example:
    >>> with RecordingEndpoint(generator, checkpoint=ckpt, model="rla-policy", sampling=SamplingConfig()) as ep:
    ...     client = openai.OpenAI(base_url=ep.base_url, api_key=ep.api_key)
    ...     client.chat.completions.create(model=ep.model, messages=[...], seed=7)  # doctest: +SKIP
    >>> ep.records(7)[0].response_ids  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from rla_core.algo.seeds import turn_seed
from rla_core.config import SamplingConfig
from rla_core.errors import ModelError
from rla_core.models.chat import ChatRequest, ChatRequestError, EndpointRecord, render_chat
from rla_core.models.sampling import eos_ids
from rla_core.models.vllm_worker import weights_hash

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from rla_core.models.generator import TokenSample

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
# How long the server thread may take to listen before the endpoint is an error (it binds a bound socket).
_START_TIMEOUT_S = 60.0


class TokenGenerator(Protocol):
    """A generator that samples token ids from token ids (both backends: ``generate_tokens``)."""

    def generate_tokens(
        self, prompts: Sequence[Sequence[int]], *, sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[TokenSample]: ...


class RecordingEndpoint:
    """The policy as an OpenAI-compatible chat endpoint on loopback that records every answered turn.

    ``generator``: the stage's (its ``generate_tokens`` answers); ``checkpoint``: the directory it serves
    (its tokenizer renders the chats; the sha256 of its weights is recorded); ``model``: the name requests
    must use; ``sampling``: the temperature, top-p and token limit of a request that sets none (the stage's
    policy sampling). Use as a context manager: it listens from ``__enter__`` until ``__exit__``.
    """

    def __init__(
        self, generator: TokenGenerator, *, checkpoint: Path, model: str, sampling: SamplingConfig
    ) -> None:
        from transformers import AutoTokenizer

        self.generator = generator
        self.checkpoint = Path(checkpoint)
        self.model = model
        self.defaults = sampling
        self.api_key = secrets.token_urlsafe(24)
        self.weights = weights_hash(self.checkpoint)
        self._tokenizer = AutoTokenizer.from_pretrained(self.checkpoint)
        self._eos = {int(i) for i in _eos_ids(self._tokenizer, self.checkpoint)}
        self._records: dict[tuple[int, int], EndpointRecord] = {}
        self._lock = threading.Lock()  # one generation at a time; also guards the records
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``http://127.0.0.1:<port>/v1``)."""
        return f"http://{LOOPBACK}:{self.port}/v1"

    # ---- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> RecordingEndpoint:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> None:
        """Listen on a free loopback port in a thread of this process; returns once it accepts requests."""
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, 0))
        self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(self._app(), log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="rla-endpoint", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        ready = threading.Event()
        while not self._server.started:  # uvicorn sets it once the socket accepts
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise ModelError(f"the recording endpoint on {self.base_url} did not start")
            ready.wait(0.01)

    def close(self) -> None:
        """Stop serving (idempotent); the records stay readable."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self._server = None

    # ---- the records --------------------------------------------------------------------------------

    def records(self, episode_seed: int) -> list[EndpointRecord]:
        """The recorded turns of the episode seeded ``episode_seed``, in turn order."""
        with self._lock:
            found = [r for (seed, _turn), r in self._records.items() if seed == episode_seed]
        return sorted(found, key=lambda r: r.turn)

    def all_records(self) -> list[EndpointRecord]:
        """Every recorded turn, by (episode seed, turn)."""
        with self._lock:
            return [self._records[k] for k in sorted(self._records)]

    # ---- serving ------------------------------------------------------------------------------------

    def answer(self, request: ChatRequest) -> EndpointRecord:
        """Sample and record one chat turn (the HTTP handler's work; callable in-process too)."""
        if request.model != self.model:
            raise ChatRequestError(
                f"model {request.model!r} is not served here; this endpoint serves {self.model!r}", status=404
            )
        if request.seed is None:
            raise ChatRequestError(
                "the request has no seed: the endpoint samples each turn from its episode's seed (the adapter "
                "passes it as `seed`), never from arrival order"
            )
        turns = request.turns()
        rendered = render_chat(self._tokenizer, turns, where=f"checkpoint {self.checkpoint}")
        sampling = request.sampling(self.defaults)
        turn = request.turn_index()
        seed = turn_seed(request.seed, turn)
        messages = EndpointRecord.messages_json(turns)
        with self._lock:
            earlier = self._records.get((request.seed, turn))
            if earlier is not None and earlier.messages != messages:
                raise ChatRequestError(
                    f"seed {request.seed} already answered a different conversation at turn {turn}: each "
                    "episode needs its own seed (the adapter derives one per episode)",
                    status=409,
                )
            (sample,) = self.generator.generate_tokens([rendered.ids], sampling=sampling, seeds=[seed])
            ids = list(sample.token_ids)
            text = self._tokenizer.decode(
                ids[:-1] if ids and ids[-1] in self._eos else ids, skip_special_tokens=True
            )
            record = EndpointRecord(
                episode_seed=request.seed, turn=turn, seed=seed, messages=messages,
                prompt=rendered.text, prompt_ids=rendered.ids, response=str(text), response_ids=sample.token_ids,
                logprobs=sample.logprobs, finish_reason=sample.finish_reason, temperature=sampling.temperature,
                top_p=sampling.top_p, max_tokens=sampling.max_new_tokens, checkpoint=self.weights,
            )  # fmt: skip
            self._records[(request.seed, turn)] = record
        return record

    def _authorized(self, header: str | None) -> bool:
        return header is not None and secrets.compare_digest(header, f"Bearer {self.api_key}")

    def _app(self) -> Starlette:
        from starlette.applications import Starlette
        from starlette.concurrency import run_in_threadpool
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response, StreamingResponse
        from starlette.routing import Route

        def error(status: int, message: str) -> JSONResponse:
            kind = {401: "authentication_error", 404: "not_found_error"}.get(status, "invalid_request_error")
            return JSONResponse(
                {"error": {"message": message, "type": kind, "code": status}}, status_code=status
            )

        unauthorized = "missing or wrong API key (Authorization: Bearer <the stage's key>)"

        async def models(request: Request) -> Response:
            if not self._authorized(request.headers.get("authorization")):
                return error(401, unauthorized)
            return JSONResponse(
                {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "rlanything"}]}
            )

        async def chat(request: Request) -> Response:
            if not self._authorized(request.headers.get("authorization")):
                return error(401, unauthorized)
            try:
                body = await request.json()
            except ValueError:
                return error(400, "the request body is not JSON")
            try:
                parsed = ChatRequest.parse(body)
                # Generation blocks: off the event loop, so other requests are read (and queue) meanwhile.
                record = await run_in_threadpool(self.answer, parsed)
            except ChatRequestError as exc:
                return error(exc.status, str(exc))
            except ModelError as exc:  # the backend failed: the client sees why, the stage's log too
                log.warning("recording endpoint: %s", exc)
                return error(500, str(exc))
            if parsed.stream:
                usage = bool((parsed.stream_options or {}).get("include_usage"))
                events = _events(
                    record, self.model, logprobs=parsed.logprobs, usage=usage, tokenizer=self._tokenizer
                )
                return StreamingResponse(events, media_type="text/event-stream")
            return JSONResponse(
                _completion(record, self.model, logprobs=parsed.logprobs, tokenizer=self._tokenizer)
            )

        return Starlette(
            routes=[
                Route("/v1/models", models, methods=["GET"]),
                Route("/v1/chat/completions", chat, methods=["POST"]),
            ]
        )


def _eos_ids(tokenizer: Any, checkpoint: Path) -> list[int]:
    """The checkpoint's EOS ids: its generation config's (a list or one), else its tokenizer's."""
    from transformers import GenerationConfig

    try:
        configured = GenerationConfig.from_pretrained(checkpoint).eos_token_id
    except OSError:  # no generation_config.json
        configured = None
    return eos_ids(configured, tokenizer)


def _completion_id(record: EndpointRecord) -> str:
    return f"chatcmpl-{record.episode_seed:x}-{record.turn}"


def _usage(record: EndpointRecord) -> dict[str, int]:
    prompt, completion = len(record.prompt_ids), len(record.response_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _logprobs(record: EndpointRecord, tokenizer: Any) -> dict[str, Any]:
    """OpenAI's ``logprobs.content``: each generated token's text and log-probability."""
    return {
        "content": [
            {"token": tokenizer.decode([i]), "logprob": lp, "bytes": None, "top_logprobs": []}
            for i, lp in zip(record.response_ids, record.logprobs, strict=True)
        ]
    }


def _completion(record: EndpointRecord, model: str, *, logprobs: bool, tokenizer: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": record.response},
        "finish_reason": record.finish_reason,
        "logprobs": _logprobs(record, tokenizer) if logprobs else None,
    }
    return {
        "id": _completion_id(record), "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [choice], "usage": _usage(record),
    }  # fmt: skip


def _events(
    record: EndpointRecord, model: str, *, logprobs: bool, usage: bool, tokenizer: Any
) -> Iterator[bytes]:
    """The completion as server-sent events: the role, the content, the finish reason, the usage when asked
    for (``stream_options.include_usage``), then ``[DONE]``."""
    head = {
        "id": _completion_id(record),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return f"data: {json.dumps({**head, 'choices': choices, **extra}, ensure_ascii=False)}\n\n".encode()

    yield event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
    content: dict[str, Any] = {"index": 0, "delta": {"content": record.response}, "finish_reason": None}
    if logprobs:
        content["logprobs"] = _logprobs(record, tokenizer)
    yield event([content])
    yield event([{"index": 0, "delta": {}, "finish_reason": record.finish_reason}])
    if usage:
        yield event([], usage=_usage(record))
    yield b"data: [DONE]\n\n"
